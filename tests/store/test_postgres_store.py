"""PostgresStore and AsyncPostgresStore: the differential harness, encryption on and off,
raw scans for canaries, tenant separation, round trips, deleting a namespace.

``LGD_PROPERTY_EXAMPLES`` sets the drawn programs per differential test (default 4).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import given
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp
from psycopg import sql

from langgraph_durable._core import store as core
from langgraph_durable.errors import (
    ConfigurationError,
    DecryptionError,
    InvalidInputError,
    InvalidNamespaceError,
)
from langgraph_durable.postgres import AsyncPostgresStore, PostgresStore
from langgraph_durable.protect import Encryption, LocalKeyring, Redaction
from tests.store import backend_cases as cases
from tests.store.differential import (
    COVERING_PROGRAM,
    FakeClock,
    arun_program,
    index_config,
    programs,
    run_program,
)

PROPERTY = cases.property_settings(4)


@pytest.fixture(scope="module")
def schema(pg_url: str) -> Iterator[str]:
    """One schema for the module's stores (each test and example has its own tenant)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with PostgresStore.from_conn_string(pg_url, schema=name) as store:
        applied = store.setup()
        assert applied[-1] >= 9  # the store's migration
        assert store.setup() == []
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _options(mode: str, **extra: Any) -> dict[str, Any]:
    return cases.mode_options(mode, **{"pool_size": 2, **extra})


def _rows(pg_url: str, schema: str, tenant: str | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        query = sql.SQL(
            "SELECT tenant_id, prefix, key, value_type, value, vectors_type, vectors, "
            "created_at, updated_at, ttl_minutes, expires_at FROM {}.store_items"
        ).format(sql.Identifier(schema))
        if tenant is None:
            return conn.execute(query).fetchall()
        query = query + sql.SQL(" WHERE tenant_id = %s")
        return conn.execute(query, (tenant,)).fetchall()


# ---- the differential harness ---------------------------------------------------------


@pytest.mark.parametrize("mode", cases.MODES)
def test_differential_sync(pg_url: str, schema: str, mode: str) -> None:
    tenant = {"now": ""}
    with PostgresStore.from_conn_string(
        pg_url, schema=schema, tenant=lambda: tenant["now"], **_options(mode)
    ) as store:
        tenant["now"] = uuid.uuid4().hex
        run_program(store, COVERING_PROGRAM)

        @PROPERTY
        @given(programs())
        def check(program: list) -> None:
            tenant["now"] = uuid.uuid4().hex  # every example starts with no items
            run_program(store, program)

        check()


@pytest.mark.parametrize("mode", cases.MODES)
def test_differential_async(pg_url: str, schema: str, mode: str) -> None:
    async def run(program: list) -> None:
        async with AsyncPostgresStore.from_conn_string(
            pg_url, schema=schema, tenant=uuid.uuid4().hex, **_options(mode, pool_size=1)
        ) as store:
            await arun_program(store, program)

    asyncio.run(run(COVERING_PROGRAM))

    @PROPERTY
    @given(programs(8))
    def check(program: list) -> None:
        asyncio.run(run(program))

    check()


@pytest.mark.parametrize("mode", cases.MODES)
def test_ttl_with_an_injected_clock(pg_url: str, schema: str, mode: str) -> None:
    def options(**kw: Any) -> dict[str, Any]:
        return {"schema": schema, "tenant": uuid.uuid4().hex, **_options(mode, **kw)}

    cases.check_ttl_sync_and_async(
        lambda **kw: PostgresStore.from_conn_string(pg_url, **options(**kw)),
        lambda **kw: AsyncPostgresStore.from_conn_string(pg_url, **options(**kw)),
    )


# ---- raw storage and tenants ------------------------------------------------------------


def _dump(rows: list[tuple[Any, ...]]) -> bytes:
    out = bytearray()
    for row in rows:
        for value in row:
            out += bytes(value) if isinstance(value, (bytes, memoryview)) else repr(value).encode()
            out += b"\n"
    return bytes(out)


@pytest.mark.parametrize("mode", cases.MODES)
def test_canaries_in_values_and_embeddings_never_reach_storage(
    pg_url: str, schema: str, mode: str
) -> None:
    tenant = uuid.uuid4().hex
    with PostgresStore.from_conn_string(
        pg_url, schema=schema, tenant=tenant, **_options(mode)
    ) as store:
        canaries = cases.write_canaries(store)
    cases.assert_canaries(_dump(_rows(pg_url, schema, tenant)), canaries, mode)


@pytest.mark.parametrize("mode", cases.MODES)
def test_crafted_namespaces_never_reach_another_tenant(pg_url: str, schema: str, mode: str) -> None:
    base = uuid.uuid4().hex[:8]
    alice, mallory = f"{base}", f"{base}.users"  # a tenant that looks like a namespace
    with (
        PostgresStore.from_conn_string(pg_url, schema=schema, tenant=alice, **_options(mode)) as a,
        PostgresStore.from_conn_string(
            pg_url, schema=schema, tenant=mallory, **_options(mode)
        ) as m,
    ):
        a.put(("users", "u1"), "k", {"text": "apple", "secret": 1})
        for ns in [("users", "u1"), (alice, "users", "u1"), (base, "users"), ("u1",)]:
            assert m.get(ns, "k") is None
            assert m.search(ns[:1]) == []
        assert m.search(()) == [] and m.search((), query="apple") == []
        assert m.list_namespaces() == []
        with pytest.raises(InvalidNamespaceError):  # ours, from batch
            m.batch([GetOp(("users.u1",), "k")])
        with pytest.raises(InvalidNamespaceError):
            m.batch([PutOp(("users.u1",), "k", {"v": 1})])
        with pytest.raises(ValueError):  # LangGraph's own, from its public methods
            m.put(("users.u1",), "k", {"v": 1})
        assert m.delete_namespace(("users",)) == 0
        assert a.get(("users", "u1"), "k") is not None
        assert a.list_namespaces() == [("users", "u1")]
    if mode == "encrypted":
        # A row moved to another tenant does not open there (bound to tenant, namespace, key).
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("UPDATE {}.store_items SET tenant_id = %s WHERE tenant_id = %s").format(
                    sql.Identifier(schema)
                ),
                (mallory, alice),
            )
        with PostgresStore.from_conn_string(
            pg_url, schema=schema, tenant=mallory, encryption=a._saver.encryption
        ) as m2:
            with pytest.raises(DecryptionError):
                m2.get(("users", "u1"), "k")


# ---- batches, round trips, deletes -----------------------------------------------------


def test_one_statement_per_batch_and_one_more_for_ttl_refreshes(pg_url: str, schema: str) -> None:
    with PostgresStore.from_conn_string(
        pg_url, schema=schema, tenant=uuid.uuid4().hex, **_options("clear")
    ) as store:
        sent = cases.pg_statements(store)
        puts = [
            PutOp(("a", str(i)), f"k{j}", {"text": "apple", "n": j})
            for i in range(5)
            for j in range(4)
        ]
        store.batch(puts)
        # this store did not run setup(): its first batch with puts looks the vector
        # table up (once per store), then every batch is one statement
        assert len(sent) == 2 and "pg_extension" in sent[0]
        sent.clear()
        store.batch(puts)
        assert len(sent) == 1
        sent.clear()
        reads = [
            GetOp(("a", "1"), "k1", refresh_ttl=False),
            GetOp(("a", "2"), "k2", refresh_ttl=False),
            SearchOp(("a",), filter={"n": {"$gt": 1}}, limit=3, refresh_ttl=False),
            SearchOp(("a", "3"), query="apple", refresh_ttl=False),
            ListNamespacesOp(max_depth=1),
        ]
        got = store.batch(reads)
        assert len(sent) == 1
        assert got[0].value["n"] == 1 and len(got[2]) == 3 and got[4] == [("a",)]
        sent.clear()
        got = store.batch(
            [PutOp(("a", "1"), "k1", None), *reads, PutOp(("b",), "x", {"n": 1}, ttl=1.0)]
        )
        assert len(sent) == 1  # reads and writes in one statement
        assert got[1].value["n"] == 1  # the reads saw the store before the batch
        assert got[5] == [("a",)]
        sent.clear()
        got = store.batch([GetOp(("b",), "x"), PutOp(("c",), "y", {"n": 2})])
        assert got[0].value == {"n": 1}
        assert len(sent) == 2  # a second statement only to extend the TTL the get returned
        assert store.get(("a", "1"), "k1") is None
        assert store.get(("c",), "y").value == {"n": 2}  # type: ignore[union-attr]


def test_a_search_without_filter_or_query_reads_only_its_page(pg_url: str, schema: str) -> None:
    with PostgresStore.from_conn_string(
        pg_url, schema=schema, tenant=uuid.uuid4().hex, **_options("encrypted")
    ) as store:
        for b in range(3):  # three times, ten items of one time each
            store.batch([PutOp(("a", str(i % 3)), f"k{b}{i}", {"n": i}) for i in range(10)])
        whole = [i.key for i in store.search(("a",), limit=100, refresh_ttl=False)]
        rows: list[int] = []
        connector = store._saver._conn
        run_one = connector.run_one

        def counting(q: Any) -> Any:
            result = run_one(q)
            rows.append(len(result))
            return result

        connector.run_one = counting
        page = store.search(("a",), limit=3, offset=2, refresh_ttl=False)
        assert rows == [5]  # offset + limit rows opened, not 30
        assert [i.key for i in page] == whole[2:5]
        rows.clear()
        two = store.batch(
            [SearchOp(("a",), limit=9, offset=8), SearchOp(("a",), limit=2, refresh_ttl=False)]
        )
        assert rows == [17]  # one read of the most either search needs
        assert [[i.key for i in r] for r in two] == [whole[8:17], whole[:2]]
        rows.clear()
        store.search(("a",), filter={"n": {"$gte": 0}}, limit=3, refresh_ttl=False)
        assert rows == [30]  # a filter needs every value opened


def test_a_search_over_too_many_items_is_refused(pg_url: str, schema: str) -> None:
    clock = FakeClock()
    with PostgresStore.from_conn_string(
        pg_url, schema=schema, tenant=uuid.uuid4().hex, max_search_items=5, clock=clock
    ) as store:
        store.batch([PutOp(("a", str(i % 2)), f"k{i}", {"v": i}, ttl=1.0) for i in range(6)])
        assert len(store.search(("a", "0"), filter={"v": {"$gte": 0}}, refresh_ttl=False)) == 3
        assert len(store.search(("a",), limit=4, refresh_ttl=False)) == 4  # a page: its rows
        clock.advance(50)
        every = {"v": {"$gte": 0}}
        with pytest.raises(InvalidInputError, match="max_search_items=5"):
            store.batch(
                [
                    GetOp(("a", "0"), "k0"),
                    SearchOp(("a",), filter=every),
                    PutOp(("b",), "k", {"v": 1}),
                    PutOp(("a", "1"), "k1", None),
                ]
            )
        assert store.get(("b",), "k") is None  # nothing of the refused batch was written
        assert store.get(("a", "1"), "k1", refresh_ttl=False) is not None
        clock.advance(20)
        assert store.get(("a", "0"), "k0") is None  # nor was the get's refresh
        store.batch([PutOp(("c",), f"j{i}", {"v": i}) for i in range(6)])
        with pytest.raises(InvalidInputError, match="max_search_items=5"):
            asyncio.run(store.asearch((), filter=every))  # 6 live items
        store.delete(("c",), "j5")
        assert len(store.search((), filter=every)) == 5  # at the bound: answered
    with pytest.raises(ConfigurationError):
        PostgresStore(pg_url, max_search_items=0)


def test_delete_namespace_sync_and_async(pg_url: str, schema: str) -> None:
    tenant = uuid.uuid4().hex
    with PostgresStore.from_conn_string(pg_url, schema=schema, tenant=tenant) as store:
        for ns in [("a",), ("a", "b"), ("a", "b", "c"), ("ab",), ("a-b",), ("b", "a")]:
            store.put(ns, "k", {"v": 1})
        assert store.delete_namespace(("a", "b")) == 2
        assert sorted(store.list_namespaces()) == [("a",), ("a-b",), ("ab",), ("b", "a")]
        with pytest.raises(InvalidNamespaceError):
            store.delete_namespace(())

    async def run() -> None:
        async with AsyncPostgresStore.from_conn_string(
            pg_url, schema=schema, tenant=tenant
        ) as astore:
            assert await astore.adelete_namespace(("a",)) == 1
            assert sorted(await astore.alist_namespaces()) == [("a-b",), ("ab",), ("b", "a")]

    asyncio.run(run())


# ---- inside a graph; redaction ----------------------------------------------------------


def test_a_graph_remembers_in_one_thread_and_recalls_in_another(pg_url: str, schema: str) -> None:
    cases.check_graph_remembers(
        lambda _: PostgresStore.from_conn_string(pg_url, schema=schema, index=index_config())
    )


def test_redaction_applies_to_stored_values(pg_url: str, schema: str) -> None:
    tenant = uuid.uuid4().hex
    with PostgresStore.from_conn_string(
        pg_url, schema=schema, tenant=tenant, redaction=Redaction()
    ) as store:
        cases.check_redaction(store, lambda: _dump(_rows(pg_url, schema, tenant)))


def test_sync_methods_of_the_async_store_from_another_thread(pg_url: str, schema: str) -> None:
    async def run() -> None:
        async with AsyncPostgresStore.from_conn_string(
            pg_url, schema=schema, tenant=uuid.uuid4().hex
        ) as store:
            await asyncio.to_thread(store.put, ("a",), "k", {"v": 1})
            item = await asyncio.to_thread(store.get, ("a",), "k")
            assert item is not None and item.value == {"v": 1}
            assert await asyncio.to_thread(store.delete_namespace, ("a",)) == 1
            with pytest.raises(ConfigurationError):
                store.get(("a",), "k")  # on the loop's own thread: refused, not a deadlock

    asyncio.run(run())
    with PostgresStore.from_conn_string(pg_url, schema=schema, tenant=uuid.uuid4().hex) as sync:
        asyncio.run(sync.aput(("a",), "k", {"v": 2}))
        assert asyncio.run(sync.aget(("a",), "k")).value == {"v": 2}  # type: ignore[union-attr]


def test_a_refresh_never_overrides_a_put_that_came_between(pg_url: str, schema: str) -> None:
    clock = FakeClock()
    ns = ("ttl",)
    with PostgresStore.from_conn_string(
        pg_url, schema=schema, tenant=uuid.uuid4().hex, clock=clock
    ) as store:
        store.put(ns, "k", {"v": 1}, ttl=1.0)  # expires at +60 s
        clock.advance(10)
        # A refreshing get, driven by hand: its read, then a put from elsewhere, then its write.
        steps = store._batch_op(core.plan_batch([GetOp(ns, "k")]), [], [], [], []).steps
        connector = store._saver._conn
        rows = connector.run_one(next(steps))
        store.put(ns, "k", {"v": 2}, ttl=5.0)  # its own expiry: +10 s + 300 s
        refresh = steps.send(rows)
        assert "UPDATE" in refresh.sql and refresh.params["re"] == [clock.now + 60]
        connector.run_one(refresh)
        with pytest.raises(StopIteration) as done:
            next(steps)
        assert done.value.value[0].value == {"v": 1}  # what the get read
        expiry = _rows(pg_url, schema, store.tenant)[0][-1]
        assert expiry == clock.now + 300


def test_sweep_ttl_deletes_expired_items_of_every_tenant(pg_url: str, pg_schema: str) -> None:
    clock = FakeClock()
    with (
        PostgresStore.from_conn_string(pg_url, schema=pg_schema, tenant="t1", clock=clock) as s1,
        PostgresStore.from_conn_string(pg_url, schema=pg_schema, tenant="t2", clock=clock) as s2,
    ):
        s1.setup()
        s1.batch([PutOp(("a",), f"k{i}", {"v": i}, ttl=1.0) for i in range(5)])
        s2.put(("b",), "gone", {"v": 0}, ttl=2.0)
        s2.put(("b",), "kept", {"v": 0})
        assert s1.sweep_ttl() == 0
        clock.advance(61)
        assert s1.sweep_ttl(batch=2) == 5  # in statements of two rows
        clock.advance(60)

        async def sweep() -> int:
            async with AsyncPostgresStore.from_conn_string(
                pg_url, schema=pg_schema, clock=clock
            ) as store:
                return await store.asweep_ttl()

        assert asyncio.run(sweep()) == 1
        assert [r[2] for r in _rows(pg_url, pg_schema)] == ["kept"]


def _gone(pg_url: str, schema: str, seconds: float = 10.0) -> bool:
    """Whether the schema's store rows are all gone within ``seconds`` (polled)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _rows(pg_url, schema):
            return True
        time.sleep(0.05)
    return False


def test_ttl_sweepers_sync_and_async(pg_url: str, pg_schema: str) -> None:
    clock = FakeClock()
    ttl = {"default_ttl": 1.0, "sweep_interval_minutes": 0.002}  # every 0.12 s
    with PostgresStore.from_conn_string(pg_url, schema=pg_schema, ttl=ttl, clock=clock) as store:
        store.setup()
        store.put(("a",), "k", {"v": 1})
        future = store.start_ttl_sweeper()
        assert store.start_ttl_sweeper() is future  # one sweeper per store
        clock.advance(61)
        assert _gone(pg_url, pg_schema)
        assert store.stop_ttl_sweeper(timeout=10) and future.done()
        with pytest.raises(ConfigurationError):
            PostgresStore(pg_url, schema=pg_schema, ttl={"sweep_interval_minutes": 0})

    async def run() -> None:
        async with AsyncPostgresStore.from_conn_string(
            pg_url, schema=pg_schema, ttl=ttl, clock=clock
        ) as store:
            await store.aput(("a",), "k", {"v": 1})
            task = await store.start_ttl_sweeper()
            clock.advance(61)
            assert await asyncio.to_thread(_gone, pg_url, pg_schema)
            assert await store.stop_ttl_sweeper(timeout=10) and task.done()

    asyncio.run(run())


def test_a_key_version_loaded_mid_batch_neither_repeats_the_writes_nor_shows_them(
    pg_url: str, schema: str
) -> None:
    """A batch whose read meets a data-key version another process made loads it and
    opens the same rows again: its writes are sent once, its reads still see the store
    as it was before the batch."""
    secret = os.urandom(32)
    tenant = uuid.uuid4().hex
    ns = ("keys",)
    mine = Encryption(LocalKeyring({"k1": secret}, "k1"))
    theirs = Encryption(LocalKeyring({"k1": secret}, "k1"), max_key_uses=1)
    with (
        PostgresStore.from_conn_string(pg_url, schema=schema, tenant=tenant, encryption=mine) as a,
        PostgresStore.from_conn_string(
            pg_url, schema=schema, tenant=tenant, encryption=theirs
        ) as b,
    ):
        a.put(ns, "x", {"v": 1})  # a has loaded the tenant's first data key
        for i in range(3):
            b.put(ns, f"y{i}", {"v": i})  # b seals each under a new version
        sent = cases.pg_statements(a)
        got = a.batch([GetOp(ns, "y2"), GetOp(ns, "x"), PutOp(ns, "x", {"v": 3})])
        assert got[0].value == {"v": 2}
        assert got[1].value == {"v": 1}  # not the batch's own write
        assert sum("INSERT INTO" in q for q in sent) == 1  # the writes went once
        assert a.get(ns, "x").value == {"v": 3}  # type: ignore[union-attr]


def test_altered_clear_fields_do_not_open(pg_url: str, schema: str) -> None:
    """With encryption on, what a read trusts beside the ciphertext is bound to it: the
    write's time (search order), the TTL, and the embeddings that go with the value."""
    tenant = uuid.uuid4().hex
    table = sql.SQL("{}.store_items").format(sql.Identifier(schema))

    def alter(assignment: str, key: str, params: tuple[Any, ...] = ()) -> None:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "UPDATE {} SET " + assignment + " WHERE tenant_id = %s AND key = %s"
                ).format(table),
                (*params, tenant, key),
            )

    def stored(key: str, column: str) -> Any:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            query = sql.SQL("SELECT {} FROM {} WHERE tenant_id = %s AND key = %s").format(
                sql.Identifier(column), table
            )
            row = conn.execute(query, (tenant, key)).fetchone()
            assert row is not None
            return row[0]

    with PostgresStore.from_conn_string(
        pg_url, schema=schema, tenant=tenant, **_options("encrypted")
    ) as store:
        store.put(("n",), "newer", {"text": "apple"}, index=False)  # no embeddings
        store.put(("n",), "ttl", {"text": "apple"}, ttl=5.0)
        store.put(("n",), "bare", {"text": "apple"})
        store.put(("o",), "old", {"text": "apple"})
        alter("updated_at = updated_at + 1000", "newer")
        alter("ttl_minutes = 50000", "ttl")
        alter("vectors_type = '', vectors = ''", "bare")
        old_vectors = stored("old", "vectors")
        store.put(("o",), "old", {"text": "river"})
        alter("vectors = %s", "old", (old_vectors,))
        for key in ("newer", "ttl", "bare"):
            with pytest.raises(DecryptionError):
                store.get(("n",), key)
        with pytest.raises(DecryptionError):
            store.get(("o",), "old")  # the replayed embeddings of an older write
        with pytest.raises(DecryptionError):
            store.search(("o",), query="apple")
