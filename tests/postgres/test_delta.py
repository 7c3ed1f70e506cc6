"""Delta encoding of growing list channels on PostgreSQL.

A ``messages`` list that grows by appending is stored as the appended items
plus a reference to the version it extends; reads rebuild it from the chain in
the same statement. Every test compares what the saver returns with what
``InMemorySaver`` returns for the same run.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langgraph_durable import Retention
from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver
from langgraph_durable.protect import Encryption, LocalKeyring


class Chat(TypedDict):
    messages: Annotated[list, operator.add]


def _reply(state: Chat) -> dict[str, Any]:
    return {"messages": [f"reply {len(state['messages'])} " + "x" * 200]}


def chat(checkpointer: Any) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=checkpointer)


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def turns(graph: Any, thread: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        graph.invoke({"messages": [f"user {i}"]}, cfg(thread))


def history(graph: Any, thread: str) -> list[tuple[Any, Any]]:
    return [(s.values, s.metadata.get("step")) for s in graph.get_state_history(cfg(thread))]


def reference(n: int, start_turns: int = 0) -> list[tuple[Any, Any]]:
    mem = chat(InMemorySaver())
    turns(mem, "t", start_turns + n)
    return history(mem, "t")


@pytest.fixture
def conn(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_url, autocommit=True) as c:
        yield c


def blob_stats(conn: psycopg.Connection[Any], schema: str) -> tuple[int, int, int]:
    row = conn.execute(
        f'SELECT count(*), count(base), coalesce(sum(octet_length(blob)), 0) FROM "{schema}".blobs'
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def test_deltas_form_and_every_checkpoint_reads_back(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, delta_chain=4) as saver:
        saver.setup()
        graph = chat(saver)
        turns(graph, "t", 12)
        assert history(graph, "t") == reference(12)
        for snapshot in graph.get_state_history(cfg("t")):
            assert graph.get_state(snapshot.config).values == snapshot.values
        row = conn.execute(
            f'SELECT count(*), count(base) FROM "{pg_schema}".blobs WHERE channel = %s',
            ("messages",),
        ).fetchone()
        assert row is not None
        total, deltas = row
        # a full copy after at most 4 deltas
        assert total == 24 and deltas == total - total // 5 - 1


def test_deltas_store_a_fraction_of_full_copies(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    sizes = {}
    for chain, schema in ((0, pg_schema), (32, pg_schema + "_d")):
        try:
            with PostgresSaver.from_conn_string(pg_url, schema=schema, delta_chain=chain) as s:
                s.setup()
                turns(chat(s), "t", 30)
                sizes[chain] = blob_stats(conn, schema)[2]
        finally:
            if schema != pg_schema:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    assert sizes[32] * 4 < sizes[0]


def test_rows_written_without_deltas_keep_reading_and_grow_deltas(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    # full copies, as every release before delta encoding wrote them (base NULL)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, delta_chain=0) as old:
        old.setup()
        turns(chat(old), "t", 6)
    assert blob_stats(conn, pg_schema)[1] == 0
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as new:
        graph = chat(new)
        assert history(graph, "t") == reference(6)
        turns(graph, "t", 6, start=6)
        assert history(graph, "t") == reference(12)
    assert blob_stats(conn, pg_schema)[1] > 0


def test_a_deleted_base_makes_the_next_write_a_full_copy(pg_url: str, pg_schema: str) -> None:
    with (
        PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as writer,
        PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as other,
    ):
        writer.setup()
        graph = chat(writer)
        turns(graph, "t", 3)
        other.delete_thread("t")  # the writer's tracker still remembers its bases
        turns(graph, "t", 2, start=3)
        values = graph.get_state(cfg("t")).values
        assert [m for m in values["messages"] if m.startswith("user")] == ["user 3", "user 4"]
        assert len(values["messages"]) == 4


def test_keep_latest_and_copy_thread_keep_whole_chains(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, delta_chain=8) as saver:
        saver.setup()
        graph = chat(saver)
        turns(graph, "t", 10)
        latest = graph.get_state(cfg("t")).values
        saver.copy_thread("t", "copy")
        saver.prune(["t"])
        assert graph.get_state(cfg("t")).values == latest
        report = saver.prune_expired(Retention(strategy="keep_latest"))
        assert report.trimmed == 1  # "copy" trimmed; "t" has one checkpoint already
        saver.delete_thread("t")
        assert graph.get_state(cfg("copy")).values == latest
        turns(graph, "copy", 1, start=10)
        assert len(graph.get_state(cfg("copy")).values["messages"]) == len(latest["messages"]) + 2


def test_encrypted_deltas_are_sealed_and_read_back(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    encryption = Encryption(LocalKeyring({"k": os.urandom(32)}, "k"))
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, encryption=encryption, delta_chain=4
    ) as saver:
        saver.setup()
        graph = chat(saver)
        turns(graph, "t", 8)
        assert history(graph, "t") == reference(8)
        total, deltas, _ = blob_stats(conn, pg_schema)
        assert deltas > 0
        blobs = conn.execute(f'SELECT blob FROM "{pg_schema}".blobs').fetchall()
        assert not any(b"reply" in bytes(b[0] or b"") for b in blobs)


async def test_async_saver_reads_and_lists_deltas(pg_url: str, pg_schema: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, delta_chain=3
    ) as saver:
        await saver.setup()
        graph = chat(saver)
        for i in range(9):
            await graph.ainvoke({"messages": [f"user {i}"]}, cfg("t"))
        got = [(s.values, s.metadata.get("step")) async for s in graph.aget_state_history(cfg("t"))]
        assert got == reference(9)
