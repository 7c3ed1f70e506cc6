"""PostgresSaver / AsyncPostgresSaver behaviour on a real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from benchmarks.instrument import RoundTripProxy
from langgraph_durable.errors import (
    ConfigurationError,
    InvalidInputError,
    SchemaError,
    StorageUnavailableError,
)
from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver
from langgraph_durable.postgres._schema import MIGRATIONS
from tests.helpers import (
    aput_message_with_write,
    cfg,
    checkpoint_ids,
    config_ids,
    make_cp,
    put_chain,
    put_shared_blob_chain,
    tenant_from_org,
    versioned_cp,
    write_concurrently,
)

ALL_MIGRATIONS = list(range(1, len(MIGRATIONS) + 1))


def count_partitions(conn: psycopg.Connection, schema: str) -> int:
    """How many partitions (leaf tables) the saver's tables in ``schema`` have."""
    return conn.execute(
        "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r'",
        (schema,),
    ).fetchone()[0]


@pytest.fixture
def saver(pg_url: str, pg_schema: str) -> Iterator[PostgresSaver]:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as s:
        assert s.setup() == ALL_MIGRATIONS
        yield s


def test_setup_is_idempotent_and_refuses_a_newer_schema(saver: PostgresSaver, pg_url: str) -> None:
    assert saver.setup() == []
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{saver.schema}".schema_migrations (version) VALUES (99)')
    with pytest.raises(SchemaError, match="newer"):
        saver.setup()


def test_plain_pool_and_plain_connection_work_as_given(pg_url: str, pg_schema: str) -> None:
    with ConnectionPool(pg_url, min_size=1, max_size=2) as pool:
        s = PostgresSaver(pool, schema=pg_schema)
        s.setup()
        put_chain(s, "t", 3)
        assert len(list(s.list(cfg("t")))) == 3
        with pool.connection() as conn:
            assert conn.autocommit is False  # the caller's setting is restored
    with psycopg.connect(pg_url) as conn:  # not autocommit, default row factory
        s = PostgresSaver(conn, schema=pg_schema)
        assert s.get_tuple(cfg("t")).checkpoint["channel_values"]["step"] == 2  # type: ignore[union-attr]
        assert conn.autocommit is False


@contextmanager
def _round_trips(pg_url: str) -> Iterator[tuple[str, RoundTripProxy]]:
    """A URL through a relay that counts round trips, and the relay."""
    target = conninfo_to_dict(pg_url)
    proxy = RoundTripProxy(str(target.get("host", "127.0.0.1")), int(target.get("port", 5432)))
    try:
        yield make_conninfo(pg_url, host="127.0.0.1", port=str(proxy.port)), proxy
    finally:
        proxy.close()


def _one_trip_each(counts: list[int]) -> bool:
    # the relay may miss a round trip on a loaded machine (see test_rls), never add one
    return all(n <= 1 for n in counts) and sum(counts) >= len(counts) - 1


@pytest.mark.parametrize("autocommit", [False, True])
def test_a_pools_autocommit_setting_is_kept(pg_url: str, pg_schema: str, autocommit: bool) -> None:
    # each statement runs in autocommit either way: one round trip (no BEGIN, no COMMIT),
    # and the pool's sessions come back as the pool hands them out
    kwargs = {"autocommit": True} if autocommit else {}
    with (
        _round_trips(pg_url) as (url, proxy),
        ConnectionPool(url, min_size=1, max_size=1, kwargs=kwargs) as pool,
    ):
        s = PostgresSaver(pool, schema=pg_schema)
        s.setup()

        def trips(call: Any) -> int:
            before = proxy.snapshot()[0]
            call()
            return proxy.snapshot()[0] - before

        put_chain(s, "warm-up", 2)  # psycopg prepares each statement at its first run
        s.get_tuple(cfg("warm-up"))
        counts = [trips(lambda i=i: put_chain(s, f"t{i}", 1)) for i in range(3)]
        counts += [trips(lambda: s.get_tuple(cfg("t0"))) for _ in range(3)]
        assert _one_trip_each(counts), counts
        with pool.connection() as conn:
            assert conn.autocommit is autocommit
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


@pytest.mark.parametrize("autocommit", [False, True])
async def test_an_async_pools_autocommit_setting_is_kept(
    pg_url: str, pg_schema: str, autocommit: bool
) -> None:
    kwargs = {"autocommit": True} if autocommit else {}
    with _round_trips(pg_url) as (url, proxy):
        async with AsyncConnectionPool(url, min_size=1, max_size=1, kwargs=kwargs) as pool:
            s = AsyncPostgresSaver(pool, schema=pg_schema)
            await s.setup()
            counts = []
            for i in range(4):
                cp = versioned_cp(messages=["hi"])
                before = proxy.snapshot()[0]
                await s.aput(cfg(f"t{i}"), cp, {}, cp["channel_versions"])
                assert (await s.aget_tuple(cfg(f"t{i}"))) is not None
                counts.append((proxy.snapshot()[0] - before + 1) // 2)  # a put and a get
            assert _one_trip_each(counts[1:]), counts  # the first prepares its statements
            async with pool.connection() as conn:
                assert conn.autocommit is autocommit
                assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


class _RefusesAttributes(psycopg.Connection):  # type: ignore[type-arg]
    def __setattr__(self, name: str, value: object) -> None:
        if name == "_lgd_cursor":
            raise AttributeError(name)
        super().__setattr__(name, value)


def test_a_connection_keeps_one_cursor_for_the_savers_statements(
    pg_url: str, pg_schema: str
) -> None:
    # A new cursor per statement looks up every parameter's dumper and every column's
    # loader again; the driver keeps one on the connection and replaces it when closed.
    with psycopg.connect(pg_url) as conn:
        s = PostgresSaver(conn, schema=pg_schema)
        s.setup()
        put_chain(s, "t", 2)
        kept = conn._lgd_cursor  # type: ignore[attr-defined]
        mine = conn.cursor()
        mine.execute("SELECT 1")
        assert s.get_tuple(cfg("t")) is not None
        assert conn._lgd_cursor is kept  # type: ignore[attr-defined]
        assert mine.fetchone() == (1,)  # the caller's own cursor is untouched
        kept.close()
        got = s.get_tuple(cfg("t"))
        assert got is not None and got.checkpoint["channel_values"]["step"] == 1
        assert conn._lgd_cursor is not kept and not conn._lgd_cursor.closed  # type: ignore[attr-defined]
        # a listing's page of rows is not held on the connection after it is read
        assert len(list(s.list(cfg("t")))) == 2
        assert conn._lgd_cursor.closed and conn._lgd_cursor.pgresult is None  # type: ignore[attr-defined]
        assert s.get_tuple(cfg("t")) is not None
        assert not conn._lgd_cursor.closed  # type: ignore[attr-defined]
    # a connection class that takes no such attribute gets a cursor per statement
    with _RefusesAttributes.connect(pg_url) as conn:
        s = PostgresSaver(conn, schema=pg_schema)
        put_chain(s, "u", 2)
        assert [c.checkpoint["channel_values"]["step"] for c in s.list(cfg("u"))] == [1, 0]
        assert not hasattr(conn, "_lgd_cursor")


async def test_an_async_connection_keeps_one_cursor(pg_url: str, pg_schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        s = AsyncPostgresSaver(conn, schema=pg_schema)
        await s.setup()
        cp = versioned_cp(messages=["hi"])
        await s.aput(cfg("t"), cp, {}, cp["channel_versions"])
        kept = conn._lgd_cursor  # type: ignore[attr-defined]
        assert (await s.aget_tuple(cfg("t"))) is not None
        assert conn._lgd_cursor is kept  # type: ignore[attr-defined]
        await kept.close()
        assert (await s.aget_tuple(cfg("t"))) is not None
        assert conn._lgd_cursor is not kept  # type: ignore[attr-defined]


def test_tenants_never_mix(saver: PostgresSaver) -> None:
    put_chain(saver, "same", 2, tenant_id="a")
    put_chain(saver, "same", 3, tenant_id="b")
    assert len(list(saver.list(cfg("same", tenant_id="a")))) == 2
    assert len(list(saver.list(cfg("same", tenant_id="b")))) == 3
    assert saver.get_tuple(cfg("same")) is None  # default tenant has nothing
    tup = saver.get_tuple(cfg("same", tenant_id="a"))
    assert tup is not None and tup.config["configurable"]["tenant_id"] == "a"
    saver.delete_thread("same", tenant_id="a")
    assert saver.get_tuple(cfg("same", tenant_id="a")) is None
    assert len(list(saver.list(cfg("same", tenant_id="b")))) == 3


def test_fixed_and_callable_tenants(pg_url: str, pg_schema: str) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, tenant="fixed") as fixed:
        fixed.setup()
        put_chain(fixed, "t", 1)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, tenant=tenant_from_org) as by_org:
        assert by_org.get_tuple(cfg("t")) is None
        put_chain(by_org, "t", 2, org="fixed")
        assert len(list(by_org.list(cfg("t", org="fixed")))) == 3


def test_list_pages_filters_and_limits(saver: PostgresSaver) -> None:
    configs = put_chain(saver, "long", 230)
    ids = config_ids(configs)
    listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("long"))]
    assert listed == ids[::-1]
    assert len(list(saver.list(cfg("long"), limit=150))) == 150
    before = checkpoint_ids(saver.list(cfg("long"), before=configs[10], limit=3))
    assert before == ids[9:6:-1]
    assert [t.metadata["step"] for t in saver.list(cfg("long"), filter={"step": 7})] == [7]
    assert (
        list(saver.list(None, filter={"step": 7, "source": "loop"}))[0].checkpoint["id"] == ids[7]
    )
    # a streaming listing can be abandoned, and the saver still works
    it = saver.list(cfg("long"))
    next(it)
    it.close()
    assert saver.get_tuple(cfg("long")) is not None


def test_metadata_filter_cannot_change_the_sql(saver: PostgresSaver, pg_url: str) -> None:
    put_chain(saver, "t", 2)
    evil = {"step') OR ('1'='1": 1, "x": "'; DROP TABLE checkpoints; --"}
    assert list(saver.list(None, filter=evil)) == []
    assert len(list(saver.list(cfg("t")))) == 2


def test_unchanged_blob_survives_keep_latest(saver: PostgresSaver) -> None:
    put_shared_blob_chain(saver, "t")
    saver.prune(["t"], strategy="keep_latest")
    (only,) = list(saver.list(cfg("t")))
    assert only.metadata == {}
    assert only.checkpoint["channel_values"] == {"big": ["kept"] * 10, "counter": [3]}


def test_prune_keeps_the_ancestors_a_delta_channel_needs(saver: PostgresSaver) -> None:
    first = saver.put(cfg("d"), make_cp(), {}, {})
    second = saver.put(first, make_cp(), {"counters_since_delta_snapshot": {"m": [1, 1]}}, {})
    saver.put(second, make_cp(), {"counters_since_delta_snapshot": {"m": [2, 2]}}, {})
    saver.prune(["d"])
    assert len(list(saver.list(cfg("d")))) == 3  # the chain back to a snapshot
    saver.put(cfg("e"), make_cp(), {}, {})
    saver.put(cfg("e"), make_cp(), {}, {})
    saver.prune(["e"])
    assert len(list(saver.list(cfg("e")))) == 1
    with pytest.raises(InvalidInputError, match="strategy"):
        saver.prune(["d"], strategy="everything")


def test_bad_input_gets_our_errors_and_loses_nothing(saver: PostgresSaver) -> None:
    configs = put_chain(saver, "t", 2)
    with pytest.raises(InvalidInputError, match="thread_id"):
        saver.put({"configurable": {}}, make_cp(), {}, {})
    with pytest.raises(InvalidInputError, match="checkpoint_id"):
        saver.put_writes(cfg("t"), [("a", 1)], "task")
    with pytest.raises(InvalidInputError):
        saver.put(cfg("t\x00x"), make_cp(), {}, {})
    with pytest.raises(InvalidInputError):
        list(saver.list(cfg("t"), limit=-1))
    assert checkpoint_ids(saver.list(cfg("t"))) == config_ids(configs[::-1])


def test_missing_setup_and_unreachable_database() -> None:
    with pytest.raises(StorageUnavailableError):
        with PostgresSaver.from_conn_string(
            "postgresql://postgres@127.0.0.1:1/none?connect_timeout=1",
            pool_size=1,
            pool_timeout=2.0,
        ) as s:
            s.get_tuple(cfg("t"))
    with pytest.raises(StorageUnavailableError):  # a transactional operation too
        with PostgresSaver.from_conn_string(
            "postgresql://postgres@127.0.0.1:1/none?connect_timeout=1",
            pool_size=1,
            pool_timeout=2.0,
        ) as s:
            s.setup()
    with pytest.raises(ConfigurationError):
        PostgresSaver(object())
    with pytest.raises(ConfigurationError):
        PostgresSaver("postgresql://x", schema="bad-name")


def test_use_before_setup_is_a_schema_error(pg_url: str, pg_schema: str) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as s:
        with pytest.raises(SchemaError, match="setup"):
            s.get_tuple(cfg("t"))


def test_a_new_time_bucket_gets_its_partition_on_first_write(
    saver: PostgresSaver, pg_url: str
) -> None:
    put_chain(saver, "old", 1)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # Narrow the bucket: "now" falls into an epoch that has no partition yet.
        conn.execute(
            f"UPDATE \"{saver.schema}\".settings SET value = '1' WHERE key = 'partition_days'"
        )
        before = count_partitions(conn, saver.schema)
    put_chain(saver, "new", 2)
    assert len(list(saver.list(cfg("new")))) == 2
    assert len(list(saver.list(cfg("old")))) == 1
    with psycopg.connect(pg_url, autocommit=True) as conn:
        after = count_partitions(conn, saver.schema)
    assert after == before + 3


def test_without_prepared_statements(pg_url: str, pg_schema: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        s = PostgresSaver(conn, schema=pg_schema, prepare_threshold=None)
        s.setup()
        put_chain(s, "t", 8)
        for _ in range(8):
            s.get_tuple(cfg("t"))
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] == 0
    with psycopg.connect(pg_url, autocommit=True) as conn:
        s = PostgresSaver(conn, schema=pg_schema)
        s.get_tuple(cfg("t"))
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] >= 1


def test_delete_for_runs_and_copy_thread_with_writes(saver: PostgresSaver) -> None:
    configs = put_chain(saver, "src", 2, run_id="r1")
    saver.put_writes(configs[-1], [("a", {"v": 1})], "task-1", "path")
    saver.copy_thread("src", "dst")
    dst = saver.get_tuple(cfg("dst"))
    assert dst is not None and dst.pending_writes == [("task-1", "a", {"v": 1})]
    assert dst.checkpoint["channel_values"]["payload"] == {"i": 1}
    saver.delete_for_runs(["r1"])
    assert list(saver.list(cfg("src"))) == []
    assert list(saver.list(cfg("dst"))) == []


async def test_async_saver_round_trip_and_sync_bridge(pg_url: str, pg_schema: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema) as s:
        assert await s.setup() == ALL_MIGRATIONS
        cp, tup = await aput_message_with_write(s, "t")
        assert tup is not None and tup.checkpoint["channel_values"] == {"messages": ["hi"]}
        assert tup.pending_writes == [("task", "messages", ["there"])]
        # the sync methods work from another thread, and refuse the loop's own thread
        other = await asyncio.to_thread(s.get_tuple, cfg("t"))
        assert other is not None and other.checkpoint["id"] == cp["id"]
        with pytest.raises(InvalidInputError, match="event loop"):
            s.get_tuple(cfg("t"))
        assert [t.checkpoint["id"] async for t in s.alist(None, limit=1)] == [cp["id"]]


def test_concurrent_writers_on_one_thread(saver: PostgresSaver) -> None:
    errors = write_concurrently(saver, "shared", writers=4, puts=20)
    assert errors == []
    assert len(list(saver.list(cfg("shared") | {"configurable": {"thread_id": "shared"}}))) == 80


def test_partitions_compress_payloads_with_lz4_when_available(
    saver: PostgresSaver, pg_url: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        lz4 = conn.execute(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        ).fetchone()[0]
        methods = {
            r[0]
            for r in conn.execute(
                "SELECT a.attcompression FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
                "AND c.relname LIKE 'blobs_e%%' AND a.attname = 'blob'",
                (saver.schema,),
            )
        }
    assert methods == ({"l"} if lz4 else {""})


def test_odd_channel_names_round_trip(saver: PostgresSaver) -> None:
    names = ['quo"te', "back\\slash", "com,ma", "NULL", "{brace}", "sp ace", "ünï"]
    cp = versioned_cp(**{n: [n] for n in names})
    stored = saver.put(cfg("odd"), cp, {}, cp["channel_versions"])
    saver.put_writes(stored, [(n, n) for n in names], "task")
    tup = saver.get_tuple(cfg("odd"))
    assert tup is not None
    assert tup.checkpoint["channel_values"] == {n: [n] for n in names}
    assert [(c, v) for _, c, v in tup.pending_writes] == [(n, n) for n in names]


def test_a_thread_deleted_and_started_again_elsewhere_is_found(pg_url: str, pg_schema: str) -> None:
    # Two savers (two processes, say): one remembers the thread's epoch, the other
    # deletes the thread and starts it again in another time bucket.
    with (
        PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as a,
        PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as b,
    ):
        a.setup()
        put_chain(a, "t", 2)
        assert a.get_tuple(cfg("t")) is not None
        b.delete_thread("t")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                f"UPDATE \"{pg_schema}\".settings SET value = '1' WHERE key = 'partition_days'"
            )
        new = put_chain(b, "t", 1)
        got = a.get_tuple(cfg("t"))
        assert got is not None and got.checkpoint["id"] == new[0]["configurable"]["checkpoint_id"]
        assert checkpoint_ids(a.list(cfg("t"))) == [got.checkpoint["id"]]
        assert a.get_tuple(cfg("t", ns="child:1")) is None


def test_python_filter_semantics_equal_postgres_containment(pg_url: str) -> None:
    import json

    from langgraph_durable._core.filters import metadata_matches, normalize_filter

    meta = {"source": "loop", "step": 1, "parents": {"": "abc"}, "tags": ["a", "b"], "ok": True}
    filters = [
        {"source": "loop"},
        {"parents": {"": "abc"}, "step": 1},
        {"tags": ["b"]},
        {"tags": "a"},
        {"source": "input"},
        {"missing": None},
        {"ok": 1},
        {"step": "1"},
        {"step": 1.0},
        {"parents": {}},
        {"parents": "abc"},
    ]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for f in filters:
            (pg,) = conn.execute(
                "SELECT %s::jsonb @> %s::jsonb", (json.dumps(meta), json.dumps(f))
            ).fetchone()
            assert metadata_matches(meta, normalize_filter(f)) is pg, f
