"""Retention on Redis: native expiry per tenant, the pruner, its lock, keep_latest trims.

Every test runs on the real server (and, where marked, the 3-node cluster) through
the sync and the async saver. The pruner's clock is injected (``now=``) and a
thread's stored times are backdated by writing its header-hash fields directly;
native expiry is checked with short real durations.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import operator
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
import redis
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from redis.cluster import RedisCluster

from langgraph_durable import Retention
from langgraph_durable.errors import ConfigurationError
from langgraph_durable.redis import AsyncRedisSaver, RedisOptions, RedisSaver
from langgraph_durable.redis._ops import CREATED_FIELD, TOUCHED_FIELD
from langgraph_durable.redis._prune import PRUNE_SCRIPTS, checkpoint_seconds
from langgraph_durable.redis.server import settings_from_env
from langgraph_durable.retention import PruneProgress, PruneReport
from tests.helpers import cfg, make_cp, put_chain

DAY = 86_400.0
ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- harness


class Harness:
    """One saver (sync or async) and a raw client on the same server or cluster."""

    def __init__(self, saver: Any, raw: Any, is_async: bool) -> None:
        self.saver = saver
        self.raw = raw
        self.is_async = is_async

    @property
    def keys(self) -> Any:
        return self.saver.keys

    async def put_chain(self, thread: str, n: int, **extra: Any) -> list[dict[str, Any]]:
        if self.is_async:  # the async saver's sync methods run on its loop, from a thread
            return await asyncio.to_thread(put_chain, self.saver, thread, n, **extra)
        return put_chain(self.saver, thread, n, **extra)

    async def put_writes(self, config: dict[str, Any], writes: list[Any], task: str) -> None:
        if self.is_async:
            await self.saver.aput_writes(config, writes, task)
        else:
            self.saver.put_writes(config, writes, task)

    async def ids(self, thread: str, **extra: Any) -> list[str]:
        config = cfg(thread, **extra)
        if self.is_async:
            tuples = [t async for t in self.saver.alist(config)]
        else:
            tuples = list(self.saver.list(config))
        return [t.config["configurable"]["checkpoint_id"] for t in tuples]

    async def prune_expired(self, *args: Any, **kwargs: Any) -> PruneReport:
        if self.is_async:
            return await self.saver.aprune_expired(*args, **kwargs)  # type: ignore[no-any-return]
        return self.saver.prune_expired(*args, **kwargs)  # type: ignore[no-any-return]

    async def prune(self, threads: list[str], **kwargs: Any) -> None:
        if self.is_async:
            await self.saver.aprune(threads, **kwargs)
        else:
            self.saver.prune(threads, **kwargs)

    async def setup(self) -> None:
        if self.is_async:
            await self.saver.setup()
        else:
            self.saver.setup()

    async def run(self, op: Any) -> Any:
        if self.is_async:
            return await self.saver._arun(op)
        return self.saver._run(op)

    async def claim_effect(self, thread: str, tenant: str = "default") -> None:
        now = time.time()
        op = self.saver._effect_claim_op(
            tenant, thread, b"material", {"x": 1}, now + 60, now, False
        )
        entry = await self.run(op)
        assert entry.entry.won

    # ---- raw views

    def header(self, thread: str, tenant: str = "default") -> str:
        return self.keys.thread(tenant, thread)[0]  # type: ignore[no-any-return]

    def backdate(
        self, thread: str, field: str, seconds_ago: float, tenant: str = "default"
    ) -> None:
        """Write a thread's stored time as ``seconds_ago`` before now (server ms)."""
        ms = round((time.time() - seconds_ago) * 1000)
        self.raw.hset(self.header(thread, tenant), field, str(ms))

    def keys_naming(self, thread: str, tenant: str = "default") -> list[bytes]:
        """Every key of the prefix whose name carries the thread's hash tag (raw SCAN).

        In pages of 1,000 keys: the server may hold many other keys (other tests', a
        benchmark's), and a TTL read after a scan of them in pages of 10 had lost 100 ms.
        """
        tag = self.keys.tag(tenant, thread).encode()
        found = self.raw.scan_iter(match=self.saver.prefix + "*", count=1000)
        return [k for k in found if tag in k]

    def indexed(self, tenant: str = "default") -> set[str]:
        return {m.decode() for m in self.raw.zrange(self.keys.tenant_index(tenant), 0, -1)}

    def pttls(self, thread: str, tenant: str = "default") -> list[int]:
        return [self.raw.pttl(k) for k in self.keys_naming(thread, tenant)]

    def dump(self) -> dict[bytes, Any]:
        """Every key of the prefix with its type and content (no expiry)."""
        out: dict[bytes, Any] = {}
        for key in self.raw.scan_iter(match=self.saver.prefix + "*"):
            kind = self.raw.type(key).decode()
            if kind == "hash":
                out[key] = sorted(self.raw.hgetall(key).items())
            elif kind == "zset":
                out[key] = self.raw.zrange(key, 0, -1, withscores=True)
            elif kind == "set":
                out[key] = sorted(self.raw.smembers(key))
            else:
                out[key] = self.raw.get(key)
        return out


TARGETS = [
    pytest.param(("sync", "single"), id="sync"),
    pytest.param(("async", "single"), id="async"),
    pytest.param(("sync", "cluster"), id="sync-cluster"),
    pytest.param(("async", "cluster"), id="async-cluster"),
]
MODES = [pytest.param(("sync", "single"), id="sync"), pytest.param(("async", "single"), id="async")]


@asynccontextmanager
async def open_harness(
    request: pytest.FixtureRequest, target: tuple[str, str], prefix: str, **kwargs: Any
) -> AsyncIterator[Harness]:
    mode, where = target
    if where == "cluster":
        url = request.getfixturevalue("redis_cluster_conn_string")
        raw: Any = RedisCluster.from_url(request.getfixturevalue("redis_cluster_url"))
    else:
        url = request.getfixturevalue("redis_url")
        raw = redis.Redis.from_url(url)
    try:
        if mode == "sync":
            with RedisSaver.from_conn_string(url, prefix=prefix, **kwargs) as saver:
                saver.setup()
                yield Harness(saver, raw, False)
        else:
            async with AsyncRedisSaver.from_conn_string(url, prefix=prefix, **kwargs) as saver:
                await saver.setup()
                yield Harness(saver, raw, True)
    finally:
        raw.close()


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


# ---------------------------------------------------------------- configuration


@pytest.mark.parametrize("target", MODES)
async def test_ttl_is_a_deprecated_alias_of_idle_retention(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    with pytest.warns(DeprecationWarning, match=r"retention=Retention\(idle=60"):
        opened = open_harness(request, target, redis_prefix, ttl=60)
        h = await opened.__aenter__()
    try:
        assert h.saver.retention == Retention(idle=datetime.timedelta(seconds=60))
        await h.put_chain("t", 2)
        ttls = h.pttls("t")
        assert len(ttls) == 5 and all(58_000 < t <= 60_000 for t in ttls)
    finally:
        await opened.__aexit__(None, None, None)
    saver_type = AsyncRedisSaver if target[0] == "async" else RedisSaver
    url = request.getfixturevalue("redis_url")
    with pytest.warns(DeprecationWarning, match="ttl= is deprecated"):
        via_options = saver_type(url, options=RedisOptions(prefix=redis_prefix, ttl=5))
    assert via_options.retention == Retention(idle=5)
    with pytest.raises(ConfigurationError, match="not both"):
        saver_type(url, prefix=redis_prefix, ttl=5, retention=Retention(idle=5))
    with pytest.raises(ConfigurationError, match="retention must be"):
        saver_type(url, prefix=redis_prefix, retention="30d")


def test_agent_server_settings_read_retention_from_the_environment() -> None:
    env = {"LGD_REDIS_URL": "redis://x", "LGD_RETENTION_IDLE": "30d"}
    assert settings_from_env(env)["retention"] == Retention(idle=datetime.timedelta(days=30))
    env |= {"LGD_RETENTION_STRATEGY": "keep-latest", "LGD_RETENTION_KEEP": "3"}
    assert settings_from_env(env)["retention"] == Retention(
        idle=datetime.timedelta(days=30), strategy="keep_latest", keep=3
    )
    with pytest.raises(ConfigurationError, match="LGD_RETENTION"):
        settings_from_env({"LGD_REDIS_URL": "x", "LGD_RETENTION_ABSOLUTE": "90"})
    with pytest.raises(ConfigurationError, match="not both"):
        settings_from_env({"LGD_REDIS_URL": "x", "LGD_REDIS_TTL": "60", "LGD_RETENTION_IDLE": "1d"})
    assert "retention" not in settings_from_env({"LGD_REDIS_URL": "x", "LGD_REDIS_TTL": "60"})


@pytest.mark.parametrize("target", MODES)
async def test_setup_stores_a_plain_retention_for_the_cli(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    policy = Retention(idle="30d", absolute="90d")
    async with open_harness(request, target, redis_prefix, retention=policy) as h:
        key = h.keys.retention()
        assert h.raw.get(key) == policy.to_json().encode()
        assert await h.run(h.saver._ops.retention_get()) == policy.to_json()
        other = Retention(strategy="keep_latest", keep=2)
        await h.run(h.saver._ops.retention_set(other.to_json()))
        assert Retention.from_json(await h.run(h.saver._ops.retention_get())) == other
        with pytest.raises(ConfigurationError, match="cannot be read"):
            await h.run(h.saver._ops.retention_set("{not json"))
    # a callable policy, or none, leaves the stored one alone
    async with open_harness(request, target, redis_prefix, retention=lambda _t: policy) as h:
        assert Retention.from_json(h.raw.get(h.keys.retention())) == other
    async with open_harness(request, target, redis_prefix) as h:
        assert Retention.from_json(h.raw.get(h.keys.retention())) == other
        await h.run(h.saver._ops.retention_set(None))
        assert await h.run(h.saver._ops.retention_get()) is None
        assert h.raw.script_exists(*[s.sha for s in PRUNE_SCRIPTS]) == [True] * len(PRUNE_SCRIPTS)


# ---------------------------------------------------------------- native expiry


@pytest.mark.parametrize("target", TARGETS)
async def test_each_write_sets_its_tenants_expiry(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    policies: dict[str, Retention | None] = {
        "short": Retention(idle=datetime.timedelta(seconds=30)),
        "capped": Retention(idle=datetime.timedelta(hours=1), absolute=90),
        "trim": Retention(idle=60, strategy="keep_latest"),
    }
    asked: list[str] = []

    def policy(tenant: str) -> Retention | None:
        asked.append(tenant)
        return policies.get(tenant)

    async with open_harness(request, target, redis_prefix, retention=policy) as h:
        for tenant in ("short", "capped", "trim", "none"):
            configs = await h.put_chain("t", 2, tenant_id=tenant)
            await h.put_writes(configs[-1], [("a", 1)], "task")
        assert {"short", "capped", "trim", "none"} <= set(asked)
        short, capped = h.pttls("t", "short"), h.pttls("t", "capped")
        assert len(short) == 6 and all(29_000 < t <= 30_000 for t in short)
        assert len(capped) == 6 and all(89_000 < t <= 90_000 for t in capped)  # the min
        # keep_latest is carried out by the pruner: no expiry, which would delete it all
        assert set(h.pttls("t", "trim")) == set(h.pttls("t", "none")) == {-1}
        for tenant in policies:
            created, touched = h.raw.hmget(h.header("t", tenant), CREATED_FIELD, TOUCHED_FIELD)
            assert created and touched and abs(int(touched) / 1000 - time.time()) < 30
        # the policy is asked per call: a tenant's new policy applies to its next write
        policies["none"] = Retention(idle=20)
        await h.put_chain("t", 1, tenant_id="none")
        assert all(19_000 < t <= 20_000 for t in h.pttls("t", "none"))
        policies["short"] = None
        await h.put_chain("t", 1, tenant_id="short")
        assert set(h.pttls("t", "short")) == {-1}


@pytest.mark.parametrize("target", TARGETS)
async def test_absolute_caps_a_busy_thread_and_it_expires_whole(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    policy = Retention(idle=datetime.timedelta(seconds=1), absolute=datetime.timedelta(seconds=1.6))
    async with open_harness(request, target, redis_prefix, retention=policy) as h:
        configs = await h.put_chain("busy", 1)
        await h.claim_effect("busy")
        assert all(900 < t <= 1000 for t in h.pttls("busy"))  # idle is sooner
        await asyncio.sleep(0.8)
        await h.put_writes(configs[-1], [("a", 1)], "task")
        ttls = h.pttls("busy")
        # idle alone would give ~1000 ms again; creation + 1.6 s leaves ~800
        assert len(ttls) == 8 and all(500 < t < 900 for t in ttls)
        assert max(ttls) - min(ttls) < 50
        await h.put_chain("quiet", 1)
        await asyncio.sleep(1.3)
        assert h.keys_naming("busy") == []  # every key, effect journal included
        assert h.keys_naming("quiet") == []
        assert h.indexed() == {"busy", "quiet"}  # the index is swept by the pruner
        report = await h.prune_expired()
        # threads_seen counts expired threads still stored: these expired natively
        assert (report.threads, report.index_entries, report.threads_seen) == (0, 2, 0)
        assert h.indexed() == set()


# ---------------------------------------------------------------- the pruner


@pytest.mark.parametrize("target", TARGETS)
async def test_pruner_deletes_expired_threads_whole_and_keeps_live_ones(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    async with open_harness(request, target, redis_prefix) as h:
        for tenant in ("acme", "beta"):
            old = await h.put_chain("old", 3, tenant_id=tenant)
            await h.put_writes(old[-1], [("a", 1)], "task")
            await h.claim_effect("old", tenant)
            h.backdate("old", TOUCHED_FIELD, 2 * DAY, tenant)
        await h.put_chain("live", 4, tenant_id="acme")
        live_before = await h.ids("live", tenant_id="acme")
        live_keys = sorted(h.keys_naming("live", "acme"))
        seen: list[PruneProgress] = []
        report = await h.prune_expired(
            Retention(idle=datetime.timedelta(days=1)), batch=2, progress=seen.append
        )
        assert (report.threads, report.trimmed, report.checkpoints) == (2, 0, 6)
        assert report.bytes > 0 and report.threads_seen == 2 and report.index_entries == 0
        assert not report.dry_run and not report.locked and not report.budget_exhausted
        assert [p.done for p in seen] == [2, 3] and seen[-1].total == 3
        for tenant in ("acme", "beta"):
            assert h.keys_naming("old", tenant) == []
            assert "old" not in h.indexed(tenant)
        assert await h.ids("live", tenant_id="acme") == live_before
        assert sorted(h.keys_naming("live", "acme")) == live_keys
        assert h.raw.get(h.keys.prune_lock()) is None  # released
        # only one tenant, and a second run finds nothing
        again = await h.prune_expired(Retention(idle=60), tenant_id="beta")
        assert (again.threads, again.threads_seen) == (0, 0)


@pytest.mark.parametrize("target", MODES)
async def test_pruner_judges_idle_and_absolute_from_stored_times(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    now = time.time()
    async with open_harness(request, target, redis_prefix) as h:
        await h.put_chain("aged", 2)
        h.backdate("aged", CREATED_FIELD, 10 * DAY)
        await h.put_chain("legacy", 2)  # written before the saver stored times
        h.raw.hdel(h.header("legacy"), CREATED_FIELD, TOUCHED_FIELD)
        legacy_ids = await h.ids("legacy")
        made = checkpoint_seconds(legacy_ids[0])
        assert made is not None and abs(made - time.time()) < 60
        odd = make_cp(x=1)
        odd["id"] = "not-a-uuid"
        if h.is_async:
            await h.saver.aput(cfg("odd"), odd, {}, {})
        else:
            h.saver.put(cfg("odd"), odd, {}, {})
        h.raw.hdel(h.header("odd"), CREATED_FIELD, TOUCHED_FIELD)
        registered = now + 10 * DAY  # as if it joined its index then
        h.raw.zadd(h.keys.tenant_index("default"), {"odd": registered * 1000})

        idle = Retention(idle=datetime.timedelta(days=1))
        report = await h.prune_expired(idle, now=now)
        assert report.threads == 0 and report.threads_seen == 0  # none expired
        # absolute counts from the stored creation, however recent the last write
        report = await h.prune_expired(Retention(absolute=datetime.timedelta(days=7)), now=now)
        assert report.threads == 1 and h.keys_naming("aged") == []
        # without stored times: the latest checkpoint id's uuid6 time ...
        report = await h.prune_expired(idle, now=made + DAY - 5)
        assert report.threads == 0
        report = await h.prune_expired(idle, now=made + DAY + 5)
        assert report.threads == 1 and h.keys_naming("legacy") == []
        # ... or, for ids that are not uuid6, when the thread joined its index
        report = await h.prune_expired(idle, now=registered + DAY - 5)
        assert report.threads == 0
        report = await h.prune_expired(idle, now=registered + DAY + 5)
        assert report.threads == 1 and h.keys_naming("odd") == []


@pytest.mark.parametrize("target", MODES)
async def test_pruner_follows_the_savers_policy_per_tenant(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    policies = {"del": Retention(idle="1d"), "trim": Retention(strategy="keep_latest", keep=2)}
    async with open_harness(request, target, redis_prefix, retention=policies.get) as h:
        for tenant in ("del", "trim", "keep"):
            await h.put_chain("t", 5, tenant_id=tenant)
        keep_before = await h.ids("t", tenant_id="keep")
        trim_before = await h.ids("t", tenant_id="trim")
        report = await h.prune_expired(now=time.time() + 2 * DAY)
        assert (report.threads, report.trimmed, report.checkpoints) == (1, 1, 5 + 3)
        assert h.keys_naming("t", "del") == [] and "t" not in h.indexed("del")
        assert await h.ids("t", tenant_id="trim") == trim_before[:2]
        assert await h.ids("t", tenant_id="keep") == keep_before
        # a policy given to the call replaces the saver's for every tenant
        report = await h.prune_expired(Retention(strategy="keep_latest"), tenant_id="keep")
        assert (report.trimmed, report.checkpoints) == (1, 4)
        assert await h.ids("t", tenant_id="keep") == keep_before[:1]


@pytest.mark.parametrize("target", TARGETS)
async def test_pruner_without_a_policy_only_sweeps_the_index(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    async with open_harness(request, target, redis_prefix) as h:
        await h.put_chain("gone", 2)
        await h.put_chain("here", 2)
        h.backdate("here", TOUCHED_FIELD, 400 * DAY)
        for key in h.keys_naming("gone"):  # deleted behind the saver's back
            h.raw.delete(key)
        report = await h.prune_expired(now=time.time() + 400 * DAY)
        assert (report.threads, report.trimmed, report.index_entries) == (0, 0, 1)
        assert h.indexed() == {"here"} and len(await h.ids("here")) == 2


@pytest.mark.parametrize("target", TARGETS)
async def test_dry_run_changes_nothing_and_predicts_the_real_run(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    policies = {
        "a": Retention(idle="1d"),
        "b": Retention(idle="1d", strategy="keep_latest", keep=2),
    }
    async with open_harness(request, target, redis_prefix, retention=policies.get) as h:
        for thread in ("old1", "old2", "live", "vanished"):
            configs = await h.put_chain(thread, 3, tenant_id="a")
            await h.put_writes(configs[-1], [("w", thread)], "task")
        await h.claim_effect("old1", "a")
        for thread in ("long", "fresh"):
            for _ in range(2):
                configs = await h.put_chain(thread, 3, tenant_id="b")
                await h.put_writes(configs[-1], [("w", thread)], "task")
        for thread in ("old1", "old2"):
            h.backdate(thread, TOUCHED_FIELD, 2 * DAY, "a")
        h.backdate("long", TOUCHED_FIELD, 2 * DAY, "b")
        for key in h.keys_naming("vanished", "a"):
            h.raw.delete(key)
        before = h.dump()
        dry = await h.prune_expired(dry_run=True)
        assert h.dump() == before
        assert dry.dry_run and (dry.threads, dry.trimmed, dry.index_entries) == (2, 1, 1)
        assert dry.checkpoints == 3 + 3 + 4 and dry.bytes > 0 and dry.threads_seen == 3
        assert sorted(dry.thread_ids) == [("a", "old1"), ("a", "old2"), ("b", "long")]
        real = await h.prune_expired()
        expected = dry.as_dict() | {"dry_run": False, "seconds": real.as_dict()["seconds"]}
        assert real.as_dict() == expected and real.thread_ids == []
        assert len(await h.ids("long", tenant_id="b")) == 2
        assert len(await h.ids("fresh", tenant_id="b")) == 6
        after = await h.prune_expired(dry_run=True)
        assert (after.threads, after.trimmed, after.checkpoints, after.index_entries) == (
            0,
            0,
            0,
            0,
        )


@pytest.mark.parametrize("target", MODES)
async def test_a_time_budget_stops_between_batches_and_a_rerun_finishes(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    async with open_harness(request, target, redis_prefix) as h:
        for n in range(5):
            await h.put_chain(f"t{n}", 1)
        policy = Retention(idle=60)
        later = time.time() + 120
        first = await h.prune_expired(policy, now=later, batch=2, max_seconds=1e-9)
        assert first.budget_exhausted and (first.threads, first.threads_seen) == (2, 2)
        assert len(h.indexed()) == 3 and h.raw.get(h.keys.prune_lock()) is None
        rest = await h.prune_expired(policy, now=later, batch=2)
        assert not rest.budget_exhausted and rest.threads == 3 and h.indexed() == set()


# ---------------------------------------------------------------- the lock


@pytest.mark.parametrize("target", TARGETS)
async def test_one_pruner_at_a_time(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    async with open_harness(request, target, redis_prefix) as h:
        await h.put_chain("t", 2)
        lock = h.keys.prune_lock()
        h.raw.set(lock, "another-host:4242:feedbeef", px=60_000)
        report = await h.prune_expired(Retention(idle=1), now=time.time() + DAY)
        assert report.locked and report.threads == 0 and report.threads_seen == 0
        assert len(await h.ids("t")) == 2
        assert h.raw.get(lock) == b"another-host:4242:feedbeef"
        # a dead process on this host: its lock is taken over at once
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        h.raw.set(lock, f"{socket.gethostname()}:{dead.pid}:0badc0de", px=60_000)
        report = await h.prune_expired(Retention(idle=1), now=time.time() + DAY)
        assert not report.locked and report.threads == 1
        assert h.raw.get(lock) is None


def test_a_second_pruner_during_a_run_is_locked_out(saver_url: str, redis_prefix: str) -> None:
    with RedisSaver.from_conn_string(saver_url, prefix=redis_prefix) as saver:
        for n in range(3):
            put_chain(saver, f"t{n}", 1)
        nested: list[PruneReport] = []

        def during(_progress: PruneProgress) -> None:
            if not nested:
                nested.append(saver.prune_expired(Retention(idle=1), now=time.time() + DAY))

        report = saver.prune_expired(
            Retention(idle=1), now=time.time() + DAY, batch=1, progress=during
        )
        assert nested[0].locked and nested[0].threads == 0
        assert not report.locked and report.threads == 3


@pytest.fixture(params=["single", "cluster"])
def saver_url(request: pytest.FixtureRequest) -> str:
    if request.param == "cluster":
        return request.getfixturevalue("redis_cluster_conn_string")  # type: ignore[no-any-return]
    return request.getfixturevalue("redis_url")  # type: ignore[no-any-return]


_KILLED_PRUNER = """
import sys, time
from langgraph_durable import Retention
from langgraph_durable.redis import RedisSaver

def slow(progress):
    print(progress.done, flush=True)
    time.sleep(0.2)

with RedisSaver.from_conn_string(sys.argv[1], prefix=sys.argv[2]) as saver:
    saver.prune_expired(Retention(idle=1), now=time.time() + 86400, batch=1, progress=slow)
"""


def test_a_killed_pruner_leaves_threads_whole_and_a_rerun_finishes(
    saver_url: str, redis_prefix: str
) -> None:
    with RedisSaver.from_conn_string(saver_url, prefix=redis_prefix) as saver:
        threads = [f"t{n}" for n in range(12)]
        for thread in threads:
            configs = put_chain(saver, thread, 3)
            saver.put_writes(configs[-1], [("w", thread)], "task")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        child = subprocess.Popen(
            [sys.executable, "-c", _KILLED_PRUNER, saver_url, redis_prefix],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert child.stdout is not None
        for _ in range(4):  # four threads deleted, then SIGKILL
            assert child.stdout.readline().strip()
        child.send_signal(signal.SIGKILL)
        child.wait()
        client = saver.client
        holder = client.get(saver.keys.prune_lock())
        assert holder is not None and f":{child.pid}:".encode() in holder  # killed mid-run
        left = [t for t in threads if client.exists(saver.keys.thread("default", t)[0])]
        assert 0 < len(left) < len(threads)
        for thread in threads:  # each thread whole or gone
            keys = saver.keys.thread("default", thread)
            count = sum(client.exists(k) for k in keys)
            ids = [t.checkpoint["id"] for t in saver.list(cfg(thread))]
            assert (count, len(ids)) in {(0, 0), (6, 3)}
        report = saver.prune_expired(Retention(idle=1), now=time.time() + DAY)
        assert not report.locked and report.threads == len(left)
        assert (
            list(saver.list(None)) == [] and client.zcard(saver.keys.tenant_index("default")) == 0
        )
        assert client.get(saver.keys.prune_lock()) is None


# ---------------------------------------------------------------- keep_latest and graphs


class Talk(TypedDict):
    log: Annotated[list[str], operator.add]


def _ask(state: Talk) -> dict[str, list[str]]:
    answer = interrupt("name?")
    return {"log": [f"name={answer}"]}


def talk_graph() -> StateGraph:
    builder = StateGraph(Talk)
    builder.add_node("greet", lambda s: {"log": ["hello"]})
    builder.add_node("think", lambda s: {"log": ["hmm"] * 3})
    builder.add_node("ask", _ask)
    builder.add_node("bye", lambda s: {"log": ["bye"]})
    builder.add_edge(START, "greet")
    builder.add_edge("greet", "think")
    builder.add_edge("think", "ask")
    builder.add_edge("ask", "bye")
    builder.add_edge("bye", END)
    return builder


def _concat(state: list[str], batches: list[list[str]]) -> list[str]:
    out = list(state)
    for batch in batches:
        out.extend(batch)
    return out


class Counted(TypedDict):
    items: Annotated[list[str], DeltaChannel(_concat, snapshot_frequency=5)]
    n: int


def counted_graph() -> StateGraph:
    builder = StateGraph(Counted)
    builder.add_node("one", lambda s: {"items": [f"one{s['n']}"], "n": s["n"] + 1})
    builder.add_node("two", lambda s: {"items": [f"two{s['n']}"]})
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    builder.add_edge("two", END)
    return builder


async def _invoke(graph: Any, value: Any, config: dict[str, Any], is_async: bool) -> Any:
    if is_async:
        return await graph.ainvoke(value, config)
    return graph.invoke(value, config)


async def _state(graph: Any, config: dict[str, Any], is_async: bool) -> Any:
    if is_async:
        return await graph.aget_state(config)
    return graph.get_state(config)


def _conf(thread: str, tenant: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "tenant_id": tenant}}


@pytest.mark.parametrize("target", TARGETS)
async def test_keep_latest_leaves_an_interrupted_graph_that_resumes(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    async with open_harness(request, target, redis_prefix) as h:
        graph = talk_graph().compile(checkpointer=h.saver)
        trimmed, kept = _conf("talk", "trimmed"), _conf("talk", "kept")
        for config in (trimmed, kept):
            paused = await _invoke(graph, {"log": ["start"]}, config, h.is_async)
            assert paused["__interrupt__"][0].value == "name?"
        before = await h.ids("talk", tenant_id="trimmed")
        blobs = h.raw.hlen(h.keys.thread("trimmed", "talk")[2])
        report = await h.prune_expired(Retention(strategy="keep_latest"), tenant_id="trimmed")
        assert (report.trimmed, report.checkpoints) == (1, len(before) - 1)
        assert await h.ids("talk", tenant_id="trimmed") == before[:1]
        assert h.raw.hlen(h.keys.thread("trimmed", "talk")[2]) < blobs
        state = await _state(graph, trimmed, h.is_async)
        assert state.next == ("ask",) and state.tasks[0].interrupts[0].value == "name?"
        done = await _invoke(graph, Command(resume="Ada"), trimmed, h.is_async)
        reference = await _invoke(graph, Command(resume="Ada"), kept, h.is_async)
        assert done == reference
        assert done["log"] == ["start", "hello", "hmm", "hmm", "hmm", "name=Ada", "bye"]


@pytest.mark.parametrize("target", TARGETS)
async def test_keep_latest_keeps_what_a_delta_channel_needs(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    async with open_harness(request, target, redis_prefix) as h:
        graph = counted_graph().compile(checkpointer=h.saver)
        configs = {t: _conf("c", t) for t in ("pruner", "prune", "kept")}
        for round_ in range(4):
            for config in configs.values():
                await _invoke(graph, {"items": [f"in{round_}"], "n": round_}, config, h.is_async)
        latest = await _state(graph, configs["kept"], h.is_async)
        assert latest.metadata.get("counters_since_delta_snapshot")  # rebuilt from ancestors
        expected = latest.values
        assert len(expected["items"]) == 12
        total = len(await h.ids("c", tenant_id="pruner"))
        report = await h.prune_expired(Retention(strategy="keep_latest"), tenant_id="pruner")
        left = len(await h.ids("c", tenant_id="pruner"))
        assert report.trimmed == 1 and 1 < left < total and report.checkpoints == total - left
        await h.prune(["c"], tenant_id="prune")  # the older API, keep_latest: the same trim
        assert len(await h.ids("c", tenant_id="prune")) == left
        for tenant in ("pruner", "prune"):
            assert (await _state(graph, configs[tenant], h.is_async)).values == expected
        for config in configs.values():
            await _invoke(graph, {"items": ["more"], "n": 9}, config, h.is_async)
        after = [(await _state(graph, c, h.is_async)).values for c in configs.values()]
        assert after[0] == after[1] == after[2] and len(after[0]["items"]) == 15


def test_keep_latest_trims_list_deltas_and_old_formats_safely(
    redis_url: str, redis_prefix: str, raw: redis.Redis
) -> None:
    with RedisSaver.from_conn_string(redis_url, prefix=redis_prefix) as saver:
        graph = talk_graph().compile(checkpointer=saver)
        for n in range(3):
            graph.invoke({"log": [f"run{n}"]}, _conf("t", "x"))
            graph.invoke(Command(resume=str(n)), _conf("t", "x"))
        blobs = saver.keys.thread("x", "t")[2]
        deltas = [v for v in raw.hvals(blobs) if v[:1] == b"D"]
        assert deltas  # the log channel is stored as deltas on earlier versions
        expected = graph.get_state(_conf("t", "x")).values
        report = saver.prune_expired(Retention(strategy="keep_latest", keep=2), tenant_id="x")
        assert report.trimmed == 1 and len(list(saver.list(cfg("t", tenant_id="x")))) == 2
        assert graph.get_state(_conf("t", "x")).values == expected
        for tup in saver.list(cfg("t", tenant_id="x")):  # both kept ones read whole
            assert tup.checkpoint["channel_values"]["log"][:1] == ["run0"]
        # the older prune() keeps the parent holding a format-1 checkpoint's sends
        parent = make_cp()
        parent["v"] = 1
        p_config = saver.put(cfg("old"), parent, {}, {})
        saver.put_writes(p_config, [("__pregel_tasks", "send-1")], "task")
        child = make_cp(count=1)
        child["v"] = 1
        child["channel_versions"] = {"count": "1"}
        saver.put(p_config, child, {}, {"count": "1"})
        saver.prune_expired(Retention(strategy="keep_latest"), tenant_id="default")
        assert len(list(saver.list(cfg("old")))) == 2
        tup = saver.get_tuple(cfg("old"))
        assert tup is not None and tup.checkpoint["channel_values"]["__pregel_tasks"] == ["send-1"]


def test_keys_and_json_of_the_stored_policy(redis_url: str, redis_prefix: str) -> None:
    with RedisSaver.from_conn_string(
        redis_url, prefix=redis_prefix, retention=Retention(idle=60)
    ) as saver:
        assert saver.keys.retention() == f"{redis_prefix}:retention"
        assert saver.keys.prune_lock() == f"{redis_prefix}:prune-lock"
        saver.setup()
        stored = json.loads(saver.client.get(saver.keys.retention()))
        assert stored == {"absolute": None, "idle": 60.0, "keep": 1, "strategy": "delete"}
