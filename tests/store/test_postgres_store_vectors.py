"""PostgresStore's search by meaning with pgvector (``postgres/_store_vectors``).

The machine's PostgreSQL may have no pgvector: these tests run a server of their own
from the ``pgserver`` wheel (which ships pgvector), started once per test process,
unless ``LGD_PGVECTOR_URL`` names a database whose server has the extension (the
superuser's: ``setup()`` creates the extension). The fallback without pgvector is the
rest of ``tests/store`` on the rig's server, plus :func:`test_without_pgvector_search_is_exact`.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from langgraph.store.base import PutOp, SearchOp
from langgraph.store.memory import InMemoryStore
from psycopg import sql
from psycopg.conninfo import make_conninfo

from langgraph_durable._core import store as core
from langgraph_durable.errors import ConfigurationError, InvalidInputError
from langgraph_durable.postgres import AsyncPostgresStore, PostgresStore
from langgraph_durable.postgres._rls import app_role_grants
from langgraph_durable.postgres._store_vectors import index_settings
from tests.encryption_helpers import local_encryption
from tests.store.backend_cases import pg_statements
from tests.store.differential import (
    COVERING_PROGRAM,
    FakeClock,
    arun_program,
    index_config,
    programs,
    run_program,
)

DIMS = 8
WORDS = [f"w{i}" for i in range(80)]


def unit_embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedding of unit length with no two texts alike: with unit
    vectors, cosine, l2 and inner product rank alike (InMemoryStore scores cosine)."""
    out = []
    for text in texts:
        digest = hashlib.sha256(text.encode()).digest()
        vector = [(b - 127.5) / 127.5 for b in digest[:DIMS]]
        norm = math.sqrt(sum(x * x for x in vector))
        out.append([x / norm for x in vector])
    return out


def _index(distance: str = "cosine", **ann: Any) -> dict[str, Any]:
    return {
        "dims": DIMS,
        "embed": unit_embed,
        "fields": ["text"],
        "distance_type": distance,
        "ann_index_config": {"kind": "hnsw", **ann},
    }


@pytest.fixture(scope="session")
def vector_url(pg_url: str) -> Iterator[str]:
    """A database whose server has pgvector: ``LGD_PGVECTOR_URL``, else the rig's if its
    server has the extension, else a throwaway server from the ``pgserver`` wheel
    (pgvector 0.6)."""
    given_url = os.environ.get("LGD_PGVECTOR_URL")
    if given_url:
        yield given_url
        return
    if _fetch(pg_url, "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"):
        yield pg_url
        return
    from langgraph_durable.postgres.embedded import start_embedded_postgres

    server = start_embedded_postgres(source="wheel")
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def vschema(vector_url: str) -> Iterator[str]:
    name = f"v_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(vector_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _fetch(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, params or None).fetchall()  # type: ignore[arg-type]


# ---- the pure parts ------------------------------------------------------------------


def test_similarity_and_when_an_index_picks_candidates() -> None:
    a, b = [1.0, 0.0], [0.6, 0.8]
    assert core.similarity(a, b, "cosine") == pytest.approx(0.6)
    assert core.similarity(a, b, "l2") == pytest.approx(-math.sqrt(0.16 + 0.64))
    assert core.similarity([2.0, 0.0], b, "inner_product") == pytest.approx(1.2)
    with pytest.raises(InvalidInputError):
        core.similarity(a, b, "hamming")
    assert core.ann_candidates(SearchOp(("a",), query="q", limit=3, offset=2), True, 2) == 20
    assert core.ann_candidates(SearchOp(("a",), query="q"), False) is None  # no index
    assert core.ann_candidates(SearchOp(("a",), query="q", filter={"n": 1}), True) is None
    assert core.ann_candidates(SearchOp(("a",)), True) is None  # no query
    assert core.ann_candidates(SearchOp(("a",), query="q", limit=600), True) is None  # > 1000


def test_index_settings_are_checked() -> None:
    assert index_settings(None, False, False) is None
    plain = index_settings(_index("l2", m=8), encrypted=False, clear_vectors=False)
    assert plain is not None and plain.clear and plain.distance_type == "l2" and plain.m == 8
    sealed = index_settings(_index(), encrypted=True, clear_vectors=False)
    assert sealed is not None and not sealed.wants_table
    assert index_settings(_index(), encrypted=True, clear_vectors=True).wants_table  # type: ignore[union-attr]
    for bad in (
        {"distance_type": "hamming"},
        {"ann_index_config": {"kind": "ivfflat"}},
        {"ann_index_config": {"vector_type": "bit"}},
        {"ann_index_config": {"m": 0}},
    ):
        with pytest.raises(ConfigurationError):
            index_settings({**_index(), **bad}, encrypted=False, clear_vectors=False)
    with pytest.raises(ConfigurationError):
        index_settings(_index(), encrypted=True, clear_vectors="yes")  # type: ignore[arg-type]


# ---- setup: extension, table, index ----------------------------------------------------


def test_setup_makes_the_hnsw_index_once_and_refuses_other_dimensions(
    vector_url: str, vschema: str
) -> None:
    with PostgresStore.from_conn_string(
        vector_url, schema=vschema, index=_index(m=8, ef_construction=32)
    ) as store:
        assert store.setup()[-1] >= 10
        assert store._vector_mode.ann
        assert store.setup() == []  # again: nothing new, no error
    rows = _fetch(
        vector_url,
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
        "AND tablename = 'store_vectors' AND indexdef LIKE '%%hnsw%%'",
        vschema,
    )
    assert len(rows) == 1 and rows[0][0] == "store_vectors_hnsw_cosine_idx"
    assert "vector_cosine_ops" in rows[0][1] and "m='8'" in rows[0][1]
    with PostgresStore.from_conn_string(vector_url, schema=vschema, index=_index("l2")) as store:
        store.setup()  # another distance: its own index beside the first
    names = {
        r[0]
        for r in _fetch(
            vector_url, "SELECT indexname FROM pg_indexes WHERE schemaname = %s", vschema
        )
    }
    assert {"store_vectors_hnsw_cosine_idx", "store_vectors_hnsw_l2_idx"} <= names
    other = {**_index(), "dims": DIMS + 1}
    with PostgresStore.from_conn_string(vector_url, schema=vschema, index=other) as store:
        with pytest.raises(ConfigurationError, match="vector table"):
            store.setup()


def test_flat_kind_orders_in_sql_without_an_index(vector_url: str, vschema: str) -> None:
    with PostgresStore.from_conn_string(
        vector_url, schema=vschema, index=_index("inner_product", kind="flat")
    ) as store:
        store.setup()
        assert store._vector_mode is not None and store._vector_mode.ann
        store.batch([PutOp(("a",), f"k{i}", {"text": WORDS[i]}) for i in range(20)])
        sent = pg_statements(store)
        assert [i.key for i in store.search(("a",), query="w9", limit=1)] == ["k9"]
        assert "store_vectors v JOIN" in sent[0]
    indexes = _fetch(
        vector_url,
        "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'store_vectors'",
        vschema,
    )
    assert indexes == [("store_vectors_pkey",)]


# ---- results: InMemoryStore's ---------------------------------------------------------


def _corpus() -> list[PutOp]:
    puts = [PutOp(("docs", f"g{i % 3}"), f"k{i}", {"text": WORDS[i], "n": i}) for i in range(30)]
    puts.append(PutOp(("docs", "g0"), "plain", {"text": "no vector"}, index=False))
    puts.append(PutOp(("other",), "o1", {"text": "w3 elsewhere"}))
    return puts


@pytest.mark.parametrize("distance", ["cosine", "l2", "inner_product"])
def test_rankings_agree_with_in_memory_store(vector_url: str, vschema: str, distance: str) -> None:
    reference = InMemoryStore(index={"dims": DIMS, "embed": unit_embed, "fields": ["text"]})
    reference.batch(_corpus())
    with PostgresStore.from_conn_string(
        vector_url, schema=vschema, tenant="t1", index=_index(distance)
    ) as store:
        store.setup()
        assert store._vector_mode.ann
        store.batch(_corpus())
        sent = pg_statements(store)
        for query in ("w3", "w17", "w29 w5"):
            for prefix, limit, offset in (((), 10, 0), (("docs",), 5, 3), (("docs", "g1"), 4, 0)):
                got = store.search(prefix, query=query, limit=limit, offset=offset)
                want = reference.search(prefix, query=query, limit=limit, offset=offset)
                assert [(i.namespace, i.key) for i in got] == [(i.namespace, i.key) for i in want]
                qv = unit_embed([query])[0]
                for item in got:
                    if item.score is None:
                        continue
                    vector = unit_embed([item.value["text"]])[0]
                    assert item.score == pytest.approx(core.similarity(qv, vector, distance))
        assert sent and all("store_vectors v JOIN" in s for s in sent)  # the index's path
        # a search reads its candidates, not every item under its prefix
        connector = store._saver._conn
        run_one = connector.run_one
        counts: list[int] = []

        def counting(q: Any) -> Any:
            rows = run_one(q)
            counts.append(len(rows))
            return rows

        connector.run_one = counting
        assert len(store.search(("docs",), query="w3", limit=2)) == 2
        assert counts == [2 * 2 + 1]  # 2 * limit vectors, and the newest item without one
        # the page the scored items leave short is filled by the items without vectors
        tail = store.search(("docs", "g0"), query="w3", limit=12, offset=5)
        assert [i.key for i in tail][-1] == "plain" and tail[-1].score is None
    with PostgresStore.from_conn_string(
        vector_url, schema=vschema, tenant="t2", index=_index(distance)
    ) as other:
        other.setup()
        assert other.search((), query="w3") == []  # another tenant's items are not found


def test_a_store_that_did_not_run_setup_finds_the_index(vector_url: str, vschema: str) -> None:
    """setup() runs once (a deploy step); the stores of the application's processes do
    not run it, and still put into and search through the vector index."""
    with PostgresStore.from_conn_string(vector_url, schema=vschema, index=_index()) as first:
        first.setup()
    with PostgresStore.from_conn_string(vector_url, schema=vschema, index=_index()) as store:
        sent = pg_statements(store)
        store.batch(_corpus())
        assert len(sent) == 2 and "pg_extension" in sent[0]  # the lookup, once per store
        assert store._vector_mode is not None and store._vector_mode.ann
        sent.clear()
        assert store.search(("docs",), query="w3", limit=2)
        assert len(sent) == 1 and "store_vectors v JOIN" in sent[0]
    assert _fetch(vector_url, f"SELECT count(*) FROM {vschema}.store_vectors")[0][0] > 0


_SHAPES = {  # query "q" is the first axis; none of these has the same nearest for two types
    "q": [1.0] + [0.0] * (DIMS - 1),
    "tiny": [0.01] + [0.0] * (DIMS - 1),  # cosine 1.0, far by l2, small product
    "near": [0.9, 0.3] + [0.0] * (DIMS - 2),  # nearest by l2
    "near2": [0.9, -0.35] + [0.0] * (DIMS - 2),
    "big": [5.0, 3.0] + [0.0] * (DIMS - 2),  # largest inner product
}


@pytest.mark.parametrize(
    "distance,nearest", [("cosine", "tiny"), ("l2", "near"), ("inner_product", "big")]
)
def test_the_index_orders_by_its_distance_type(
    vector_url: str, vschema: str, distance: str, nearest: str
) -> None:
    """With one result wanted the index gives two candidates: those of its distance."""
    index = {**_index(distance), "embed": lambda texts: [_SHAPES[t] for t in texts]}
    with PostgresStore.from_conn_string(vector_url, schema=vschema, index=index) as store:
        store.setup()
        store.batch([PutOp(("a",), key, {"text": key}) for key in _SHAPES if key != "q"])
        assert [i.key for i in store.search(("a",), query="q", limit=1)] == [nearest]


def test_differential_with_the_index(vector_url: str, vschema: str) -> None:
    """The differential harness (InMemoryStore's answers, cosine) on an index store,
    clear and encrypted with clear vectors, sync and async."""
    index = {**index_config(), "ann_index_config": {"kind": "hnsw"}}
    tenant = {"now": ""}
    with PostgresStore.from_conn_string(
        vector_url, schema=vschema, tenant=lambda: tenant["now"], index=index
    ) as store:
        store.setup()
        assert store._vector_mode.ann
        tenant["now"] = uuid.uuid4().hex
        run_program(store, COVERING_PROGRAM)

        @settings(
            max_examples=3,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(programs(8))
        def check(program: list) -> None:
            tenant["now"] = uuid.uuid4().hex
            run_program(store, program)

        check()

    async def run() -> None:
        async with AsyncPostgresStore.from_conn_string(
            vector_url,
            schema=vschema,
            tenant=uuid.uuid4().hex,
            index=index,
            encryption=local_encryption(),
            clear_vectors=True,
        ) as store:
            await store.setup()
            assert store._vector_mode.ann
            await arun_program(store, COVERING_PROGRAM)

    asyncio.run(run())


def test_expired_items_are_not_found_and_limits_follow_the_page(
    vector_url: str, vschema: str
) -> None:
    clock = FakeClock()
    with PostgresStore.from_conn_string(
        vector_url, schema=vschema, index=_index(), clock=clock, ttl={"default_ttl": 1}
    ) as store:
        store.setup()
        store.batch([PutOp(("a",), f"k{i}", {"text": WORDS[i]}, ttl=None) for i in range(60)])
        clock.advance(1)
        store.put(("a",), "soon", {"text": "w3"}, ttl=1)  # as near as k3, and newer
        assert store.search(("a",), query="w3", limit=1)[0].key == "soon"
        clock.advance(61)
        assert all(i.key != "soon" for i in store.search(("a",), query="w3", limit=100))
        big = store.search(("a",), query="w7", limit=50)  # 100 candidates: ef_search raised
        assert len(big) == 50 and big[0].key == "k7"


# ---- writes: the vector table follows the items ---------------------------------------


def test_the_vector_table_follows_puts_deletes_and_sealed_writers(
    vector_url: str, vschema: str
) -> None:
    def rows() -> list[tuple[Any, ...]]:
        return _fetch(
            vector_url,
            sql.SQL("SELECT key, path FROM {}.store_vectors ORDER BY key, path")
            .format(sql.Identifier(vschema))
            .as_string(),
        )

    multi = {**_index(), "fields": ["text", "tags[*]"]}
    enc = local_encryption()  # one keyring for the stores of the schema
    with PostgresStore.from_conn_string(
        vector_url, schema=vschema, index=multi, encryption=enc, clear_vectors=True
    ) as store:
        store.setup()
        store.put(("a",), "x", {"text": "w1", "tags": ["w2", "w3"]})
        store.put(("a",), "y", {"text": "w4"})
        assert rows() == [("x", "tags[*].0"), ("x", "tags[*].1"), ("x", "text"), ("y", "text")]
        store.put(("a",), "x", {"text": "w5"})  # fewer paths: the others go
        assert rows() == [("x", "text"), ("y", "text")]
        store.put(("a",), "y", {"text": "w4"}, index=False)
        store.delete(("a",), "x")
        assert rows() == []
        store.put(("a",), "z", {"text": "w6"})
    # a store that seals its embeddings (encryption, no clear_vectors) on the same schema
    with PostgresStore.from_conn_string(
        vector_url, schema=vschema, index=_index(), encryption=enc
    ) as sealed:
        sealed.setup()
        assert sealed._vector_mode.table and not sealed._vector_mode.ann
        sealed.put(("a",), "z", {"text": "w7"})  # its clear row of "w6" is removed
        assert rows() == []
    # what it wrote is still found by an index store (scored exactly, not from the index)
    with PostgresStore.from_conn_string(
        vector_url, schema=vschema, index=_index(), encryption=enc, clear_vectors=True
    ) as store:
        store.setup()
        store.put(("a",), "w", {"text": "w8"})
        found = store.search(("a",), query="w7")
        assert [i.key for i in found][:2] == ["z", "w"] and found[0].score == pytest.approx(1.0)


# ---- encryption: vectors in the clear only when asked ----------------------------------


@pytest.mark.parametrize("clear_vectors", [False, True])
def test_encrypted_embeddings_stay_sealed_unless_clear_vectors(
    vector_url: str, vschema: str, clear_vectors: bool
) -> None:
    canary = "w31"
    vector = unit_embed([canary])[0]
    with PostgresStore.from_conn_string(
        vector_url,
        schema=vschema,
        index=_index(),
        encryption=local_encryption(),
        clear_vectors=clear_vectors,
    ) as store:
        store.setup()
        assert store._vector_mode.ann is clear_vectors
        store.put(("a",), "k", {"text": canary})
        assert store.search(("a",), query=canary)[0].key == "k"
    dump = b""
    with psycopg.connect(vector_url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (vschema,)
        ).fetchall()
        for (table,) in tables:
            query = sql.SQL("SELECT t::text FROM {}.{} t").format(
                sql.Identifier(vschema), sql.Identifier(table)
            )
            dump += "\n".join(r[0] for r in conn.execute(query).fetchall()).encode()
    # each component's first four decimals (truncated: any longer form starts so)
    leading = [f"{'-' if x < 0 else ''}0.{int(abs(x) * 1e4):04d}" for x in vector]
    found = [d for d in leading if d.encode() in dump]
    if clear_vectors:
        assert len(found) == DIMS
    else:
        assert len(found) <= 1  # none but by chance, and no vector in the clear
        assert canary.encode() not in dump


# ---- the plan: the index is used ---------------------------------------------------------


def test_explain_shows_the_hnsw_index(vector_url: str, vschema: str) -> None:
    with PostgresStore.from_conn_string(vector_url, schema=vschema, index=_index()) as store:
        store.setup()
        store.batch([PutOp(("big", f"n{i % 5}"), f"k{i}", {"text": f"t{i}"}) for i in range(500)])
        with psycopg.connect(vector_url, autocommit=True) as conn:
            conn.execute(f'ANALYZE "{vschema}".store_vectors, "{vschema}".store_items')
        op = SearchOp(("big",), query="t42", limit=5)
        plan = core.plan_batch([op])
        query = store._store_ops.read_query(
            store.tenant, plan, 0.0, True, store._vector_mode, {"t42": unit_embed(["t42"])[0]}
        )
        assert query is not None
        with psycopg.connect(vector_url, autocommit=True) as conn:
            lines = conn.execute("EXPLAIN " + query.sql, query.params).fetchall()  # type: ignore[arg-type]
        text = "\n".join(r[0] for r in lines)
        assert "store_vectors_hnsw_cosine_idx" in text, text
        assert store.search(("big",), query="t42", limit=5)[0].key == "k42"
        # 100 candidates: more than an HNSW scan gives by default (ef_search 40)
        assert len(store.search(("big",), query="t42", limit=50)) == 50


# ---- without pgvector: exact search --------------------------------------------------------


def test_without_pgvector_search_is_exact(pg_url: str, pg_schema: str) -> None:
    available = _fetch(pg_url, "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    with PostgresStore.from_conn_string(pg_url, schema=pg_schema, index=_index("l2")) as store:
        store.setup()
        assert store._vector_mode.ann is bool(available)
        store.batch(_corpus())
        reference = InMemoryStore(index={"dims": DIMS, "embed": unit_embed, "fields": ["text"]})
        reference.batch(_corpus())
        got = store.search(("docs",), query="w11", limit=7)
        want = reference.search(("docs",), query="w11", limit=7)
        assert [i.key for i in got] == [i.key for i in want]
        vector = unit_embed(["w11"])[0]
        assert got[0].score == pytest.approx(core.similarity(vector, vector, "l2"))


# ---- row-level security: the vector table is a tenant table ---------------------------------


def test_row_level_security_keeps_the_vector_table_apart(vector_url: str) -> None:
    """The roles of docs/security.md: the owner runs setup(), the application role
    (no BYPASSRLS) finds the vector table on its first batch and sends its tenant with
    the index's settings."""
    suffix = uuid.uuid4().hex[:10]
    owner, app_role, schema = f"lgd_vowner_{suffix}", f"lgd_vapp_{suffix}", f"v_rls_{suffix}"
    with psycopg.connect(vector_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")  # a superuser's step
        for role in (owner, app_role):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
                sql.Identifier(schema), sql.Identifier(owner)
            )
        )
    owner_url = make_conninfo(vector_url, user=owner)
    app_url = make_conninfo(vector_url, user=app_role)
    try:
        with PostgresStore.from_conn_string(
            owner_url, schema=schema, row_level_security=True, index=_index()
        ) as store:
            store.setup()
            assert store._vector_mode is not None and store._vector_mode.ann
        with psycopg.connect(owner_url, autocommit=True) as conn:
            for statement in app_role_grants(schema, app_role, owner):
                conn.execute(statement)  # type: ignore[arg-type]
        stores = {}
        for tenant in ("t1", "t2"):
            stores[tenant] = PostgresStore.from_conn_string(
                app_url, schema=schema, row_level_security=True, index=_index(), tenant=tenant
            )
        with stores["t1"] as t1, stores["t2"] as t2:
            t1.batch([PutOp(("a",), f"k{i}", {"text": WORDS[i]}) for i in range(45)])
            assert t1._vector_mode is not None and t1._vector_mode.ann
            found = t1.search(("a",), query="w7", limit=30)  # 60 candidates: ef_search set
            assert len(found) == 30 and found[0].key == "k7"
            assert t2.search(("a",), query="w7") == []
            t2.put(("a",), "k7", {"text": "w7"})
            assert [i.key for i in t2.search(("a",), query="w7")] == ["k7"]
        with psycopg.connect(app_url, autocommit=True) as conn:  # no tenant named: no rows
            count = conn.execute(
                sql.SQL("SELECT count(*) FROM {}.store_vectors").format(sql.Identifier(schema))
            ).fetchone()
            assert count == (0,)
        assert len(_fetch(vector_url, f'SELECT 1 FROM "{schema}".store_vectors')) == 46
    finally:
        with psycopg.connect(vector_url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
                ([owner, app_role],),
            )
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
            for role in (owner, app_role):
                conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
