"""Retention on DynamoDB: policies on writes, expiry on reads, and the pruner.

Runs against moto's server through boto3, with the savers' injected clock
(writes) and the pruner's ``now=`` (decisions). Tests marked with the ``h``
fixture run with a sync and an async saver.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Annotated, Any

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_durable import Retention
from langgraph_durable._core.records import Sealed
from langgraph_durable._core.retention import LOCK_LEASE_SECONDS, PruneProgress, PruneReport
from langgraph_durable.dynamodb import AsyncDynamoDBSaver, DynamoDBSaver
from langgraph_durable.dynamodb._ops import LOCK_SK, META_PK, thread_pk
from langgraph_durable.dynamodb.saver import parse_conn_string
from langgraph_durable.dynamodb.server import checkpointer
from langgraph_durable.errors import ConfigurationError, StorageError
from tests.dynamodb.helpers import (
    CallCounter,
    error_response,
    make_client,
    raw_items,
    table_dump,
)
from tests.helpers import cfg, make_cp, put_chain

T0 = 1_000_000.0
IDLE = Retention(idle=datetime.timedelta(seconds=100))
TRIM = Retention(strategy="keep_latest")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Harness:
    """A sync or async saver behind one awaitable interface."""

    def __init__(self, saver: Any, is_async: bool, clock: Clock) -> None:
        self.saver = saver
        self.is_async = is_async
        self.clock = clock

    @classmethod
    async def open(cls, kind: str, client: Any, table: str, **settings: Any) -> Harness:
        clock = Clock()
        if kind == "async":
            asaver = AsyncDynamoDBSaver(client, table=table, clock=clock, **settings)
            await asaver.setup()
            return cls(asaver, True, clock)
        saver = DynamoDBSaver(client, table=table, clock=clock, **settings)
        saver.setup()
        return cls(saver, False, clock)

    async def close(self) -> None:
        if self.is_async:
            await self.saver.close()
        else:
            self.saver.close()

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A public saver method (``a``-prefixed on the async saver)."""
        if self.is_async:
            return await getattr(self.saver, "a" + method)(*args, **kwargs)
        return getattr(self.saver, method)(*args, **kwargs)

    async def prune(self, *args: Any, **kwargs: Any) -> PruneReport:
        kwargs.setdefault("now", self.clock.now)
        return await self.call("prune_expired", *args, **kwargs)  # type: ignore[no-any-return]

    async def history(self, config: Any) -> list[Any]:
        if self.is_async:
            return [t async for t in self.saver.alist(config)]
        return list(self.saver.list(config))

    async def put_chain(self, thread: str, n: int, **extra: Any) -> list[dict[str, Any]]:
        # the async saver's sync methods run from another thread
        return await asyncio.to_thread(put_chain, self.saver, thread, n, **extra)

    async def invoke(self, graph: Any, value: Any, config: Any) -> Any:
        if self.is_async:
            return await graph.ainvoke(value, config)
        return graph.invoke(value, config)

    async def state(self, graph: Any, config: Any) -> Any:
        if self.is_async:
            return await graph.aget_state(config)
        return graph.get_state(config)


@pytest.fixture
def client(dynamodb_endpoint: str) -> Any:
    return make_client(dynamodb_endpoint)


def _policies(tenant: str) -> Retention | None:
    """The per-tenant policy most tests use: delete after 100 s idle, trim, or keep."""
    return {"short": IDLE, "trim": Retention(strategy="keep_latest", idle=100)}.get(tenant)


@pytest.fixture(params=["sync", "async"])
async def h(request: Any, client: Any, dynamodb_table: str) -> AsyncIterator[Harness]:
    harness = await Harness.open(request.param, client, dynamodb_table, retention=_policies)
    yield harness
    await harness.close()


def _naming(client: Any, table: str, tenant: str, thread: str) -> list[dict[str, Any]]:
    """Every stored item of one thread."""
    pk = thread_pk(tenant, thread)
    return [i for i in raw_items(client, table) if i["pk"]["S"] == pk]


def _tenant_items(client: Any, table: str, tenant: str) -> dict[tuple[str, str], Any]:
    """A tenant's items by (thread, sort key), comparable across tenants that hold the
    same data: without the partition key and the metadata (which names the tenant)."""
    out = {}
    for item in raw_items(client, table):
        pk = item["pk"]["S"]
        if pk.startswith(f"{tenant}#"):
            rest = {k: v for k, v in item.items() if k not in ("pk", "m", "mi")}
            out[(pk.split("#", 1)[1], item["sk"]["S"])] = rest
    return out


# ---- settings --------------------------------------------------------------------------


def test_ttl_is_a_deprecated_alias_of_retention_idle(client: Any, dynamodb_table: str) -> None:
    clock = Clock()
    with pytest.warns(DeprecationWarning, match="retention="):
        s = DynamoDBSaver(client, table=dynamodb_table, ttl=100, clock=clock)
    assert s.retention == IDLE
    s.setup()
    (config,) = put_chain(s, "t", 1)
    assert all("expires_at" in i for i in raw_items(client, dynamodb_table))
    clock.now += 99
    assert s.get_tuple(config) is not None
    clock.now += 2
    assert s.get_tuple(config) is None
    with pytest.raises(ConfigurationError, match="not both"):
        DynamoDBSaver(client, table=dynamodb_table, ttl=100, retention=IDLE)
    with pytest.raises(ConfigurationError, match="ttl_refresh needs ttl or retention"):
        DynamoDBSaver(client, table=dynamodb_table, ttl_refresh=10)
    assert parse_conn_string("dynamodb://tbl?ttl=60")["ttl"] == 60
    with pytest.warns(DeprecationWarning, match="retention="):
        with DynamoDBSaver.from_conn_string("dynamodb://tbl?ttl=60&region=us-east-1") as u:
            assert u.retention == Retention(idle=datetime.timedelta(seconds=60))
    with pytest.raises(ConfigurationError, match="retention must be"):
        DynamoDBSaver(client, table=dynamodb_table, retention="30d")  # type: ignore[arg-type]


async def test_retention_from_urls_and_the_agent_server_factory(
    dynamodb_endpoint: str, dynamodb_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert parse_conn_string(
        "dynamodb://tbl?retention_idle=30d&retention_absolute=7776000"
        "&retention_strategy=keep_latest&retention_keep=2"
    ) == {
        "table": "tbl",
        "retention": Retention(
            idle=datetime.timedelta(days=30),
            absolute=datetime.timedelta(days=90),
            strategy="keep_latest",
            keep=2,
        ),
    }
    with pytest.raises(ConfigurationError, match="needs idle or absolute"):
        parse_conn_string("dynamodb://tbl?retention_strategy=delete")
    with pytest.raises(ConfigurationError, match="duration 'soon'"):
        parse_conn_string("dynamodb://tbl?retention_idle=soon")
    url = (
        f"dynamodb://{dynamodb_table}?region=us-east-1&endpoint={dynamodb_endpoint}"
        "&retention_idle=1h"
    )
    hour = Retention(idle=datetime.timedelta(hours=1))
    with DynamoDBSaver.from_conn_string(url) as s:
        assert s.retention == hour
        assert s.setup() == ["created table", "enabled TTL"]
        assert Retention.from_json(s._run(s._ops.retention_get())) == hour
    other = Retention(absolute=datetime.timedelta(days=1))
    async with AsyncDynamoDBSaver.from_conn_string(url) as a:
        assert a.retention == hour
    async with AsyncDynamoDBSaver.from_conn_string(url, retention=other) as a:
        assert a.retention == other  # keyword arguments override the URL
    monkeypatch.setenv("LGD_DYNAMODB_URL", url.replace("retention_idle=1h", "retention_idle=2h"))
    async with checkpointer() as saver:
        two = Retention(idle=datetime.timedelta(hours=2))
        assert saver.retention == two
        assert await saver._arun(saver._ops.retention_get()) == two.to_json()


# ---- writes and reads under a policy ---------------------------------------------------


async def test_idle_expiry_hides_threads_and_the_pruner_deletes_them(
    h: Harness, client: Any, dynamodb_table: str
) -> None:
    old = await h.put_chain("old", 3, tenant_id="short")
    await h.call("put_writes", old[-1], [("a", [1])], "task")
    claim = h.saver._ops.effect_claim("short", "old", "e1", Sealed("json", b"{}"), T0, T0, False)
    await (h.saver._arun(claim) if h.is_async else asyncio.to_thread(h.saver._run, claim))
    h.clock.now += 60
    new = await h.put_chain("new", 3, tenant_id="short")
    h.clock.now += 41  # old: 101 s idle; new: 41 s
    assert await h.call("get_tuple", cfg("old", tenant_id="short")) is None
    assert await h.call("get_tuple", old[0]) is None
    assert await h.history(cfg("old", tenant_id="short")) == []
    everything = await h.history({"configurable": {"tenant_id": "short"}})
    assert [t.config["configurable"]["thread_id"] for t in everything] == ["new"] * 3
    items_of_new = _naming(client, dynamodb_table, "short", "new")
    assert len(_naming(client, dynamodb_table, "short", "old")) == 9  # lazily deleted: still there

    progress: list[PruneProgress] = []
    report = await h.prune(progress=progress.append)
    assert (report.threads, report.trimmed, report.checkpoints) == (1, 0, 3)
    assert report.bytes > 0 and report.threads_seen == 1 and not report.budget_exhausted
    assert progress and progress[-1].threads == 1 and progress[-1].checkpoints == 3
    assert _naming(client, dynamodb_table, "short", "old") == []  # gone, head included
    assert _naming(client, dynamodb_table, "short", "new") == items_of_new  # untouched
    assert [t.config for t in await h.history(cfg("new", tenant_id="short"))] == new[::-1]
    # the lock is released
    assert not [i for i in raw_items(client, dynamodb_table) if i["pk"]["S"] == META_PK]


async def test_absolute_expiry_ends_a_busy_thread(client: Any, dynamodb_table: str) -> None:
    both = Retention(idle=datetime.timedelta(seconds=100), absolute=datetime.timedelta(seconds=150))
    h = await Harness.open("sync", client, dynamodb_table, retention=both)
    (first,) = await h.put_chain("busy", 1)
    for _ in range(2):
        h.clock.now += 60  # never idle for long
        await h.put_chain("busy", 1)
    head = next(
        i for i in _naming(client, dynamodb_table, "default", "busy") if i["sk"]["S"] == "h"
    )
    assert {k: int(v["N"]) for k, v in head.items() if k in ("created", "ts", "dies_at")} == {
        "created": 1_000_000,
        "ts": 1_000_120,
        "dies_at": 1_000_150,
    }
    # items carry a TTL no earlier than the thread's end (DynamoDB deletes lazily)
    stamps = [int(i["expires_at"]["N"]) for i in _naming(client, dynamodb_table, "default", "busy")]
    assert min(stamps) >= 1_000_150
    h.clock.now = T0 + 149
    assert await h.call("get_tuple", first) is not None
    h.clock.now = T0 + 151  # 31 s after the last write, 151 s after the first
    assert await h.call("get_tuple", cfg("busy")) is None
    assert await h.history(cfg("busy")) == []
    report = await h.prune()
    assert (report.threads, report.checkpoints) == (1, 3)
    assert _naming(client, dynamodb_table, "default", "busy") == []
    # a write to the expired thread would have started it afresh as well
    fresh = await h.put_chain("busy", 1)
    assert [t.config for t in await h.history(cfg("busy"))] == fresh


async def test_a_policy_per_tenant(h: Harness, client: Any, dynamodb_table: str) -> None:
    for tenant in ("short", "trim", "keep"):
        await h.put_chain("t", 3, tenant_id=tenant)
    kinds = {
        tenant: {("expires_at" in i) for i in _naming(client, dynamodb_table, tenant, "t")}
        for tenant in ("short", "trim", "keep")
    }
    assert kinds == {"short": {True}, "trim": {False}, "keep": {False}}
    assert not any(i["sk"]["S"] == "h" for i in _naming(client, dynamodb_table, "keep", "t"))
    h.clock.now += 101
    assert await h.call("get_tuple", cfg("t", tenant_id="short")) is None
    for tenant in ("trim", "keep"):  # keep_latest threads are trimmed, never hidden
        assert len(await h.history(cfg("t", tenant_id=tenant))) == 3
    report = await h.prune()
    assert (report.threads, report.trimmed, report.checkpoints, report.threads_seen) == (1, 1, 5, 2)
    assert _naming(client, dynamodb_table, "short", "t") == []
    assert len(await h.history(cfg("t", tenant_id="trim"))) == 1
    assert len(await h.history(cfg("t", tenant_id="keep"))) == 3
    # only one tenant, and an explicit policy instead of the saver's
    await h.put_chain("t", 2, tenant_id="keep")
    report = await h.prune(TRIM, tenant_id="keep")
    assert (report.trimmed, report.checkpoints, report.threads_seen) == (1, 4, 1)
    assert len(await h.history(cfg("t", tenant_id="keep"))) == 1


# ---- keep_latest leaves threads that resume --------------------------------------------


class Ask(TypedDict):
    count: int
    answer: str


def _ask_graph() -> Any:
    def step(state: Ask) -> dict[str, Any]:
        return {"count": state["count"] + 1}

    def ask(state: Ask) -> dict[str, Any]:
        return {"answer": interrupt(f"go on after {state['count']}?")}

    builder = StateGraph(Ask)
    builder.add_node("step", step)
    builder.add_node("ask", ask)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["count"] < 4 else "ask")
    builder.add_edge("ask", END)
    return builder


def _extend(state: list[str], writes: Sequence[list[str]]) -> list[str]:
    return [*state, *(x for w in writes for x in w)]


class Deltas(TypedDict):
    count: int
    items: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=3)]


def _delta_graph() -> Any:
    def step(state: Deltas) -> dict[str, Any]:
        n = state["count"] + 1
        return {"count": n, "items": [f"i{n}"]}

    builder = StateGraph(Deltas)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["count"] % 7 else END)
    return builder


async def test_keep_latest_leaves_an_interrupted_graph_that_resumes(h: Harness) -> None:
    graph = _ask_graph().compile(checkpointer=h.saver)
    pruned, ref = cfg("t"), cfg("t", tenant_id="untouched")
    for config in (pruned, ref):
        await h.invoke(graph, {"count": 0, "answer": ""}, config)
    before = await h.state(graph, pruned)
    assert before.next == ("ask",) and before.interrupts
    report = await h.prune(TRIM, tenant_id="default")
    assert report.trimmed == 1 and report.checkpoints == len(await h.history(ref)) - 1 == 5
    assert len(await h.history(pruned)) == 1
    after = await h.state(graph, pruned)
    assert (after.values, after.next, after.interrupts) == (
        before.values,
        before.next,
        before.interrupts,
    )
    results = [await h.invoke(graph, Command(resume="yes"), c) for c in (pruned, ref)]
    assert results[0] == results[1] == {"count": 4, "answer": "yes"}


async def test_keep_latest_keeps_what_a_delta_channel_needs(h: Harness) -> None:
    graph = _delta_graph().compile(checkpointer=h.saver)
    configs = {
        "expired": cfg("t"),  # pruned by prune_expired
        "pruned": cfg("t", tenant_id="other"),  # by prune(thread_ids)
        "ref": cfg("t", tenant_id="untouched"),
    }
    for config in configs.values():
        await h.invoke(graph, {"count": 0, "items": ["start"]}, config)
    tips = await h.history(configs["ref"])
    assert tips[0].metadata.get("counters_since_delta_snapshot")  # rebuilt from ancestors
    before = await h.state(graph, configs["ref"])
    assert before.values["items"] == ["start"] + [f"i{n}" for n in range(1, 8)]
    report = await h.prune(TRIM, tenant_id="default")
    assert report.trimmed == 1
    await h.call("prune", ["t"], strategy="keep_latest", tenant_id="other")
    for name in ("expired", "pruned"):
        kept = await h.history(configs[name])
        assert 1 < len(kept) < len(tips)  # the snapshot and what follows it
        assert (await h.state(graph, configs[name])).values == before.values
    # they go on exactly as the untouched thread does
    for config in configs.values():
        await h.invoke(graph, {"count": 0, "items": ["more"]}, config)
    finals = [(await h.state(graph, c)).values for c in configs.values()]
    assert finals[0] == finals[1] == finals[2]
    assert finals[0]["items"][-8:] == ["more"] + [f"i{n}" for n in range(1, 8)]


# ---- dry runs ----------------------------------------------------------------------------


async def test_a_dry_run_changes_nothing_and_counts_what_a_run_removes(
    h: Harness, client: Any, dynamodb_table: str
) -> None:
    for tenant in ("short", "trim", "keep"):
        configs = await h.put_chain("a", 3, tenant_id=tenant)
        await h.call("put_writes", configs[0], [("x", {"big": "y" * 50})], "t1")
        await h.put_chain("b", 2, tenant_id=tenant)
    h.clock.now += 50
    await h.put_chain("c", 2, tenant_id="short")  # stays live
    h.clock.now += 51
    before = table_dump(client, dynamodb_table)
    dry = await h.prune(dry_run=True)
    assert table_dump(client, dynamodb_table) == before
    assert dry.dry_run and not dry.locked
    assert sorted(dry.thread_ids) == [("short", "a"), ("short", "b"), ("trim", "a"), ("trim", "b")]
    real = await h.prune()
    assert not real.dry_run and real.thread_ids == []
    counts = ("threads", "trimmed", "checkpoints", "bytes", "threads_seen")
    assert [getattr(dry, n) for n in counts] == [getattr(real, n) for n in counts]
    assert (real.threads, real.trimmed, real.checkpoints, real.threads_seen) == (2, 2, 8, 4)
    # the next dry run finds nothing left to do
    again = await h.prune(dry_run=True)
    assert (again.threads, again.trimmed, again.checkpoints, again.bytes) == (0, 0, 0, 0)


# ---- the lock ------------------------------------------------------------------------------


def _hold_lock(client: Any, table: str, holder: str, until: float) -> None:
    client.put_item(
        TableName=table,
        Item={
            "pk": {"S": META_PK},
            "sk": {"S": LOCK_SK},
            "holder": {"S": holder},
            "until": {"N": str(until)},
        },
    )


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_one_pruner_at_a_time(client: Any, dynamodb_table: str) -> None:
    s = DynamoDBSaver(client, table=dynamodb_table, retention=IDLE, clock=Clock())
    s.setup()
    put_chain(s, "t", 2)
    now = T0 + 500
    _hold_lock(client, dynamodb_table, "elsewhere:4242:cafe", now + 30)
    report = s.prune_expired(now=now)
    assert report.locked and (report.threads, report.threads_seen) == (0, 0)
    assert len(_naming(client, dynamodb_table, "default", "t")) == 5
    # a dry run changes nothing, so it needs no lock
    assert s.prune_expired(now=now, dry_run=True).threads == 1
    # a lease that ran out is taken over
    report = s.prune_expired(now=now + 31)
    assert not report.locked and report.threads == 1
    assert raw_items(client, dynamodb_table) == [
        i for i in raw_items(client, dynamodb_table) if i["sk"]["S"] == "retention"
    ]
    # so is the lock of a process of this host that has died, lease or not
    put_chain(s, "t", 1)
    _hold_lock(client, dynamodb_table, f"{socket.gethostname()}:{_dead_pid()}:beef", now + 60)
    report = s.prune_expired(now=now)
    assert not report.locked and report.threads == 1
    # but not a live one's
    _hold_lock(client, dynamodb_table, f"{socket.gethostname()}:1:beef", now + 60)
    assert s.prune_expired(now=now).locked


# ---- interrupted runs -----------------------------------------------------------------------


def _put_story(saver: Any, tenant: str, thread: str, n: int) -> None:
    """``n`` checkpoints with a blob and a write each, with ids the same in every tenant."""
    parent = None
    for i in range(n):
        cp = make_cp(step=i, payload={"i": i})
        cp["id"] = f"{thread}-{i:04d}"
        cp["ts"] = f"2026-01-01T00:00:{i:02d}+00:00"
        cp["v"] = 4
        cp["channel_versions"] = {"step": f"{i + 1:032}.0", "payload": f"{i + 1:032}.0"}
        saver.put(
            cfg(thread, checkpoint_id=parent, tenant_id=tenant),
            cp,
            {"step": i},
            dict(cp["channel_versions"]),
        )
        parent = cp["id"]
        config = cfg(thread, checkpoint_id=parent, tenant_id=tenant)
        saver.put_writes(config, [("payload", {"w": i})], f"task{i}")


class FailNthBatchWrite:
    """Fails the ``n``-th BatchWriteItem from now on (a call the saver does not retry)."""

    def __init__(self, client: Any, n: int) -> None:
        self.left = n
        self.failed = 0
        client.meta.events.register("before-call.dynamodb.BatchWriteItem", self._maybe)

    def _maybe(self, **_: Any) -> Any:
        self.left -= 1
        if self.left == 0:
            self.failed += 1
            return error_response("ValidationException", "injected failure")
        return None


def test_an_interrupted_pruner_ends_like_an_uninterrupted_one(
    client: Any, dynamodb_table: str
) -> None:
    def policy(tenant: str) -> Retention:
        return IDLE if tenant in ("a", "b") else Retention(strategy="keep_latest", idle=100)

    clock = Clock()
    s = DynamoDBSaver(client, table=dynamodb_table, retention=policy, clock=clock)
    s.setup()
    # a and b delete, c and d trim: each pair holds the same data
    for tenant in "abcd":
        _put_story(s, tenant, "x", 12)  # 37 items: deletes take two BatchWriteItem calls
        _put_story(s, tenant, "y", 3)
    clock.now += 150
    for tenant in "abcd":
        _put_story(s, tenant, "live", 2)
    now = clock.now + 60

    # uninterrupted
    assert s.prune_expired(now=now, tenant_id="b").threads == 2
    assert s.prune_expired(now=now, tenant_id="d").trimmed == 2

    # a failure in the middle of a thread's deletion (its head says gone, some items
    # deleted), then a run from scratch; and in the middle of a trim
    for tenant in "ac":
        fault = FailNthBatchWrite(client, 2)
        with pytest.raises(StorageError, match="injected failure"):
            s.prune_expired(now=now, tenant_id=tenant)
        assert fault.failed == 1
    assert _tenant_items(client, dynamodb_table, "a") != _tenant_items(client, dynamodb_table, "b")
    assert _tenant_items(client, dynamodb_table, "c") != _tenant_items(client, dynamodb_table, "d")
    # half deleted, yet gone for readers: its head says so
    assert any("gone" in i for i in _naming(client, dynamodb_table, "a", "x"))
    assert s.get_tuple(cfg("x", tenant_id="a")) is None
    assert list(s.list(cfg("x", tenant_id="a"))) == []
    # half trimmed: the kept checkpoint is whole
    assert len(list(s.list(cfg("x", tenant_id="c")))) == 1
    # the failed runs released the lock; the next ones run out of time after each thread
    # (each run goes on where the last one stopped: three runs see the three threads,
    # of which two are expired: threads_seen counts those)
    for tenant in "ac":
        runs = [
            s.prune_expired(now=now, tenant_id=tenant, max_seconds=1e-9, batch=1) for _ in range(3)
        ]
        assert [r.budget_exhausted for r in runs] == [True, True, False]
        assert sorted(r.threads_seen for r in runs) == [0, 1, 1]
    assert _tenant_items(client, dynamodb_table, "a") == _tenant_items(client, dynamodb_table, "b")
    assert _tenant_items(client, dynamodb_table, "c") == _tenant_items(client, dynamodb_table, "d")
    assert {thread for thread, _sk in _tenant_items(client, dynamodb_table, "a")} == {"live"}
    assert not [i for i in raw_items(client, dynamodb_table) if i["pk"]["S"] == META_PK]
    for tenant in "bd":
        assert len(list(s.list(cfg("live", tenant_id=tenant)))) == 2
    assert len(list(s.list(cfg("x", tenant_id="c")))) == 1


# ---- threads written without a policy, leftovers, meta items --------------------------------


def test_threads_without_a_head_and_leftovers_are_found(client: Any, dynamodb_table: str) -> None:
    clock = Clock()
    plain = DynamoDBSaver(client, table=dynamodb_table, clock=clock)  # no retention
    plain.setup()
    put_chain(plain, "plain", 2)
    s = DynamoDBSaver(client, table=dynamodb_table, retention=IDLE, clock=clock)
    put_chain(s, "headless", 2)
    put_chain(s, "marked", 2)
    put_chain(s, "live", 1)
    # DynamoDB's TTL deleted one head early; a pruner died while deleting another
    client.delete_item(
        TableName=dynamodb_table,
        Key={"pk": {"S": thread_pk("default", "headless")}, "sk": {"S": "h"}},
    )
    client.update_item(
        TableName=dynamodb_table,
        Key={"pk": {"S": thread_pk("default", "marked")}, "sk": {"S": "h"}},
        UpdateExpression="SET gone = :t, gb = :who, gr = :p, gu = :until",
        ExpressionAttributeValues={
            ":t": {"N": str(T0)},
            ":who": {"S": "elsewhere:1:dead"},
            ":p": {"S": "p"},
            ":until": {"N": str(T0 + 10_000)},
        },
    )
    assert s.get_tuple(cfg("headless")) is None and s.get_tuple(cfg("marked")) is None
    # by stored expiry alone (a saver without retention): only the leftovers go
    report = plain.prune_expired(now=T0 + 10)
    assert (report.threads, report.checkpoints, report.threads_seen) == (2, 4, 2)
    assert {split[0] for split in _threads(client, dynamodb_table)} == {"plain", "live"}
    # a policy given to the run finds the thread written without one, by its items;
    # readers stop seeing it before anything of it is deleted
    clock.now += 50
    put_chain(s, "live", 1)
    fault = FailNthBatchWrite(client, 1)
    with pytest.raises(StorageError, match="injected failure"):
        plain.prune_expired(IDLE, now=T0 + 101)
    assert fault.failed == 1 and len(_naming(client, dynamodb_table, "default", "plain")) == 5
    assert plain.get_tuple(cfg("plain")) is None and list(plain.list(cfg("plain"))) == []
    assert len(list(s.list(cfg("live")))) == 2
    report = plain.prune_expired(IDLE, now=T0 + 101)
    assert (report.threads, report.checkpoints) == (1, 2)
    assert {split[0] for split in _threads(client, dynamodb_table)} == {"live"}
    assert len(list(s.list(cfg("live")))) == 2


def _threads(client: Any, table: str) -> set[tuple[str, str]]:
    """(thread, sort key) of every thread item of the default tenant."""
    return {
        (i["pk"]["S"].split("#", 1)[1], i["sk"]["S"])
        for i in raw_items(client, table)
        if i["pk"]["S"].startswith("default#")
    }


def test_meta_items_are_never_threads(client: Any, dynamodb_table: str) -> None:
    s = DynamoDBSaver(client, table=dynamodb_table, retention=IDLE, clock=Clock())
    s.setup()
    assert Retention.from_json(s._run(s._ops.retention_get())) == IDLE
    s._run(s._ops.retention_set(TRIM.to_json()))
    assert s._run(s._ops.retention_get()) == TRIM.to_json()
    put_chain(s, "t", 2, run_id="run-1")
    _hold_lock(client, dynamodb_table, "elsewhere:1:x", 0)  # a stale lock
    for tenant in ("default", "", "#"):
        found = list(s.list({"configurable": {"tenant_id": tenant}}))
        assert {t.config["configurable"]["thread_id"] for t in found} <= {"t"}
    s.delete_for_runs(["run-1"])
    report = s.prune_expired(now=T0 + 1_000)
    assert report.threads_seen == 1  # the head "t" left behind, not the meta items
    left = {(i["pk"]["S"], i["sk"]["S"]) for i in raw_items(client, dynamodb_table)}
    assert left == {(META_PK, "retention")}


# ---- writers and deletions -------------------------------------------------------------------


def test_a_write_waits_for_or_takes_over_a_threads_deletion(
    client: Any, dynamodb_table: str
) -> None:
    clock = Clock()
    s = DynamoDBSaver(client, table=dynamodb_table, retention=IDLE, clock=clock)
    s.setup()
    pk = {"S": thread_pk("default", "t")}

    def mark(holder: str, until: float) -> None:
        client.update_item(
            TableName=dynamodb_table,
            Key={"pk": pk, "sk": {"S": "h"}},
            UpdateExpression="SET gone = :t, gb = :who, gr = :p, gu = :until",
            ExpressionAttributeValues={
                ":t": {"N": str(clock.now)},
                ":who": {"S": holder},
                ":p": {"S": "p"},
                ":until": {"N": str(until)},
            },
        )

    # a pruner of this host that died mid-deletion: the write deletes the rest, then writes
    put_chain(s, "t", 2)
    mark(f"{socket.gethostname()}:{_dead_pid()}:0", clock.now + LOCK_LEASE_SECONDS)
    fresh = put_chain(s, "t", 1)
    assert [t.config for t in s.list(cfg("t"))] == fresh
    assert len(_naming(client, dynamodb_table, "default", "t")) == 3  # head, pointer, blob

    # a live deleter elsewhere: the write waits until it is done
    mark("elsewhere:7:0", clock.now + LOCK_LEASE_SECONDS)

    def finish() -> None:
        for item in _naming(client, dynamodb_table, "default", "t"):
            client.delete_item(TableName=dynamodb_table, Key={"pk": pk, "sk": item["sk"]})

    counter = CallCounter(client)
    timer = threading.Timer(0.3, finish)
    timer.start()
    fresh = put_chain(s, "t", 1)
    timer.join()
    assert [t.config for t in s.list(cfg("t"))] == fresh
    calls = counter.reset()
    assert calls["GetItem"] >= 3 and calls["BatchWriteItem"] == 0  # it looked, then waited


def test_policy_results_are_checked(client: Any, dynamodb_table: str) -> None:
    bad: Callable[[str], Any] = lambda _tenant: "30d"  # noqa: E731
    s = DynamoDBSaver(client, table=dynamodb_table, retention=bad)
    s.setup()
    with pytest.raises(ConfigurationError, match="return a langgraph_durable.Retention"):
        put_chain(s, "t", 1)
