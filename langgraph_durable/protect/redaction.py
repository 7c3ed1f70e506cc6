"""PII redaction at the storage boundary: redact -> serialize -> encrypt.

Every value a saver stores (channel values, the checkpoint's inline values,
pending writes with interrupts and ``Send`` payloads, metadata) passes
:class:`RedactionPipeline` before it is serialized. Strings inside the value
are scanned by detectors (``langgraph_durable.protect.detectors``) and each
finding is replaced according to the first :class:`Rule` whose channel glob
matches the record's channel (metadata is the channel ``"__metadata__"``):

- ``mask``: ``<EMAIL>``, irreversible;
- ``pseudonymize``: ``<EMAIL:3f9a2c1b7d04>``, a keyed HMAC of the value, the
  same within a tenant and different across tenants;
- ``tokenize``: ``<EMAIL:tok_5b1e0c93a4d27f60>``; the original goes to the
  record's vault, encrypted with a key derived from ``Redaction(key=...)``,
  and reads restore it when ``restore=True``; the vault lives in the thread's
  records, so it is deleted with the thread;
- ``drop``: the channel's value is not stored: ``None`` is stored in its place,
  sealed like any value (a blob of it reads back as an absent channel, a pending
  write keeps the value ``None``);
- ``keep``: stored as it is.

Only the stored copy changes: the running graph keeps its own objects.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ormsgpack
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .._core.records import RecordIdentity, RecordKind, Sealed
from ..errors import ConfigurationError, DecryptionError
from .detectors import Detector, find_spans, placeholder, resolve_detectors
from .keyring import derive, nonce
from .pipeline import IdentityPipeline
from .walk import BoundedCache, StringRewriter

__all__ = ["Redaction", "Rule", "RedactionPipeline", "MODES", "METADATA_CHANNEL", "VAULT_TYPE"]

MODES = ("mask", "pseudonymize", "tokenize", "drop", "keep")
#: The channel name rules match for a checkpoint's metadata.
METADATA_CHANNEL = "__metadata__"
VAULT_TYPE = "lgd-vault"
_VAULT_MAGIC = b"LGV1"
_TOKEN = re.compile(r"<([A-Z0-9_]+):tok_([0-9a-f]{16})>")
_CACHE = 8192
_OPENED = 65536
_MESSAGES = 4096


def _lp(value: str) -> bytes:
    raw = value.encode()
    return len(raw).to_bytes(4, "big") + raw


@dataclass(frozen=True)
class Rule:
    """Which channels a mode applies to.

    Args:
        channels: A glob over channel names (``"messages"``, ``"scratch*"``), or
            several; metadata is the channel ``"__metadata__"``.
        mode: ``mask``, ``pseudonymize``, ``tokenize``, ``drop`` or ``keep``.
        detectors: Names of the detectors to use (default: all of the
            redaction's detectors).
    """

    channels: str | tuple[str, ...] = "*"
    mode: str = "mask"
    detectors: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        channels = (self.channels,) if isinstance(self.channels, str) else self.channels
        if not isinstance(channels, Iterable) or not channels:
            raise ConfigurationError(f"Rule channels must be a glob or globs, got {channels!r}")
        channels = tuple(channels)
        if not all(isinstance(c, str) and c for c in channels):
            raise ConfigurationError(f"Rule channels must be non-empty strings, got {channels!r}")
        object.__setattr__(self, "channels", channels)
        if self.mode not in MODES:
            raise ConfigurationError(f"Rule mode must be one of {MODES}, got {self.mode!r}")
        if self.detectors is not None:
            if isinstance(self.detectors, str):
                object.__setattr__(self, "detectors", (self.detectors,))
            else:
                object.__setattr__(self, "detectors", tuple(self.detectors))

    def matches(self, channel: str) -> bool:
        """Whether this rule applies to ``channel``."""
        return any(fnmatch.fnmatchcase(channel, glob) for glob in self.channels)


#: Channels whose rule a Redaction remembers.
_RULE_CACHE = 1024


class Redaction:
    """Redaction settings for a saver (``redaction=`` on every saver).

    Args:
        rules: Rules tried in order; the first whose glob matches a record's
            channel decides (no match: kept). Default: ``[Rule()]``, every
            built-in detector in ``mask`` mode on every channel, pending
            writes and metadata.
        detectors: Custom detectors by name: a regex (string or compiled) or a
            callable ``text -> [(start, end), ...]``; added to the built-ins.
        key: Secret (at least 16 bytes) for ``pseudonymize`` and ``tokenize``;
            required by them. Tenants get keys derived from it.
        restore: Reads through the saver put tokenized values back (otherwise
            the tokens are returned).

    Raises:
        ConfigurationError: An unknown mode or detector, or no key where needed.
    """

    def __init__(
        self,
        rules: Sequence[Rule] | None = None,
        *,
        detectors: Mapping[str, Any] | None = None,
        key: bytes | str | None = None,
        restore: bool = False,
    ) -> None:
        rules = tuple(rules) if rules is not None else (Rule(),)
        for rule in rules:
            if not isinstance(rule, Rule):
                raise ConfigurationError(f"Redaction rules must be Rule objects, got {rule!r}")
        if detectors is not None and not isinstance(detectors, Mapping):
            raise ConfigurationError(
                "Redaction detectors must be a mapping of name -> regex or callable, "
                f"got {detectors!r}"
            )
        self.rules = rules
        self.custom = dict(detectors or {})
        self._detectors = {
            id(rule): resolve_detectors(rule.detectors, self.custom) for rule in rules
        }
        if isinstance(key, str):
            key = key.encode()
        keyed = [r.mode for r in rules if r.mode in ("pseudonymize", "tokenize")]
        if key is not None and (not isinstance(key, (bytes, bytearray)) or len(key) < 16):
            raise ConfigurationError("Redaction key must be at least 16 bytes (os.urandom(32))")
        if keyed and key is None:
            raise ConfigurationError(
                f"Redaction mode {keyed[0]!r} needs key=: a secret of at least 16 bytes, "
                "kept like an encryption key"
            )
        self.key = bytes(key) if key is not None else None
        self.restore = bool(restore)
        self.tokenizes = "tokenize" in [r.mode for r in rules]
        # channel -> (mode, detectors): the rules never change, and matching their
        # globs again at every record cost about a microsecond a record
        self._rule_cache: dict[str, tuple[str, tuple[Detector, ...]]] = {}

    def rule_for(self, channel: str) -> tuple[str, tuple[Detector, ...]]:
        """(mode, detectors) for a channel."""
        found = self._rule_cache.get(channel)
        if found is not None:
            return found
        found = "keep", ()
        for rule in self.rules:
            if rule.matches(channel):
                found = rule.mode, self._detectors[id(rule)]
                break
        if len(self._rule_cache) < _RULE_CACHE:  # a graph has few channels
            self._rule_cache[channel] = found
        return found


class _Serialized(tuple):
    """(type, bytes) of a redacted value, with what sealing it needs to know."""

    vault: dict[str, str]

    def __new__(cls, pair: tuple[str, bytes], vault: dict[str, str]) -> Any:
        out = tuple.__new__(cls, pair)
        out.vault = vault
        return out


class RedactionPipeline:
    """Redacts, then hands the value to ``base`` (serialize, or serialize and encrypt).

    Args:
        base: The pipeline that stores the redacted value.
        redaction: The settings.
    """

    def __init__(self, base: IdentityPipeline, redaction: Redaction) -> None:
        self.base = base
        self.serde = base.serde
        self.redaction = redaction
        self.binds_identity = base.binds_identity
        self.joins_lists = base.joins_lists  # vault records are not msgpack: opened alone
        self._texts = BoundedCache(_CACHE)  # (mode, rule, scope, text) -> (text, vault items)
        self._opened = BoundedCache(_OPENED)  # (tenant, token) -> original, from opened vaults
        self._keys = BoundedCache(1024)
        self._messages = BoundedCache(_MESSAGES)

    # ---- keys -------------------------------------------------------------------

    def _tenant_key(self, purpose: str, tenant: str) -> bytes:
        cached = self._keys.get((purpose, tenant))
        if cached is None:
            assert self.redaction.key is not None
            cached = derive(self.redaction.key, b"lgd/" + purpose.encode() + b"/1" + _lp(tenant))
            self._keys.put((purpose, tenant), cached)
        return cached  # type: ignore[no-any-return]

    # ---- redaction of values ------------------------------------------------------

    def _text(
        self, mode: str, detectors: tuple[Detector, ...], tenant: str, text: str
    ) -> tuple[str, tuple[tuple[str, str], ...]]:
        cache_key = (mode, id(detectors), tenant if mode != "mask" else "", text)
        hit = self._texts.get(cache_key)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        spans = find_spans(text, detectors)
        vault: list[tuple[str, str]] = []
        if not spans:
            result: tuple[str, tuple[tuple[str, str], ...]] = (text, ())
        else:
            parts: list[str] = []
            last = 0
            for span in spans:
                original = text[span.start : span.end]
                parts.append(text[last : span.start])
                parts.append(self._replacement(mode, span.detector, tenant, original, vault))
                last = span.end
            parts.append(text[last:])
            result = ("".join(parts), tuple(vault))
        if mode == "tokenize":
            # tokens already in the text (a value read back without restore) keep
            # their originals in the new record's vault when this process knows them
            known = tuple(
                (m.group(0), o)
                for m in _TOKEN.finditer(result[0])
                if (o := self._opened.get((tenant, m.group(0)))) is not None
            )
            result = (result[0], result[1] + known)
        self._texts.put(cache_key, result)
        return result

    def _replacement(
        self, mode: str, detector: str, tenant: str, original: str, vault: list[tuple[str, str]]
    ) -> str:
        if mode == "mask":
            return placeholder(detector)
        name = placeholder(detector)[1:-1]
        purpose = "pseudonym" if mode == "pseudonymize" else "token"
        mac = hmac.new(
            self._tenant_key(purpose, tenant),
            detector.encode() + b"\x00" + original.encode(),
            hashlib.sha256,
        ).hexdigest()
        if mode == "pseudonymize":
            return f"<{name}:{mac[:12]}>"
        token = f"<{name}:tok_{mac[:16]}>"
        vault.append((token, original))
        return token

    def _redact(
        self, identity: RecordIdentity, channel: str, value: Any
    ) -> tuple[Any, dict[str, str], bool]:
        """(redacted value, vault entries, dropped) for one channel's value."""
        mode, detectors = self.redaction.rule_for(channel)
        if mode == "keep":
            return value, {}, False
        if mode == "drop":
            if identity.kind == RecordKind.METADATA:
                mode = "mask"  # metadata is never dropped whole
            else:
                return None, {}, True
        found: list[tuple[str, str]] = []
        tenant = identity.tenant

        def rewrite(text: str) -> str:
            new, entries = self._text(mode, detectors, tenant, text)
            if entries:
                found.extend(entries)
            return new

        scope = (mode, id(detectors), tenant if mode != "mask" else "")
        walker = StringRewriter(rewrite, self._messages, scope, found)
        return walker(value), dict(found), False

    def _redact_record(
        self, identity: RecordIdentity, value: Any
    ) -> tuple[Any, dict[str, str], bool]:
        kind = identity.kind
        if kind == RecordKind.METADATA:
            return self._redact(identity, METADATA_CHANNEL, value)
        if kind == RecordKind.CHECKPOINT:
            return self._redact_body(identity, value)
        return self._redact(identity, identity.channel or identity.key, value)

    def _redact_body(self, identity: RecordIdentity, body: Any) -> tuple[Any, dict[str, str], bool]:
        """A checkpoint body: only its inline channel values hold data."""
        values = body.get("channel_values") if isinstance(body, dict) else None
        if not values:
            return body, {}, False
        vault: dict[str, str] = {}
        out: dict[str, Any] | None = None
        for channel, value in values.items():
            if value is None or value is True:  # empty, or the marker of a snapshot blob
                continue
            new, entries, dropped = self._redact(identity, channel, value)
            if new is value and not dropped:
                continue
            out = dict(values) if out is None else out
            if dropped:
                del out[channel]
            else:
                out[channel] = new
            vault.update(entries)
        if out is None:
            return body, vault, False
        return {**body, "channel_values": out}, vault, False

    # ---- the pipeline -----------------------------------------------------------

    def serialize(self, identity: RecordIdentity, value: Any) -> tuple[str, bytes]:
        redacted, vault, _dropped = self._redact_record(identity, value)
        serialized = self.base.serialize(identity, redacted)
        # Without vault entries the pair is plain, so that a delta's bytes can be cut
        # from it (the codec cuts only plain serializations) instead of redacting and
        # serializing the tail again.
        return _Serialized(serialized, vault) if vault else serialized

    def seal(self, identity: RecordIdentity, value: Any) -> Sealed:
        return self.seal_serialized(identity, self.serialize(identity, value))

    def seal_serialized(self, identity: RecordIdentity, serialized: tuple[str, bytes]) -> Sealed:
        # A dropped value was serialized as None above and is sealed and tagged like any
        # other value (never an unsealed "empty" marker, which a writer of the storage
        # could forge): a channel's blob that opens to None reads back as an absent
        # channel, and a dropped write keeps the value None, so its task is not re-run.
        inner = self.base.seal_serialized(identity, (serialized[0], serialized[1]))
        vault = getattr(serialized, "vault", None)
        if not vault:
            return inner
        return self._with_vault(identity, inner, vault)

    def _vault_aead(self, tenant: str) -> AESGCM:
        return AESGCM(self._tenant_key("vault", tenant))

    def _with_vault(self, identity: RecordIdentity, inner: Sealed, vault: dict[str, str]) -> Sealed:
        iv = nonce()
        packed = ormsgpack.packb(vault)
        box = iv + self._vault_aead(identity.tenant).encrypt(
            iv, packed, b"lgd-vault/1" + _lp(identity.tenant)
        )
        tag = inner.type.encode()
        return Sealed(
            VAULT_TYPE,
            _VAULT_MAGIC
            + bytes((len(tag),))
            + tag
            + len(box).to_bytes(4, "big")
            + box
            + inner.data,
        )

    def _split_vault(self, identity: RecordIdentity, data: bytes) -> tuple[Sealed, dict[str, str]]:
        try:
            if data[:4] != _VAULT_MAGIC:
                raise ValueError("bad header")
            n = data[4]
            inner_type = data[5 : 5 + n].decode()
            at = 5 + n
            size = int.from_bytes(data[at : at + 4], "big")
            box = data[at + 4 : at + 4 + size]
            inner = Sealed(inner_type, data[at + 4 + size :])
            if self.redaction.key is None:
                return inner, {}
            plain = self._vault_aead(identity.tenant).decrypt(
                box[:12], box[12:], b"lgd-vault/1" + _lp(identity.tenant)
            )
            vault = ormsgpack.unpackb(plain)
        except (IndexError, ValueError, UnicodeDecodeError, InvalidTag) as exc:
            raise DecryptionError(
                f"the token vault of a {identity.kind} record of thread {identity.thread!r} "
                "is damaged or was written with another redaction key"
            ) from exc
        return inner, vault if isinstance(vault, dict) else {}

    def open(self, identity: RecordIdentity, sealed: Sealed) -> Any:
        if sealed.type != VAULT_TYPE:
            return self.base.open(identity, sealed)
        inner, vault = self._split_vault(identity, sealed.data)
        value = self.base.open(identity, inner)
        for token, original in vault.items():
            self._opened.put((identity.tenant, token), original)
        if not self.redaction.restore or not vault:
            return value

        def restore(text: str) -> str:
            if "tok_" not in text:
                return text
            return _TOKEN.sub(lambda m: vault.get(m.group(0), m.group(0)), text)

        return StringRewriter(restore)(value)

    # ---- metadata -------------------------------------------------------------------

    def _metadata(self, identity: RecordIdentity, metadata: Any) -> Any:
        return self._redact(identity, METADATA_CHANNEL, metadata)[0]

    def metadata_index(self, identity: RecordIdentity, metadata: dict[str, Any]) -> dict[str, Any]:
        return self.base.metadata_index(identity, self._metadata(identity, metadata))

    def check_metadata(
        self,
        identity: RecordIdentity,
        metadata: Any,
        stored_index: dict[str, Any] | None,
        sealed: Sealed,
    ) -> None:
        self.base.check_metadata(identity, self._metadata(identity, metadata), stored_index, sealed)

    def effect_id(self, tenant: str, material: bytes) -> str:
        return self.base.effect_id(tenant, material)

    def tampered(self, why: str) -> Exception:
        return self.base.tampered(why)

    def index_settings(self) -> dict[str, Any] | None:
        return self.base.index_settings()

    def split_filter(
        self, tenant: str, filter: dict[str, Any] | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Filter values are pseudonymized like stored ones (mask and tokens never match)."""
        if filter and self.redaction.rule_for(METADATA_CHANNEL)[0] == "pseudonymize":
            identity = RecordIdentity(tenant, "", "", RecordKind.METADATA)
            filter = self._redact(identity, METADATA_CHANNEL, filter)[0]
        return self.base.split_filter(tenant, filter)
