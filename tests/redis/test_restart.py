"""A graph keeps running when its Redis server restarts or forgets its scripts mid-run.

Each test starts its own ``redis-server`` with an append-only file fsynced on every
write (so a crash loses nothing acknowledged), runs a four-node graph on a Redis saver,
and disrupts the server between two steps:

* ``restart``: SIGKILL the server and start it again on the same port and directory
  (it reloads its data, and any function library, from the append-only file); every
  connection the saver holds is now dead;
* ``script_flush``: ``SCRIPT FLUSH`` (the server forgets every Lua script it cached);
* ``function_flush``: ``FUNCTION FLUSH`` (the server forgets every function library).

The disruption happens either inside a node (the checkpoint before it is written, the
next one is not yet) or between two ``invoke`` calls of a graph interrupted before a
node. In every case the run must finish with no error reaching the caller, and its
final state and checkpoint history must equal those of an undisturbed run.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypedDict

import pytest
import redis
from langgraph.graph import END, START, StateGraph

from tests.servers import RedisServer, delete_redis_keys, new_redis_prefix

NODES = ("a", "b", "c", "d")
DISRUPTIONS = ("restart", "script_flush", "function_flush")


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer(config={"appendonly": "yes", "appendfsync": "always"}) as running:
        yield running


def _disrupt(server: RedisServer, how: str) -> None:
    if how == "restart":
        before = server.pid
        server.restart(crash=True)
        assert server.pid != before
        return
    with redis.Redis.from_url(server.url) as client:
        if how == "script_flush":
            client.script_flush()
        else:
            client.execute_command("FUNCTION FLUSH")


def _graph(on_b: Callable[[], Any] | None, *, is_async: bool) -> StateGraph:
    builder = StateGraph(State)
    for name in NODES:
        if is_async:

            async def node(state: State, name: str = name) -> dict[str, list[str]]:
                if name == "b" and on_b is not None:
                    await asyncio.to_thread(on_b)
                return {"steps": [name]}

        else:

            def node(state: State, name: str = name) -> dict[str, list[str]]:  # type: ignore[misc]
                if name == "b" and on_b is not None:
                    on_b()
                return {"steps": [name]}

        builder.add_node(name, node)
    builder.add_edge(START, NODES[0])
    for first, second in zip(NODES[:-1], NODES[1:], strict=True):
        builder.add_edge(first, second)
    builder.add_edge(NODES[-1], END)
    return builder


def _summary(history: list[Any]) -> list[tuple[Any, ...]]:
    """What must survive: per checkpoint, its step, next nodes and state values."""
    return [(s.metadata.get("step"), s.next, tuple(s.values.get("steps", ()))) for s in history]


@pytest.fixture
def prefix(server: RedisServer) -> Iterator[str]:
    value = new_redis_prefix()
    yield value
    if server.running():
        delete_redis_keys(server.url, value)


@pytest.mark.parametrize("placement", ["in_node", "between_invokes"])
@pytest.mark.parametrize("how", DISRUPTIONS)
def test_sync_graph_survives(server: RedisServer, prefix: str, how: str, placement: str) -> None:
    from langgraph_durable.redis import RedisSaver

    with RedisSaver.from_conn_string(server.url, prefix=prefix) as saver:
        saver.setup()
        reference = {"configurable": {"thread_id": "reference"}}
        plain = _graph(None, is_async=False).compile(checkpointer=saver)
        assert plain.invoke({"steps": []}, reference, durability="sync") == {"steps": list(NODES)}
        expected = _summary(list(plain.get_state_history(reference)))

        config = {"configurable": {"thread_id": f"disrupted-{how}-{placement}"}}
        if placement == "in_node":
            graph = _graph(lambda: _disrupt(server, how), is_async=False).compile(
                checkpointer=saver
            )
            result = graph.invoke({"steps": []}, config, durability="sync")
        else:
            graph = _graph(None, is_async=False).compile(checkpointer=saver, interrupt_before=["c"])
            first = graph.invoke({"steps": []}, config, durability="sync")
            assert first["steps"] == ["a", "b"]
            assert graph.get_state(config).next == ("c",)
            _disrupt(server, how)
            result = graph.invoke(None, config, durability="sync")
        assert result == {"steps": list(NODES)}
        assert graph.get_state(config).values == {"steps": list(NODES)}
        assert _summary(list(graph.get_state_history(config))) == expected


@pytest.mark.parametrize("placement", ["in_node", "between_invokes"])
@pytest.mark.parametrize("how", DISRUPTIONS)
async def test_async_graph_survives(
    server: RedisServer, prefix: str, how: str, placement: str
) -> None:
    from langgraph_durable.redis import AsyncRedisSaver

    async with AsyncRedisSaver.from_conn_string(server.url, prefix=prefix) as saver:
        await saver.setup()
        reference = {"configurable": {"thread_id": "reference"}}
        plain = _graph(None, is_async=True).compile(checkpointer=saver)
        assert await plain.ainvoke({"steps": []}, reference, durability="sync") == {
            "steps": list(NODES)
        }
        expected = _summary([s async for s in plain.aget_state_history(reference)])

        config = {"configurable": {"thread_id": f"disrupted-{how}-{placement}"}}
        if placement == "in_node":
            graph = _graph(lambda: _disrupt(server, how), is_async=True).compile(checkpointer=saver)
            result = await graph.ainvoke({"steps": []}, config, durability="sync")
        else:
            graph = _graph(None, is_async=True).compile(checkpointer=saver, interrupt_before=["c"])
            first = await graph.ainvoke({"steps": []}, config, durability="sync")
            assert first["steps"] == ["a", "b"]
            assert (await graph.aget_state(config)).next == ("c",)
            await asyncio.to_thread(_disrupt, server, how)
            result = await graph.ainvoke(None, config, durability="sync")
        assert result == {"steps": list(NODES)}
        assert (await graph.aget_state(config)).values == {"steps": list(NODES)}
        assert _summary([s async for s in graph.aget_state_history(config)]) == expected
