"""The record pipeline seam (redact -> serialize -> encrypt, and back)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from .._core.codec import RecordPipeline, json_safe_metadata
from .._core.records import RecordIdentity, Sealed
from ..errors import CorruptRecordError, InvalidInputError
from .allowlist import AllowlistSerializer
from .value_paths import culprit_path, has_lone_surrogate

__all__ = ["RecordPipeline", "IdentityPipeline"]

_SERDE_ERRORS = (TypeError, ValueError, OverflowError, RecursionError)
_PLAIN_LOADS = (JsonPlusSerializer.loads_typed, AllowlistSerializer.loads_typed)


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
        # LangGraph's serializer and ours decode a msgpack payload with one unpackb and
        # nothing after it, so a delta chain's arrays may be joined before decoding
        self.joins_lists = type(serde).loads_typed in _PLAIN_LOADS

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
            serialized = self.serde.dumps_typed(value)
        except _SERDE_ERRORS as exc:
            # The serializer's own errors (an int past 64 bits, nesting past its limit,
            # a type it does not know) become ours, naming the record and the path in
            # the value (found only now, on the error path); nothing is stored.
            raise self._unstorable(identity, value, exc, self._fails) from exc
        if (
            serialized[0] == "msgpack"
            and b"?" in serialized[1]
            and isinstance(self.serde, JsonPlusSerializer)
            and has_lone_surrogate(value)
        ):
            # LangGraph's serializer would store "?" in its place: refuse instead.
            raise self._unstorable(identity, value, None, has_lone_surrogate)
        return serialized

    def _fails(self, value: Any) -> bool:
        try:
            self.serde.dumps_typed(value)
        except _SERDE_ERRORS:
            return True
        return False

    def _unstorable(
        self,
        identity: RecordIdentity,
        value: Any,
        error: Exception | None,
        fails: Callable[[Any], bool],
    ) -> InvalidInputError:
        root = identity.channel or identity.kind
        where, part = root, value
        try:
            where, part = culprit_path(value, root, fails)
            if error is not None:
                self.serde.dumps_typed(part)  # the part's own error names its type
        except _SERDE_ERRORS as exc:
            error = exc
        if error is None or "surrogates" in str(error):  # ormsgpack's words for it
            why = "a string holds a lone surrogate (not valid Unicode)"
        else:
            why = f"{type(error).__name__}: {error}"
        return InvalidInputError(
            f"cannot store the value at {where} ({identity.kind} record of thread "
            f"{identity.thread!r}): {why}"
        )

    def tampered(self, why: str) -> Exception:
        return CorruptRecordError(why)

    def index_settings(self) -> dict[str, Any] | None:
        return None

    def effect_id(self, tenant: str, material: bytes) -> str:
        return hashlib.sha256(material).hexdigest()[:40]

    def seal_serialized(self, identity: RecordIdentity, serialized: tuple[str, bytes]) -> Sealed:
        return Sealed(serialized[0], serialized[1])


_check: type[RecordPipeline] = IdentityPipeline  # structural check for type checkers
