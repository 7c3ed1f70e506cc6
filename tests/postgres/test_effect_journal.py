"""The effect journal's Postgres operations (``PostgresOps.effect_*``), sync and async."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from langgraph_durable._core.effects import StoredEffect
from langgraph_durable._core.records import Sealed
from langgraph_durable._core.sansio import Operation
from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver
from tests.helpers import cfg, put_chain

T = "acme"  # the tenant of most entries
REQ = Sealed("json", b'{"fn": "charge", "args": [1]}')
RES = Sealed("json", b'{"charged": true}')
STATE = Sealed("json", b"null")  # a claim's state record, as a takeover writes it


class Journal:
    """One saver, sync or async, behind one async interface."""

    def __init__(self, saver: Any, is_async: bool) -> None:
        self.saver = saver
        self.is_async = is_async
        self.ops = saver._ops

    async def run(self, op: Operation[Any]) -> Any:
        if self.is_async:
            return await self.saver._arun(op)
        return self.saver._run(op)

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A public saver method: ``name`` on the sync saver, ``a<name>`` on the async one."""
        if self.is_async:
            return await getattr(self.saver, "a" + name)(*args, **kwargs)
        return getattr(self.saver, name)(*args, **kwargs)

    async def put_chain(self, thread: str, n: int, **extra: Any) -> None:
        # The async saver's sync bridge works from another thread.
        await asyncio.to_thread(put_chain, self.saver, thread, n, **extra)

    async def claim(
        self,
        effect_id: str,
        *,
        lease_until: float = 100.0,
        now: float = 10.0,
        takeover: bool = False,
        thread: str = "t",
        tenant: str = T,
        request: Sealed = REQ,
    ) -> StoredEffect:
        op = self.ops.effect_claim(tenant, thread, effect_id, request, lease_until, now)
        entry: StoredEffect = await self.run(op)
        if takeover and not entry.won and entry.state == "claimed" and entry.lease_until <= now:
            # what the saver does once it checked the entry: a takeover under its token
            taken = await self.run(
                self.ops.effect_takeover(
                    tenant, thread, effect_id, entry.token, STATE, lease_until, now
                )
            )
            return taken if taken is not None else entry
        return entry

    async def complete(
        self,
        effect_id: str,
        token: int,
        *,
        outcome: str = "ok",
        result: Sealed = RES,
        now: float = 20.0,
        thread: str = "t",
        tenant: str = T,
    ) -> bool:
        op = self.ops.effect_complete(tenant, thread, effect_id, token, outcome, result, now)
        return await self.run(op)  # type: ignore[no-any-return]

    async def entries(self, thread: str = "t", tenant: str = T) -> dict[str, StoredEffect]:
        listed = await self.run(self.ops.effect_list(tenant, thread))
        return {e.effect_id: e for e in listed}


@pytest.fixture(params=["sync", "async"])
async def journal(request: Any, pg_url: str, pg_schema: str) -> AsyncIterator[Journal]:
    if request.param == "sync":
        with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
            saver.setup()
            yield Journal(saver, False)
    else:
        async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema) as asaver:
            await asaver.setup()
            yield Journal(asaver, True)


# ---- claim / complete ----------------------------------------------------------------


async def test_a_fresh_claim_is_won_and_a_second_one_is_not(journal: Journal) -> None:
    first = await journal.claim("e1", lease_until=100.0, now=10.0)
    assert first == StoredEffect(
        "e1", "claimed", 1, 1, 100.0, REQ, None, None, won=True, created=10.0
    )
    other = Sealed("json", b"another request")
    second = await journal.claim("e1", lease_until=200.0, now=11.0, request=other)
    assert second == StoredEffect(
        "e1", "claimed", 1, 1, 100.0, REQ, None, None, won=False, created=10.0
    )


async def test_an_expired_lease_is_taken_over_only_when_asked(journal: Journal) -> None:
    await journal.claim("e1", lease_until=100.0, now=10.0)
    # live lease: no takeover, even when asked
    live = await journal.claim("e1", lease_until=300.0, now=99.0, takeover=True)
    assert (live.won, live.token, live.attempt, live.lease_until) == (False, 1, 1, 100.0)
    # expired lease without takeover: returned as it is
    expired = await journal.claim("e1", lease_until=300.0, now=150.0, takeover=False)
    assert (expired.won, expired.token, expired.attempt, expired.lease_until) == (
        False,
        1,
        1,
        100.0,
    )
    # expired lease (the boundary counts as expired) with takeover
    taken = await journal.claim(
        "e1", lease_until=300.0, now=100.0, takeover=True, request=Sealed("x", b"new")
    )
    assert taken == StoredEffect(
        "e1", "claimed", 2, 2, 300.0, REQ, None, STATE, won=True, created=10.0
    )
    again = await journal.claim("e1", lease_until=900.0, now=400.0, takeover=True)
    assert (again.won, again.token, again.attempt, again.lease_until) == (True, 3, 3, 900.0)


async def test_complete_needs_the_current_token(journal: Journal) -> None:
    await journal.claim("e1", lease_until=100.0, now=10.0)
    await journal.claim("e1", lease_until=300.0, now=200.0, takeover=True)  # token 2
    assert await journal.complete("e1", 1) is False  # stale token
    assert await journal.complete("e1", 3) is False  # never issued
    assert await journal.complete("nope", 1) is False  # no entry
    assert (await journal.entries())["e1"].state == "claimed"
    assert await journal.complete("e1", 2, outcome="error", result=RES) is True
    assert await journal.complete("e1", 2, now=21.0) is False  # already done
    # the same completion sent again (its reply lost) finds itself recorded
    assert await journal.complete("e1", 2, outcome="error", result=RES) is True
    stored = (await journal.entries())["e1"]
    assert (stored.state, stored.outcome, stored.result, stored.token) == (
        "done",
        "error",
        RES,
        2,
    )


async def test_a_claim_after_completion_returns_the_result(journal: Journal) -> None:
    first = await journal.claim("e1", lease_until=100.0, now=10.0)
    assert await journal.complete("e1", first.token, result=RES) is True
    for takeover, now in ((False, 20.0), (True, 500.0)):  # done entries are never taken over
        replay = await journal.claim("e1", lease_until=900.0, now=now, takeover=takeover)
        assert replay == StoredEffect(
            "e1", "done", 1, 1, 100.0, REQ, "ok", RES, won=False, created=10.0
        )


async def test_entries_are_per_tenant_and_thread(journal: Journal) -> None:
    assert (await journal.claim("e", thread="t", tenant="a")).won
    assert (await journal.claim("e", thread="t", tenant="b")).won
    assert (await journal.claim("e", thread="u", tenant="a")).won
    assert await journal.complete("e", 1, thread="t", tenant="a")
    assert (await journal.entries("t", "b"))["e"].state == "claimed"
    assert (await journal.entries("u", "a"))["e"].state == "claimed"


# ---- delete / list / restore ----------------------------------------------------------


async def test_delete_with_and_without_a_token(journal: Journal) -> None:
    ops = journal.ops
    await journal.claim("e1", lease_until=100.0, now=10.0)
    await journal.claim("e1", lease_until=300.0, now=200.0, takeover=True)  # token 2
    assert await journal.run(ops.effect_delete(T, "t", "e1", 1)) is False
    assert await journal.run(ops.effect_delete(T, "t", "e1", 2)) is True
    assert await journal.entries() == {}
    assert await journal.run(ops.effect_delete(T, "t", "e1", 2)) is False
    # a done entry is released by no token, only deleted unconditionally
    await journal.claim("e2")
    await journal.complete("e2", 1)
    assert await journal.run(ops.effect_delete(T, "t", "e2", 1)) is False
    assert await journal.run(ops.effect_delete(T, "t", "e2", None)) is True
    assert await journal.run(ops.effect_delete(T, "t", "e2", None)) is False
    # a deleted entry can be claimed afresh
    assert (await journal.claim("e1")).won


async def test_list_and_restore(journal: Journal) -> None:
    ops = journal.ops
    assert await journal.run(ops.effect_list(T, "t")) == []
    await journal.claim("e1", lease_until=100.0, now=10.0)
    await journal.claim("e2", lease_until=100.0, now=11.0)
    await journal.complete("e2", 1, result=RES)
    await journal.claim("other-thread", thread="u")
    listed = await journal.run(ops.effect_list(T, "t"))
    assert sorted(e.effect_id for e in listed) == ["e1", "e2"]
    assert all(not e.won for e in listed)
    by_id = {e.effect_id: e for e in listed}
    assert by_id["e2"] == StoredEffect(
        "e2", "done", 1, 1, 100.0, REQ, "ok", RES, won=False, created=11.0
    )
    # restore writes an entry exactly as given: new, or over an existing one
    done = StoredEffect(
        "r1",
        "done",
        7,
        3,
        55.5,
        Sealed("t1", b"\x00req"),
        "error",
        Sealed("t2", b"\x01"),
        created=1.25,
    )
    claimed = StoredEffect("e1", "claimed", 4, 2, 77.0, Sealed("t3", b"q"), created=2.5)
    assert await journal.run(ops.effect_restore(T, "v", done)) is None
    await journal.run(ops.effect_restore(T, "t", claimed))
    assert (await journal.entries("v"))["r1"] == done
    assert (await journal.entries("t"))["e1"] == claimed
    overwritten = StoredEffect("r1", "claimed", 1, 1, 5.0, REQ, created=3.0)
    await journal.run(ops.effect_restore(T, "v", overwritten))
    assert (await journal.entries("v"))["r1"] == overwritten


# ---- thread lifecycle -------------------------------------------------------------------


async def _three_threads(journal: Journal) -> None:
    """Entries on thread t (tenant T), thread u (tenant T) and thread t (tenant other)."""
    for thread, tenant in (("t", T), ("u", T), ("t", "other")):
        await journal.claim("e1", thread=thread, tenant=tenant)
        await journal.claim("e2", thread=thread, tenant=tenant)
        await journal.complete("e2", 1, thread=thread, tenant=tenant)


async def _remaining(journal: Journal) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for thread, tenant in (("t", T), ("u", T), ("t", "other")):
        out[(tenant, thread)] = set(await journal.entries(thread, tenant))
    return out


@pytest.mark.parametrize("with_checkpoints", [True, False])
async def test_delete_thread_deletes_its_entries_only(
    journal: Journal, with_checkpoints: bool
) -> None:
    await _three_threads(journal)
    if with_checkpoints:
        await journal.put_chain("t", 2, tenant_id=T)
    await journal.call("delete_thread", "t", tenant_id=T)
    assert await _remaining(journal) == {
        (T, "t"): set(),
        (T, "u"): {"e1", "e2"},
        ("other", "t"): {"e1", "e2"},
    }


async def test_prune_delete_removes_entries_and_keep_latest_keeps_them(journal: Journal) -> None:
    await _three_threads(journal)
    await journal.put_chain("t", 3, tenant_id=T)
    await journal.put_chain("u", 3, tenant_id=T)
    await journal.call("prune", ["u"], strategy="keep_latest", tenant_id=T)
    assert set(await journal.entries("u")) == {"e1", "e2"}
    await journal.call("prune", ["t"], strategy="delete", tenant_id=T)
    assert await _remaining(journal) == {
        (T, "t"): set(),
        (T, "u"): {"e1", "e2"},
        ("other", "t"): {"e1", "e2"},
    }


async def test_delete_for_runs_keeps_entries(journal: Journal) -> None:
    await _three_threads(journal)
    await journal.put_chain("t", 2, tenant_id=T, run_id="r1")
    await journal.call("delete_for_runs", ["r1"], tenant_id=T)
    assert set(await journal.entries("t")) == {"e1", "e2"}


@pytest.mark.parametrize("with_checkpoints", [True, False])
async def test_copy_thread_copies_entries_and_keeps_the_targets(
    journal: Journal, with_checkpoints: bool
) -> None:
    await _three_threads(journal)
    if with_checkpoints:
        await journal.put_chain("t", 2, tenant_id=T)
    # the target already has its own e1: kept as it is
    await journal.claim("e1", thread="dst", lease_until=5.0, now=1.0)
    await journal.call("copy_thread", "t", "dst", tenant_id=T)
    source, target = await journal.entries("t"), await journal.entries("dst")
    assert set(target) == {"e1", "e2"}
    assert target["e2"] == source["e2"]
    assert (target["e1"].lease_until, target["e1"].created) == (5.0, 1.0)
    assert set(await journal.entries("dst", "other")) == set()
    if with_checkpoints:
        got = await asyncio.to_thread(journal.saver.get_tuple, cfg("dst", tenant_id=T))
        assert got is not None


# ---- round trips and concurrency ---------------------------------------------------------


async def test_claim_complete_and_replay_are_one_round_trip_each(journal: Journal) -> None:
    connector = journal.saver._conn
    calls: list[Any] = []
    execute = connector.execute

    if journal.is_async:

        async def counted(conn: Any, step: Any) -> Any:
            calls.append(step)
            return await execute(conn, step)
    else:

        def counted(conn: Any, step: Any) -> Any:  # type: ignore[misc]
            calls.append(step)
            return execute(conn, step)

    connector.execute = counted
    try:
        won = await journal.claim("e1")
        assert won.won and len(calls) == 1
        assert await journal.complete("e1", won.token) and len(calls) == 2
        replay = await journal.claim("e1")
        assert replay.state == "done" and not replay.won and len(calls) == 3
        assert not (await journal.claim("e1", takeover=True, now=1e9)).won and len(calls) == 4
    finally:
        del connector.execute


def _claim_at_once(saver: PostgresSaver, effect_id: str, workers: int) -> list[StoredEffect]:
    """``workers`` threads claim one fresh effect at the same moment."""
    barrier = threading.Barrier(workers)
    results: list[StoredEffect] = []
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            barrier.wait()
            req = Sealed("json", str(n).encode())
            op = saver._ops.effect_claim(T, "t", effect_id, req, 100.0, 10.0)
            results.append(saver._run(op))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return results


def test_concurrent_first_claims_have_one_winner(pg_url: str, pg_schema: str) -> None:
    # Most losers' statements see neither their insert nor the winner's row (not yet
    # committed when their snapshot was taken) and run again.
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, pool_size=8) as saver:
        saver.setup()
        for round_ in range(10):
            results = _claim_at_once(saver, f"e{round_}", 8)
            assert len(results) == 8
            winners = [r for r in results if r.won]
            assert len(winners) == 1
            assert {(r.token, r.request) for r in results} == {(1, winners[0].request)}


# ---- transactional mode -------------------------------------------------------------------


def _side_table(pg_url: str, schema: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{schema}".side (k text PRIMARY KEY)')


def _side_rows(pg_url: str, schema: str) -> list[str]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        return [r[0] for r in conn.execute(f'SELECT k FROM "{schema}".side ORDER BY k')]


class Boom(Exception):
    pass


def test_effect_transaction_commits_or_rolls_back_together(pg_url: str, pg_schema: str) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
        saver.setup()
        _side_table(pg_url, pg_schema)
        ops = saver._ops
        assert saver._run(ops.effect_claim(T, "t", "e1", REQ, 100.0, 10.0, False)).won
        assert saver._run(ops.effect_claim(T, "t", "e2", REQ, 100.0, 10.0, False)).won

        with pytest.raises(Boom), saver._effect_transaction() as tx:
            tx.connection.execute(f'INSERT INTO "{pg_schema}".side VALUES (%s)', ("e1",))
            assert tx.run(ops.effect_complete(T, "t", "e1", 1, "ok", RES, 20.0)) is True
            raise Boom
        assert _side_rows(pg_url, pg_schema) == []
        entry = saver._run(ops.effect_claim(T, "t", "e1", REQ, 100.0, 10.0, False))
        assert entry.state == "claimed"

        with saver._effect_transaction() as tx:
            tx.connection.execute(f'INSERT INTO "{pg_schema}".side VALUES (%s)', ("e1",))
            assert tx.run(ops.effect_complete(T, "t", "e1", 1, "ok", RES, 20.0)) is True
            # not visible outside the transaction until it commits
            assert _side_rows(pg_url, pg_schema) == []
        assert _side_rows(pg_url, pg_schema) == ["e1"]
        entry = saver._run(ops.effect_claim(T, "t", "e1", REQ, 100.0, 10.0, False))
        assert (entry.state, entry.result) == ("done", RES)

        # a failing statement of the caller's rolls the journal back too, and propagates as is
        with pytest.raises(psycopg.errors.UniqueViolation), saver._effect_transaction() as tx:
            assert tx.run(ops.effect_complete(T, "t", "e2", 1, "ok", RES, 20.0)) is True
            tx.connection.execute(f'INSERT INTO "{pg_schema}".side VALUES (%s)', ("e1",))
        entry = saver._run(ops.effect_claim(T, "t", "e2", REQ, 100.0, 10.0, False))
        assert entry.state == "claimed"
        # the saver still works afterwards
        assert saver.get_tuple(cfg("t")) is None


async def test_async_effect_transaction_commits_or_rolls_back_together(
    pg_url: str, pg_schema: str
) -> None:
    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
        await saver.setup()
        _side_table(pg_url, pg_schema)
        ops = saver._ops
        assert (await saver._arun(ops.effect_claim(T, "t", "e1", REQ, 100.0, 10.0, False))).won

        with pytest.raises(Boom):
            async with saver._aeffect_transaction() as tx:
                await tx.connection.execute(f'INSERT INTO "{pg_schema}".side VALUES (%s)', ("e1",))
                assert await tx.arun(ops.effect_complete(T, "t", "e1", 1, "ok", RES, 20.0))
                raise Boom
        assert _side_rows(pg_url, pg_schema) == []
        entry = await saver._arun(ops.effect_claim(T, "t", "e1", REQ, 100.0, 10.0, False))
        assert entry.state == "claimed"

        async with saver._aeffect_transaction() as tx:
            await tx.connection.execute(f'INSERT INTO "{pg_schema}".side VALUES (%s)', ("e1",))
            assert await tx.arun(ops.effect_complete(T, "t", "e1", 1, "ok", RES, 20.0))
            assert _side_rows(pg_url, pg_schema) == []
        assert _side_rows(pg_url, pg_schema) == ["e1"]
        entry = await saver._arun(ops.effect_claim(T, "t", "e1", REQ, 100.0, 10.0, False))
        assert (entry.state, entry.result) == ("done", RES)
        assert await saver.aget_tuple(cfg("t")) is None
