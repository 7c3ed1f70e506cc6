"""The integrity stage of the record pipeline: a keyed tag on every stored payload.

With ``integrity=`` on a saver, the pipeline is ``redact -> serialize ->
encrypt -> tag`` on the way in and ``check tag -> decrypt -> deserialize ->
restore`` on the way out: a payload whose bytes, type or record identity were
changed is refused before anything else reads it. The tag is an HMAC-SHA256
under the chain key, which also signs the checkpoint hash chain (see
``langgraph_durable._core.chain`` and ``langgraph-durable verify``).
"""

from __future__ import annotations

import os
from typing import Any

from .._core.chain import TAG_SIZE, ChainKey, chain_key
from .._core.codec import RecordPipeline
from .._core.records import RecordIdentity, Sealed
from ..errors import ConfigurationError, IntegrityError

__all__ = ["IntegrityPipeline", "INTEGRITY_KEY_ENV", "integrity_from_env", "resolve_integrity"]

INTEGRITY_KEY_ENV = "LGD_INTEGRITY_KEY"


def resolve_integrity(value: Any) -> ChainKey | None:
    """``integrity=`` as a saver takes it.

    None (off), a ChainKey, the key as bytes or hex, or a keyring that holds a
    chain key (``LocalKeyring(..., chain=ID)``, ``KmsKeyring(..., chain_key_id=...)``;
    anything with a ``chain_key()`` method), asked once here.
    """
    if value is None or value is False:
        return None
    if isinstance(value, ChainKey):
        return value
    if isinstance(value, bytes | bytearray | memoryview | str):
        return ChainKey(chain_key(value))
    getter = getattr(value, "chain_key", None)
    if callable(getter):
        return ChainKey(chain_key(getter()))
    raise ConfigurationError(
        "integrity= takes the chain key as bytes or hex, or a keyring with a chain key "
        f"(LocalKeyring(..., chain=ID), KmsKeyring(..., chain_key_id=...)), "
        f"got {type(value).__name__}"
    )


def integrity_from_env(environ: Any = None) -> ChainKey | None:
    """The chain key from ``LGD_INTEGRITY_KEY`` (hex), or None when it is unset."""
    env = os.environ if environ is None else environ
    raw = (env.get(INTEGRITY_KEY_ENV) or "").strip()
    if not raw:
        return None
    try:
        return ChainKey(chain_key(raw))
    except ConfigurationError as exc:
        raise ConfigurationError(f"{INTEGRITY_KEY_ENV}: {exc}") from exc


class IntegrityPipeline:
    """Wraps a pipeline: tags what it seals, checks the tag before it opens.

    Args:
        base: The rest of the pipeline (serialize, encrypt, redact).
        chain: The chain key.
    """

    binds_identity = True  # a tagged record only checks under its own identity
    joins_lists = False  # ... so each part of a delta chain is checked on its own

    def __init__(self, base: Any, chain: ChainKey) -> None:
        self.base = base
        self.chain = chain
        self.serde = base.serde

    def __getattr__(self, name: str) -> Any:
        # anything else the savers use from the pipeline (key caches, settings)
        return getattr(self.base, name)

    def serialize(self, identity: RecordIdentity, value: Any) -> tuple[str, bytes]:
        return self.base.serialize(identity, value)  # type: ignore[no-any-return]

    def seal(self, identity: RecordIdentity, value: Any) -> Sealed:
        return self.chain.seal(identity, self.base.seal(identity, value))

    def seal_serialized(self, identity: RecordIdentity, serialized: tuple[str, bytes]) -> Sealed:
        return self.chain.seal(identity, self.base.seal_serialized(identity, serialized))

    def open(self, identity: RecordIdentity, sealed: Sealed) -> Any:
        return self.base.open(identity, self.chain.check(identity, sealed))

    def metadata_index(self, identity: RecordIdentity, metadata: dict[str, Any]) -> dict[str, Any]:
        return self.base.metadata_index(identity, metadata)  # type: ignore[no-any-return]

    def split_filter(
        self, tenant: str, filter: dict[str, Any] | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        return self.base.split_filter(tenant, filter)  # type: ignore[no-any-return]

    def check_metadata(
        self,
        identity: RecordIdentity,
        metadata: Any,
        stored_index: dict[str, Any] | None,
        sealed: Sealed,
    ) -> None:
        inner = Sealed(sealed.type, sealed.data[:-TAG_SIZE])
        self.base.check_metadata(identity, metadata, stored_index, inner)

    def tampered(self, why: str) -> Exception:
        return IntegrityError(why)

    def index_settings(self) -> dict[str, Any] | None:
        return self.base.index_settings()  # type: ignore[no-any-return]

    def effect_id(self, tenant: str, material: bytes) -> str:
        return self.base.effect_id(tenant, material)  # type: ignore[no-any-return]


_check: type[RecordPipeline] = IntegrityPipeline  # structural check for type checkers
