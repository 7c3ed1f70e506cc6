"""Large states: chunked inside the table up to the transaction limit, refused beyond it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_durable._core.versions import next_version
from langgraph_durable.dynamodb import DynamoDBSaver
from langgraph_durable.errors import InvalidInputError
from tests.dynamodb.helpers import CallCounter, loop_graph, make_client, raw_items
from tests.helpers import cfg, make_cp

MB = 1024 * 1024


def _text(size: int) -> str:
    """Incompressible text of ``size`` characters."""
    return os.urandom(size // 2).hex()


@pytest.fixture
def saver(dynamodb_endpoint: str, dynamodb_table: str) -> Iterator[DynamoDBSaver]:
    s = DynamoDBSaver(make_client(dynamodb_endpoint), table=dynamodb_table)
    s.setup()
    yield s


def test_a_graph_state_of_2_mb_round_trips_exactly(saver: DynamoDBSaver) -> None:
    pieces = [_text(MB // 2) for _ in range(4)]
    graph = loop_graph(4, payload=lambda n: pieces[n - 1]).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "big"}}
    graph.invoke({"count": 0, "log": []}, config)
    state = graph.get_state(config)
    assert state.values == {"count": 4, "log": pieces}
    assert sum(len(p) for p in state.values["log"]) == 2 * MB
    # the history holds every intermediate state, exactly
    reference = loop_graph(4, payload=lambda n: pieces[n - 1]).compile(checkpointer=InMemorySaver())
    reference.invoke({"count": 0, "log": []}, config)
    ours = [s.values for s in graph.get_state_history(config)]
    theirs = [s.values for s in reference.get_state_history(config)]
    assert ours == theirs
    chunks = [i for i in raw_items(saver.client, saver.table) if "#k#" in i["sk"]["S"]]
    assert chunks and all(len(i["d"]["B"]) <= 380_000 for i in chunks)
    # the latest state: one Query, one BatchGetItem (blob and its chunks, known from the put)
    counter = CallCounter(saver.client)
    assert saver.get_tuple(config) is not None
    assert counter.reset() == {"Query": 1, "BatchGetItem": 1}


def test_large_write_and_large_checkpoint_body_round_trip(saver: DynamoDBSaver) -> None:
    cp = make_cp(note=_text(900_000))  # a primitive: stays in the checkpoint body
    cp["channel_versions"] = {"note": next_version(None)}
    stored = saver.put(cfg("t"), cp, {"source": "input", "big": _text(10)}, {})
    value = {"blob": _text(1_500_000)}
    saver.put_writes(stored, [("out", value)], "task")
    tup = saver.get_tuple(cfg("t"))
    assert tup is not None
    assert tup.checkpoint["channel_values"] == {"note": cp["channel_values"]["note"]}
    assert tup.pending_writes == [("task", "out", value)]
    assert list(saver.list(cfg("t")))[0].pending_writes == [("task", "out", value)]


def test_a_20_mb_state_fails_before_any_write(saver: DynamoDBSaver) -> None:
    graph = loop_graph(2, payload=lambda n: _text(20 * MB if n == 2 else 100)).compile(
        checkpointer=saver
    )
    config = {"configurable": {"thread_id": "huge"}}
    counter = CallCounter(saver.client)
    with pytest.raises(InvalidInputError, match=r"needs 20\.\d MB .* at most 4\.0 MB and 100"):
        graph.invoke({"count": 0, "log": []}, config, durability="sync")
    calls = counter.reset()
    before = len(raw_items(saver.client, saver.table))
    # the step before survives intact, and nothing of the huge one was written
    state = graph.get_state(config)
    assert state.values["count"] == 1 and len(state.values["log"]) == 1
    assert all(len(i.get("d", {}).get("B", b"")) < MB for i in raw_items(saver.client, saver.table))
    assert len(raw_items(saver.client, saver.table)) == before
    assert calls["TransactWriteItems"] >= 1  # the earlier steps wrote; the huge one did not

    cp = make_cp(huge=[_text(20 * MB)])
    cp["channel_versions"] = {"huge": next_version(None)}
    counter.reset()
    with pytest.raises(InvalidInputError) as err:
        saver.put(cfg("direct"), cp, {}, cp["channel_versions"])
    assert "checkpoint" in str(err.value) and "4.0 MB" in str(err.value)
    assert counter.reset() == {}  # refused before any call
    assert saver.get_tuple(cfg("direct")) is None
