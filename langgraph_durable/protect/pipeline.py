"""The record pipeline seam (redact -> serialize -> encrypt, and back)."""

from __future__ import annotations

import hashlib
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from .._core.codec import RecordPipeline, json_safe_metadata
from .._core.records import RecordIdentity, Sealed
from ..errors import CorruptRecordError, InvalidInputError

__all__ = ["RecordPipeline", "IdentityPipeline"]


class IdentityPipeline:
    """Serialize only: no redaction, no encryption.

    All metadata is kept in clear for filtering. Later pipelines replace the
    serializer step's output with ciphertext bound to the record identity and
    narrow the clear metadata to an allow-list.

    Args:
        serde: The LangGraph serializer (the saver's ``serde``).
    """

    binds_identity = False

    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde

    def seal(self, identity: RecordIdentity, value: Any) -> Sealed:
        return self.seal_serialized(identity, self.serialize(identity, value))

    def open(self, identity: RecordIdentity, sealed: Sealed) -> Any:
        try:
            return self.serde.loads_typed((sealed.type, sealed.data))
        except Exception as exc:  # the serializer raises anything on bad bytes
            raise CorruptRecordError(
                f"cannot decode {identity.kind} record of thread {identity.thread!r} "
                f"(checkpoint {identity.checkpoint_id or '-'}, key {identity.key or '-'}): {exc}"
            ) from exc

    def metadata_index(self, identity: RecordIdentity, metadata: dict[str, Any]) -> dict[str, Any]:
        return json_safe_metadata(metadata)

    def split_filter(
        self, tenant: str, filter: dict[str, Any] | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        return filter, None

    def check_metadata(
        self,
        identity: RecordIdentity,
        metadata: Any,
        stored_index: dict[str, Any] | None,
        sealed: Sealed,
    ) -> None:
        return None

    def serialize(self, identity: RecordIdentity, value: Any) -> tuple[str, bytes]:
        try:
            return self.serde.dumps_typed(value)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            # The serializer's own errors (an int past 64 bits, nesting past its limit,
            # a type it does not know) become ours, naming the record; nothing is stored.
            where = f"channel {identity.channel!r}" if identity.channel else identity.kind
            raise InvalidInputError(
                f"cannot store the {where} value of thread {identity.thread!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def tampered(self, why: str) -> Exception:
        return CorruptRecordError(why)

    def index_settings(self) -> dict[str, Any] | None:
        return None

    def effect_id(self, tenant: str, material: bytes) -> str:
        return hashlib.sha256(material).hexdigest()[:40]

    def seal_serialized(self, identity: RecordIdentity, serialized: tuple[str, bytes]) -> Sealed:
        return Sealed(serialized[0], serialized[1])


_check: type[RecordPipeline] = IdentityPipeline  # structural check for type checkers
