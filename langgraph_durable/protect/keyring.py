"""Keyrings: who wraps and unwraps the tenants' data keys.

A keyring holds key-encryption keys (KEKs). The savers never encrypt payloads
with a KEK: each tenant has data keys, generated here, stored *wrapped* (by a
KEK) in the backend, and unwrapped once per cache window
(:mod:`langgraph_durable.protect.keys`). Two keyrings ship:

- :class:`LocalKeyring`: named 32-byte keys held by the process (from code, an
  environment variable or a file), AES-256-GCM key wrapping.
- :class:`KmsKeyring`: AWS KMS through boto3, one KMS key or one per tenant,
  with the tenant and data-key version as the encryption context.

Every wrap is bound to ``(tenant, data-key version)``: a wrapped key copied to
another tenant does not unwrap.

A keyring can also hold the *chain key* of ``integrity=`` (tamper evidence, see
:mod:`langgraph_durable.protect.integrity`): unlike the KEKs it never rotates, since
every digest of every stored history is signed with it. :class:`LocalKeyring` derives
it from the key named by ``chain=``, which must stay in the keyring through rotations;
:class:`KmsKeyring` asks KMS for an HMAC under an HMAC KMS key (``chain_key_id=``),
whose key material AWS never rotates and never exports.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..errors import ConfigurationError, DecryptionError, KeyringError

__all__ = [
    "KeyProvider",
    "ChainKeySource",
    "GeneratedKey",
    "LocalKeyring",
    "KmsKeyring",
    "DATA_KEY_BYTES",
]

DATA_KEY_BYTES = 32
_WRAP_NONCE = 12
#: What the chain key is derived from (LocalKeyring: HKDF info; KMS: the MAC's message).
_CHAIN_INFO = b"langgraph-durable/chain-key/1"


def nonce(size: int = 12) -> bytes:
    """A fresh random AES-GCM nonce for one record: ``size`` bytes of OpenSSL's CSPRNG.

    Not ``os.urandom``: it lets go of the GIL for its system call, and with another
    thread waiting for the GIL getting it back costs far more than the call
    (``benchmarks/gil.py``). OpenSSL reseeds its generator in a forked child, so a
    pre-fork worker draws none of its parent's nonces. Keys still come from
    ``os.urandom``: they are made rarely.
    """
    return ssl.RAND_bytes(size)


@dataclass(frozen=True, slots=True)
class GeneratedKey:
    """A new data key: its plaintext, its wrapped form and the KEK that wrapped it."""

    plaintext: bytes
    wrapped: bytes
    key_id: str


class KeyProvider(Protocol):
    """What the savers need from a keyring. Every method may do I/O (KMS)."""

    def active_key_id(self, tenant: str) -> str:
        """The KEK that wraps new data keys of ``tenant``."""
        ...

    def generate(self, tenant: str, version: int) -> GeneratedKey:
        """A fresh data key for ``(tenant, version)``, wrapped by the active KEK."""
        ...

    def wrap(self, tenant: str, version: int, plaintext: bytes) -> tuple[bytes, str]:
        """``plaintext`` wrapped by the active KEK of ``tenant``, and that KEK's id."""
        ...

    def unwrap(self, tenant: str, version: int, key_id: str, wrapped: bytes) -> bytes:
        """The plaintext data key; :class:`DecryptionError` if it cannot be had."""
        ...


class ChainKeySource(Protocol):
    """A keyring that can give the (non-rotating) chain key of ``integrity=``."""

    def chain_key(self) -> bytes:
        """32 bytes, the same on every call and in every process with the same keyring."""
        ...


def derive(key: bytes, info: bytes) -> bytes:
    """32 bytes of HKDF-SHA256 from ``key`` for ``info`` (thread subkeys, blind-index
    keys, the chain key)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(key)


def _wrap_aad(tenant: str, version: int) -> bytes:
    t = tenant.encode()
    return b"lgd-data-key/1" + len(t).to_bytes(4, "big") + t + version.to_bytes(8, "big")


class LocalKeyring:
    """Key-encryption keys held by this process.

    Args:
        keys: Key id -> 32-byte key. Ids are short names (``"2026-01"``); they
            are stored next to each wrapped data key.
        active: The id of the key that wraps new data keys (and the target of
            ``rotate-keys``). The others still unwrap what they wrapped.
        chain: The id of the key the chain key of ``integrity=`` is derived from
            (HKDF-SHA256, its own label, so it is never the KEK itself). Rotating
            the KEKs does not change it, as long as this key stays in the keyring
            under this id; ``None`` (the default) means this keyring has no chain
            key and ``integrity=keyring`` is refused.

    Raises:
        ConfigurationError: A key is not 32 bytes, or ``active`` is not in ``keys``.
    """

    def __init__(self, keys: Mapping[str, bytes], active: str, *, chain: str | None = None) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise ConfigurationError("LocalKeyring needs a non-empty mapping of key id -> 32 bytes")
        checked: dict[str, AESGCM] = {}
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not key_id or len(key_id) > 200:
                raise ConfigurationError(
                    f"LocalKeyring key ids must be non-empty strings of at most 200 characters, "
                    f"got {key_id!r}"
                )
            if not isinstance(key, (bytes, bytearray)) or len(key) != DATA_KEY_BYTES:
                raise ConfigurationError(
                    f"LocalKeyring key {key_id!r} must be 32 bytes (AES-256), got "
                    f"{len(key) if isinstance(key, (bytes, bytearray)) else type(key).__name__}: "
                    "make one with os.urandom(32)"
                )
            checked[key_id] = AESGCM(bytes(key))
        if active not in checked:
            raise ConfigurationError(
                f"LocalKeyring active key {active!r} is not one of its keys {sorted(checked)}"
            )
        if chain is not None and chain not in checked:
            raise ConfigurationError(
                f"LocalKeyring chain key {chain!r} is not one of its keys {sorted(checked)}"
            )
        self._keys = checked
        self.active = active
        self.chain = chain
        self._chain_key = None if chain is None else derive(bytes(keys[chain]), _CHAIN_INFO)

    @classmethod
    def from_env(cls, name: str = "LGD_KEYRING", *, chain: str | None = None) -> LocalKeyring:
        """A keyring from an environment variable (for servers and cron jobs).

        The format is ``ID=BASE64[,ID=BASE64...]``: comma-separated entries of a
        key id, ``=``, and the key's 32 bytes in standard base64. The first
        entry is the active key. A value starting with ``@`` names a file that
        holds the same text. Example::

            LGD_KEYRING="k2=$(head -c32 /dev/urandom | base64),k1=<old key>"

        ``chain`` names the key the chain key is derived from (see the class).

        Raises:
            ConfigurationError: The variable is unset or malformed.
        """
        text = os.environ.get(name)
        if not text:
            raise ConfigurationError(
                f"environment variable {name} is not set: give it ID=BASE64[,ID=BASE64...] "
                "(the first key is active)"
            )
        return cls.from_text(text, source=name, chain=chain)

    @classmethod
    def from_text(
        cls, text: str, *, source: str = "keyring text", chain: str | None = None
    ) -> LocalKeyring:
        """A keyring from the ``ID=BASE64[,...]`` text of :meth:`from_env`."""
        text = text.strip()
        if text.startswith("@"):
            try:
                with open(text[1:], encoding="utf-8") as fh:
                    text = fh.read().strip()
            except OSError as exc:
                raise ConfigurationError(f"{source}: cannot read keyring file: {exc}") from exc
        keys: dict[str, bytes] = {}
        active = None
        for entry in text.replace("\n", ",").split(","):
            entry = entry.strip()
            if not entry:
                continue
            key_id, sep, encoded = entry.partition("=")
            key_id = key_id.strip()
            if not sep or not key_id:
                raise ConfigurationError(
                    f"{source}: entry {key_id or entry[:8]!r} is not ID=BASE64"
                )
            try:
                keys[key_id] = base64.b64decode(encoded.strip(), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ConfigurationError(f"{source}: key {key_id!r} is not valid base64") from exc
            active = active or key_id
        if active is None:
            raise ConfigurationError(f"{source}: no keys (expected ID=BASE64[,ID=BASE64...])")
        return cls(keys, active, chain=chain)

    def chain_key(self) -> bytes:
        """The chain key of ``integrity=``, derived from the key named by ``chain=``.

        Raises:
            ConfigurationError: The keyring was made without ``chain=``.
        """
        if self._chain_key is None:
            raise ConfigurationError(
                "this LocalKeyring has no chain key: name the key that signs the hash chain, "
                "LocalKeyring(keys, active, chain=ID), and keep that key in the keyring after "
                "rotations (the chain key must never change)"
            )
        return self._chain_key

    def active_key_id(self, tenant: str) -> str:
        return self.active

    def generate(self, tenant: str, version: int) -> GeneratedKey:
        plaintext = os.urandom(DATA_KEY_BYTES)
        wrapped, key_id = self.wrap(tenant, version, plaintext)
        return GeneratedKey(plaintext, wrapped, key_id)

    def wrap(self, tenant: str, version: int, plaintext: bytes) -> tuple[bytes, str]:
        nonce = os.urandom(_WRAP_NONCE)
        sealed = self._keys[self.active].encrypt(nonce, plaintext, _wrap_aad(tenant, version))
        return nonce + sealed, self.active

    def unwrap(self, tenant: str, version: int, key_id: str, wrapped: bytes) -> bytes:
        kek = self._keys.get(key_id)
        if kek is None:
            raise DecryptionError(
                f"data key version {version} of tenant {tenant!r} is wrapped by key "
                f"{key_id!r}, which is not in the keyring (keys: {sorted(self._keys)}); "
                "add it back, or run rotate-keys while it is still there"
            )
        try:
            return kek.decrypt(
                wrapped[:_WRAP_NONCE], wrapped[_WRAP_NONCE:], _wrap_aad(tenant, version)
            )
        except (InvalidTag, ValueError) as exc:
            raise DecryptionError(
                f"data key version {version} of tenant {tenant!r} does not unwrap with key "
                f"{key_id!r} (altered, or stored for another tenant)"
            ) from exc


class KmsKeyring:
    """Data keys wrapped by AWS KMS.

    Args:
        key_id: A KMS key id, ARN or alias (``alias/agents``), or a callable
            ``tenant -> key id`` for a KMS key per tenant.
        client: A boto3 KMS client (default: ``boto3.client("kms")``, made on
            first use).

        chain_key_id: An HMAC KMS key (``KeySpec=HMAC_256``,
            ``KeyUsage=GENERATE_VERIFY_MAC``) for ``integrity=keyring``: the chain
            key is its ``GenerateMac`` of a fixed label, asked once per saver. HMAC
            KMS keys never rotate, so the chain key stays the same; ``None`` (the
            default) means this keyring has no chain key.

    Calls: ``GenerateDataKey`` once per new data-key version, ``Decrypt`` once
    per data key and cache window, ``Encrypt`` (with ``Decrypt``) per data key
    on ``rotate-keys``, ``GenerateMac`` once per :meth:`chain_key`. The encryption context is
    ``{"lgd:tenant": tenant, "lgd:dk-version": version}``, so a policy can
    restrict a principal to its tenants.
    """

    def __init__(
        self,
        key_id: str | Callable[[str], str],
        *,
        client: Any = None,
        chain_key_id: str | None = None,
    ) -> None:
        if not (callable(key_id) or (isinstance(key_id, str) and key_id)):
            raise ConfigurationError(
                f"KmsKeyring key_id must be a key id/ARN/alias or a callable tenant -> key id, "
                f"got {key_id!r}"
            )
        if chain_key_id is not None and not (isinstance(chain_key_id, str) and chain_key_id):
            raise ConfigurationError(
                f"KmsKeyring chain_key_id must be an HMAC KMS key id, ARN or alias, "
                f"got {chain_key_id!r}"
            )
        self._key_id = key_id
        self._client = client
        self._lock = threading.Lock()
        self.chain_key_id = chain_key_id

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    try:
                        import boto3
                    except ImportError as exc:  # pragma: no cover - depends on extras
                        raise ConfigurationError(
                            "KmsKeyring needs boto3: pip install 'langgraph-durable[kms]'"
                        ) from exc
                    self._client = boto3.client("kms")
        return self._client

    def active_key_id(self, tenant: str) -> str:
        key_id = self._key_id(tenant) if callable(self._key_id) else self._key_id
        if not isinstance(key_id, str) or not key_id:
            raise ConfigurationError(f"KmsKeyring key_id({tenant!r}) returned {key_id!r}")
        return key_id

    @staticmethod
    def _context(tenant: str, version: int) -> dict[str, str]:
        return {"lgd:tenant": tenant, "lgd:dk-version": str(version)}

    def _call(self, what: str, tenant: str, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, what)(**kwargs)
        except Exception as exc:
            code = _error_code(exc)
            if code in _GONE_CODES:
                raise DecryptionError(
                    f"KMS refused {what} for tenant {tenant!r} ({code}): the key is disabled, "
                    "deleted, or not the one that wrapped this data key"
                ) from exc
            raise KeyringError(f"KMS {what} failed for tenant {tenant!r}: {exc}") from exc

    def chain_key(self) -> bytes:
        """The chain key of ``integrity=``: KMS's HMAC-SHA256 of a fixed label.

        Raises:
            ConfigurationError: The keyring was made without ``chain_key_id=``.
            KeyringError: KMS refused (not an HMAC key, no permission, unreachable).
        """
        if self.chain_key_id is None:
            raise ConfigurationError(
                "this KmsKeyring has no chain key: give it chain_key_id= (an HMAC KMS key, "
                "KeySpec HMAC_256, KeyUsage GENERATE_VERIFY_MAC)"
            )
        try:
            out = self.client.generate_mac(
                KeyId=self.chain_key_id, MacAlgorithm="HMAC_SHA_256", Message=_CHAIN_INFO
            )
        except Exception as exc:
            raise KeyringError(
                f"KMS GenerateMac with chain key {self.chain_key_id!r} failed: {exc}"
            ) from exc
        mac = bytes(out["Mac"])
        if len(mac) != 32:
            raise KeyringError(f"KMS GenerateMac returned {len(mac)} bytes, 32 expected")
        return mac

    def generate(self, tenant: str, version: int) -> GeneratedKey:
        key_id = self.active_key_id(tenant)
        out = self._call(
            "generate_data_key",
            tenant,
            KeyId=key_id,
            KeySpec="AES_256",
            EncryptionContext=self._context(tenant, version),
        )
        return GeneratedKey(bytes(out["Plaintext"]), bytes(out["CiphertextBlob"]), key_id)

    def wrap(self, tenant: str, version: int, plaintext: bytes) -> tuple[bytes, str]:
        key_id = self.active_key_id(tenant)
        out = self._call(
            "encrypt",
            tenant,
            KeyId=key_id,
            Plaintext=plaintext,
            EncryptionContext=self._context(tenant, version),
        )
        return bytes(out["CiphertextBlob"]), key_id

    def unwrap(self, tenant: str, version: int, key_id: str, wrapped: bytes) -> bytes:
        out = self._call(
            "decrypt",
            tenant,
            KeyId=key_id,
            CiphertextBlob=wrapped,
            EncryptionContext=self._context(tenant, version),
        )
        return bytes(out["Plaintext"])


_GONE_CODES = {
    "InvalidCiphertextException",
    "IncorrectKeyException",
    "DisabledException",
    "KMSInvalidStateException",
    "NotFoundException",
    "AccessDeniedException",
}


def _error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str((response.get("Error") or {}).get("Code") or "")
    return ""
