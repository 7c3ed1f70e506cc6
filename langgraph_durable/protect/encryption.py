"""Envelope encryption of every stored payload, bound to the record's identity.

Stored format of an encrypted payload (``Sealed.type == "lgd-enc"``)::

    header = b"LGD" | format (1 byte, 2; 1 is read) | data-key version (4 bytes, big endian)
             | key id length (1 byte) | key id (UTF-8)
    data   = header | nonce (12 bytes) | AES-256-GCM(serializer type tag + bytes)

The key is the thread's subkey (HKDF of the tenant's data key, see
``langgraph_durable.protect.keys``). The associated data is the header plus
the record identity (tenant, thread, namespace, kind, checkpoint id,
channel or task, version, channel, and the clear fields stored beside the
payload: a delta's base and length, a write's task path), so a ciphertext
moved or copied to any other record, or a clear field edited beside it,
fails authentication. Authentication happens before deserialization. The key
id names the keyring key that wrapped the data key when the record was
written (``rotate-keys`` rewraps data keys later without touching records).

Metadata: the full metadata is encrypted like any payload. Only the keys in
``clear_metadata`` are kept in clear for filtering, and keys in
``searchable_metadata`` are kept as a keyed hash (a blind index). On every
read the clear part is recomputed from the decrypted metadata and compared
with what is stored, so altering the clear part is detected like altering
ciphertext.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._core.codec import _json_safe
from .._core.records import RecordIdentity, Sealed
from ..errors import ConfigurationError, DecryptionError
from .keyring import KeyProvider, nonce
from .keys import KeyCache, KeyManager
from .pipeline import IdentityPipeline

__all__ = ["Encryption", "EncryptionPipeline", "ENCRYPTED_TYPE"]

logger = logging.getLogger("langgraph_durable.protect")

ENCRYPTED_TYPE = "lgd-enc"
_MAGIC = b"LGD"
_FORMAT = 2
_FORMATS = (1, 2)
_NONCE = 12
_TAG = 16
# Metadata keys LangGraph itself writes for its own bookkeeping (never user
# data), kept clear because operations read them (prune refuses DeltaChannel
# threads by this key).
_INTERNAL_CLEAR = ("counters_since_delta_snapshot",)
_BLIND_PREFIX = "bi1:"


def _names(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigurationError(f"{what} must be a list or tuple of metadata keys, got {value!r}")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"{what} holds {name!r}: metadata keys are non-empty strings")
    return names


@dataclass(frozen=True)
class Encryption:
    """Envelope encryption settings for a saver (``encryption=`` on every saver).

    Args:
        keyring: Wraps the tenants' data keys (:class:`LocalKeyring`,
            :class:`KmsKeyring`).
        clear_metadata: Metadata keys stored in clear, for ``list(filter=...)``.
            Every other key is only stored encrypted.
        searchable_metadata: Metadata keys stored only as a keyed hash of their
            value (per tenant), so ``list(filter={key: value})`` matches equal
            values without the value being stored.
        cache_ttl: Seconds an unwrapped data key stays in memory before it is
            loaded and unwrapped again (KMS is called about once per tenant per
            window; a ``shred`` reaches other processes within it).
        max_key_age: Seconds after which a tenant's writes move to a new
            data-key version.
        max_key_uses: Records one data-key version seals in one process before
            a new version is made.
        allow_plaintext: Plaintext migration mode: records written before
            encryption was turned on are read (and logged) instead of raising
            :class:`~langgraph_durable.errors.DecryptionError`; new records are
            encrypted. Turn it off once old threads are gone or rewritten.
    """

    keyring: KeyProvider
    _: KW_ONLY
    clear_metadata: tuple[str, ...] = ("source", "step", "parents", "run_id")
    searchable_metadata: tuple[str, ...] = ()
    cache_ttl: float = 300.0
    max_key_age: float = 30 * 86400.0
    max_key_uses: int = 2**30
    allow_plaintext: bool = False

    def __post_init__(self) -> None:
        for method in ("active_key_id", "generate", "wrap", "unwrap"):
            if not callable(getattr(self.keyring, method, None)):
                raise ConfigurationError(
                    f"Encryption keyring must be a LocalKeyring, a KmsKeyring or another "
                    f"KeyProvider (missing {method}()), got {self.keyring!r}"
                )
        clear = _names(self.clear_metadata, "clear_metadata")
        searchable = _names(self.searchable_metadata, "searchable_metadata")
        both = set(clear) & set(searchable)
        if both:
            raise ConfigurationError(
                f"metadata keys {sorted(both)} are in both clear_metadata and "
                "searchable_metadata: a key is either clear or blind-indexed"
            )
        object.__setattr__(self, "clear_metadata", clear)
        object.__setattr__(self, "searchable_metadata", searchable)
        for name in ("cache_ttl", "max_key_age"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigurationError(f"{name} must be a positive number, got {value!r}")
        if (
            isinstance(self.max_key_uses, bool)
            or not isinstance(self.max_key_uses, int)
            or self.max_key_uses < 1
        ):
            raise ConfigurationError(
                f"max_key_uses must be a positive integer, got {self.max_key_uses!r}"
            )

    def key_manager(self) -> KeyManager:
        """A key manager (with its own in-memory key cache) for one saver."""
        return KeyManager(
            self.keyring,
            cache_ttl=float(self.cache_ttl),
            max_key_age=float(self.max_key_age),
            max_key_uses=self.max_key_uses,
            # the index key also keys the effect journal's entry ids (effect_id)
            index_keys=True,
        )


def _lp(value: str) -> bytes:
    raw = value.encode()
    return len(raw).to_bytes(4, "big") + raw


@functools.lru_cache(maxsize=4096)
def _scope_aad(tenant: str, thread: str, ns: str) -> bytes:
    return b"lgd-record/1" + _lp(tenant) + _lp(thread) + _lp(ns)


def identity_aad(identity: RecordIdentity, format: int = _FORMAT) -> bytes:
    """The record identity as associated data (length-prefixed fields).

    Format 2 binds every field of the identity, the channel and the clear fields
    stored beside the payload (``extra``: a delta's base and length, a write's task
    path) included; format 1 (records written before) bound the first seven.
    """
    parts = [
        _scope_aad(identity.tenant, identity.thread, identity.ns),
        _lp(identity.kind),
        _lp(identity.checkpoint_id),
        _lp(identity.key),
        _lp(identity.version),
    ]
    if format >= 2:
        parts.append(_lp(identity.channel))
        parts.append(_lp(identity.extra))
    return b"".join(parts)


@functools.lru_cache(maxsize=1024)
def _header(version: int, key_id: str) -> bytes:
    kid = key_id.encode()[:255]
    return _MAGIC + bytes((_FORMAT,)) + version.to_bytes(4, "big") + bytes((len(kid),)) + kid


class EncryptionPipeline(IdentityPipeline):
    """Serialize then encrypt (and authenticate, then decrypt and deserialize).

    Args:
        serde: The LangGraph serializer.
        settings: The :class:`Encryption` settings.
        cache: The saver's unwrapped data keys.
    """

    binds_identity = True

    def __init__(self, serde: SerializerProtocol, settings: Encryption, cache: KeyCache) -> None:
        super().__init__(serde)
        self.joins_lists = False  # each record opens under its own identity
        self.settings = settings
        self.cache = cache
        self._clear = frozenset(settings.clear_metadata) | frozenset(_INTERNAL_CLEAR)
        self._searchable = frozenset(settings.searchable_metadata)
        self._settings = {
            "clear_metadata": sorted(settings.clear_metadata),
            "searchable_metadata": sorted(settings.searchable_metadata),
        }
        self._plaintext_reads = 0

    # ---- payloads -------------------------------------------------------------

    def seal_serialized(self, identity: RecordIdentity, serialized: tuple[str, bytes]) -> Sealed:
        type_, data = serialized
        version, key_id, aead = self.cache.sealer(identity.tenant, identity.thread)
        header = _header(version, key_id)
        tag = type_.encode()
        iv = nonce(_NONCE)
        body = aead.encrypt(iv, bytes((len(tag),)) + tag + data, header + identity_aad(identity))
        return Sealed(ENCRYPTED_TYPE, header + iv + body)

    def open(self, identity: RecordIdentity, sealed: Sealed) -> Any:
        if sealed.type != ENCRYPTED_TYPE:
            if self.settings.allow_plaintext:
                self._plaintext_reads += 1
                if self._plaintext_reads == 1 or self._plaintext_reads % 1000 == 0:
                    logger.warning(
                        "read %d unencrypted record(s) in plaintext migration mode "
                        "(latest: %s of thread %r of tenant %r)",
                        self._plaintext_reads,
                        identity.kind,
                        identity.thread,
                        identity.tenant,
                    )
                return super().open(identity, sealed)
            raise DecryptionError(
                f"{identity.kind} record of thread {identity.thread!r} (tenant "
                f"{identity.tenant!r}) is not encrypted by langgraph-durable (no header); "
                "if it was written before encryption was turned on, use "
                "Encryption(..., allow_plaintext=True) while migrating"
            )
        data = sealed.data
        try:
            if data[:3] != _MAGIC or data[3] not in _FORMATS:
                raise ValueError("bad header")
            format = data[3]
            version = int.from_bytes(data[4:8], "big")
            end = 9 + data[8]
            if len(data) < end + _NONCE + _TAG:
                raise ValueError("too short")
        except (IndexError, ValueError) as exc:
            raise self._failed(identity, "its header is damaged or it is truncated") from exc
        aead = self.cache.opener(identity.tenant, version, identity.thread)
        try:
            plain = aead.decrypt(
                data[end : end + _NONCE],
                data[end + _NONCE :],
                data[:end] + identity_aad(identity, format),
            )
        except InvalidTag as exc:
            raise self._failed(
                identity, "it was altered, truncated, or belongs to another record"
            ) from exc
        n = plain[0]
        return super().open(identity, Sealed(plain[1 : 1 + n].decode(), plain[1 + n :]))

    def tampered(self, why: str) -> Exception:
        return DecryptionError(why)

    def index_settings(self) -> dict[str, Any] | None:
        return self._settings

    @staticmethod
    def _failed(identity: RecordIdentity, why: str) -> DecryptionError:
        return DecryptionError(
            f"{identity.kind} record of thread {identity.thread!r} (tenant {identity.tenant!r}, "
            f"checkpoint {identity.checkpoint_id or '-'}, key {identity.key or '-'}, version "
            f"{identity.version or '-'}) failed authentication: {why}"
        )

    # ---- metadata -------------------------------------------------------------

    def _blind(self, tenant: str, key: str, value: Any) -> str:
        canonical = json.dumps(_json_safe(value), sort_keys=True, separators=(",", ":"))
        mac = hmac.new(
            self.cache.index_key(tenant),
            key.encode() + b"\x00" + canonical.encode(),
            hashlib.sha256,
        )
        return _BLIND_PREFIX + mac.hexdigest()[:32]

    def effect_id(self, tenant: str, material: bytes) -> str:
        mac = hmac.new(self.cache.index_key(tenant), b"effect\x00" + material, hashlib.sha256)
        return mac.hexdigest()[:40]

    def metadata_index(self, identity: RecordIdentity, metadata: dict[str, Any]) -> dict[str, Any]:
        tenant = identity.tenant
        out: dict[str, Any] = {}
        for key, value in metadata.items():
            if key in self._clear:
                out[key] = _json_safe(value)
            elif key in self._searchable:
                out[key] = self._blind(tenant, key, value)
        return out

    def split_filter(
        self, tenant: str, filter: dict[str, Any] | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        if not filter:
            return filter, None
        server: dict[str, Any] = {}
        client: dict[str, Any] = {}
        for key, value in filter.items():
            if key in self._clear:
                server[key] = value
            elif key in self._searchable and self._has_index_key(tenant):
                server[key] = self._blind(tenant, key, value)
            else:
                client[key] = value
        return server or None, client or None

    def _has_index_key(self, tenant: str) -> bool:
        """Whether searchable keys of ``tenant`` can be matched on their blind index.

        A tenant with no live data key (nothing written yet, shredded, or only
        plaintext records) has none: its filters are matched after opening.
        An unloaded tenant raises ``KeyMissing`` so the saver loads it first.
        """
        state = self.cache.get(tenant)
        if state is not None and state.index_key is None:
            return False
        self.cache.index_key(tenant)
        return True

    def check_metadata(
        self,
        identity: RecordIdentity,
        metadata: Any,
        stored_index: dict[str, Any] | None,
        sealed: Sealed,
    ) -> None:
        if stored_index is None or sealed.type != ENCRYPTED_TYPE or not isinstance(metadata, dict):
            return
        expected = self.metadata_index(identity, metadata)
        if expected != stored_index:
            raise DecryptionError(
                f"the clear metadata of a checkpoint of tenant {identity.tenant!r} does not "
                f"match its encrypted metadata (stored keys {sorted(stored_index)}): it was altered"
            )
