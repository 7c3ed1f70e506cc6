"""The lean write statement: a thread this process registered moments ago is written
without touching its registry row, and every way that shortcut could be wrong
falls back to the full statement (postgres/_writes.py, ``lean_cte``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver
from tests.helpers import cfg, checkpoint_ids, put_chain

LEAN = "AND updated_at >= now() - interval"  # only the lean form reads this


@pytest.fixture
def admin(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


def spy(saver: Any) -> list[str]:
    """Record the SQL of every statement the saver's driver runs from now on."""
    seen: list[str] = []
    driver = saver._conn
    execute = driver.execute

    def recording(conn: Any, step: Any) -> Any:
        seen.append(step.sql)
        return execute(conn, step)

    driver.execute = recording
    return seen


def registry(admin: psycopg.Connection[Any], schema: str, thread: str) -> tuple | None:
    return admin.execute(
        f'SELECT epoch, updated_at FROM "{schema}".threads WHERE thread_id = %s', (thread,)
    ).fetchone()


def test_a_steady_thread_is_written_by_the_lean_statement(
    pg_url: str, pg_schema: str, admin: psycopg.Connection[Any]
) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as s:
        s.setup()
        put_chain(s, "t", 1)  # registers the thread
        seen = spy(s)
        configs = put_chain(s, "t", 3)
        s.put_writes(configs[-1], [("ch", 1)], "task")
        assert len(seen) == 4 and all(LEAN in sql for sql in seen)
        # the lean form inserts into the current epoch's partitions, not through the parents
        epoch = registry(admin, pg_schema, "t")[0]  # type: ignore[index]
        for table in ("checkpoints", "blobs", "writes"):
            leaf = f'INSERT INTO "{pg_schema}"."{table}_e{epoch}" '
            assert sum(leaf in sql for sql in seen) == (1 if table == "writes" else 3)
            assert f'INSERT INTO "{pg_schema}".{table} ' not in "".join(seen)
        assert len(checkpoint_ids(s.list(cfg("t")))) == 4
        tup = s.get_tuple(cfg("t"))
        assert tup is not None and [(c, v) for _, c, v in tup.pending_writes] == [("ch", 1)]


def test_a_thread_deleted_by_another_process_is_written_again_in_full(
    pg_url: str, pg_schema: str, admin: psycopg.Connection[Any]
) -> None:
    with (
        PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as a,
        PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as b,
    ):
        a.setup()
        put_chain(a, "t", 2)
        b.delete_thread("t")
        seen = spy(a)
        new = put_chain(a, "t", 1)
        # the lean statement wrote nothing; the full one registered the thread again
        assert len(seen) == 2 and LEAN in seen[0] and LEAN not in seen[1]
        assert registry(admin, pg_schema, "t") is not None
        assert checkpoint_ids(b.list(cfg("t"))) == [new[0]["configurable"]["checkpoint_id"]]
        b.delete_thread("t")
        seen.clear()
        a.put_writes(new[0], [("ch", "after")], "task")
        assert len(seen) == 2 and LEAN in seen[0] and LEAN not in seen[1]
        assert registry(admin, pg_schema, "t") is not None  # no write without its registry row


def test_a_refresh_that_is_due_is_never_skipped(
    pg_url: str, pg_schema: str, admin: psycopg.Connection[Any]
) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as s:
        s.setup()
        configs = put_chain(s, "t", 1)
        for write in (
            lambda: put_chain(s, "t", 1),
            lambda: s.put_writes(configs[0], [("ch", 1)], "task"),
        ):
            admin.execute(
                f"UPDATE \"{pg_schema}\".threads SET updated_at = now() - interval '2 days'"
            )
            write()
            (fresh,) = admin.execute(
                f"SELECT updated_at > now() - interval '1 minute' FROM \"{pg_schema}\".threads"
            ).fetchone()
            assert fresh  # the pruner sees the thread as just written


def test_a_thread_of_an_older_epoch_goes_through_the_locking_statement(
    pg_url: str, pg_schema: str, admin: psycopg.Connection[Any]
) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as s:
        s.setup()
        put_chain(s, "t", 1)
        epoch = registry(admin, pg_schema, "t")[0]
        # Narrower partitions: the current epoch number jumps past the thread's,
        # which is now an older epoch the pruner could be moving.
        admin.execute(
            f"UPDATE \"{pg_schema}\".settings SET value = '1' WHERE key = 'partition_days'"
        )
        seen = spy(s)
        new = put_chain(s, "t", 1)
        assert LEAN in seen[0] and "FOR KEY SHARE" in seen[-1]
        assert registry(admin, pg_schema, "t")[0] == epoch
        got = s.get_tuple(cfg("t"))
        assert got is not None and got.checkpoint["id"] == new[0]["configurable"]["checkpoint_id"]


async def test_async_a_deleted_thread_is_written_again_in_full(
    pg_url: str, pg_schema: str, admin: psycopg.Connection[Any]
) -> None:
    async with (
        AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema) as a,
        AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema) as b,
    ):
        await a.setup()
        first = await a.aput(*_checkpoint_args("t", 1))
        await b.adelete_thread("t")
        second = await a.aput(*_checkpoint_args("t", 2, parent=first))
        await a.aput_writes(second, [("ch", "x")], "task")
        assert registry(admin, pg_schema, "t") is not None
        got = await b.aget_tuple(cfg("t"))
        assert got is not None
        assert got.checkpoint["id"] == second["configurable"]["checkpoint_id"]
        assert [(c, v) for _, c, v in got.pending_writes] == [("ch", "x")]


def _checkpoint_args(thread: str, step: int, parent: Any = None) -> tuple:
    from tests.helpers import versioned_cp

    cp = versioned_cp(step=step)
    config = parent if parent is not None else cfg(thread)
    return config, cp, {"step": step, "source": "loop"}, cp["channel_versions"]


@pytest.mark.parametrize("n", [0, 1, 8, 9, 30])
def test_any_number_of_blobs_in_one_call_round_trips(pg_url: str, pg_schema: str, n: int) -> None:
    # up to SPREAD_MAX blobs go as separate parameters, more as one bytea[] list
    from tests.helpers import versioned_cp

    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as s:
        s.setup()
        values = {f"ch{i}": [f"value {i}", bytes([i % 256]) * i] for i in range(n)}
        cp = versioned_cp(**values)
        stored = s.put(cfg("t"), cp, {}, cp["channel_versions"])
        writes = [(f"w{i}", {"i": i, "data": b"\x00" * i}) for i in range(n)]
        s.put_writes(stored, writes, "task")
        got = s.get_tuple(cfg("t"))
        assert got is not None and got.checkpoint["channel_values"] == values
        assert [(c, v) for _, c, v in got.pending_writes] == writes


def test_a_due_refresh_keeps_the_delta(
    pg_url: str, pg_schema: str, admin: psycopg.Connection[Any]
) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as s:
        s.setup()
        config: Any = cfg("t")
        items: list[str] = []
        version = None
        for step in range(3):
            if step == 2:  # the lean form finds a refresh due; the full one still writes a delta
                admin.execute(
                    f"UPDATE \"{pg_schema}\".threads SET updated_at = now() - interval '1 hour'"
                )
            items.append(f"message {step}")
            version = s.get_next_version(version, None)
            cp = empty_checkpoint()
            cp["channel_values"] = {"messages": list(items)}
            cp["channel_versions"] = {"messages": version}
            config = s.put(config, cp, {"step": step}, cp["channel_versions"])
        rows = admin.execute(
            "SELECT base IS NOT NULL, updated_at > now() - interval '1 minute' "
            f'FROM "{pg_schema}".blobs b JOIN "{pg_schema}".threads t '
            "USING (tenant_id, thread_id) ORDER BY b.version"
        ).fetchall()
        assert [r[0] for r in rows] == [False, True, True] and all(r[1] for r in rows)
        got = s.get_tuple(cfg("t"))
        assert got is not None and got.checkpoint["channel_values"]["messages"] == items


def test_the_registry_is_read_by_its_key_before_any_analyze(
    pg_url: str, pg_schema: str, admin: psycopg.Connection[Any]
) -> None:
    # A new schema's registry has no statistics (autovacuum off, or not yet run). The
    # planner then rated the epoch index as cheap as the primary key for a thread's row,
    # and a plan that took it (cached for the connection) read every thread of the
    # epoch on each write. Every statement that reads a thread's registry row must find
    # it by the key, for each form: full and lean writes, reads by a known epoch.
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as s:
        s.setup()
        statements: list[Any] = []
        driver = s._conn
        execute = driver.execute

        def recording(conn: Any, step: Any) -> Any:
            statements.append(step)
            return execute(conn, step)

        driver.execute = recording
        configs = put_chain(s, "t", 3)  # full, then lean puts
        s.put_writes(configs[-1], [("ch", 1)], "task")
        assert s.get_tuple(cfg("t")) is not None  # by the epoch this process knows
        assert s.get_tuple(configs[0]) is not None
    reads = [q for q in statements if f'"{pg_schema}".threads' in q.sql]
    assert any(LEAN in q.sql for q in reads) and any(LEAN not in q.sql for q in reads)
    for q in reads:
        plan = "\n".join(
            r[0] for r in admin.execute("EXPLAIN " + q.sql, q.params or None).fetchall()
        )
        assert "threads_epoch_idx" not in plan, plan
        assert "threads_pkey" in plan, plan
