"""The checkpoint codec and the sans-IO operations, without a database."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import WRITES_IDX_MAP, empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, _DeltaSnapshot

from langgraph_durable._core.codec import (
    CheckpointCodec,
    StoredCheckpoint,
    ThreadKey,
    encode_filter,
    thread_key,
)
from langgraph_durable._core.sansio import Emit
from langgraph_durable._core.versions import next_version
from langgraph_durable.errors import ConfigurationError, InvalidInputError
from langgraph_durable.postgres._ops import PostgresOps, Query, validate_schema_name
from langgraph_durable.protect.pipeline import IdentityPipeline

KEY = ThreadKey("acme", "t1", "", False)


def codec() -> CheckpointCodec:
    return CheckpointCodec(IdentityPipeline(JsonPlusSerializer()))


def checkpoint(**values: Any) -> dict[str, Any]:
    cp = dict(empty_checkpoint())
    cp["channel_values"] = values
    cp["channel_versions"] = {k: next_version(None) for k in values}
    return cp


def test_primitives_stay_inline_and_objects_become_blobs() -> None:
    cp = checkpoint(
        count=3, name="x", flag=True, nothing=None, messages=[1, 2], snap=_DeltaSnapshot([1])
    )
    rec = codec().encode_checkpoint(KEY, {"configurable": {}}, cp, {}, cp["channel_versions"])
    assert {b.channel for b in rec.blobs} == {"messages", "snap"}
    assert {c for c, _ in rec.blob_refs} == {"messages", "snap"}
    body = codec().pipeline.open(None, rec.body)  # type: ignore[arg-type]
    assert body["channel_values"] == {
        "count": 3,
        "name": "x",
        "flag": True,
        "nothing": None,
        "snap": True,
    }


def test_only_new_versions_are_written_as_blobs() -> None:
    cp = checkpoint(messages=[1], other=[2])
    new = {"messages": cp["channel_versions"]["messages"]}
    rec = codec().encode_checkpoint(KEY, {"configurable": {}}, cp, {}, new)
    assert [b.channel for b in rec.blobs] == ["messages"]
    assert sorted(c for c, _ in rec.blob_refs) == ["messages", "other"]


def test_round_trip_through_stored_parts() -> None:
    c = codec()
    cp = checkpoint(count=3, messages=["a", "b"])
    config = {"configurable": {"thread_id": "t1", "checkpoint_id": "parent-1", "run_id": "r1"}}
    rec = c.encode_checkpoint(
        KEY, config, cp, {"source": "loop", "step": 1}, cp["channel_versions"]
    )
    writes, replace = c.encode_writes(KEY, cp["id"], [("a", 1), ("b", {"x": 2})], "task-2", "p2")
    assert not replace
    early, _ = c.encode_writes(KEY, cp["id"], [("c", 3)], "task-1", "p1")
    stored = StoredCheckpoint(
        thread="t1",
        ns="",
        checkpoint_id=cp["id"],
        parent_checkpoint_id="parent-1",
        body=rec.body,
        metadata=rec.metadata,
        blobs=[(b.channel, b.version, b.sealed) for b in rec.blobs],
        writes=[(w.task_id, w.task_path, w.idx, w.channel, w.sealed) for w in writes + early],
    )
    tup = c.decode(KEY, stored)
    assert tup.checkpoint["channel_values"] == {"count": 3, "messages": ["a", "b"]}
    assert tup.metadata["source"] == "loop" and tup.metadata["run_id"] == "r1"
    assert tup.parent_config == {
        "configurable": {"thread_id": "t1", "checkpoint_ns": "", "checkpoint_id": "parent-1"}
    }
    # writes_sort_key order: task_path first
    assert tup.pending_writes == [("task-1", "c", 3), ("task-2", "a", 1), ("task-2", "b", {"x": 2})]
    assert rec.run_id == "r1"


def test_special_writes_use_fixed_indexes_and_replace() -> None:
    records, replace = codec().encode_writes(
        KEY, "c1", [(ERROR, "boom"), (INTERRUPT, "x")], "t", ""
    )
    assert replace
    assert [r.idx for r in records] == [WRITES_IDX_MAP[ERROR], WRITES_IDX_MAP[INTERRUPT]]


def test_thread_key_requires_thread_id() -> None:
    with pytest.raises(InvalidInputError, match="thread_id"):
        thread_key({"configurable": {}}, None, "default")
    key = thread_key({"configurable": {"thread_id": 7}}, None, "default")
    assert key == ("default", "7", "", False)


def test_filter_is_encoded_as_data() -> None:
    assert encode_filter(None) is None
    assert encode_filter({"a'; DROP TABLE x; --": "1"}) == '{"a\'; DROP TABLE x; --":"1"}'
    with pytest.raises(InvalidInputError):
        encode_filter(["not", "a", "dict"])  # type: ignore[arg-type]


def test_versions_increase() -> None:
    v1 = next_version(None)
    v2 = next_version(v1)
    assert v1 < v2 and v2.startswith("0" * 31 + "2.")
    assert next_version(5).startswith("0" * 31 + "6.")


@pytest.mark.parametrize("bad", ["", "1abc", "a-b", 'x"; drop', "a" * 64, None])
def test_schema_names_are_validated(bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        validate_schema_name(bad)


def _requests(op: Any, results: list[Any]) -> list[Any]:
    """Drive an operation with canned results; return what it asked for."""
    seen = []
    gen = op.steps
    step = gen.send(None)
    feed = iter(results)
    try:
        while True:
            seen.append(step)
            step = gen.send(None if isinstance(step, Emit) else next(feed))
    except StopIteration:
        return seen


def test_put_put_writes_and_get_tuple_are_one_statement_each() -> None:
    ops = PostgresOps("s", codec())
    cp = checkpoint(messages=[1])
    put = _requests(
        ops.put(KEY, {"configurable": {"thread_id": "t1"}}, cp, {}, cp["channel_versions"]),
        [(7, False, ["messages"], True)],
    )
    assert len(put) == 1 and isinstance(put[0], Query)
    assert ops.epochs.get("acme", "t1") == 7  # the write taught it the thread's epoch
    writes = _requests(ops.put_writes(KEY, cp["id"], [("a", 1), ("b", 2)], "task", ""), [(7,)])
    assert len(writes) == 1
    # with the epoch known, the read names it as a parameter (one partition)
    (get,) = _requests(ops.get_tuple(KEY, None), [(7,) + (None,) * 27])
    assert get.params["epoch"] == 7 and "epoch = %(epoch)s" in get.sql
    # a fresh process looks the epoch up in the same single statement
    cold = PostgresOps("s", codec())
    (get,) = _requests(cold.get_tuple(KEY, None), [None])
    assert "epoch" not in get.params


def test_a_stale_epoch_is_forgotten_and_looked_up_again() -> None:
    ops = PostgresOps("s", codec())
    ops.epochs.remember("acme", "t1", 7)
    first, second = _requests(ops.get_tuple(KEY, None), [(9,) + (None,) * 27, None])
    assert first.params["epoch"] == 7 and "epoch" not in second.params
    assert ops.epochs.get("acme", "t1") is None


def test_listing_a_100_checkpoint_thread_is_paged() -> None:
    ops = PostgresOps("s", codec())
    requests = _requests(ops.list("acme", "t1", "", None, None, None, None, False), [[]])
    assert len(requests) == 1
    assert "LIMIT %(page)s" in requests[0].sql
    assert requests[0].params["page"] == 100


def test_metadata_filter_is_a_parameter_not_sql() -> None:
    ops = PostgresOps("s", codec())
    evil = {"x') OR 1=1 --": "y'; DROP SCHEMA s CASCADE; --"}
    (q,) = _requests(ops.list("acme", None, None, None, evil, None, 5, False), [[]])
    assert "DROP" not in q.sql and "OR 1=1" not in q.sql
    assert "DROP SCHEMA" in q.params["filter"]


def test_python_metadata_filter_matches_jsonb_containment() -> None:
    from langgraph_durable._core.filters import metadata_matches, normalize_filter

    meta = {"source": "loop", "step": 1, "parents": {"": "abc"}, "tags": ["a", "b"], "ok": True}
    assert metadata_matches(meta, normalize_filter({"source": "loop"}))
    assert metadata_matches(meta, normalize_filter({"parents": {"": "abc"}, "step": 1}))
    assert metadata_matches(meta, normalize_filter({"tags": ["b"]}))
    assert metadata_matches(meta, None)
    assert not metadata_matches(meta, normalize_filter({"source": "input"}))
    assert not metadata_matches(meta, normalize_filter({"missing": None}))
    assert not metadata_matches(meta, normalize_filter({"ok": 1}))  # True is not 1
    assert not metadata_matches(meta, normalize_filter({"step": "1"}))
    assert not metadata_matches(meta, normalize_filter({"parents": "abc"}))
