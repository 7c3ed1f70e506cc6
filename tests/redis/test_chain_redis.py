"""Redis and the hash chain: thread enumeration for ``verify``, tombstones on trims.

``thread_page`` (the saver's ``_ops``) walks every thread that has a checkpoint,
a SCAN page at a time; ``keep_latest`` trims (``prune`` and the pruner's
``prune_expired``) of a saver with ``integrity=`` leave, in each surviving
checkpoint whose parent they remove, a signed tombstone naming that parent and
its digest. Everything runs on the real server (and, where marked, the 3-node
cluster); stored bodies are read raw from the payload hash.
"""

from __future__ import annotations

import asyncio
import hashlib
import operator
import time
from collections.abc import AsyncIterator, Generator
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypedDict

import ormsgpack
import pytest
import redis
from langgraph.graph import END, START, StateGraph
from redis.cluster import RedisCluster

from langgraph_durable import Retention
from langgraph_durable._core.chain import ChainBlock, split_block
from langgraph_durable._core.records import Sealed
from langgraph_durable._core.sansio import Operation
from langgraph_durable.errors import InvalidInputError
from langgraph_durable.redis import AsyncRedisSaver, RedisSaver
from langgraph_durable.redis._requests import Batch, Command, Script
from langgraph_durable.redis._scripts import PRUNE_TRIM
from tests.helpers import cfg, make_cp, put_chain

KEY = b"k" * 32
HOUR = 3600.0

TARGETS = [
    pytest.param(("sync", "single"), id="sync"),
    pytest.param(("async", "single"), id="async"),
    pytest.param(("sync", "cluster"), id="sync-cluster"),
]


class Harness:
    """A saver (sync or async) and a raw client on the same server or cluster."""

    def __init__(self, saver: Any, raw: Any, is_async: bool) -> None:
        self.saver = saver
        self.raw = raw
        self.is_async = is_async

    async def run(self, op: Operation[Any]) -> Any:
        if self.is_async:
            return await self.saver._arun(op)
        return self.saver._run(op)

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A saver method, ``a<name>`` on the async saver."""
        if self.is_async:
            return await getattr(self.saver, "a" + name)(*args, **kwargs)
        return getattr(self.saver, name)(*args, **kwargs)

    async def put_chain(self, thread: str, n: int, **extra: Any) -> list[str]:
        if self.is_async:  # the async saver's sync methods run on its loop, from a thread
            configs = await asyncio.to_thread(put_chain, self.saver, thread, n, **extra)
        else:
            configs = put_chain(self.saver, thread, n, **extra)
        return [c["configurable"]["checkpoint_id"] for c in configs]

    async def put_one(self, thread: str, tenant: str, ns: str = "") -> None:
        await self.call("put", cfg(thread, ns, tenant_id=tenant), make_cp(), {}, {})

    async def ids(self, thread: str, tenant: str = "default") -> list[str]:
        config = cfg(thread, tenant_id=tenant)
        if self.is_async:
            tuples = [t async for t in self.saver.alist(config)]
        else:
            tuples = list(self.saver.list(config))
        return [t.config["configurable"]["checkpoint_id"] for t in tuples]

    async def walk(self, tenant: str | None, limit: int) -> list[list[tuple[str, str]]]:
        """Every page of a full ``thread_page`` walk."""
        pages, cursor = [], None
        while True:
            page, cursor = await self.run(self.saver._ops.thread_page(tenant, cursor, limit))
            pages.append(page)
            if cursor is None:
                return pages

    # ---- raw views

    def payload_key(self, thread: str, tenant: str = "default") -> str:
        return self.saver.keys.thread(tenant, thread)[1]  # type: ignore[no-any-return]

    def payload(self, thread: str, cid: str, tenant: str = "default", ns: str = "") -> bytes:
        raw = self.raw.hget(self.payload_key(thread, tenant), f"{ns}\x00{cid}".encode())
        assert raw is not None, f"checkpoint {cid} is not stored"
        return raw  # type: ignore[no-any-return]

    def body(self, thread: str, cid: str, tenant: str = "default") -> Sealed:
        """A checkpoint's body as stored (see ``_records.encode_payload``)."""
        _index, b_type, b_data, _m_type, _m_data = ormsgpack.unpackb(
            self.payload(thread, cid, tenant)
        )
        return Sealed(b_type, b_data)

    def block(self, thread: str, cid: str, tenant: str = "default") -> ChainBlock | None:
        return split_block(self.body(thread, cid, tenant))[1]


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


def _record_requests(saver: Any) -> list[Any]:
    """Record every request the sync saver's driver sends (the saver works as before)."""
    sent: list[Any] = []
    execute = saver._conn.execute

    def recording(request: Any) -> Any:
        sent.append(request)
        return execute(request)

    saver._conn.execute = recording
    return sent


def _hmgets(sent: list[Any]) -> list[Command]:
    return [
        item
        for request in sent
        if isinstance(request, Batch)
        for item in request.requests
        if isinstance(item, Command) and item.args[0] == "HMGET"
    ]


def _trims(sent: list[Any]) -> list[Script]:
    out = []
    for request in sent:
        items = request.requests if isinstance(request, Batch) else (request,)
        out += [i for i in items if isinstance(i, Script) and i.script is PRUNE_TRIM]
    return out


# ---------------------------------------------------------------- thread_page


@pytest.mark.parametrize("target", TARGETS)
async def test_thread_page_walks_every_thread_once(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    async with open_harness(request, target, redis_prefix) as h:
        assert await h.run(h.saver._ops.thread_page(None, None, 7)) == ([], None)
        assert await h.run(h.saver._ops.thread_page("t1", None, 7)) == ([], None)
        expected = [("t1", f"a{i}") for i in range(13)] + [("t2", f"b:{{{i}}}") for i in range(12)]
        for tenant, thread in expected:
            await h.put_one(thread, tenant)
        await h.put_one("a0", "t1", ns="child")  # a second namespace: still one thread
        pages = await h.walk(None, 7)
        found = [pair for page in pages for pair in page]
        assert sorted(found) == sorted(expected)  # each exactly once
        assert all(len(page) == 7 for page in pages[:-1]) and 0 < len(pages[-1]) <= 7
        assert len(pages) == 4
        # one tenant's threads only (a tenant whose name starts the same is not it)
        await h.put_one("x", "t1*")
        await h.put_one("y", "t1:z")
        t1 = [pair for page in await h.walk("t1", 7) for pair in page]
        assert sorted(t1) == sorted(p for p in expected if p[0] == "t1")
        assert [p for page in await h.walk("t1*", 7) for p in page] == [("t1*", "x")]
        # a thread without checkpoints (deleted, or only an effect-journal entry) is not listed
        await h.call("delete_thread", "a1", tenant_id="t1")
        now = time.time()
        claim = h.saver._effect_claim_op("t1", "only-effects", b"m", {"x": 1}, now + 60, now, False)
        assert (await h.run(claim)).entry.won
        found = [pair for page in await h.walk(None, 100) for pair in page]
        assert ("t1", "a1") not in found and ("t1", "only-effects") not in found
        assert len(found) == len(expected) - 1 + 2


async def test_thread_page_cursor_is_checked(redis_url: str, redis_prefix: str) -> None:
    async with AsyncRedisSaver.from_conn_string(redis_url, prefix=redis_prefix) as saver:
        with pytest.raises(InvalidInputError, match="cursor"):
            await saver._arun(saver._ops.thread_page(None, "nonsense", 5))
        with pytest.raises(InvalidInputError, match="limit"):
            await saver._arun(saver._ops.thread_page(None, None, 0))


# ---------------------------------------------------------------- tombstones


def _check_tombstone(
    h: Harness,
    thread: str,
    survivor: str,
    removed: list[str],
    before: dict[str, ChainBlock | None],
    tenant: str = "default",
) -> None:
    """The survivor's stored body carries a tombstone of its removed parent."""
    chain = h.saver._ops.codec.chain
    block = h.block(thread, survivor, tenant)
    assert block is not None and block.tombstone is not None
    old = before[survivor]
    assert old is not None and old.tombstone is None
    assert block.digest == old.digest and block.covers == old.covers  # the link is unchanged
    tomb = block.tombstone
    parent = max(removed)
    parent_block = before[parent]
    assert parent_block is not None
    assert (tomb.parent, tomb.digest) == (parent, parent_block.digest)
    assert (tomb.count, tomb.first, tomb.last) == (len(removed), min(removed), max(removed))
    assert chain.tombstone_holds(tenant, thread, "", survivor, tomb)
    assert not chain.tombstone_holds(tenant, thread, "", removed[0], tomb)


@pytest.mark.parametrize("target", TARGETS)
async def test_prune_keep_latest_writes_a_tombstone(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    async with open_harness(request, target, redis_prefix, integrity=KEY) as h:
        ids = await h.put_chain("th", 5, v=4)
        await h.put_chain("other", 2, v=4)
        before = {cid: h.block("th", cid) for cid in ids}
        assert all(b is not None and b.tombstone is None for b in before.values())
        inner = split_block(h.body("th", ids[-1]))[0]
        await h.call("prune", ["th", "other"])
        assert await h.ids("th") == [ids[-1]]
        _check_tombstone(h, "th", ids[-1], ids[:-1], before)
        assert split_block(h.body("th", ids[-1]))[0] == inner  # payload and tag as they were
        # the thread reads and goes on from the survivor
        got = await h.call("get_tuple", cfg("th"))
        assert got is not None and got.checkpoint["channel_values"] == {
            "step": 4,
            "payload": {"i": 4},
        }
        nxt = await h.call(
            "put", cfg("th", checkpoint_id=ids[-1]), make_cp(step=5), {"step": 5}, {}
        )
        again = await h.call("get_tuple", cfg("th"))
        assert again.config == nxt
        assert again.parent_config["configurable"]["checkpoint_id"] == ids[-1]
        block = h.block("th", nxt["configurable"]["checkpoint_id"])
        assert block is not None and block.tombstone is None
        # a second trim: the tombstone now names the survivor of the first
        before = {cid: h.block("th", cid) for cid in await h.ids("th")}
        await h.call("prune", ["th"])
        new_id = nxt["configurable"]["checkpoint_id"]
        assert await h.ids("th") == [new_id]
        _check_tombstone(h, "th", new_id, [ids[-1]], before)


@pytest.mark.parametrize("target", TARGETS)
async def test_pruner_keep_latest_writes_a_tombstone_and_the_graph_resumes(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    async with open_harness(request, target, redis_prefix, integrity=KEY) as h:
        graph = counter_graph().compile(checkpointer=h.saver)
        config = {"configurable": {"thread_id": "g", "tenant_id": "acme"}}
        for _ in range(3):
            await _invoke(graph, {"log": ["in"]}, config, h.is_async)
        ids = await h.ids("g", "acme")
        assert len(ids) >= 5
        before = {cid: h.block("g", cid, "acme") for cid in ids}
        later = time.time() + 2 * HOUR
        dry = await h.call(
            "prune_expired",
            Retention(idle=HOUR, strategy="keep_latest"),
            now=later,
            dry_run=True,
        )
        assert dry.trimmed == 1 and h.block("g", ids[0], "acme") == before[ids[0]]
        report = await h.call(
            "prune_expired", Retention(idle=HOUR, strategy="keep_latest"), now=later
        )
        assert (report.trimmed, report.checkpoints) == (1, len(ids) - 1)
        assert await h.ids("g", "acme") == ids[:1]
        _check_tombstone(h, "g", ids[0], ids[1:], before, tenant="acme")
        state = await _state(graph, config, h.is_async)
        assert state.values["log"] == ["in", "step"] * 3
        done = await _invoke(graph, {"log": ["in"]}, config, h.is_async)
        assert done["log"] == ["in", "step"] * 4
        assert len(await h.ids("g", "acme")) > 1
        if not h.is_async:  # the whole store verifies: trims are not tampering
            report = h.saver.verify()
            assert report.ok and report.threads == 1


async def test_a_trim_reads_bodies_in_one_round_trip_and_rewrites_only_with_integrity(
    redis_url: str, redis_prefix: str
) -> None:
    for integrity, prefix in ((KEY, redis_prefix), (None, redis_prefix + "p")):
        with RedisSaver.from_conn_string(redis_url, prefix=prefix, integrity=integrity) as saver:
            h = Harness(saver, redis.Redis.from_url(redis_url), False)
            try:
                threads = [f"t{i}" for i in range(3)]
                ids = {t: await h.put_chain(t, 5, v=4) for t in threads}
                payloads = {t: h.payload(t, ids[t][-1]) for t in threads}
                sent = _record_requests(saver)
                saver.prune(threads)
                trims = _trims(sent)
                assert len(trims) == 3
                if integrity is None:
                    # one round trip reads the survivors only (the check for chain blocks)
                    batches = [r for r in sent if isinstance(r, Batch) and _hmgets([r])]
                    assert len(batches) == 1 and len(_hmgets(sent)) == 3
                    assert all(len(c.args) == 3 for c in _hmgets(sent))  # HMGET key field
                    assert all(int(t.args[3]) == 0 for t in trims)  # no rewrite
                    for t in threads:  # the survivor is stored exactly as it was
                        assert h.payload(t, ids[t][-1]) == payloads[t]
                        assert split_block(h.body(t, ids[t][-1]))[1] is None
                else:
                    batches = [r for r in sent if isinstance(r, Batch) and _hmgets([r])]
                    assert len(batches) == 1 and len(_hmgets(sent)) == 3
                    assert all(int(t.args[3]) == 1 for t in trims)
                    for t in threads:
                        block = h.block(t, ids[t][-1])
                        assert block is not None and block.tombstone is not None
                for t in threads:
                    assert await h.ids(t) == [ids[t][-1]]
            finally:
                h.raw.close()


def test_the_trim_script_refuses_a_payload_changed_since_read(
    redis_url: str, redis_prefix: str
) -> None:
    with RedisSaver.from_conn_string(redis_url, prefix=redis_prefix, integrity=KEY) as saver:
        h = Harness(saver, redis.Redis.from_url(redis_url), False)
        try:
            ids = put_chain(saver, "th", 3, v=4)
            ids_ = [c["configurable"]["checkpoint_id"] for c in ids]
            keys = saver.keys.thread("default", "th")
            field = f"\x00{ids_[-1]}".encode()
            stored = h.payload("th", ids_[-1])
            hlen = h.raw.hlen(keys[0])

            def trim(sha: str) -> Generator[Any, Any, Any]:
                drop = [f"\x00{c}".encode() for c in ids_[:-1]]
                return (
                    yield Script(PRUNE_TRIM, keys, (hlen, "*", "0", 1, field, sha, b"x", *drop))
                )

            assert saver._run(Operation(trim("0" * 40))) == [-1, 0, 0]
            assert h.payload("th", ids_[-1]) == stored
            assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("th"))] == (
                ids_[::-1]
            )
            status, removed, _size = saver._run(Operation(trim(hashlib.sha1(stored).hexdigest())))
            assert (status, removed) == (1, 2)
            assert h.payload("th", ids_[-1]) == b"x"
        finally:
            h.raw.close()


async def test_without_integrity_a_trim_writes_no_tombstone(
    redis_url: str, redis_prefix: str
) -> None:
    async with AsyncRedisSaver.from_conn_string(redis_url, prefix=redis_prefix) as saver:
        h = Harness(saver, redis.Redis.from_url(redis_url), True)
        try:
            graph = counter_graph().compile(checkpointer=saver)
            config: Any = {"configurable": {"thread_id": "g"}}
            for _ in range(3):
                await graph.ainvoke({"log": ["in"]}, config)
            ids = await h.ids("g")
            latest = h.payload("g", ids[0])
            report = await saver.aprune_expired(
                Retention(idle=HOUR, strategy="keep_latest"), now=time.time() + 2 * HOUR
            )
            assert report.trimmed == 1 and await h.ids("g") == ids[:1]
            assert h.payload("g", ids[0]) == latest
            assert h.block("g", ids[0]) is None
            done = await graph.ainvoke({"log": ["in"]}, config)
            assert done["log"] == ["in", "step"] * 4
        finally:
            h.raw.close()


# ---------------------------------------------------------------- a small graph


class Log(TypedDict):
    log: Annotated[list[str], operator.add]


def counter_graph() -> StateGraph:
    builder = StateGraph(Log)
    builder.add_node("step", lambda s: {"log": ["step"]})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder


async def _invoke(graph: Any, value: Any, config: dict[str, Any], is_async: bool) -> Any:
    if is_async:
        return await graph.ainvoke(value, config)
    return graph.invoke(value, config)


async def _state(graph: Any, config: dict[str, Any], is_async: bool) -> Any:
    if is_async:
        return await graph.aget_state(config)
    return graph.get_state(config)


def test_a_run_delete_retries_a_thread_written_while_it_signs(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delete_for_runs under a survivor: a put between the read of the payloads and the
    trim script makes the script refuse (nothing deleted), and the thread is done again."""
    from langgraph_durable.redis import _tombstones

    with (
        RedisSaver.from_conn_string(redis_url, prefix=redis_prefix, integrity=KEY) as saver,
        RedisSaver.from_conn_string(redis_url, prefix=redis_prefix, integrity=KEY) as other,
    ):
        first = put_chain(saver, "th", 2, run_id="r1")
        parent = first[-1]["configurable"]["checkpoint_id"]
        later = saver.put(
            cfg("th", checkpoint_id=parent, run_id="r2"), make_cp(step=9), {"run_id": "r2"}, {}
        )
        real = _tombstones.tombstone_args
        calls: list[int] = []

        def meddling(*args: Any) -> Generator[Any, Any, Any]:
            result = yield from real(*args)
            calls.append(len(calls))
            if len(calls) == 1:  # a writer adds a checkpoint to the thread meanwhile
                other.put(
                    cfg("th", checkpoint_id=later["configurable"]["checkpoint_id"], run_id="r3"),
                    make_cp(step=10),
                    {"run_id": "r3"},
                    {},
                )
            return result

        monkeypatch.setattr(_tombstones, "tombstone_args", meddling)
        saver.delete_for_runs(["r1"])
        assert calls == [0, 1]  # the payloads were read again after the refused trim
        left = [t.metadata.get("run_id") for t in saver.list(cfg("th"))]
        assert left == ["r3", "r2"]
        assert saver.verify(thread_id="th").ok


@pytest.mark.parametrize("target", TARGETS)
async def test_verify_names_an_index_score_that_changes_the_latest(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    """Both checkpoint indexes order members by name with score 0: a score raised on an
    older checkpoint makes reads take it as the latest, with every record intact, and
    ``verify`` names the index member."""
    async with open_harness(request, target, redis_prefix, integrity=KEY) as h:
        ids = await h.put_chain("th", 3, v=4)
        assert (await h.run(h.saver._ops.index_problems("default", "th"))) == []
        report = await h.call("verify", thread_id="th")
        assert report.ok
        keys = h.saver.keys.thread("default", "th")
        h.raw.zadd(keys[4], {f"\x00{ids[0]}": 1})
        h.raw.zadd(keys[5], {f"{ids[0]}\x00": -1})
        latest = await h.call("get_tuple", cfg("th"))
        assert latest.config["configurable"]["checkpoint_id"] == ids[0]  # the attack works
        broken: list[Any] = []
        report = await h.call("verify", thread_id="th", on_broken=broken.append)
        assert not report.ok
        named = [b for b in broken if b.checkpoint_id == "index"]
        assert len(named) == 2 and all(ids[0] in b.reason for b in named), broken


@pytest.mark.parametrize("target", TARGETS)
async def test_verify_names_a_checkpoint_missing_from_an_index(
    request: pytest.FixtureRequest, target: tuple[str, str], redis_prefix: str
) -> None:
    """Removing the newest checkpoint's index member makes reads fall back to its parent
    (records intact): ``verify`` names the checkpoint the index lost."""
    async with open_harness(request, target, redis_prefix, integrity=KEY) as h:
        ids = await h.put_chain("th", 3, v=4)
        keys = h.saver.keys.thread("default", "th")
        h.raw.zrem(keys[4], f"\x00{ids[-1]}")
        latest = await h.call("get_tuple", cfg("th"))
        assert latest.config["configurable"]["checkpoint_id"] == ids[-2]  # the attack works
        broken: list[Any] = []
        report = await h.call("verify", thread_id="th", on_broken=broken.append)
        assert not report.ok
        assert [b.reason for b in broken if b.checkpoint_id == "index"] == [
            f"checkpoint '/{ids[-1]}' is missing from index 'i' (reads and listings skip it)"
        ]
