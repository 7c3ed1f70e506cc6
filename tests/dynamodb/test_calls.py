"""DynamoDB API calls per operation, counted with an event hook on the real client.

The counts are deterministic (they depend on item counts, not on timing), so they
are asserted exactly or with tight bounds.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable.dynamodb import DynamoDBSaver
from tests.dynamodb.helpers import CallCounter, agent_graph, make_client
from tests.helpers import cfg, put_chain


@pytest.fixture
def saver(dynamodb_endpoint: str, dynamodb_table: str) -> Iterator[DynamoDBSaver]:
    s = DynamoDBSaver(make_client(dynamodb_endpoint), table=dynamodb_table)
    s.setup()
    yield s


@pytest.mark.parametrize("ttl", [None, 86400])
def test_calls_per_super_step_of_an_agent_graph(
    dynamodb_endpoint: str, dynamodb_table: str, ttl: int | None
) -> None:
    saver = DynamoDBSaver(make_client(dynamodb_endpoint), table=dynamodb_table, ttl=ttl)
    saver.setup()
    counter = CallCounter(saver.client)
    graph = agent_graph(tool_calls=10).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "agent"}}
    graph.invoke({"messages": [("user", "go")]}, config, durability="sync")
    calls = counter.reset()
    history = list(saver.list(cfg("agent")))
    super_steps = len(history)  # the input, the start, 21 node steps
    assert super_steps == 23
    writes = calls["TransactWriteItems"]
    # one put per checkpoint and one put_writes per task: 2 calls per super-step at most
    assert set(calls) == {"Query", "TransactWriteItems"}  # plus the first read
    assert calls["Query"] == 1  # invoke reads the thread once (empty: no blob fetch)
    print(f"{super_steps} super-steps: {dict(calls)}")
    assert writes <= 2 * super_steps

    counter.reset()
    latest = saver.get_tuple(config)
    assert latest is not None
    assert counter.reset() == {"Query": 1, "BatchGetItem": 1}

    # resuming the thread: one read, then the same 2 calls per super-step
    graph.invoke({"messages": [("user", "again")]}, config, durability="sync")
    calls = counter.reset()
    assert calls["Query"] == 1 and calls["BatchGetItem"] == 1
    new_steps = len(list(saver.list(cfg("agent")))) - super_steps
    assert calls["TransactWriteItems"] <= 2 * new_steps


def test_get_tuple_is_one_query_and_at_most_one_batch_get(saver: DynamoDBSaver) -> None:
    configs = put_chain(saver, "t", 5, v=4)
    saver.put_writes(configs[-1], [("a", 1), ("b", [2])], "task-1")
    saver.put_writes(configs[-1], [("c", 3)], "task-2")
    counter = CallCounter(saver.client)
    assert saver.get_tuple(cfg("t")) is not None  # latest
    assert counter.reset() == {"Query": 1, "BatchGetItem": 1}
    assert saver.get_tuple(configs[2]) is not None  # by id
    assert counter.reset() == {"Query": 1, "BatchGetItem": 1}
    cp = dict(empty_checkpoint())
    cp["channel_values"] = {"n": 1, "s": "inline"}  # primitives only: no blob to fetch
    saver.put(cfg("inline"), cp, {}, {})
    counter.reset()
    assert saver.get_tuple(cfg("inline")) is not None
    assert counter.reset() == {"Query": 1}
    # a checkpoint of a format before 4 with a parent also reads the parent's pending
    # sends (one more Query); LangGraph writes format 4
    old = put_chain(saver, "old", 2)
    counter.reset()
    assert saver.get_tuple(old[-1]) is not None
    assert counter.reset() == {"Query": 2, "BatchGetItem": 1}


def test_a_100_checkpoint_history_in_a_handful_of_calls(saver: DynamoDBSaver) -> None:
    graph = agent_graph(tool_calls=49).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "long"}}
    graph.invoke({"messages": [("user", "go")]}, config, durability="sync")
    counter = CallCounter(saver.client)
    history = list(saver.list(cfg("long")))
    calls = counter.reset()
    assert len(history) == 101  # the input, the start, 99 node steps
    assert sum(len(t.pending_writes) for t in history) >= 100
    # 101 checkpoints + their writes: a Query per 100 items, a BatchGetItem per page
    print(f"history of {len(history)} checkpoints: {dict(calls)}")
    assert calls["Query"] <= 4 and calls["BatchGetItem"] <= calls["Query"]
    assert sum(calls.values()) <= 8
    counter.reset()
    assert len(list(saver.list(cfg("long"), limit=100))) == 100
    assert sum(counter.reset().values()) <= 8
    states = list(graph.get_state_history(config))
    assert len(states) == 101 and len(states[0].values["messages"]) == 100
