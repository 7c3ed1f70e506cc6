"""PostgreSQL and the hash chain: thread enumeration for ``verify``, trim tombstones."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from langgraph_durable import Retention
from langgraph_durable._core.chain import ChainBlock, split_block
from langgraph_durable._core.records import Sealed
from langgraph_durable.errors import ConfigurationError, InvalidInputError
from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver, _trim
from tests.helpers import cfg, make_cp, put_chain
from tests.postgres.aging import age_thread
from tests.postgres.test_rls import Roles, roles  # noqa: F401  (the module's role fixture)
from tests.retention_helpers import (
    EXPECTED_APPROVAL_LOG,
    apause,
    aresume,
    interrupt_graph,
    pause,
    resume,
)

KEY = b"k" * 32
KEEP_1 = Retention(idle=datetime.timedelta(days=30), strategy="keep_latest", keep=1)
KEEP_2 = Retention(idle=datetime.timedelta(days=30), strategy="keep_latest", keep=2)


@pytest.fixture
def conn(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_url, autocommit=True) as c:
        yield c


@pytest.fixture
def saver(pg_url: str, pg_schema: str) -> Iterator[PostgresSaver]:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as s:
        s.setup()
        yield s


def _bodies(
    conn: psycopg.Connection[Any], schema: str, thread: str, tenant: str = "default"
) -> dict[str, tuple[str | None, Sealed]]:
    """checkpoint id -> (parent id, stored body) of a thread's root namespace, read raw."""
    rows = conn.execute(
        "SELECT checkpoint_id, parent_checkpoint_id, checkpoint_type, checkpoint "
        f'FROM "{schema}".checkpoints WHERE tenant_id = %s AND thread_id = %s '
        "AND checkpoint_ns = ''",
        (tenant, thread),
    ).fetchall()
    return {r[0]: (r[1], Sealed(r[2], bytes(r[3]))) for r in rows}


def _block(body: Sealed) -> ChainBlock:
    _inner, block = split_block(body)
    assert block is not None
    return block


def _walk(saver: PostgresSaver, tenant: str | None, limit: int) -> list[list[tuple[str, str]]]:
    pages, cursor = [], None
    while True:
        page, cursor = saver._run(saver._ops.thread_page(tenant, cursor, limit))
        assert len(page) <= limit
        pages.append(page)
        if cursor is None:
            return pages
        assert len(pages) < 100


def _threads(saver: PostgresSaver) -> set[tuple[str, str]]:
    """25 threads over tenants t1 (13) and t2 (12), one checkpoint each."""
    want = set()
    for i in range(25):
        tenant = "t1" if i % 2 == 0 else "t2"
        saver.put(cfg(f"th-{i:02d}", tenant_id=tenant), make_cp(), {}, {})
        want.add((tenant, f"th-{i:02d}"))
    return want


# ---- thread_page ------------------------------------------------------------------


def test_thread_page_walks_every_thread_exactly_once(saver: PostgresSaver) -> None:
    want = _threads(saver)
    # a registry row whose checkpoints are all gone is not a thread to verify
    saver.put(cfg("emptied", tenant_id="t1", run_id="r1"), make_cp(), {"run_id": "r1"}, {})
    saver.delete_for_runs(["r1"], tenant_id="t1")
    pages = _walk(saver, None, 7)
    seen = [pair for page in pages for pair in page]
    assert len(seen) == len(set(seen)) == 25
    assert set(seen) == want
    assert [len(p) for p in pages] == [7, 7, 7, 4]
    only_t1 = [pair for page in _walk(saver, "t1", 7) for pair in page]
    assert sorted(only_t1) == sorted(p for p in want if p[0] == "t1")
    assert len(only_t1) == 13
    # a page that ends the walk exactly says so: no trailing empty page
    assert [len(p) for p in _walk(saver, "t2", 6)] == [6, 6]
    # the cursor survives a JSON round trip (a list instead of a tuple)
    page, cursor = saver._run(saver._ops.thread_page(None, None, 3))
    again, _next = saver._run(saver._ops.thread_page(None, list(cursor), 3))
    assert again[0] > page[-1] and not set(again) & set(page)


def test_thread_page_of_an_empty_store(saver: PostgresSaver) -> None:
    assert saver._run(saver._ops.thread_page(None, None, 7)) == ([], None)
    assert saver._run(saver._ops.thread_page("t1", None, 7)) == ([], None)
    with pytest.raises(InvalidInputError):
        saver._run(saver._ops.thread_page(None, None, 0))
    with pytest.raises(InvalidInputError):
        saver._run(saver._ops.thread_page(None, "not-a-cursor", 7))


async def test_thread_page_through_the_async_saver(pg_url: str, pg_schema: str) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as sync_saver:
        sync_saver.setup()
        want = _threads(sync_saver)
    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema) as s:
        seen: list[tuple[str, str]] = []
        cursor: Any = None
        while True:
            page, cursor = await s._arun(s._ops.thread_page(None, cursor, 7))
            seen.extend(page)
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) and set(seen) == want


def test_thread_page_under_row_level_security(roles: Roles) -> None:  # noqa: F811
    schema = roles.new_schema()
    try:
        with PostgresSaver.from_conn_string(
            roles.url(roles.app), schema=schema, row_level_security=True
        ) as app:
            for tenant in ("t1", "t2"):
                for i in range(3):
                    app.put(cfg(f"{tenant}-{i}", tenant_id=tenant), make_cp(), {}, {})
            # one tenant: the database shows the application role that tenant's rows
            page, cursor = app._run(app._ops.thread_page("t1", None, 2))
            rest, end = app._run(app._ops.thread_page("t1", cursor, 2))
            assert page + rest == [("t1", "t1-0"), ("t1", "t1-1"), ("t1", "t1-2")]
            assert end is None
            # every tenant: the pruner's rule (a role that bypasses row-level security)
            with pytest.raises(ConfigurationError, match="BYPASSRLS"):
                app._run(app._ops.thread_page(None, None, 10))
        with PostgresSaver.from_conn_string(
            roles.url(roles.pruner), schema=schema, row_level_security=True
        ) as pruner:
            page, end = pruner._run(pruner._ops.thread_page(None, None, 10))
            assert len(page) == 6 and end is None
    finally:
        roles.drop_schema(schema)


# ---- tombstones -------------------------------------------------------------------


def _check_tombstone(
    saver: PostgresSaver,
    before: dict[str, tuple[str | None, Sealed]],
    after: dict[str, tuple[str | None, Sealed]],
    survivor: str,
    thread: str,
    tenant: str = "default",
) -> None:
    """``survivor``'s body now carries a tombstone for its removed parent (read before)."""
    chain = saver._ops.codec.chain
    assert chain is not None
    parent = before[survivor][0]
    assert parent is not None and parent not in after
    removed = sorted(set(before) - set(after))
    old, new = before[survivor][1], after[survivor][1]
    old_block, new_block = _block(old), _block(new)
    tomb = new_block.tombstone
    assert tomb is not None
    assert tomb.parent == parent
    assert tomb.digest == _block(before[parent][1]).digest
    assert (tomb.count, tomb.first, tomb.last) == (len(removed), removed[0], removed[-1])
    assert chain.tombstone_holds(tenant, thread, "", survivor, tomb)
    assert not chain.tombstone_holds(tenant, thread, "", parent, tomb)
    # the payload, its tag and the survivor's digest are what they were
    assert split_block(new)[0] == split_block(old)[0]
    assert (new_block.digest, new_block.covers) == (old_block.digest, old_block.covers)
    assert new.type == old.type


def test_prune_keep_latest_leaves_a_tombstone(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, integrity=KEY) as s:
        s.setup()
        configs = put_chain(s, "t", 5)
        put_chain(s, "other", 2)
        latest = configs[-1]["configurable"]["checkpoint_id"]
        before = _bodies(conn, pg_schema, "t")
        other = _bodies(conn, pg_schema, "other")
        assert len(before) == 5 and all(_block(b).tombstone is None for _p, b in before.values())
        s.prune(["t"], strategy="keep_latest")
        after = _bodies(conn, pg_schema, "t")
        assert list(after) == [latest]
        _check_tombstone(s, before, after, latest, "t")
        assert _bodies(conn, pg_schema, "other") == other
        # the thread reads (the tag still holds) and grows on the survivor
        tup = s.get_tuple(cfg("t"))
        assert tup is not None and tup.checkpoint["id"] == latest
        assert tup.checkpoint["channel_values"]["payload"] == {"i": 4}
        s.put(tup.config, make_cp(step=5), {"step": 5}, {})
        grown = _bodies(conn, pg_schema, "t")
        assert len(grown) == 2 and grown[latest] == after[latest]
        # trimming again marks the new survivor, whose parent was the tombstoned one
        s.prune(["t"])
        (newest,) = _bodies(conn, pg_schema, "t")
        _check_tombstone(s, grown, _bodies(conn, pg_schema, "t"), newest, "t")


def test_prune_expired_keep_latest_leaves_tombstones_and_the_thread_resumes(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, integrity=KEY, retention=KEEP_1
    ) as s:
        s.setup()
        graph = interrupt_graph(s)
        pause(graph, "paused")
        put_chain(s, "chain", 5)
        before = {t: _bodies(conn, pg_schema, t) for t in ("paused", "chain")}
        assert len(before["chain"]) == 5 and len(before["paused"]) >= 3
        for t in ("paused", "chain"):
            age_thread(conn, pg_schema, t, days=31)
        report = s.prune_expired(batch=1)  # one thread a batch: two batches
        assert (report.trimmed, report.threads) == (2, 0)
        for t in ("paused", "chain"):
            after = _bodies(conn, pg_schema, t)
            (survivor,) = after
            _check_tombstone(s, before[t], after, survivor, t)
        assert s.get_tuple(cfg("chain")) is not None
        assert resume(graph, "paused") == EXPECTED_APPROVAL_LOG
        assert s.get_tuple(cfg("paused")) is not None


def test_keep_two_marks_only_the_survivor_whose_parent_goes(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, integrity=KEY, retention=KEEP_2
    ) as s:
        s.setup()
        configs = put_chain(s, "t", 5)
        ids = [c["configurable"]["checkpoint_id"] for c in configs]
        before = _bodies(conn, pg_schema, "t")
        age_thread(conn, pg_schema, "t", days=31)
        assert s.prune_expired().trimmed == 1
        after = _bodies(conn, pg_schema, "t")
        assert sorted(after) == ids[-2:]
        assert after[ids[-1]] == before[ids[-1]]  # its parent stays: untouched
        _check_tombstone(s, before, after, ids[-2], "t")
        assert s.get_tuple(cfg("t", checkpoint_id=ids[-2])) is not None


async def test_async_prune_leaves_tombstones(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    async with AsyncPostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, integrity=KEY, retention=KEEP_1
    ) as s:
        await s.setup()
        graph = interrupt_graph(s)
        await apause(graph, "a")
        await apause(graph, "b")
        before = {t: _bodies(conn, pg_schema, t) for t in ("a", "b")}
        await s.aprune(["a"])
        age_thread(conn, pg_schema, "b", days=31)
        assert (await s.aprune_expired()).trimmed == 1
        for t in ("a", "b"):
            after = _bodies(conn, pg_schema, t)
            (survivor,) = after
            _check_tombstone(s, before[t], after, survivor, t)  # type: ignore[arg-type]
            assert await aresume(graph, t) == EXPECTED_APPROVAL_LOG


def test_without_integrity_a_trim_writes_no_tombstone(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the key a trim reads the survivors only to check they carry no chain block."""
    checked: list[Any] = []
    real = _trim._tombstones

    def spy(ops: Any, links: Any) -> Any:
        stones = yield from real(ops, links)
        checked.append(stones)
        return stones

    monkeypatch.setattr(_trim, "_tombstones", spy)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, retention=KEEP_1) as s:
        s.setup()
        assert s._ops.codec.chain is None
        configs = put_chain(s, "t", 5)
        put_chain(s, "u", 5)
        latest = configs[-1]["configurable"]["checkpoint_id"]
        before = _bodies(conn, pg_schema, "t")
        s.prune(["t"])
        assert _bodies(conn, pg_schema, "t") == {latest: before[latest]}
        assert split_block(before[latest][1])[1] is None
        before_u = _bodies(conn, pg_schema, "u")
        age_thread(conn, pg_schema, "u", days=31)
        assert s.prune_expired().trimmed == 1
        ((survivor, stored),) = _bodies(conn, pg_schema, "u").items()
        assert stored == before_u[survivor]
        assert s.get_tuple(cfg("t")) is not None and s.get_tuple(cfg("u")) is not None
        assert checked == [{}, {}]  # one check per trim, nothing to rewrite


def test_tombstones_under_row_level_security(roles: Roles) -> None:  # noqa: F811
    schema = roles.new_schema()
    try:
        with (
            roles.admin() as admin,
            PostgresSaver.from_conn_string(
                roles.url(roles.app), schema=schema, row_level_security=True, integrity=KEY
            ) as app,
        ):
            configs = put_chain(app, "t", 3, tenant_id="t1")
            put_chain(app, "t", 3, tenant_id="t2")
            latest = configs[-1]["configurable"]["checkpoint_id"]
            before = _bodies(admin, schema, "t", "t1")
            other = _bodies(admin, schema, "t", "t2")
            # the application role trims its own tenant's thread (the tenant sent along)
            app.prune(["t"], tenant_id="t1")
            after = _bodies(admin, schema, "t", "t1")
            assert list(after) == [latest]
            _check_tombstone(app, before, after, latest, "t", "t1")
            assert _bodies(admin, schema, "t", "t2") == other
            assert app.get_tuple(cfg("t", tenant_id="t1")) is not None
    finally:
        roles.drop_schema(schema)
