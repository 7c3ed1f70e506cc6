"""Delta encoding of growing list channels in the codec, without a database."""

from __future__ import annotations

from typing import Any

import ormsgpack
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_durable._core.chain import ChainKey
from langgraph_durable._core.codec import CheckpointCodec, StoredCheckpoint, ThreadKey
from langgraph_durable._core.delta import DeltaTracker, ListMemo, join_arrays
from langgraph_durable._core.records import (
    BlobDelta,
    CheckpointRecord,
    RecordIdentity,
    RecordKind,
    Sealed,
)
from langgraph_durable._core.versions import next_version
from langgraph_durable.errors import CorruptRecordError
from langgraph_durable.protect.allowlist import AllowlistSerializer
from langgraph_durable.protect.integrity import IntegrityPipeline
from langgraph_durable.protect.pipeline import IdentityPipeline
from langgraph_durable.protect.redaction import Redaction, RedactionPipeline

KEY = ThreadKey("acme", "t1", "", False)


class SerializingTracker(DeltaTracker):
    """A tracker that serializes each planned value itself (as the codec does for it)."""

    def __init__(self, max_chain: int, serialize: Any = None) -> None:
        super().__init__(max_chain)
        self.serialize = serialize or JsonPlusSerializer().dumps_typed

    def plan(self, scope: Any, channel: str, version: str, value: Any) -> Any:  # type: ignore[override]
        return super().plan(scope, channel, version, value, self.serialize(value))


def tracker(max_chain: int = 3) -> SerializingTracker:
    return SerializingTracker(max_chain)


class CountingPipeline(IdentityPipeline):
    """Counts the blob payloads it opens; ``joins`` sets ``joins_lists``."""

    def __init__(self, joins: bool) -> None:
        super().__init__(AllowlistSerializer())
        self.joins_lists = joins
        self.blob_opens = 0

    def open(self, identity: RecordIdentity, sealed: Sealed) -> Any:
        if identity.kind == RecordKind.BLOB:
            self.blob_opens += 1
        return super().open(identity, sealed)


class Store:
    """Blobs of one thread as a backend would keep them, and checkpoints to read back."""

    def __init__(self, max_chain: int = 3, pipeline: Any = None) -> None:
        self.codec = CheckpointCodec(pipeline or IdentityPipeline(JsonPlusSerializer()), max_chain)
        self.blobs: dict[tuple[str, str], Sealed | BlobDelta] = {}
        self.records: list[CheckpointRecord] = []
        self.version: str | None = None

    def put(self, items: list[Any]) -> CheckpointRecord:
        self.version = next_version(self.version)
        cp = dict(empty_checkpoint())
        cp["id"] = f"cp{len(self.records):04d}"
        cp["channel_values"] = {"messages": items}
        cp["channel_versions"] = {"messages": self.version}
        rec = self.codec.encode_checkpoint(
            KEY, {"configurable": {}}, cp, {}, {"messages": self.version}
        )
        for b in rec.blobs:
            assert b.sealed is not None
            stored = b.sealed if b.base is None else BlobDelta(b.base, b.prefix, b.sealed)
            self.blobs[(b.channel, b.version)] = stored
        self.codec.written(rec)
        self.records.append(rec)
        return rec

    def stored(self, rec: CheckpointRecord) -> StoredCheckpoint:
        (ch, ver), *_ = rec.blob_refs
        bases = {k: v for k, v in self.blobs.items() if k != (ch, ver)}
        return StoredCheckpoint(
            thread=rec.thread,
            ns=rec.ns,
            checkpoint_id=rec.checkpoint_id,
            parent_checkpoint_id=None,
            body=rec.body,
            metadata=rec.metadata,
            blobs=[(ch, ver, self.blobs[(ch, ver)])],
            bases=bases,
        )

    def read(self, rec: CheckpointRecord, memo: ListMemo | None = None) -> Any:
        return self.codec.decode(KEY, self.stored(rec), memo).checkpoint["channel_values"][
            "messages"
        ]


def test_tracker_plans_deltas_only_for_extensions() -> None:
    t = tracker(max_chain=2)
    first = t.plan("s", "messages", "v1", [1, 2])
    assert first.base is None
    t.remember("s", "messages", first.written)
    second = t.plan("s", "messages", "v2", [1, 2, 3])
    assert second.written is not None
    assert (second.base, second.prefix, second.written.depth) == ("v1", 2, 1)
    t.remember("s", "messages", second.written)
    # An earlier item changed: a full copy.
    assert t.plan("s", "messages", "v3", [1, 9, 3, 4]).base is None
    assert t.plan("s", "messages", "v3", [1, 2, {"a": 3}, 4]).base is None
    # Shorter (an item removed): a full copy.
    assert t.plan("s", "messages", "v3", [1, 2]).base is None
    # Another scope or channel knows nothing.
    assert t.plan("other", "messages", "v3", [1, 2, 3, 4]).base is None
    assert t.plan("s", "todo", "v3", [1, 2, 3, 4]).base is None
    third = t.plan("s", "messages", "v3", [1, 2, 3, 4])
    t.remember("s", "messages", third.written)
    # The chain is full (2 deltas): the next version is a full copy again.
    assert t.plan("s", "messages", "v4", [1, 2, 3, 4, 5]).base is None
    t.forget(lambda scope: scope == "s")
    assert t.plan("s", "messages", "v2b", [1, 2, 3, 4]).base is None


def test_values_that_are_not_msgpack_arrays_are_never_bases() -> None:
    def serialize(value: Any) -> tuple[str, bytes]:
        if "pickled" in value:
            return ("pickle", b"\x80\x04...")
        return JsonPlusSerializer().dumps_typed(value)

    t = SerializingTracker(4, serialize)
    plan = t.plan("s", "messages", "v1", [1, "pickled"])
    assert plan.base is None and plan.written is None and plan.serialized is not None
    t.remember("s", "messages", plan.written)
    assert t.plan("s", "messages", "v2", [1, "pickled", 3]).base is None


@pytest.mark.parametrize("n", [15, 16, 70_000])
def test_array_headers_of_every_size(n: int) -> None:
    t = tracker(max_chain=2)
    first = t.plan("s", "messages", "v1", list(range(n)))
    t.remember("s", "messages", first.written)
    second = t.plan("s", "messages", "v2", [*range(n), "new"])
    assert (second.base, second.prefix) == ("v1", n)


def test_codec_round_trip_through_chains() -> None:
    store = Store(max_chain=3)
    values = [[{"n": i} for i in range(k)] for k in range(1, 11)]
    recs = [store.put(v) for v in values]
    kinds = [
        "delta" if isinstance(store.blobs[r.blob_refs[0]], BlobDelta) else "full" for r in recs
    ]
    assert kinds == ["full", "delta", "delta", "delta"] * 2 + ["full", "delta"]
    memo = ListMemo()
    for rec, want in reversed(list(zip(recs, values, strict=True))):
        assert store.read(rec, memo) == want
        assert store.read(rec) == want  # without a memo too


def test_written_only_for_created_blobs() -> None:
    store = Store()
    store.put([1])
    rec = store.put([1, 2])
    assert rec.blobs[0].base is not None
    # The blob of the next version already existed (another writer): not a base.
    store.version = next_version(store.version)
    cp = dict(empty_checkpoint())
    cp["channel_values"] = {"messages": [1, 2, 3]}
    cp["channel_versions"] = {"messages": store.version}
    rec = store.codec.encode_checkpoint(
        KEY, {"configurable": {}}, cp, {}, {"messages": store.version}
    )
    store.codec.written(rec, created=[])
    assert store.put([1, 2, 3, 4]).blobs[0].base is None


def test_allow_delta_false_writes_full_copies() -> None:
    store = Store()
    store.put([1])
    cp = dict(empty_checkpoint())
    cp["channel_values"] = {"messages": [1, 2]}
    cp["channel_versions"] = {"messages": "v9"}
    rec = store.codec.encode_checkpoint(
        KEY, {"configurable": {}}, cp, {}, {"messages": "v9"}, allow_delta=False
    )
    assert rec.blobs[0].base is None


def test_broken_chains_are_reported() -> None:
    store = Store()
    store.put([1])
    second = store.put([1, 2])
    stored = store.stored(second)
    # The base is missing.
    stored.bases = {}
    with pytest.raises(CorruptRecordError, match="missing"):
        store.codec.decode(KEY, stored)
    # The base has a different number of items than the delta says.
    delta = store.blobs[second.blob_refs[0]]
    assert isinstance(delta, BlobDelta)
    stored = store.stored(second)
    stored.blobs = [(*second.blob_refs[0], BlobDelta(delta.base, 5, delta.tail))]
    with pytest.raises(CorruptRecordError, match="extends 5 items"):
        store.codec.decode(KEY, stored)
    # A delta built on itself.
    stored = store.stored(second)
    ch, ver = second.blob_refs[0]
    loop = BlobDelta(ver, 1, delta.tail)
    stored.blobs = [(ch, ver, loop)]
    stored.bases = {(ch, ver): loop}
    with pytest.raises(CorruptRecordError, match="looping"):
        store.codec.decode(KEY, stored)


def test_codec_without_deltas_stores_full_copies() -> None:
    codec = CheckpointCodec(IdentityPipeline(JsonPlusSerializer()))
    assert codec.deltas is None
    version = None
    for k in range(1, 4):
        version = next_version(version)
        cp = dict(empty_checkpoint())
        cp["channel_values"] = {"messages": list(range(k))}
        cp["channel_versions"] = {"messages": version}
        rec = codec.encode_checkpoint(KEY, {"configurable": {}}, cp, {}, {"messages": version})
        codec.written(rec)
        assert rec.blobs[0].base is None and rec.tracked == []


@pytest.mark.parametrize(
    ("before", "added"), [(1, 1), (3, 14), (15, 1), (2, 16), (10, 70_000), (70_000, 3)]
)
def test_a_deltas_bytes_cut_from_the_whole_equal_serializing_its_items(
    before: int, added: int
) -> None:
    serde = JsonPlusSerializer()
    t = tracker(max_chain=4)
    items: list[Any] = [{"n": i, "text": "x" * (i % 7)} for i in range(before + added)]
    first = t.plan("s", "messages", "v1", items[:before])
    t.remember("s", "messages", first.written)
    plan = t.plan("s", "messages", "v2", items)
    assert plan.base == "v1" and plan.tail is not None
    assert plan.tail == serde.dumps_typed(items[before:])[1]


def _serialized(items: list[Any]) -> tuple[str, bytes]:
    return JsonPlusSerializer().dumps_typed(items)


@pytest.mark.parametrize("sizes", [[1], [1, 1, 1], [15, 1], [14, 1, 1], [16, 3], [70_000, 2]])
def test_join_arrays_joins_the_items_in_order(sizes: list[int]) -> None:
    parts, want = [], []
    for i, n in enumerate(sizes):
        items = [f"{i}-{k}" for k in range(n)]
        parts.append(_serialized(items))
        want.extend(items)
    joined = join_arrays(parts)
    assert joined is not None
    data, counts = joined
    assert counts == sizes
    assert data[:1] == _serialized(want)[1][:1]  # the header of a list of that length
    assert ormsgpack.unpackb(data) == want


def test_join_arrays_refuses_a_part_that_is_not_an_array() -> None:
    head = _serialized([1])
    for bad in [
        ("msgpack", ormsgpack.packb({"a": 1})),
        ("msgpack", b""),
        ("msgpack", b"\xdc\x00"),  # a header cut short
        ("empty", b""),
        ("json", b"[1]"),
        ("pickle", b"\x80\x04]."),
    ]:
        assert join_arrays([head, bad]) is None
        assert join_arrays([bad, head]) is None


def _messages(n: int) -> list[Any]:
    out: list[Any] = []
    for i in range(n):
        if i % 3 == 0:
            out.append(HumanMessage(f"question {i} \u00e9\u4e2d", id=f"h{i}"))
        elif i % 3 == 1:
            call = {"name": "search", "args": {"q": i}, "id": f"c{i}", "type": "tool_call"}
            out.append(AIMessage(f"calling {i}", id=f"a{i}", tool_calls=[call]))
        else:
            out.append(ToolMessage(f"result {i}" * 50, tool_call_id=f"c{i - 1}", id=f"t{i}"))
    return out


def test_a_chain_opens_in_one_pass_and_reads_as_opened_part_by_part() -> None:
    messages = _messages(40)
    stores = {
        joins: Store(max_chain=8, pipeline=CountingPipeline(joins)) for joins in (True, False)
    }
    recs = {
        joins: [store.put(messages[:k]) for k in range(1, 41)] for joins, store in stores.items()
    }
    depths = []
    for k in range(1, 41):
        got = {}
        for joins, store in stores.items():
            pipeline = store.codec.pipeline
            pipeline.blob_opens = 0
            got[joins] = store.read(recs[joins][k - 1])
            assert got[joins] == messages[:k]
            assert [type(m) for m in got[joins]] == [type(m) for m in messages[:k]]
            if joins:
                assert pipeline.blob_opens == 1  # the whole chain, one pass
            else:
                depths.append(pipeline.blob_opens)
    assert max(depths) == 9  # a full copy and 8 deltas: the part-by-part path's opens


def test_a_broken_part_of_a_joined_chain_is_reported_as_part_by_part() -> None:
    cases = {
        "not msgpack": Sealed("msgpack", b"\x91\xc1"),  # 0xc1: a byte msgpack never uses
        "not an array": Sealed("msgpack", ormsgpack.packb({"a": 1})),
        "blanked": Sealed("empty", b""),
        "one item short": Sealed("msgpack", b"\x92" + ormsgpack.packb("x")),
    }
    for why, broken in cases.items():
        errors = []
        for joins in (True, False):
            store = Store(max_chain=8, pipeline=CountingPipeline(joins))
            recs = [store.put(_messages(k)) for k in range(1, 5)]
            ch, ver = recs[2].blob_refs[0]  # a delta in the middle of the chain
            delta = store.blobs[(ch, ver)]
            assert isinstance(delta, BlobDelta)
            store.blobs[(ch, ver)] = BlobDelta(delta.base, delta.prefix, broken)
            with pytest.raises(CorruptRecordError) as caught:
                store.read(recs[3])
            errors.append(str(caught.value).replace(ver, "<broken version>"))
        assert errors[0] == errors[1], why


def test_only_pipelines_whose_payloads_are_the_serializers_bytes_join_lists() -> None:
    class OwnLoads(JsonPlusSerializer):
        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            return super().loads_typed(data)

    plain = IdentityPipeline(AllowlistSerializer())
    assert plain.joins_lists
    assert IdentityPipeline(JsonPlusSerializer()).joins_lists
    assert not IdentityPipeline(OwnLoads()).joins_lists  # a serializer of its own: part by part
    assert RedactionPipeline(plain, Redaction()).joins_lists
    assert not IntegrityPipeline(plain, ChainKey(b"k" * 32)).joins_lists
    assert not RedactionPipeline(IdentityPipeline(OwnLoads()), Redaction()).joins_lists
