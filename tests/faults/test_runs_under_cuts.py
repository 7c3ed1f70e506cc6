"""A 200-step graph run while every connection is cut every few milliseconds
(tests/faults/proxy.py): no error reaches the caller and the history equals what
LangGraph's InMemorySaver holds for the same run."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver
from langgraph_durable.redis import AsyncRedisSaver, RedisSaver
from tests.dynamodb.helpers import history_signature, loop_graph
from tests.faults.proxy import FaultProxy

STEPS = 200
EVERY = 0.05  # seconds between cuts


class Cutter:
    """Cut every connection through ``proxy`` every ``EVERY`` seconds, in a thread."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(EVERY):
            self.proxy.reset_all()

    def __enter__(self) -> Cutter:
        self.thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop.set()
        self.thread.join()


@pytest.fixture
def reference() -> list[tuple[Any, ...]]:
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "run"}}
    loop_graph(STEPS).compile(checkpointer=saver).invoke({"count": 0, "log": []}, config)
    return history_signature(saver, config)


def _run(saver: Any, proxy: FaultProxy, reference: list) -> None:
    config = {"configurable": {"thread_id": "run"}}
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    with Cutter(proxy):
        result = graph.invoke({"count": 0, "log": []}, config, durability="sync")
    assert result["count"] == STEPS
    assert proxy.resets > 0
    assert history_signature(saver, config) == reference


async def _arun(saver: Any, proxy: FaultProxy, reference: list) -> None:
    config = {"configurable": {"thread_id": "run"}}
    graph = loop_graph(STEPS).compile(checkpointer=saver)
    with Cutter(proxy):
        result = await graph.ainvoke({"count": 0, "log": []}, config, durability="sync")
    assert result["count"] == STEPS
    assert proxy.resets > 0
    got = [t async for t in saver.alist(config)]
    assert len(got) == len(reference) == STEPS + 2


def test_postgres_run_under_cuts(
    pg_url: str, pg_schema: str, pg_proxy: FaultProxy, reference: list
) -> None:
    with PostgresSaver.from_conn_string(pg_proxy.url(pg_url), schema=pg_schema) as s:
        s.setup()
        _run(s, pg_proxy, reference)


async def test_async_postgres_run_under_cuts(
    pg_url: str, pg_schema: str, pg_proxy: FaultProxy, reference: list
) -> None:
    async with AsyncPostgresSaver.from_conn_string(pg_proxy.url(pg_url), schema=pg_schema) as s:
        await s.setup()
        await _arun(s, pg_proxy, reference)


def test_redis_run_under_cuts(
    redis_url: str, redis_prefix: str, redis_proxy: FaultProxy, reference: list
) -> None:
    with RedisSaver.from_conn_string(redis_proxy.url(redis_url), prefix=redis_prefix) as s:
        _run(s, redis_proxy, reference)


async def test_async_redis_run_under_cuts(
    redis_url: str, redis_prefix: str, redis_proxy: FaultProxy, reference: list
) -> None:
    url = redis_proxy.url(redis_url)
    async with AsyncRedisSaver.from_conn_string(url, prefix=redis_prefix) as s:
        await _arun(s, redis_proxy, reference)
