"""How the saver packs what it stores in Redis, and reads it back.

Pure: no redis import, no I/O. The key and field names are in ``_keys``.

A checkpoint is two hash values, a header the scripts read (msgpack of str,
int and bool only: Lua's cmsgpack) and a payload only Python reads. A channel
value (blob) is msgpack of (type, bytes), or a delta of a list value: ``"D"``,
``>I`` meta length, meta (msgpack: the version it extends, that version's item
count), then the added items (msgpack: type, bytes).

A write frame is ``>i idx, >I header length, header (msgpack: task id, task
path, channel, type), >I data length, data``: the scripts read the index and the
channel of a frame without touching its payload.

A read script returns each checkpoint as ``{ns, id, header, payload, blobs,
writes, parent's writes}`` (``lua/lib/collect.lua``), read here by
:class:`_Entry`. An effect-journal entry is a hash of ``EFFECT_FIELDS``.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde.types import TASKS

from .._core.codec import StoredCheckpoint
from .._core.effects import DONE, StoredEffect
from .._core.records import (
    BlobDelta,
    BlobRecord,
    CheckpointRecord,
    Sealed,
    StoredDataKey,
    WriteRecord,
)
from ..errors import CorruptRecordError, InvalidInputError
from ._keys import EFFECT_FIELDS, _effect_id, _ident

__all__ = [
    "DELTA_MARK",
    "encode_header",
    "encode_payload",
    "encode_blob",
    "decode_blob",
    "encode_frame",
    "decode_frames",
    "encode_data_key",
    "decode_data_key",
]

_FRAME_HEAD = struct.Struct(">iI")
#: First byte of a delta blob (a full one starts with a msgpack array header).
DELTA_MARK = b"D"
#: Stands for a blob sent earlier in the same reply.
_SENT = b"\x01"
_LEN = struct.Struct(">I")
_INT32 = (-(2**31), 2**31 - 1)


def _pack(value: Any) -> bytes:
    try:
        return ormsgpack.packb(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"cannot encode a record for Redis: {exc}") from exc


def encode_header(rec: CheckpointRecord) -> bytes:
    """The part of a record the scripts read (str, int and bool only: Lua's cmsgpack)."""
    refs: list[str] = []
    for channel, version in rec.blob_refs:
        refs.append(_ident(channel, "channel name"))
        refs.append(_ident(version, "channel version"))
    return _pack(
        [
            rec.v,
            False if rec.parent_checkpoint_id is None else str(rec.parent_checkpoint_id),
            False if rec.run_id is None else rec.run_id,
            refs,
            "counters_since_delta_snapshot" in rec.metadata_index,
        ]
    )


def encode_payload(rec: CheckpointRecord) -> bytes:
    """The part of a record only Python reads."""
    index = json.dumps(rec.metadata_index, separators=(",", ":"))
    return _pack([index, rec.body.type, rec.body.data, rec.metadata.type, rec.metadata.data])


def encode_blob(blob: BlobRecord) -> bytes:
    """A channel value (empty, full or a delta; see the module docstring)."""
    sealed = blob.sealed
    if sealed is None:
        return _pack(["empty", None])
    value = _pack([sealed.type, sealed.data])
    if blob.base is None:
        return value
    meta = _pack([_ident(blob.base, "channel version"), blob.prefix])
    return DELTA_MARK + _LEN.pack(len(meta)) + meta + value


def _sealed(type_: Any, data: Any, what: str) -> Sealed:
    """A stored (type, bytes) pair, checked: altered storage gets our error, not a builtin.

    Raises:
        CorruptRecordError: The type is not text or the payload not bytes.
    """
    if not isinstance(type_, str) or not isinstance(data, (bytes, bytearray)):
        raise CorruptRecordError(
            f"{what} cannot be read: its type is {type(type_).__name__} and its payload "
            f"{type(data).__name__} (expected text and bytes)"
        )
    return Sealed(type_, bytes(data))


def decode_blob(raw: bytes, what: str = "a stored channel value") -> Sealed | BlobDelta | None:
    """What ``encode_blob`` stored (None: the channel is empty).

    Raises:
        CorruptRecordError: ``raw`` is not a value ``encode_blob`` writes
            (``what`` names it).
    """
    try:
        if raw[:1] == DELTA_MARK:
            (n,) = _LEN.unpack_from(raw, 1)
            base, prefix = ormsgpack.unpackb(raw[5 : 5 + n])
            b_type, b_data = ormsgpack.unpackb(raw[5 + n :])
            if not isinstance(base, str) or isinstance(prefix, bool):
                raise ValueError(f"delta base {base!r} / count {prefix!r}")
            return BlobDelta(base, int(prefix), _sealed(b_type, b_data, what))
        b_type, b_data = ormsgpack.unpackb(raw)
    except (ValueError, TypeError, struct.error) as exc:
        raise CorruptRecordError(f"{what} cannot be read: {exc}") from exc
    if b_type == "empty" and b_data is None:
        return None
    return _sealed(b_type, b_data, what)


def encode_frame(record: WriteRecord) -> bytes:
    """One pending write as a frame (see the module docstring)."""
    if not _INT32[0] <= record.idx <= _INT32[1]:
        raise InvalidInputError(f"write index {record.idx} is out of range")
    head = _pack([record.task_id, record.task_path, record.channel, record.sealed.type])
    data = record.sealed.data
    return _FRAME_HEAD.pack(record.idx, len(head)) + head + _LEN.pack(len(data)) + data


def decode_frames(
    blob: bytes, what: str = "a stored write frame"
) -> Iterator[tuple[str, str, int, str, Sealed]]:
    """(task id, task path, idx, channel, sealed) of each frame in ``blob``.

    Raises:
        CorruptRecordError: ``blob`` is not frames ``encode_frame`` writes
            (``what`` names the record).
    """
    pos, end = 0, len(blob)
    try:
        while pos < end:
            idx, hlen = _FRAME_HEAD.unpack_from(blob, pos)
            pos += 8
            task_id, task_path, channel, type_ = ormsgpack.unpackb(blob[pos : pos + hlen])
            if not all(isinstance(x, str) for x in (task_id, task_path, channel, type_)):
                raise ValueError("a frame header field is not text")
            pos += hlen
            (dlen,) = _LEN.unpack_from(blob, pos)
            pos += 4
            data = bytes(blob[pos : pos + dlen])
            if len(data) != dlen:
                raise ValueError("truncated frame")
            pos += dlen
            yield task_id, task_path, idx, channel, Sealed(type_, data)
    except (struct.error, ValueError, TypeError) as exc:
        raise CorruptRecordError(f"{what} cannot be read: {exc}") from exc


def encode_data_key(key: StoredDataKey) -> bytes:
    """A data-key version as its hash field stores it (the version is the field)."""
    return _pack([key.key_id, key.wrapped, float(key.created)])


def decode_data_key(version: Any, raw: bytes) -> StoredDataKey:
    """What ``encode_data_key`` stored under field ``version``.

    Raises:
        CorruptRecordError: The field or the value is not one the saver wrote.
    """
    try:
        key_id, wrapped, created = ormsgpack.unpackb(raw)
        return StoredDataKey(
            int(_text(version)),
            str(key_id),
            None if wrapped is None else bytes(wrapped),
            float(created),
        )
    except (ValueError, TypeError) as exc:
        raise CorruptRecordError(
            f"stored data-key version {_text(version)!r} cannot be read: {exc}"
        ) from exc


def _hash_pairs(reply: Any) -> list[tuple[bytes, bytes]]:
    """The (field, value) pairs of an HGETALL reply (redis-py's dict, or a flat list)."""
    if isinstance(reply, dict):
        return [(bytes(k), bytes(v)) for k, v in reply.items()]
    return list(_pairs(list(reply or [])))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


class _Entry:
    """One checkpoint as a read script returns it.

    ``seen`` maps (ns, channel, version) to the blobs of earlier entries of the
    same reply: a script sends a blob once per reply.
    """

    __slots__ = (
        "ns",
        "checkpoint_id",
        "header",
        "payload",
        "blobs",
        "bases",
        "writes",
        "sends",
        "_index",
    )

    def __init__(self, raw: Sequence[Any], seen: dict[tuple[str, str, str], Any]) -> None:
        self.checkpoint_id = "?"
        try:
            ns, cid, hdr, payload, blobs, writes, sends = raw
            self.ns = _text(ns)
            self.checkpoint_id = _text(cid)
            self.header = ormsgpack.unpackb(hdr)
            self.payload = ormsgpack.unpackb(payload)
            refs = self.header[3]
            if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
                raise ValueError("its blob references are not a list of texts")
            self.blobs, self.bases = self._walk(refs, list(blobs or []), seen)
        except (ValueError, TypeError, KeyError, IndexError, UnicodeDecodeError) as exc:
            raise CorruptRecordError(
                f"stored checkpoint {self.checkpoint_id} cannot be read: {exc}"
            ) from exc
        self.writes: list[Any] = list(writes or [])
        self.sends: list[Any] = list(sends or [])
        self._index: dict[str, Any] | None = None

    def _walk(
        self, refs: Sequence[str], values: list[Any], seen: dict[tuple[str, str, str], Any]
    ) -> tuple[
        list[tuple[str, str, Sealed | BlobDelta | None]],
        dict[tuple[str, str], Sealed | BlobDelta | None],
    ]:
        """The values a read script sent, in its order: each referenced version,
        then the versions its delta chain extends. Returns (channel, version,
        blob) of the referenced ones and the chains' blobs by (channel, version)."""
        blobs: list[tuple[str, str, Sealed | BlobDelta | None]] = []
        bases: dict[tuple[str, str], Sealed | BlobDelta | None] = {}
        pos = 0
        for j in range(0, len(refs) - 1, 2):
            channel, version = refs[j], refs[j + 1]
            first, earlier = True, False
            visited: set[str] = set()
            while True:
                if version in visited:  # altered bases that lead back: never a loop
                    raise ValueError(f"the delta chain of channel {channel!r} loops")
                visited.add(version)
                where = (self.ns, channel, version)
                if earlier:  # the script sent the rest of this chain earlier in the reply
                    if where not in seen:
                        break
                    blob = seen[where]
                else:
                    raw = values[pos]
                    pos += 1
                    if raw == _SENT:
                        blob, earlier = seen[where], True
                    elif not raw:  # missing: the codec decides (the body says what it holds)
                        seen[where] = None
                        if first:
                            blobs.append((channel, version, None))
                        break
                    else:
                        blob = seen[where] = decode_blob(
                            bytes(raw),
                            f"the value of channel {channel!r} version {version} (namespace "
                            f"{self.ns!r}, read for checkpoint {self.checkpoint_id})",
                        )
                if first:
                    blobs.append((channel, version, blob))
                else:
                    bases[(channel, version)] = blob
                if not isinstance(blob, BlobDelta):
                    break
                version, first = blob.base, False
        return blobs, bases

    def metadata_index(self) -> dict[str, Any]:
        """The clear metadata index as stored (parsed once per entry).

        Not a dict (altered storage) reads as ``{}``, which the encryption
        pipeline then finds differs from the encrypted metadata.
        """
        if self._index is None:
            try:
                index = json.loads(self.payload[0])
            except (ValueError, TypeError, IndexError) as exc:
                raise CorruptRecordError(
                    f"checkpoint {self.checkpoint_id}: stored metadata index cannot be read: {exc}"
                ) from exc
            self._index = index if isinstance(index, dict) else {}
        return self._index

    def stored(self, thread: str) -> StoredCheckpoint:
        """The checkpoint for the codec, with its stored clear metadata index.

        The codec's pipeline compares that index with the opened metadata (when
        it encrypts), so an altered clear index fails like altered ciphertext.
        """
        what = f"checkpoint {self.checkpoint_id} of thread {thread!r} (namespace {self.ns!r})"
        try:
            _v, parent, _run, _refs, _delta = self.header
            _index, c_type, c_data, m_type, m_data = self.payload
        except (ValueError, TypeError) as exc:
            raise CorruptRecordError(f"{what} has a malformed record") from exc
        if parent is not False and not isinstance(parent, str):
            raise CorruptRecordError(f"{what} has a malformed parent pointer {parent!r}")
        body = _sealed(c_type, c_data, f"the body of {what}")
        metadata = _sealed(m_type, m_data, f"the metadata of {what}")
        writes = [
            w for blob in self.writes for w in decode_frames(blob, f"a pending write of {what}")
        ]
        sends = [
            (task_id, path, idx, sealed)
            for blob in self.sends
            for task_id, path, idx, channel, sealed in decode_frames(
                blob, f"a pending send of the parent of {what}"
            )
            if channel == TASKS
        ]
        return StoredCheckpoint(
            thread=thread,
            ns=self.ns,
            checkpoint_id=self.checkpoint_id,
            parent_checkpoint_id=parent if isinstance(parent, str) else None,
            body=body,
            metadata=metadata,
            blobs=self.blobs,
            bases=self.bases,
            writes=writes,
            parent_sends=sends,
            metadata_index=self.metadata_index(),
        )


def _pairs(flat: Sequence[Any]) -> Iterator[tuple[bytes, bytes]]:
    for j in range(0, len(flat) - 1, 2):
        yield bytes(flat[j]), bytes(flat[j + 1])


# ---------------------------------------------------------------- effect-journal entries


def _time(value: Any, what: str) -> str:
    """A time (Unix seconds) as the scripts store and compare it: Python's float repr."""
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} must be a number of seconds, got {value!r}") from exc
    if math.isnan(number):
        raise InvalidInputError(f"{what} must not be NaN")
    return repr(number)


def _decode_effect(effect_id: str, values: Sequence[Any], won: bool) -> StoredEffect:
    """A journal entry from its fields in ``EFFECT_FIELDS`` order (None where missing).

    Raises:
        CorruptRecordError: The entry is not one the saver wrote.
    """
    try:
        state, token, attempt, lease, r_type, r_data, outcome, res_type, res_data, created, _ = (
            values
        )
        if state is None or r_type is None or r_data is None:
            raise ValueError("state or request missing")
        result = None
        if res_type is not None:
            result = Sealed(_text(res_type), bytes(res_data or b""))
        return StoredEffect(
            effect_id=effect_id,
            state=_text(state),
            token=int(token),
            attempt=int(attempt),
            lease_until=float(lease),
            request=Sealed(_text(r_type), bytes(r_data)),
            outcome=None if outcome is None else _text(outcome),
            result=result,
            won=won,
            created=float(created) if created is not None else 0.0,
        )
    except (ValueError, TypeError) as exc:
        raise CorruptRecordError(
            f"stored effect-journal entry {effect_id!r} cannot be read: {exc}"
        ) from exc


def _effect_fields(effect_id: str, values: Sequence[Any]) -> list[Any]:
    """EFFECT_WRITE's arguments for one entry: id, field count, the present fields."""
    pairs: list[Any] = []
    for name, value in zip(EFFECT_FIELDS, values, strict=True):
        if value is not None:
            pairs.extend((name.encode(), bytes(value)))
    return [effect_id.encode(), str(len(pairs) // 2).encode(), *pairs]


def _effect_args(effect: StoredEffect) -> list[Any]:
    """EFFECT_WRITE's arguments for an entry as given (a done one completed when created)."""
    created = _time(effect.created, "created")
    values: list[Any] = [
        _ident(effect.state, "effect state"),
        str(int(effect.token)),
        str(int(effect.attempt)),
        _time(effect.lease_until, "lease_until"),
        _ident(effect.request.type, "request type"),
        bytes(effect.request.data),
        None if effect.outcome is None else _ident(effect.outcome, "effect outcome"),
        None if effect.result is None else _ident(effect.result.type, "result type"),
        None if effect.result is None else bytes(effect.result.data),
        created,
        created if effect.state == DONE else None,
    ]
    encoded = [v.encode() if isinstance(v, str) else v for v in values]
    return _effect_fields(_effect_id(effect.effect_id), encoded)
