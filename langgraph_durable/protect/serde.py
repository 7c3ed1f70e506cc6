"""The same envelope encryption as a ``SerializerProtocol``, for upstream savers.

Our savers encrypt inside their record pipeline, where each payload's identity
is known. Users of other savers (``langgraph-checkpoint-postgres``, ...) can pass
:class:`EnvelopeSerializer` as their ``serde`` and get customer-key envelope
encryption of what those savers hand to the serializer, with these limits
(documented in ``docs/security.md``):

- no identity binding: a serializer does not know which record it serializes,
  so a ciphertext copied onto another thread or checkpoint still decrypts;
- only what the saver serializes is encrypted: upstream savers keep metadata
  (and LangGraph's ``configurable`` values copied into it) and, for some, primitive
  channel values in clear;
- no per-tenant data keys and so no crypto-shredding per tenant: one data key
  per serializer (per process), wrapped by the keyring and carried, wrapped,
  in every ciphertext (about 60 bytes with a local keyring, 200 with KMS).

Format: ``b"LGS" | 1 | key id length | key id | wrapped length (2 bytes) |
wrapped data key | nonce (12) | AES-256-GCM(type tag + bytes)``, with the
header as associated data.
"""

from __future__ import annotations

import copy
import hashlib
import threading
from collections import OrderedDict
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..errors import DecryptionError
from .allowlist import AllowlistSerializer
from .keyring import KeyProvider, nonce

__all__ = ["EnvelopeSerializer", "SERIALIZED_TYPE"]

SERIALIZED_TYPE = "lgd-envelope"
_MAGIC = b"LGS"
_NONCE = 12
_CACHE = 64


class EnvelopeSerializer:
    """Envelope encryption as a LangGraph serializer (see the module doc for its limits).

    Args:
        keyring: Wraps the data key (:class:`LocalKeyring`, :class:`KmsKeyring`).
        serde: The serializer whose output is encrypted (default:
            :class:`~langgraph_durable.protect.allowlist.AllowlistSerializer`, which
            rebuilds only allowlisted types; pass ``AllowlistSerializer(allowed=[...])``
            for your own classes when the saver does not hand a graph's schema classes
            to its serializer).
        tenant: The tenant the keyring wraps the data key for (selects the KMS
            key of a per-tenant ``KmsKeyring``; part of the wrap's context).
        allow_plaintext: Read values that were stored before encryption was
            turned on (instead of raising ``DecryptionError``).
    """

    def __init__(
        self,
        keyring: KeyProvider,
        *,
        serde: SerializerProtocol | None = None,
        tenant: str = "default",
        allow_plaintext: bool = False,
    ) -> None:
        self.keyring = keyring
        self.serde = serde if serde is not None else AllowlistSerializer()
        self.tenant = tenant
        self.allow_plaintext = allow_plaintext
        self._lock = threading.Lock()
        self._header: bytes | None = None
        self._aead: AESGCM | None = None
        self._opened: OrderedDict[bytes, AESGCM] = OrderedDict()

    def _sealer(self) -> tuple[bytes, AESGCM]:
        if self._aead is None or self._header is None:
            with self._lock:
                if self._aead is None:
                    made = self.keyring.generate(self.tenant, 0)
                    kid = made.key_id.encode()[:255]
                    self._header = (
                        _MAGIC
                        + bytes((1, len(kid)))
                        + kid
                        + len(made.wrapped).to_bytes(2, "big")
                        + made.wrapped
                    )
                    self._aead = AESGCM(made.plaintext)
        assert self._header is not None and self._aead is not None
        return self._header, self._aead

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        type_, data = self.serde.dumps_typed(obj)
        header, aead = self._sealer()
        tag = type_.encode()
        iv = nonce(_NONCE)
        body = aead.encrypt(iv, bytes((len(tag),)) + tag + data, header)
        return SERIALIZED_TYPE, header + iv + body

    def with_msgpack_allowlist(self, extra_allowlist: Any) -> EnvelopeSerializer:
        """A copy whose inner serializer also rebuilds ``extra_allowlist`` (what
        ``BaseCheckpointSaver.with_allowlist`` calls with a graph's schema classes);
        the copy shares this one's data key."""
        extend = getattr(self.serde, "with_msgpack_allowlist", None)
        if not callable(extend):
            return self
        inner = extend(extra_allowlist)
        if inner is self.serde:
            return self
        clone = copy.copy(self)
        clone.serde = inner
        return clone

    def _opener(self, key_id: str, wrapped: bytes) -> AESGCM:
        digest = hashlib.sha256(wrapped).digest()
        aead = self._opened.get(digest)
        if aead is None:
            aead = AESGCM(self.keyring.unwrap(self.tenant, 0, key_id, wrapped))
            with self._lock:
                self._opened[digest] = aead
                if len(self._opened) > _CACHE:
                    self._opened.popitem(last=False)
        return aead

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, raw = data
        if type_ != SERIALIZED_TYPE:
            if self.allow_plaintext:
                return self.serde.loads_typed(data)
            raise DecryptionError(
                f"value of type {type_!r} is not encrypted by EnvelopeSerializer; pass "
                "allow_plaintext=True while old values are being replaced"
            )
        try:
            if raw[:3] != _MAGIC or raw[3] != 1:
                raise ValueError("bad header")
            kid_end = 5 + raw[4]
            key_id = raw[5:kid_end].decode()
            wrapped_end = kid_end + 2 + int.from_bytes(raw[kid_end : kid_end + 2], "big")
            wrapped = raw[kid_end + 2 : wrapped_end]
            nonce = raw[wrapped_end : wrapped_end + _NONCE]
            if len(nonce) != _NONCE:
                raise ValueError("too short")
        except (IndexError, ValueError, UnicodeDecodeError) as exc:
            raise DecryptionError("encrypted value has a damaged header or is truncated") from exc
        aead = self._opener(key_id, wrapped)
        try:
            plain = aead.decrypt(nonce, raw[wrapped_end + _NONCE :], raw[:wrapped_end])
        except InvalidTag as exc:
            raise DecryptionError("encrypted value failed authentication (altered)") from exc
        n = plain[0]
        return self.serde.loads_typed((plain[1 : 1 + n].decode(), plain[1 + n :]))
