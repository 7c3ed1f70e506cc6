"""Delta encoding of growing list channels on Redis: what is stored, and what comes back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from redis.cluster import RedisCluster

from langgraph_durable.errors import ConfigurationError
from langgraph_durable.redis import AsyncRedisSaver, RedisOptions, RedisSaver
from langgraph_durable.redis._ops import DELTA_MARK
from tests.delta_graphs import chat_graph, run_turns

from .test_saver import count_requests


def history(saver: Any, thread: str) -> list[tuple[str, Any]]:
    """(checkpoint id, channel values) of every checkpoint, newest first."""
    return [
        (t.config["configurable"]["checkpoint_id"], t.checkpoint["channel_values"])
        for t in saver.list({"configurable": {"thread_id": thread}})
    ]


def messages_dump(values: dict[str, Any]) -> list[Any]:
    return [(m.id, m.content, type(m).__name__) for m in values.get("messages", [])]


def blob_kinds(saver: RedisSaver, thread: str) -> tuple[int, int, int]:
    """(delta blobs, full blobs, bytes) of the ``messages`` channel of a thread."""
    b = saver.keys.thread("default", thread)[2]
    raw = {k: v for k, v in saver.client.hgetall(b).items() if b"\x00messages\x00" in k}
    deltas = sum(1 for v in raw.values() if v[:1] == DELTA_MARK)
    return deltas, len(raw) - deltas, sum(len(v) for v in raw.values())


@pytest.fixture
def pair(redis_url: str, redis_prefix: str) -> Iterator[tuple[RedisSaver, RedisSaver]]:
    """A saver with delta encoding (chain of 4) and one without, on distinct prefixes."""
    with (
        RedisSaver.from_conn_string(redis_url, prefix=redis_prefix, delta_chain=4) as a,
        RedisSaver.from_conn_string(redis_url, prefix=redis_prefix + "f", delta_chain=0) as b,
    ):
        a.setup()
        b.setup()
        yield a, b


def test_history_matches_memory_saver_and_stores_deltas(
    pair: tuple[RedisSaver, RedisSaver],
) -> None:
    ours, full = pair
    memory = InMemorySaver()
    for saver in (ours, full, memory):
        run_turns(chat_graph(saver), "t", 12)
    want = [messages_dump(v) for _, v in history(memory, "t")]
    assert len(want) == 36
    assert [messages_dump(v) for _, v in history(ours, "t")] == want
    assert [messages_dump(v) for _, v in history(full, "t")] == want
    latest = ours.get_tuple({"configurable": {"thread_id": "t"}})
    assert messages_dump(latest.checkpoint["channel_values"]) == want[0]
    deltas, fulls, size = blob_kinds(ours, "t")
    f_deltas, _, f_size = blob_kinds(full, "t")
    assert deltas > 0 and f_deltas == 0
    # 24 versions of the list: a full copy starts each chain of 4 deltas.
    assert (deltas, fulls) == (19, 5)
    assert size < f_size / 2


def test_item_changed_in_place_is_stored(pair: tuple[RedisSaver, RedisSaver]) -> None:
    ours, _ = pair
    memory = InMemorySaver()
    for saver in (ours, memory):
        run_turns(chat_graph(saver, edit_first=True), "e", 6)
    want = [messages_dump(v) for _, v in history(memory, "e")]
    got = [messages_dump(v) for _, v in history(ours, "e")]
    assert got == want
    assert got[0][0][1] == "edited at 11"


def test_other_process_reads_and_continues(
    pair: tuple[RedisSaver, RedisSaver], redis_url: str, redis_prefix: str
) -> None:
    ours, _ = pair
    run_turns(chat_graph(ours), "p", 5)
    before = [messages_dump(v) for _, v in history(ours, "p")]
    with RedisSaver.from_conn_string(redis_url, prefix=redis_prefix, delta_chain=4) as other:
        assert [messages_dump(v) for _, v in history(other, "p")] == before
        run_turns(chat_graph(other), "p", 3, start=5)
        after = [messages_dump(v) for _, v in history(other, "p")]
    assert [messages_dump(v) for _, v in history(ours, "p")] == after
    assert after[len(after) - len(before) :] == before
    assert len(after[0]) == 16


def test_base_deleted_elsewhere_writes_full_copy(
    pair: tuple[RedisSaver, RedisSaver], redis_url: str, redis_prefix: str
) -> None:
    """This process's last version is gone: the put falls back to a full copy."""
    ours, _ = pair
    graph = chat_graph(ours)
    run_turns(graph, "d", 3)
    cfg = {"configurable": {"thread_id": "d"}}
    state = ours.get_tuple(cfg)
    # Another process deletes the thread; this one does not know.
    with RedisSaver.from_conn_string(redis_url, prefix=redis_prefix) as other:
        other.delete_thread("d")
    seen = count_requests(ours)
    values = dict(state.checkpoint["channel_values"])
    msgs = [*values["messages"], AIMessage(content="after delete", id="late")]
    versions = dict(state.checkpoint["channel_versions"])
    versions["messages"] = ours.get_next_version(versions["messages"])
    cp = {
        **state.checkpoint,
        "id": "1f000000-0000-6000-8000-000000000001",
        "channel_values": {**values, "messages": msgs},
        "channel_versions": versions,
    }
    ours.put(
        {"configurable": {"thread_id": "d", "checkpoint_ns": ""}},
        cp,
        {"source": "update", "step": 99},
        {"messages": versions["messages"]},
    )
    scripts = [r for r in seen if type(r).__name__ == "Script" and r.script.name == "put"]
    assert len(scripts) == 2  # refused (missing base), then written in full
    back = ours.get_tuple(cfg)
    assert [m.id for m in back.checkpoint["channel_values"]["messages"]] == [m.id for m in msgs]
    assert blob_kinds(ours, "d")[0] == 0


def test_prune_and_delete_for_runs_keep_bases(pair: tuple[RedisSaver, RedisSaver]) -> None:
    ours, _ = pair
    graph = chat_graph(ours)
    run_turns(graph, "k", 7)
    cfg = {"configurable": {"thread_id": "k"}}
    want = messages_dump(ours.get_tuple(cfg).checkpoint["channel_values"])
    assert blob_kinds(ours, "k")[0] > 0
    ours.prune(["k"], strategy="keep_latest")
    assert len(history(ours, "k")) == 1
    assert messages_dump(ours.get_tuple(cfg).checkpoint["channel_values"]) == want
    # Another run on top, then delete that run: the earlier checkpoint still reads.
    graph.invoke(
        {"messages": [HumanMessage(content="more", id="more")]},
        {"configurable": {"thread_id": "k", "run_id": "1f0aaaaa-0000-6000-8000-00000000run2"}},
    )
    runs = {t.metadata.get("run_id") for t in ours.list(cfg)}
    last_run = ours.get_tuple(cfg).metadata["run_id"]
    assert len(runs) == 2
    ours.delete_for_runs([last_run])
    assert messages_dump(ours.get_tuple(cfg).checkpoint["channel_values"]) == want


def test_copy_thread_and_fork(pair: tuple[RedisSaver, RedisSaver]) -> None:
    ours, _ = pair
    memory = InMemorySaver()
    for saver in (ours, memory):
        graph = chat_graph(saver)
        run_turns(graph, "src", 6)
        if saver is ours:
            saver.copy_thread("src", "dst")
        else:  # InMemorySaver has no copy_thread: the same run again
            run_turns(graph, "dst", 6, tag="src")
        # Time travel: continue from an early checkpoint of the copy.
        old = list(saver.list({"configurable": {"thread_id": "dst"}}))[9].config
        graph.invoke({"messages": [HumanMessage(content="fork", id="fork")]}, old)
    for thread in ("src", "dst"):
        want = [messages_dump(v) for _, v in history(memory, thread)]
        assert [messages_dump(v) for _, v in history(ours, thread)] == want


def test_small_pages_and_limits(redis_url: str, redis_prefix: str) -> None:
    with RedisSaver.from_conn_string(
        redis_url, prefix=redis_prefix, delta_chain=3, page_size=4
    ) as saver:
        saver.setup()
        memory = InMemorySaver()
        for s in (saver, memory):
            run_turns(chat_graph(s), "pg", 8)
        want = [messages_dump(v) for _, v in history(memory, "pg")]
        assert [messages_dump(v) for _, v in history(saver, "pg")] == want
        cfg = {"configurable": {"thread_id": "pg"}}
        some = list(saver.list(cfg, limit=5, before=list(saver.list(cfg))[7].config))
        assert [messages_dump(t.checkpoint["channel_values"]) for t in some] == want[8:13]


def test_filtered_listing_rebuilds_deltas_of_skipped_checkpoints(
    pair: tuple[RedisSaver, RedisSaver],
) -> None:
    """A filter skips checkpoints whose blobs the reply already carried once."""
    ours, _ = pair
    memory = InMemorySaver()
    for saver in (ours, memory):
        run_turns(chat_graph(saver), "f", 8)
    cfg = {"configurable": {"thread_id": "f"}}
    for flt, n in (({"source": "loop"}, 16), ({"source": "input"}, 8)):
        want = [messages_dump(t.checkpoint["channel_values"]) for t in memory.list(cfg, filter=flt)]
        got = [messages_dump(t.checkpoint["channel_values"]) for t in ours.list(cfg, filter=flt)]
        assert got == want and len(got) == n


def test_listing_shares_items_not_lists(pair: tuple[RedisSaver, RedisSaver]) -> None:
    """Each checkpoint gets its own list; unchanged items are decoded once."""
    ours, _ = pair
    run_turns(chat_graph(ours), "s", 3)
    tuples = list(ours.list({"configurable": {"thread_id": "s"}}))
    a = tuples[0].checkpoint["channel_values"]["messages"]
    b = tuples[3].checkpoint["channel_values"]["messages"]
    assert a is not b
    a.append("not in b")
    assert len(b) < len(a) - 1


def test_cluster_history(redis_cluster_conn_string: str, redis_prefix: str) -> None:
    with RedisSaver.from_conn_string(
        redis_cluster_conn_string, prefix=redis_prefix, delta_chain=2
    ) as saver:
        saver.setup()
        assert isinstance(saver.client, RedisCluster)
        memory = InMemorySaver()
        for s in (saver, memory):
            run_turns(chat_graph(s), "c", 5)
        want = [messages_dump(v) for _, v in history(memory, "c")]
        assert [messages_dump(v) for _, v in history(saver, "c")] == want
        assert blob_kinds(saver, "c")[0] > 0


def test_async_saver_history(redis_url: str, redis_prefix: str) -> None:
    async def main() -> list[Any]:
        async with AsyncRedisSaver.from_conn_string(
            redis_url, prefix=redis_prefix, delta_chain=3
        ) as saver:
            await saver.setup()
            graph = chat_graph(saver)
            for i in range(6):
                await graph.ainvoke(
                    {"messages": [HumanMessage(content=f"q{i}", id=f"ha{i}")]},
                    {"configurable": {"thread_id": "a"}},
                )
            return [
                messages_dump(t.checkpoint["channel_values"])
                async for t in saver.alist({"configurable": {"thread_id": "a"}})
            ]

    memory = InMemorySaver()
    graph = chat_graph(memory)
    for i in range(6):
        graph.invoke(
            {"messages": [HumanMessage(content=f"q{i}", id=f"ha{i}")]},
            {"configurable": {"thread_id": "a"}},
        )
    assert asyncio.run(main()) == [messages_dump(v) for _, v in history(memory, "a")]


@pytest.mark.parametrize("bad", [-1, 1001, 2.5, True, "4"])
def test_delta_chain_is_validated(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="delta_chain"):
        RedisOptions(delta_chain=bad)
