"""Tampered storage that the parsers of each backend read: our error, never a builtin.

Found by the tamper matrix (``test_tamper_matrix``), pinned here without a server:
each case is a stored shape the saver never writes.
"""

from __future__ import annotations

import struct

import ormsgpack
import pytest

from langgraph_durable._core.records import BlobDelta, Sealed
from langgraph_durable.dynamodb._deltas import parse_refs
from langgraph_durable.dynamodb._items import (
    _num,
    _str,
    parse_checkpoint_sk,
    read_payload,
    stored_data_key,
)
from langgraph_durable.errors import CorruptRecordError
from langgraph_durable.redis._records import _SENT, _Entry, decode_blob, decode_frames

CID = "1f1f0000-0000-6000-8000-000000000001"


def _delta(base: object, count: object, tail: list[object]) -> bytes:
    meta = ormsgpack.packb([base, count])
    return b"D" + struct.pack(">I", len(meta)) + meta + ormsgpack.packb(tail)


@pytest.mark.parametrize(
    "raw",
    [
        ormsgpack.packb(["msgpack", None]),  # a payload removed, its type kept
        ormsgpack.packb([None, b"x"]),  # a type removed
        _delta("v1", 1, ["empty", None]),  # a delta blanked
        _delta(None, 1, ["msgpack", b"x"]),  # a delta without its base
        _delta("v1", True, ["msgpack", b"x"]),
    ],
)
def test_redis_blob_values(raw: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="channel 'ch'"):
        decode_blob(raw, "the value of channel 'ch'")


def test_redis_empty_value_still_reads_as_empty() -> None:
    assert decode_blob(ormsgpack.packb(["empty", None])) is None
    assert decode_blob(ormsgpack.packb(["msgpack", b"x"])) == Sealed("msgpack", b"x")


def _entry(payload: list[object], header: list[object] | None = None) -> list[object]:
    hdr = header if header is not None else [4, False, False, [], False]
    return ["", CID, ormsgpack.packb(hdr), ormsgpack.packb(payload), [], [], []]


@pytest.mark.parametrize(
    "payload",
    [
        ["{}", "empty", None, "msgpack", b"m"],  # the body blanked
        ["{}", "msgpack", b"b", "empty", None],  # the metadata blanked
        ["{}", "msgpack", b"b"],  # cut short
    ],
)
def test_redis_checkpoint_payload(payload: list[object]) -> None:
    with pytest.raises(CorruptRecordError, match=CID):
        _Entry(_entry(payload), {}).stored("t")


def test_redis_parent_pointer_must_be_text() -> None:
    raw = _entry(["{}", "msgpack", b"b", "msgpack", b"m"], [4, True, False, [], False])
    with pytest.raises(CorruptRecordError, match="parent"):
        _Entry(raw, {}).stored("t")


def test_redis_refs_must_be_texts() -> None:
    raw = _entry(["{}", "msgpack", b"b", "msgpack", b"m"], [4, False, False, [1, 2], False])
    with pytest.raises(CorruptRecordError, match=CID):
        _Entry(raw, {})


def test_redis_delta_chain_that_loops_raises() -> None:
    """A base that leads back to a version already walked: an error, not a hang."""
    raw = _entry(["{}", "msgpack", b"b", "msgpack", b"m"], [4, False, False, ["ch", "v1"], False])
    raw[4] = [_SENT]
    seen = {("", "ch", "v1"): BlobDelta("v2", 1, Sealed("msgpack", b"x"))}
    seen[("", "ch", "v2")] = BlobDelta("v1", 1, Sealed("msgpack", b"y"))
    with pytest.raises(CorruptRecordError, match="loops"):
        _Entry(raw, seen)


def test_redis_missing_value_reaches_the_codec_as_none() -> None:
    raw = _entry(["{}", "msgpack", b"b", "msgpack", b"m"], [4, False, False, ["ch", "v1"], False])
    raw[4] = [b""]
    assert _Entry(raw, {}).stored("t").blobs == [("ch", "v1", None)]


def test_redis_frame_header_fields_must_be_text() -> None:
    head = ormsgpack.packb(["task", None, "ch", "msgpack"])
    frame = struct.pack(">iI", 0, len(head)) + head + struct.pack(">I", 1) + b"x"
    with pytest.raises(CorruptRecordError, match="a pending write"):
        list(decode_frames(frame, "a pending write"))


@pytest.mark.parametrize(
    "sk",
    [
        f"c##{CID}#w#task#",  # a blank write index
        f"c##{CID}#w#task#x",
        f"c##{CID}#w",  # cut short
        "c#",
        f"c##{CID}#k#b",
        f"c#%G1#{CID}#",  # a malformed escape
    ],
)
def test_dynamodb_sort_keys(sk: str) -> None:
    with pytest.raises(CorruptRecordError, match="sort key"):
        parse_checkpoint_sk(sk)


@pytest.mark.parametrize(
    "refs",
    ['[["ch"]]', '[["ch", "v1"]]', '[["ch", "v1", ""]]', '[["ch", "v1", 0, [["v0"]]]]', "[1]", "{"],
)
def test_dynamodb_refs(refs: str) -> None:
    with pytest.raises(CorruptRecordError, match="references"):
        parse_refs(refs)


def test_dynamodb_attributes_of_another_type() -> None:
    item = {"sk": {"S": "c#x"}, "n": {"S": "1"}, "s": {"N": "1"}, "b": {"S": "x"}}
    for call in (lambda: _num(item, "n"), lambda: _str(item, "s")):
        with pytest.raises(CorruptRecordError, match="c#x"):
            call()
    with pytest.raises(CorruptRecordError, match="body"):
        read_payload(item, "b", {}, "the body")
    with pytest.raises(CorruptRecordError, match="data-key"):
        stored_data_key({"sk": {"S": ""}, "pk": {"S": "t##keys"}})
