"""The effect journal's Redis operations on a real Redis (and the rig's 3-node cluster).

Every test runs with ``RedisSaver`` and ``AsyncRedisSaver``: the operations are
the same generators, run by the sync or the async driver.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from langgraph_durable._core.effects import StoredEffect, decide
from langgraph_durable._core.records import Sealed
from langgraph_durable._core.sansio import Stepper
from langgraph_durable.errors import CorruptRecordError, InvalidInputError
from langgraph_durable.redis import AsyncRedisSaver, RedisSaver
from langgraph_durable.redis._ops import Batch, Script
from tests.helpers import cfg, checkpoint_ids, make_cp, put_chain

REQUEST = Sealed("json", b'{"name": "charge", "args": [1]}')
OTHER_REQUEST = Sealed("json", b'{"name": "charge", "args": [2]}')
RESULT = Sealed("msgpack", b"\x93\x01\x02\x03 result \x00\xff")
STATE = Sealed("json", b"null")  # a claim's state record, as a takeover writes it
NOW = 1_700_000_000.123456789  # not exact in binary: stored and compared at full precision
LEASE = 30.0

pytestmark = pytest.mark.parametrize("mode", ["sync", "async"])


class Journal:
    """One saver's effect operations, awaited the same way whether it is sync or async."""

    def __init__(self, saver: RedisSaver | AsyncRedisSaver) -> None:
        self.saver = saver
        self.is_async = isinstance(saver, AsyncRedisSaver)
        self.ops = saver._ops

    async def run(self, op: Any) -> Any:
        if isinstance(self.saver, AsyncRedisSaver):
            return await self.saver._arun(op)
        return self.saver._run(op)

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A saver method (``name``, or ``a<name>`` on the async saver)."""
        if self.is_async:
            return await getattr(self.saver, "a" + name)(*args, **kwargs)
        return getattr(self.saver, name)(*args, **kwargs)

    async def execute(self, request: Any) -> Any:
        """Send one request through the driver (as its resend after a lost reply would)."""
        result = self.saver._conn.execute(request)
        return await result if self.is_async else result

    async def claim(
        self,
        effect_id: str = "e1",
        now: float = NOW,
        lease: float = LEASE,
        takeover: bool = False,
        thread: str = "t",
        tenant: str = "default",
        request: Sealed = REQUEST,
    ) -> StoredEffect:
        op = self.ops.effect_claim(tenant, thread, effect_id, request, now + lease, now)
        entry: StoredEffect = await self.run(op)
        if takeover and not entry.won and entry.state == "claimed" and entry.lease_until <= now:
            # what the saver does once it checked the entry: a takeover under its token
            taken = await self.run(
                self.ops.effect_takeover(
                    tenant, thread, effect_id, entry.token, STATE, now + lease, now
                )
            )
            return taken if taken is not None else entry
        return entry

    async def complete(
        self,
        token: int,
        effect_id: str = "e1",
        outcome: str = "ok",
        result: Sealed = RESULT,
        now: float = NOW + 1,
        thread: str = "t",
        tenant: str = "default",
    ) -> bool:
        op = self.ops.effect_complete(tenant, thread, effect_id, token, outcome, result, now)
        return await self.run(op)  # type: ignore[no-any-return]

    async def delete(
        self, token: int | None, effect_id: str = "e1", thread: str = "t", tenant: str = "default"
    ) -> bool:
        return await self.run(  # type: ignore[no-any-return]
            self.ops.effect_delete(tenant, thread, effect_id, token)
        )

    async def list(self, thread: str = "t", tenant: str = "default") -> dict[str, StoredEffect]:
        entries = await self.run(self.ops.effect_list(tenant, thread))
        by_id = {e.effect_id: e for e in entries}
        assert len(by_id) == len(entries)
        return by_id

    async def restore(self, entry: StoredEffect, thread: str, tenant: str = "default") -> None:
        await self.run(self.ops.effect_restore(tenant, thread, entry))

    async def put_chain(self, thread: str, n: int, **extra: Any) -> None:
        if not isinstance(self.saver, AsyncRedisSaver):
            put_chain(self.saver, thread, n, **extra)
            return
        parent = None
        for i in range(n):
            cp = make_cp(step=i)
            cp["channel_versions"] = {"step": f"{i + 1:032}.0"}
            config = cfg(thread, checkpoint_id=parent, **extra)
            stored = await self.saver.aput(config, cp, {"step": i}, cp["channel_versions"])
            parent = stored["configurable"]["checkpoint_id"]

    async def checkpoints(self, thread: str | None) -> list[str]:
        config = None if thread is None else cfg(thread)
        if isinstance(self.saver, AsyncRedisSaver):
            return checkpoint_ids([t async for t in self.saver.alist(config)])
        return checkpoint_ids(self.saver.list(config))


@asynccontextmanager
async def open_journal(mode: str, conn: str, prefix: str, **kwargs: Any) -> AsyncIterator[Journal]:
    if mode == "sync":
        with RedisSaver.from_conn_string(conn, prefix=prefix, **kwargs) as saver:
            saver.setup()
            yield Journal(saver)
    else:
        async with AsyncRedisSaver.from_conn_string(conn, prefix=prefix, **kwargs) as asaver:
            await asaver.setup()
            yield Journal(asaver)


@pytest.fixture
async def journal(mode: str, redis_url: str, redis_prefix: str) -> AsyncIterator[Journal]:
    async with open_journal(mode, redis_url, redis_prefix) as j:
        yield j


@pytest.fixture
def raw(redis_url: str) -> Any:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def all_keys(client: Any, prefix: str) -> set[str]:
    """Every key of ``prefix`` (each primary of a cluster scanned)."""
    if isinstance(client, RedisCluster):
        nodes = [client.get_redis_connection(n) for n in client.get_primaries()]
    else:
        nodes = [client]
    return {k.decode() for node in nodes for k in node.scan_iter(match=prefix + ":*", count=1000)}


def thread_keys(j: Journal, client: Any, thread: str, tenant: str = "default") -> set[str]:
    """The keys naming a thread (its hash tag), found by a raw scan."""
    tag = j.saver.keys.tag(tenant, thread)
    return {k for k in all_keys(client, j.saver.prefix) if tag in k}


def count_requests(j: Journal) -> list[Any]:
    """Record every request the saver's driver runs from now on."""
    seen: list[Any] = []
    driver = j.saver._conn
    inner = driver.execute
    if j.is_async:

        async def aexecute(request: Any) -> Any:
            seen.append(request)
            return await inner(request)

        driver.execute = aexecute
    else:

        def execute(request: Any) -> Any:
            seen.append(request)
            return inner(request)

        driver.execute = execute
    return seen


# ---------------------------------------------------------------- claim


async def test_a_fresh_claim_wins_and_a_second_one_gets_the_stored_entry(journal: Journal) -> None:
    first = await journal.claim()
    assert first == StoredEffect("e1", "claimed", 1, 1, NOW + LEASE, REQUEST, won=True, created=NOW)
    second = await journal.claim(now=NOW + 1, request=OTHER_REQUEST, takeover=True)
    assert second == StoredEffect(
        "e1", "claimed", 1, 1, NOW + LEASE, REQUEST, won=False, created=NOW
    )
    assert decide(second, NOW + 1).action == "wait"


async def test_an_expired_claim_is_taken_over_only_when_asked(journal: Journal) -> None:
    await journal.claim(lease=10)
    expired = NOW + 10  # lease_until <= now: expired
    kept = await journal.claim(now=expired, takeover=False)
    assert not kept.won and (kept.token, kept.attempt) == (1, 1)
    assert decide(kept, expired).action == "ambiguous"
    taken = await journal.claim(now=expired, lease=25, takeover=True, request=OTHER_REQUEST)
    assert taken == StoredEffect(
        "e1", "claimed", 2, 2, expired + 25, REQUEST, result=STATE, won=True, created=NOW
    )
    again = await journal.claim(now=expired + 26, lease=5, takeover=True)
    assert again.won and (again.token, again.attempt) == (3, 3)
    assert (await journal.list())["e1"].lease_until == expired + 31


async def test_a_live_lease_is_not_taken_over(journal: Journal) -> None:
    lease_until = NOW + 10
    await journal.claim(lease=10)
    # one ulp before the lease ends: still live (compared at full float precision)
    just_before = math.nextafter(lease_until, -math.inf)
    entry = await journal.claim(now=just_before, lease=1, takeover=True)
    assert not entry.won and entry.token == 1 and entry.lease_until == lease_until
    entry = await journal.claim(now=lease_until, lease=1, takeover=True)
    assert entry.won and entry.token == 2


# ---------------------------------------------------------------- complete


async def test_complete_with_the_claim_token_records_the_result(journal: Journal) -> None:
    claimed = await journal.claim()
    assert await journal.complete(claimed.token)
    done = StoredEffect("e1", "done", 1, 1, NOW + LEASE, REQUEST, "ok", RESULT, False, NOW)
    assert (await journal.list())["e1"] == done
    replay = await journal.claim(now=NOW + 100, takeover=True, request=OTHER_REQUEST)
    assert replay == done
    assert decide(replay, NOW + 100).action == "replay"
    # a done entry is final: no second completion, no release with its token
    assert not await journal.complete(claimed.token, outcome="error", result=REQUEST)
    assert not await journal.delete(claimed.token)
    assert (await journal.list())["e1"] == done


async def test_complete_with_a_stale_token_changes_nothing(journal: Journal) -> None:
    await journal.claim(lease=1)
    taken = await journal.claim(now=NOW + 2, takeover=True)
    assert taken.token == 2
    before = await journal.list()
    assert not await journal.complete(1)
    assert await journal.list() == before
    assert not await journal.complete(7, effect_id="missing")
    assert "missing" not in await journal.list()
    assert await journal.complete(2, outcome="error")
    assert (await journal.list())["e1"].outcome == "error"


# ---------------------------------------------------------------- delete, list, restore


async def test_delete_with_a_token_or_unconditionally(journal: Journal) -> None:
    claimed = await journal.claim()
    assert not await journal.delete(claimed.token + 1)
    assert "e1" in await journal.list()
    assert await journal.delete(claimed.token)
    assert await journal.list() == {}
    assert not await journal.delete(None)
    fresh = await journal.claim(now=NOW + 5)
    assert fresh.won and fresh.token == 1  # a released entry is claimed afresh
    await journal.complete(1)
    assert await journal.delete(None)
    assert await journal.list() == {}


async def test_list_returns_every_entry_of_its_thread_only(journal: Journal) -> None:
    for j in range(5):
        await journal.claim(f"e{j}", now=NOW + j)
    await journal.complete(1, effect_id="e3")
    await journal.claim("other", thread="u")
    await journal.claim("e0", tenant="acme")
    entries = await journal.list()
    assert sorted(entries) == [f"e{j}" for j in range(5)]
    assert not any(e.won for e in entries.values())
    assert entries["e3"].state == "done" and entries["e3"].result == RESULT
    assert entries["e2"].created == NOW + 2
    assert list(await journal.list("u")) == ["other"]
    assert list(await journal.list(tenant="acme")) == ["e0"]
    assert await journal.list("nobody") == {}


async def test_list_pages_through_a_large_journal(journal: Journal) -> None:
    ids = [f"effect-{j:04}" for j in range(250)]  # a hashtable-encoded set: several SSCANs
    for effect_id in ids:
        await journal.claim(effect_id)
    seen = count_requests(journal)
    entries = await journal.list()
    assert sorted(entries) == ids
    assert len(seen) > 1


async def test_restore_writes_the_entry_as_given(journal: Journal) -> None:
    done = StoredEffect("r1", "done", 3, 2, NOW + 9, REQUEST, "error", RESULT, True, NOW)
    claimed = StoredEffect("r2", "claimed", 1, 1, NOW + 5, OTHER_REQUEST, created=NOW - 1)
    await journal.restore(done, "target")
    await journal.restore(claimed, "target")
    entries = await journal.list("target")
    assert entries == {"r1": StoredEffect(*[*_fields(done)[:8], False, NOW]), "r2": claimed}
    # overwrites an existing entry, the claimed one included
    assert (await journal.claim("r2", thread="target", now=NOW + 100, takeover=True)).token == 2
    await journal.restore(claimed, "target")
    assert (await journal.list("target"))["r2"] == claimed
    await journal.restore(done, "target")
    assert (await journal.list("target"))["r1"].token == 3
    # the restored claim behaves like any other
    assert await journal.complete(1, effect_id="r2", thread="target")


def _fields(entry: StoredEffect) -> list[Any]:
    return [getattr(entry, name) for name in StoredEffect.__slots__]


async def test_ids_and_times_are_checked(journal: Journal) -> None:
    with pytest.raises(InvalidInputError):
        await journal.claim("")
    with pytest.raises(InvalidInputError):
        await journal.claim("a\x00b")
    with pytest.raises(InvalidInputError):
        await journal.claim(now=math.nan)
    # braces in an effect id do not move the entry out of its thread's slot
    assert (await journal.claim("{other}:x")).won
    keys = journal.saver.keys
    slot = key_slot(keys.thread("default", "t")[0].encode())
    assert key_slot(keys.effect("default", "t", "{other}:x").encode()) == slot
    assert key_slot(keys.effects("default", "t").encode()) == slot


async def test_a_damaged_entry_is_reported(journal: Journal, raw: redis.Redis) -> None:
    await journal.claim()
    raw.hdel(journal.saver.keys.effect("default", "t", "e1"), "request")
    with pytest.raises(CorruptRecordError, match="e1"):
        await journal.list()


# ---------------------------------------------------------------- round trips, resends


async def test_claim_complete_and_replay_take_one_round_trip_each(journal: Journal) -> None:
    await journal.put_chain("t", 1)
    seen = count_requests(journal)
    claimed = await journal.claim()
    await journal.complete(claimed.token)
    await journal.claim(now=NOW + 2)  # the replay
    await journal.delete(None)
    assert len(seen) == 4
    assert all(isinstance(r, Script) for r in seen)


async def test_a_claim_or_completion_sent_again_finds_its_own_change(journal: Journal) -> None:
    """A request whose reply was lost is sent again by the driver: same answer."""
    op = journal.ops.effect_claim("default", "t", "e1", REQUEST, NOW + LEASE, NOW)
    stepper = Stepper(op.steps)
    request = stepper.first()
    await journal.execute(request)  # the reply is lost
    assert stepper.send(await journal.execute(request)) is None
    assert stepper.result.won and stepper.result.token == 1

    # the lease ran out: a takeover, its reply lost too
    op = journal.ops.effect_takeover("default", "t", "e1", 1, STATE, NOW + 99, NOW + LEASE)
    stepper = Stepper(op.steps)
    request = stepper.first()
    await journal.execute(request)
    assert stepper.send(await journal.execute(request)) is None
    assert stepper.result.won and stepper.result.token == 2

    op2 = journal.ops.effect_complete("default", "t", "e1", 2, "ok", RESULT, NOW + 50)
    stepper = Stepper(op2.steps)
    request = stepper.first()
    await journal.execute(request)
    assert stepper.send(await journal.execute(request)) is None
    assert stepper.result is True
    # another completion with the same token is refused
    assert not await journal.complete(2)


# ---------------------------------------------------------------- thread lifecycle


async def _two_threads(j: Journal) -> None:
    for thread in ("a", "b"):
        await j.put_chain(thread, 2, run_id=f"run-{thread}")
        for e in ("e1", "e2"):
            claimed = await j.claim(e, thread=thread)
        await j.complete(claimed.token, "e2", thread=thread)
    await j.claim("lonely", thread="effects-only")


async def test_delete_thread_deletes_its_entries_only(journal: Journal, raw: redis.Redis) -> None:
    await _two_threads(journal)
    b_keys = thread_keys(journal, raw, "b")
    assert journal.saver.keys.effect("default", "b", "e1") in b_keys
    seen = count_requests(journal)
    await journal.call("delete_thread", "a")
    assert len(seen) == 1 and isinstance(seen[0], Batch)  # one round trip, as before
    assert thread_keys(journal, raw, "a") == set()
    assert await journal.list("a") == {}
    assert thread_keys(journal, raw, "b") == b_keys
    assert sorted(await journal.list("b")) == ["e1", "e2"]
    await journal.call("delete_thread", "effects-only")
    assert thread_keys(journal, raw, "effects-only") == set()
    # the thread starts afresh
    assert (await journal.claim("e1", thread="a")).token == 1


async def test_prune_delete_deletes_entries_keep_latest_keeps_them(
    journal: Journal, raw: redis.Redis
) -> None:
    await _two_threads(journal)
    b_keys = thread_keys(journal, raw, "b")
    await journal.call("prune", ["a", "effects-only"], strategy="delete")
    assert thread_keys(journal, raw, "a") == set()
    assert thread_keys(journal, raw, "effects-only") == set()
    assert thread_keys(journal, raw, "b") == b_keys
    await journal.call("prune", ["b"], strategy="keep_latest")
    assert len(await journal.checkpoints("b")) == 1
    assert sorted(await journal.list("b")) == ["e1", "e2"]


async def test_copy_thread_copies_entries_and_keeps_the_targets(journal: Journal) -> None:
    await _two_threads(journal)
    mine = await journal.claim("e1", thread="target", now=NOW + 7)
    await journal.call("copy_thread", "a", "target")
    source, target = await journal.list("a"), await journal.list("target")
    assert sorted(target) == ["e1", "e2"]
    assert target["e1"] == StoredEffect(*[*_fields(mine)[:8], False, NOW + 7])
    assert target["e2"] == source["e2"] and target["e2"].result == RESULT
    assert await journal.checkpoints("target") == await journal.checkpoints("a")
    # the copy is an independent entry: completing it leaves the source alone
    assert await journal.complete(1, "e1", thread="target")
    assert (await journal.list("a"))["e1"].state == "claimed"
    # a thread with entries but no checkpoint yet is copied too
    await journal.call("copy_thread", "effects-only", "copy2")
    assert list(await journal.list("copy2")) == ["lonely"]


async def test_reads_of_checkpoints_are_not_confused_by_entries(
    journal: Journal, raw: redis.Redis
) -> None:
    await _two_threads(journal)
    assert len(await journal.checkpoints(None)) == 4  # the effects-only thread lists nothing
    assert len(await journal.checkpoints("a")) == 2
    assert await journal.checkpoints("effects-only") == []
    assert await journal.call("get_tuple", cfg("a")) is not None
    assert await journal.call("get_tuple", cfg("effects-only")) is None
    index = journal.saver.keys.tenant_index("default")
    assert sorted(m.decode() for m in raw.zrange(index, 0, -1)) == ["a", "b"]
    await journal.call("delete_for_runs", ["run-a"])
    assert await journal.checkpoints("a") == []
    # delete_for_runs deletes checkpoints, not the journal (like the SQL backend)
    assert sorted(await journal.list("a")) == ["e1", "e2"]
    assert len(await journal.checkpoints(None)) == 2


# ---------------------------------------------------------------- TTL


def pttls(raw: redis.Redis, keys: set[str]) -> list[int]:
    return [raw.pttl(k) for k in keys]


async def test_entries_expire_with_their_thread(
    mode: str, redis_url: str, redis_prefix: str, raw: redis.Redis
) -> None:
    async with open_journal(mode, redis_url, redis_prefix, ttl=1.5) as j:
        await j.put_chain("t", 1)
        claimed = await j.claim()
        keys = thread_keys(j, raw, "t")
        assert j.saver.keys.effect("default", "t", "e1") in keys
        assert j.saver.keys.effects("default", "t") in keys
        ttls = pttls(raw, keys)
        assert min(ttls) > 1300 and max(ttls) - min(ttls) < 50  # the claim refreshed all
        await asyncio.sleep(0.5)
        await j.put_chain("u", 1)
        await j.call("put", cfg("t"), make_cp(), {}, {})  # a checkpoint write refreshes entries
        ttls = pttls(raw, keys | thread_keys(j, raw, "t"))
        assert min(ttls) > 1300 and max(ttls) - min(ttls) < 50
        await asyncio.sleep(0.5)
        assert await j.complete(claimed.token)  # a completion refreshes the thread
        ttls = pttls(raw, thread_keys(j, raw, "t"))
        assert min(ttls) > 1300 and max(ttls) - min(ttls) < 50
        await asyncio.sleep(0.5)
        assert not (await j.claim(now=NOW + 99)).won  # a claim that finds the entry is a read
        assert max(pttls(raw, thread_keys(j, raw, "t"))) < 1100
        await j.restore(StoredEffect("r", "claimed", 1, 1, NOW, REQUEST), "t")
        assert min(pttls(raw, thread_keys(j, raw, "t"))) > 1300
        await asyncio.sleep(1.7)
        assert thread_keys(j, raw, "t") == set()
        assert await j.list() == {}


async def test_entries_of_an_effects_only_thread_expire(
    mode: str, redis_url: str, redis_prefix: str, raw: redis.Redis
) -> None:
    async with open_journal(mode, redis_url, redis_prefix, ttl=0.4) as j:
        await j.claim("e1", thread="x")
        await j.call("copy_thread", "x", "y")
        assert len(thread_keys(j, raw, "y")) == 2
        assert all(0 < t <= 400 for t in pttls(raw, thread_keys(j, raw, "y")))
        await asyncio.sleep(0.6)
        assert thread_keys(j, raw, "x") == thread_keys(j, raw, "y") == set()


async def test_refresh_on_read_refreshes_entries(
    mode: str, redis_url: str, redis_prefix: str, raw: redis.Redis
) -> None:
    async with open_journal(mode, redis_url, redis_prefix, ttl=2, refresh_ttl_on_read=True) as j:
        await j.put_chain("t", 1)
        await j.claim()
        await asyncio.sleep(0.5)
        assert max(pttls(raw, thread_keys(j, raw, "t"))) < 1600
        assert await j.call("get_tuple", cfg("t")) is not None
        assert min(pttls(raw, thread_keys(j, raw, "t"))) > 1900
        await asyncio.sleep(0.3)
        await j.list()
        assert min(pttls(raw, thread_keys(j, raw, "t"))) > 1900


async def test_without_ttl_entries_persist(
    mode: str, redis_url: str, redis_prefix: str, raw: redis.Redis
) -> None:
    async with open_journal(mode, redis_url, redis_prefix, ttl=60) as j:
        await j.put_chain("t", 1)
        await j.claim()
    async with open_journal(mode, redis_url, redis_prefix) as j:
        await j.put_chain("t", 1)
        assert set(pttls(raw, thread_keys(j, raw, "t"))) == {-1}
        await j.claim("e2", thread="t")
        assert set(pttls(raw, thread_keys(j, raw, "t"))) == {-1}


# ---------------------------------------------------------------- cluster


async def test_the_journal_on_a_cluster(
    mode: str, redis_cluster_conn_string: str, redis_cluster_url: str, redis_prefix: str
) -> None:
    client = RedisCluster.from_url(redis_cluster_url)
    try:
        async with open_journal(mode, redis_cluster_conn_string, redis_prefix, ttl=60) as j:
            threads = [f"thread-{n}" for n in range(8)] + ["{x}", "a:b"]
            for thread in threads:
                await j.put_chain(thread, 1)
                claimed = await j.claim("e1", thread=thread)
                assert claimed.won
                assert await j.complete(claimed.token, thread=thread)
                await j.claim("e2", thread=thread)
                keys = thread_keys(j, client, thread)
                layout = j.saver.keys
                assert {
                    layout.thread("default", thread)[0],
                    layout.effects("default", thread),
                    layout.effect("default", thread, "e1"),
                    layout.effect("default", thread, "e2"),
                } <= keys
                assert len({client.keyslot(k) for k in keys}) == 1
                assert all(t > 0 for t in (client.pttl(k) for k in keys))
            nodes = {
                client.get_node_from_key(j.saver.keys.effects("default", t)).name for t in threads
            }
            assert len(nodes) > 1  # the journals spread over the primaries
            replay = await j.claim("e1", thread="thread-0", now=NOW + 5)
            assert replay.state == "done" and replay.result == RESULT
            await j.call("copy_thread", "thread-0", "copy")
            assert sorted(await j.list("copy")) == ["e1", "e2"]
            await j.call("delete_thread", "thread-1")
            await j.call("prune", ["thread-2"], strategy="delete")
            assert thread_keys(j, client, "thread-1") == thread_keys(j, client, "thread-2") == set()
            assert sorted(await j.list("thread-3")) == ["e1", "e2"]
            assert await j.delete(None, "e2", thread="thread-3")
            assert sorted(await j.list("thread-3")) == ["e1"]
            await j.restore(replay, "restored")
            assert (await j.list("restored"))["e1"].result == RESULT
            client.script_flush()  # the scripts are sent again (EVAL) when the server lost them
            assert (await j.claim("e9", thread="thread-4")).won
    finally:
        client.close()
