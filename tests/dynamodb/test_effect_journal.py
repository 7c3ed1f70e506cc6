"""The effect journal's DynamoDB ops (``effect_claim`` ... ``effect_restore``) on moto's server.

Every test runs against a sync and an async saver: the ops are run with the
saver's own driver (``saver._run`` / ``await saver._arun``), the thread
lifecycle through the public methods.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from langgraph_durable._core.effects import StoredEffect
from langgraph_durable._core.records import Sealed
from langgraph_durable.dynamodb import AsyncDynamoDBSaver, DynamoDBSaver
from langgraph_durable.dynamodb._ops import thread_pk
from langgraph_durable.errors import InvalidInputError
from tests.dynamodb.helpers import CallCounter, make_client, raw_items
from tests.helpers import cfg, put_chain

TENANT = "default"  # the savers' default tenant: what the public methods resolve to
REQ = Sealed("json", b'{"fn": "charge", "args": [1]}')
RES = Sealed("json", b'{"ok": true}')
STATE = Sealed("json", b"null")  # a claim's state record, as a takeover writes it


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Harness:
    """A sync or async saver behind one awaitable interface."""

    def __init__(self, saver: Any, is_async: bool) -> None:
        self.saver = saver
        self.is_async = is_async

    @classmethod
    async def open(cls, kind: str, client: Any, table: str, **settings: Any) -> Harness:
        if kind == "async":
            asaver = AsyncDynamoDBSaver(client, table=table, **settings)
            await asaver.setup()
            return cls(asaver, True)
        saver = DynamoDBSaver(client, table=table, **settings)
        saver.setup()
        return cls(saver, False)

    async def close(self) -> None:
        if self.is_async:
            await self.saver.close()
        else:
            self.saver.close()

    async def run(self, op: Any) -> Any:
        if self.is_async:
            return await self.saver._arun(op)
        return self.saver._run(op)

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A public saver method (``a``-prefixed on the async saver)."""
        if self.is_async:
            return await getattr(self.saver, "a" + method)(*args, **kwargs)
        return getattr(self.saver, method)(*args, **kwargs)

    async def history(self, config: Any) -> list[Any]:
        if self.is_async:
            return [t async for t in self.saver.alist(config)]
        return list(self.saver.list(config))

    async def put_chain(self, thread: str, n: int, **extra: Any) -> list[dict[str, Any]]:
        # the async saver's sync methods run from another thread
        return await asyncio.to_thread(put_chain, self.saver, thread, n, **extra)

    async def claim(
        self,
        effect_id: str,
        lease_until: float,
        now: float,
        takeover: bool = False,
        thread: str = "t",
        request: Sealed = REQ,
    ) -> StoredEffect:
        ops = self.saver._ops
        entry: StoredEffect = await self.run(
            ops.effect_claim(TENANT, thread, effect_id, request, lease_until, now)
        )
        if takeover and not entry.won and entry.state == "claimed" and entry.lease_until <= now:
            # what the saver does once it checked the entry: a takeover under its token
            taken = await self.run(
                ops.effect_takeover(TENANT, thread, effect_id, entry.token, STATE, lease_until, now)
            )
            return taken if taken is not None else entry
        return entry

    async def complete(
        self,
        effect_id: str,
        token: int,
        outcome: str = "ok",
        result: Sealed = RES,
        now: float = 0.0,
        thread: str = "t",
    ) -> bool:
        ops = self.saver._ops
        return await self.run(  # type: ignore[no-any-return]
            ops.effect_complete(TENANT, thread, effect_id, token, outcome, result, now)
        )

    async def delete(self, effect_id: str, token: int | None, thread: str = "t") -> bool:
        return await self.run(  # type: ignore[no-any-return]
            self.saver._ops.effect_delete(TENANT, thread, effect_id, token)
        )

    async def entries(self, thread: str = "t") -> dict[str, StoredEffect]:
        got = await self.run(self.saver._ops.effect_list(TENANT, thread))
        return {e.effect_id: e for e in got}

    async def restore(self, effect: StoredEffect, thread: str = "t") -> None:
        await self.run(self.saver._ops.effect_restore(TENANT, thread, effect))


@pytest.fixture
def client(dynamodb_endpoint: str) -> Any:
    return make_client(dynamodb_endpoint)


@pytest.fixture(params=["sync", "async"])
async def h(request: Any, client: Any, dynamodb_table: str) -> AsyncIterator[Harness]:
    harness = await Harness.open(request.param, client, dynamodb_table)
    yield harness
    await harness.close()


def _thread_items(client: Any, table: str, thread: str) -> list[dict[str, Any]]:
    pk = thread_pk(TENANT, thread)
    return [i for i in raw_items(client, table) if i["pk"]["S"] == pk]


def _entry_items(client: Any, table: str, thread: str | None = None) -> list[dict[str, Any]]:
    items = raw_items(client, table) if thread is None else _thread_items(client, table, thread)
    return [i for i in items if i["sk"]["S"].startswith("e#")]


# ---- claim ----------------------------------------------------------------------


async def test_a_fresh_claim_is_won_and_a_second_one_is_not(h: Harness) -> None:
    first = await h.claim("e1", lease_until=130.5, now=100.25)
    assert first == StoredEffect("e1", "claimed", 1, 1, 130.5, REQ, None, None, True, 100.25)
    other = Sealed("json", b"another request")
    second = await h.claim("e1", lease_until=200.0, now=110.0, request=other)
    assert second == StoredEffect("e1", "claimed", 1, 1, 130.5, REQ, None, None, False, 100.25)
    # a live lease is not taken over, even when asked to
    third = await h.claim("e1", lease_until=200.0, now=130.0, takeover=True)
    assert not third.won and third.token == 1 and third.lease_until == 130.5


async def test_an_expired_lease_is_taken_over_only_when_asked(h: Harness) -> None:
    await h.claim("e1", lease_until=130.0, now=100.0)
    waiting = await h.claim("e1", lease_until=200.0, now=140.0, takeover=False)
    assert not waiting.won and (waiting.token, waiting.attempt) == (1, 1)
    taken = await h.claim(
        "e1", lease_until=200.0, now=140.0, takeover=True, request=Sealed("json", b"new")
    )
    # token and attempt +1, the new lease; the request and creation time stay
    assert taken == StoredEffect("e1", "claimed", 2, 2, 200.0, REQ, None, STATE, True, 100.0)
    # a lease ending exactly now has ended
    again = await h.claim("e1", lease_until=300.0, now=200.0, takeover=True)
    assert again.won and (again.token, again.attempt, again.lease_until) == (3, 3, 300.0)
    assert (await h.entries())["e1"].token == 3


async def test_concurrent_claims_have_one_winner(h: Harness) -> None:
    # plain threads on the sync saver, or concurrent tasks on the async saver's pool
    if h.is_async:
        results = await asyncio.gather(*(h.claim("e1", 200.0, 100.0) for _ in range(8)))
    else:
        results = []
        lock = threading.Lock()

        def claim() -> None:
            entry = h.saver._run(
                h.saver._ops.effect_claim(TENANT, "t", "e1", REQ, 200.0, 100.0, False)
            )
            with lock:
                results.append(entry)

        workers = [threading.Thread(target=claim) for _ in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    assert sum(r.won for r in results) == 1
    assert {(r.token, r.attempt) for r in results} == {(1, 1)}


# ---- complete -------------------------------------------------------------------


async def test_complete_with_the_claims_token_then_replay(h: Harness) -> None:
    claimed = await h.claim("e1", lease_until=130.0, now=100.0)
    assert await h.complete("e1", claimed.token, "ok", RES, now=120.0)
    done = (await h.entries())["e1"]
    assert done == StoredEffect("e1", "done", 1, 1, 130.0, REQ, "ok", RES, False, 100.0)
    assert not await h.complete("e1", claimed.token, "ok", Sealed("json", b"second"))
    # a claim of a done entry returns it, with its outcome and result, whatever it asks
    for takeover in (False, True):
        replay = await h.claim("e1", lease_until=500.0, now=400.0, takeover=takeover)
        assert replay == done
    errored = await h.claim("e2", lease_until=130.0, now=100.0)
    assert await h.complete("e2", errored.token, "error", Sealed("json", b'{"err": 1}'))
    assert (await h.entries())["e2"].outcome == "error"


async def test_a_stale_token_cannot_complete(h: Harness) -> None:
    await h.claim("e1", lease_until=130.0, now=100.0)
    taken = await h.claim("e1", lease_until=300.0, now=200.0, takeover=True)
    before = await h.entries()
    assert not await h.complete("e1", 1, "ok", Sealed("json", b"stale"))
    assert await h.entries() == before
    assert not await h.complete("missing", 1)
    assert await h.entries() == before
    assert await h.complete("e1", taken.token)
    assert (await h.entries())["e1"].result == RES


# ---- delete, list, restore ---------------------------------------------------------


async def test_delete_with_a_token_or_unconditionally(h: Harness) -> None:
    await h.claim("e1", lease_until=130.0, now=100.0)
    await h.claim("e1", lease_until=300.0, now=200.0, takeover=True)
    assert not await h.delete("e1", 1)  # stale token
    assert not await h.delete("e1", 3)
    assert "e1" in await h.entries()
    assert await h.delete("e1", 2)
    assert await h.entries() == {}
    assert not await h.delete("e1", 2)

    claimed = await h.claim("e2", lease_until=130.0, now=100.0)
    assert await h.complete("e2", claimed.token)
    assert not await h.delete("e2", claimed.token)  # a done entry is no claim to release
    assert await h.delete("e2", None)
    assert not await h.delete("e2", None)
    assert await h.entries() == {}


async def test_list_returns_every_entry_of_the_thread(h: Harness) -> None:
    assert await h.entries() == {}
    ids = [f"id-{i}" for i in range(5)] + ["odd #id%/é"]
    for i, effect_id in enumerate(ids):
        entry = await h.claim(effect_id, lease_until=200.0 + i, now=100.0)
        if i % 2:
            await h.complete(effect_id, entry.token)
    await h.claim("elsewhere", lease_until=200.0, now=100.0, thread="t2")
    listed = await h.entries()
    assert sorted(listed) == sorted(ids)
    assert all(not e.won for e in listed.values())
    assert [listed[i].state for i in ids] == ["claimed", "done"] * 3
    assert listed["id-3"].result == RES and listed["id-2"].lease_until == 202.0
    assert list(await h.entries("t2")) == ["elsewhere"]


async def test_list_reads_every_page(h: Harness, client: Any, dynamodb_table: str) -> None:
    big = Sealed("b", b"x" * 300_000)  # about three entries per 1 MB page
    for i in range(8):
        await h.claim(f"e{i}", lease_until=200.0, now=100.0, request=big)
    counter = CallCounter(client)
    listed = await h.entries()
    assert len(listed) == 8 and all(e.request == big for e in listed.values())
    assert counter.reset()["Query"] >= 2


async def test_restore_writes_the_entry_as_given(h: Harness) -> None:
    done = StoredEffect("e1", "done", 4, 3, 150.5, REQ, "error", RES, False, 99.5)
    claimed = StoredEffect("e2", "claimed", 2, 2, 150.0, REQ, None, None, False, 99.0)
    await h.restore(done)
    await h.restore(claimed)
    assert await h.entries() == {"e1": done, "e2": claimed}
    replay = await h.claim("e1", lease_until=500.0, now=400.0, takeover=True)
    assert replay == done
    # overwrite
    fresh = StoredEffect("e1", "claimed", 1, 1, 10.0, Sealed("json", b"r"), None, None, False, 1.0)
    await h.restore(fresh)
    assert (await h.entries())["e1"] == fresh
    # restoring with won=True stores the entry; won is not stored
    await h.restore(StoredEffect("e3", "claimed", 1, 1, 10.0, REQ, won=True))
    assert not (await h.entries())["e3"].won


async def test_too_large_a_request_or_result_is_refused(h: Harness) -> None:
    huge = Sealed("b", b"x" * 400_000)
    with pytest.raises(InvalidInputError, match="request of effect"):
        await h.claim("e1", lease_until=200.0, now=100.0, request=huge)
    entry = await h.claim("e1", lease_until=200.0, now=100.0)
    with pytest.raises(InvalidInputError, match="result of effect"):
        await h.complete("e1", entry.token, result=huge)
    assert (await h.entries())["e1"].state == "claimed"


# ---- one call each -------------------------------------------------------------------


def _seen(counter: CallCounter) -> tuple[dict[str, int], dict[str, int]]:
    """(completed, failed) calls so far; counting starts again from zero."""
    failed = dict(counter.failed)
    return dict(counter.reset()), failed


async def test_each_op_is_one_call(h: Harness, client: Any) -> None:
    counter = CallCounter(client)
    entry = await h.claim("e1", lease_until=130.0, now=100.0)
    assert _seen(counter) == ({"UpdateItem": 1}, {})
    contested = await h.claim("e1", lease_until=130.0, now=110.0)
    assert not contested.won  # the failed condition returned the stored entry
    assert _seen(counter) == ({}, {"UpdateItem": 1})
    # a takeover: the claim returns the stored entry, the saver checks it and takes it
    # over under its token (the recovery path; a first claim stays one call)
    await h.claim("e1", lease_until=200.0, now=140.0, takeover=True)
    assert _seen(counter) == ({"UpdateItem": 1}, {"UpdateItem": 1})
    assert await h.complete("e1", entry.token + 1)
    assert _seen(counter) == ({"UpdateItem": 1}, {})
    replay = await h.claim("e1", lease_until=500.0, now=400.0)
    assert replay.state == "done" and replay.result == RES
    assert _seen(counter) == ({}, {"UpdateItem": 1})
    assert not await h.complete("e1", entry.token + 1)
    assert _seen(counter) == ({}, {"UpdateItem": 1})
    await h.entries()
    assert _seen(counter) == ({"Query": 1}, {})
    await h.delete("e1", None)
    assert _seen(counter) == ({"DeleteItem": 1}, {})
    await h.restore(replay)
    assert _seen(counter) == ({"PutItem": 1}, {})


# ---- the thread's lifecycle -----------------------------------------------------------


async def _two_threads_with_entries(h: Harness) -> list[dict[str, Any]]:
    configs = await h.put_chain("t", 3)
    await h.put_chain("t2", 1)
    for thread in ("t", "t2"):
        entry = await h.claim("e1", lease_until=130.0, now=100.0, thread=thread)
        await h.complete("e1", entry.token, thread=thread)
        await h.claim("e2", lease_until=130.0, now=100.0, thread=thread)
    return configs


async def test_delete_thread_deletes_its_entries_only(
    h: Harness, client: Any, dynamodb_table: str
) -> None:
    await _two_threads_with_entries(h)
    await h.call("delete_thread", "t")
    assert _thread_items(client, dynamodb_table, "t") == []
    assert await h.entries("t") == {}
    assert len(await h.entries("t2")) == 2
    assert len(_entry_items(client, dynamodb_table)) == 2


async def test_prune_delete_deletes_entries_and_keep_latest_keeps_them(
    h: Harness, client: Any, dynamodb_table: str
) -> None:
    await _two_threads_with_entries(h)
    await h.call("prune", ["t"], strategy="keep_latest")
    assert len(await h.history(cfg("t"))) == 1
    assert sorted(await h.entries("t")) == ["e1", "e2"]
    await h.call("prune", ["t"], strategy="delete")
    assert _thread_items(client, dynamodb_table, "t") == []
    assert sorted(await h.entries("t2")) == ["e1", "e2"]


async def test_delete_for_runs_leaves_entries(h: Harness) -> None:
    await h.put_chain("t", 2, run_id="run-1")
    await h.claim("e1", lease_until=130.0, now=100.0)
    await h.call("delete_for_runs", ["run-1"])
    assert await h.history(cfg("t")) == []
    assert list(await h.entries("t")) == ["e1"]


async def test_copy_thread_copies_entries_and_keeps_the_targets(h: Harness) -> None:
    await _two_threads_with_entries(h)
    source = await h.entries("t")
    # the target already has e2 (its own claim) and e3
    await h.claim("e2", lease_until=999.0, now=900.0, thread="copy", request=Sealed("j", b"own"))
    await h.claim("e3", lease_until=999.0, now=900.0, thread="copy")
    own = await h.entries("copy")
    await h.call("copy_thread", "t", "copy")
    copied = await h.entries("copy")
    assert copied == {"e1": source["e1"], "e2": own["e2"], "e3": own["e3"]}
    assert await h.entries("t") == source
    assert len(await h.history(cfg("copy"))) == 3


async def test_entries_do_not_show_in_checkpoint_reads(h: Harness) -> None:
    configs = await h.put_chain("t", 3)
    await h.call("put_writes", configs[-1], [("a", 1)], "task")
    before = [t.config for t in await h.history(cfg("t"))]
    latest = await h.call("get_tuple", cfg("t"))
    everything = [t.config for t in await h.history(None)]
    for effect_id in ("e1", "c#x", "b#y", "h", "zzz", ""):
        await h.claim(effect_id, lease_until=130.0, now=100.0)
    await h.complete("e1", 1)
    assert [t.config for t in await h.history(cfg("t"))] == before
    assert [t.config for t in await h.history(None)] == everything
    again = await h.call("get_tuple", cfg("t"))
    assert again is not None and latest is not None
    assert (again.config, again.pending_writes) == (latest.config, latest.pending_writes)
    assert await h.call("get_tuple", configs[0]) is not None
    # a thread with entries only has no checkpoints
    await h.claim("e1", lease_until=130.0, now=100.0, thread="only")
    assert await h.call("get_tuple", cfg("only")) is None
    assert await h.history(cfg("only")) == []


# ---- TTL -------------------------------------------------------------------------------


@pytest.fixture(params=["sync", "async"])
async def ttl(request: Any, client: Any, dynamodb_table: str) -> AsyncIterator[Harness]:
    clock = Clock()
    harness = await Harness.open(
        request.param, client, dynamodb_table, ttl=100, ttl_refresh=50, clock=clock
    )
    harness.clock = clock  # type: ignore[attr-defined]
    yield harness
    await harness.close()


def _expire(client: Any, table: str, item: dict[str, Any], at: float) -> None:
    client.update_item(
        TableName=table,
        Key={"pk": item["pk"], "sk": item["sk"]},
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues={":past": {"N": str(int(at) - 1)}},
    )


async def test_entries_carry_the_threads_expiry(
    ttl: Harness, client: Any, dynamodb_table: str
) -> None:
    await ttl.put_chain("t", 1)
    await ttl.claim("e1", lease_until=130.0, now=100.0)
    (item,) = _entry_items(client, dynamodb_table, "t")
    assert int(item["expires_at"]["N"]) == 1_000_150
    ttl.clock.now += 10  # type: ignore[attr-defined]
    await ttl.complete("e1", 1)
    (item,) = _entry_items(client, dynamodb_table, "t")
    assert int(item["expires_at"]["N"]) == 1_000_160
    await ttl.restore(StoredEffect("e2", "claimed", 1, 1, 1.0, REQ))
    assert all("expires_at" in i for i in _entry_items(client, dynamodb_table))
    # the sweep of an active thread extends its entries too
    ttl.clock.now += 60  # type: ignore[attr-defined]
    await ttl.put_chain("t", 1)
    assert {int(i["expires_at"]["N"]) for i in _entry_items(client, dynamodb_table)} == {1_000_220}
    # writing to an expired thread purges it, entries included
    ttl.clock.now += 200  # type: ignore[attr-defined]
    assert await ttl.entries("t") == {}
    await ttl.put_chain("t", 1)
    assert _entry_items(client, dynamodb_table) == []


async def test_an_entry_expired_by_ttl_counts_as_absent(
    ttl: Harness, client: Any, dynamodb_table: str
) -> None:
    clock: Clock = ttl.clock  # type: ignore[attr-defined]
    await ttl.put_chain("t", 1)
    done = await ttl.claim("done", lease_until=130.0, now=100.0)
    await ttl.complete("done", done.token)
    await ttl.claim("held", lease_until=130.0, now=100.0)
    await ttl.claim("held", lease_until=230.0, now=200.0, takeover=True)  # token 2
    await ttl.claim("live", lease_until=130.0, now=100.0)
    # DynamoDB deletes expired items up to days late: they must not be replayed
    for item in _entry_items(client, dynamodb_table, "t"):
        if item["sk"]["S"] != "e#live":
            _expire(client, dynamodb_table, item, clock.now)
    assert sorted(await ttl.entries()) == ["live"]
    new = Sealed("json", b"new request")
    counter = CallCounter(client)
    fresh = await ttl.claim("done", lease_until=330.0, now=300.0, request=new)
    assert fresh == StoredEffect("done", "claimed", 1, 1, 330.0, new, None, None, True, 300.0)
    assert _seen(counter) == ({"PutItem": 1}, {"UpdateItem": 1})
    taken = await ttl.claim("held", lease_until=330.0, now=300.0, takeover=True, request=new)
    assert taken == StoredEffect("held", "claimed", 1, 1, 330.0, new, None, None, True, 300.0)
    assert not (await ttl.claim("held", lease_until=330.0, now=300.0)).won
    (item,) = [i for i in _entry_items(client, dynamodb_table) if i["sk"]["S"] == "e#done"]
    assert int(item["expires_at"]["N"]) > clock.now and "res" not in item
    # an expired entry can neither be completed
    for item in _entry_items(client, dynamodb_table, "t"):
        if item["sk"]["S"] == "e#live":
            _expire(client, dynamodb_table, item, clock.now)
    assert not await ttl.complete("live", 1)
    assert sorted(await ttl.entries()) == ["done", "held"]
