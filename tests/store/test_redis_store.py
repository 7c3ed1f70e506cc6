"""RedisStore and AsyncRedisStore: the differential harness (single server and cluster,
encryption on and off), raw scans for canaries, tenant separation, one round trip per
batch, deleting a namespace, the sweep.

``LGD_PROPERTY_EXAMPLES`` sets the drawn programs per differential test (default 4).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest
import redis
from hypothesis import given
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp

from langgraph_durable.errors import (
    ConfigurationError,
    DecryptionError,
    InvalidInputError,
    InvalidNamespaceError,
)
from langgraph_durable.protect import Encryption, LocalKeyring, Redaction
from langgraph_durable.redis import AsyncRedisStore, RedisStore
from langgraph_durable.redis._requests import Script
from langgraph_durable.redis._store import StoreKeys
from tests.encryption_helpers import local_encryption
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
SERVERS = ["single", "cluster"]


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> str:
    """The connection string of the single server or of the cluster (``redis+cluster://``)."""
    name = "redis_url" if request.param == "single" else "redis_cluster_conn_string"
    return str(request.getfixturevalue(name))


def _options(mode: str, prefix: str, **extra: Any) -> dict[str, Any]:
    return cases.mode_options(mode, prefix=prefix, **extra)


def _raw(url: str) -> Any:
    if "+cluster" in url:
        return redis.cluster.RedisCluster.from_url(url.replace("+cluster", ""))
    return redis.Redis.from_url(url)


def _dump(url: str, prefix: str) -> tuple[list[bytes], bytes]:
    """Every key name starting with ``prefix`` and every byte those keys hold."""
    client = _raw(url)
    try:
        names = sorted(set(client.scan_iter(match=f"{prefix}:*", count=1000)))
        out = bytearray()
        for name in names:
            kind = client.type(name)
            if kind == b"hash":
                for f, v in client.hgetall(name).items():
                    out += f + b"\n" + v + b"\n"
            elif kind == b"zset":
                for m, s in client.zrange(name, 0, -1, withscores=True):
                    out += m + b"\n" + repr(s).encode() + b"\n"
            elif kind == b"string":
                out += client.get(name) + b"\n"
            elif kind == b"set":
                out += b"\n".join(client.smembers(name)) + b"\n"
        return names, bytes(out)
    finally:
        client.close()


# ---- the differential harness ---------------------------------------------------------


@pytest.mark.parametrize("mode", cases.MODES)
def test_differential_sync(server: str, redis_prefix: str, mode: str) -> None:
    tenant = {"now": ""}
    with RedisStore.from_conn_string(
        server, tenant=lambda: tenant["now"], **_options(mode, redis_prefix)
    ) as store:
        store.setup()
        tenant["now"] = uuid.uuid4().hex
        run_program(store, COVERING_PROGRAM)

        @PROPERTY
        @given(programs())
        def check(program: list) -> None:
            tenant["now"] = uuid.uuid4().hex  # every example starts with no items
            run_program(store, program)

        check()


@pytest.mark.parametrize("mode", cases.MODES)
def test_differential_async(server: str, redis_prefix: str, mode: str) -> None:
    tenant = {"now": ""}
    loop = asyncio.new_event_loop()  # one loop and one client for every example
    opened = AsyncRedisStore.from_conn_string(
        server, tenant=lambda: tenant["now"], **_options(mode, redis_prefix)
    )
    store = loop.run_until_complete(opened.__aenter__())
    try:

        def run(program: list) -> None:
            tenant["now"] = uuid.uuid4().hex  # every example starts with no items
            loop.run_until_complete(arun_program(store, program))

        run(COVERING_PROGRAM)

        @PROPERTY
        @given(programs(8))
        def check(program: list) -> None:
            run(program)

        check()
    finally:
        loop.run_until_complete(opened.__aexit__(None, None, None))
        loop.close()


@pytest.mark.parametrize("mode", cases.MODES)
def test_ttl_with_an_injected_clock(redis_url: str, redis_prefix: str, mode: str) -> None:
    def options(**kw: Any) -> dict[str, Any]:
        return {"tenant": uuid.uuid4().hex, **_options(mode, redis_prefix, **kw)}

    cases.check_ttl_sync_and_async(
        lambda **kw: RedisStore.from_conn_string(redis_url, **options(**kw)),
        lambda **kw: AsyncRedisStore.from_conn_string(redis_url, **options(**kw)),
    )


def test_ttl_native_backstop_and_sweep(redis_url: str, redis_prefix: str) -> None:
    clock = FakeClock()
    tenant = uuid.uuid4().hex
    with RedisStore.from_conn_string(
        redis_url, tenant=tenant, prefix=redis_prefix, ttl={"default_ttl": 1.0}, clock=clock
    ) as store:
        store.put(("a",), "short", {"v": 1})
        store.put(("a",), "long", {"v": 2}, ttl=10.0)
        store.put(("a",), "never", {"v": 3}, ttl=None)
        keys = StoreKeys(store._store_ops.layout, tenant)
        raw = store.client
        short_ms = raw.pttl(keys.item(("a",), "short"))
        assert 60_000 < short_ms <= (60 + 3600) * 1000  # a grace period after its expiry
        assert raw.pttl(keys.item(("a",), "never")) == -1
        first = store.get(("a",), "never")
        clock.advance(1)
        store.put(("a",), "never", {"v": 3}, ttl=None)
        again = store.get(("a",), "never")
        assert again.created_at == first.created_at and again.updated_at > first.updated_at  # type: ignore[union-attr]
        store.put(("b",), "again", {"v": 4}, ttl=0.5)
        clock.advance(60)
        assert store.get(("a",), "short") is None  # still stored, never returned
        assert raw.exists(keys.item(("a",), "short")) == 1
        store.put(("b",), "again", {"v": 4}, ttl=None)  # put after it expired: a new item
        renewed = store.get(("b",), "again")
        assert renewed.created_at == renewed.updated_at > first.created_at  # type: ignore[union-attr]
        store.delete(("b",), "again")
        long_key = keys.item(("a",), "long")
        stored = raw.hget(long_key, "x")
        store.get(("a",), "long", refresh_ttl=False)
        assert raw.hget(long_key, "x") == stored
        store.get(("a",), "long")  # refreshed: its native expiry moves too
        assert float(raw.hget(long_key, "x")) == clock.now + 600 > float(stored)
        assert raw.pttl(keys.item(("a",), "long")) > (61 + 600) * 1000 - 5_000
        assert store.sweep_expired() == 1
        assert raw.exists(keys.item(("a",), "short")) == 0

        assert sorted(i.key for i in store.search(("a",))) == ["long", "never"]
        clock.advance(3600)
        assert store.sweep_expired() == 1
        assert store.list_namespaces() == [("a",)]
        store.delete(("a",), "never")
        assert store.list_namespaces() == []
        assert raw.exists(*keys.indexes) == 0  # nothing left behind


# ---- raw storage and tenants ------------------------------------------------------------


@pytest.mark.parametrize("mode", cases.MODES)
def test_canaries_in_values_and_embeddings_never_reach_storage(
    server: str, redis_prefix: str, mode: str
) -> None:
    with RedisStore.from_conn_string(
        server, tenant=uuid.uuid4().hex, **_options(mode, redis_prefix)
    ) as store:
        canaries = cases.write_canaries(store)
    names, dump = _dump(server, redis_prefix)
    assert names  # the scan sees the store's keys
    cases.assert_canaries(dump + b"\n".join(names), canaries, mode)


@pytest.mark.parametrize("mode", cases.MODES)
def test_crafted_namespaces_never_reach_another_tenant(
    server: str, redis_prefix: str, mode: str
) -> None:
    base = uuid.uuid4().hex[:8]
    alice = base
    # tenants that look like a namespace, close the hash tag, or encode one
    # ({base}}:i:x} unencoded would name alice's item of namespace ("x}:i:users", "u1"))
    mallories = [f"{base}.users", f"{base}}}:i:x", f"{base}%7D", f"{base}:store"]
    opts = _options(mode, redis_prefix)
    with RedisStore.from_conn_string(server, tenant=alice, **opts) as a:
        a.put(("users", "u1"), "k", {"text": "apple", "secret": 1})
        a.put(("users}", "{u1}"), "k", {"text": "apple", "secret": 2})
        a.put(("x}:i:users", "u1"), "k", {"text": "apple", "secret": 3})
        current = [""]
        # one client for every tenant of the attack (a store whose tenant changes)
        m = RedisStore(a.client, tenant=lambda: current[0], **opts)
        for mallory in mallories:
            current[0] = mallory
            for ns in [("users", "u1"), (alice, "users", "u1"), (base, "users"), ("u1",)]:
                assert m.get(ns, "k") is None
                assert m.search(ns[:1]) == []
            assert m.get(("users}", "{u1}"), "k") is None
            assert m.search(()) == [] and m.search((), query="apple") == []
            assert m.list_namespaces() == []
            with pytest.raises(InvalidNamespaceError):  # ours, from batch
                m.batch([GetOp(("users.u1",), "k")])
            with pytest.raises(InvalidNamespaceError):
                m.batch([PutOp(("users.u1",), "k", {"v": 1})])
            assert m.delete_namespace(("users",)) == 0
            m.put(("users", "u1"), "k", {"text": "mallory"})
        assert a.get(("users", "u1"), "k").value["secret"] == 1  # type: ignore[union-attr]
        assert a.list_namespaces() == [("users", "u1"), ("users}", "{u1}"), ("x}:i:users", "u1")]
        layout = a._store_ops.layout
        if "+cluster" in server:
            client = a.client
            for tenant in [alice, *mallories]:
                keys = StoreKeys(layout, tenant)
                names = [*keys.indexes, keys.item(("users}", "{u1}"), "k")]
                assert len({client.keyslot(k) for k in names}) == 1  # one slot per tenant
    if mode == "encrypted" and "+cluster" not in server:
        # An item copied under another tenant's keys does not open there.
        client = _raw(server)
        src, dst = StoreKeys(layout, alice), StoreKeys(layout, mallories[0])
        fields = client.hgetall(src.item(("users", "u1"), "k"))
        client.hset(dst.item(("users", "u1"), "k"), mapping=fields)
        client.close()
        with RedisStore.from_conn_string(
            server, tenant=mallories[0], prefix=redis_prefix, encryption=a._saver.encryption
        ) as m2:
            with pytest.raises(DecryptionError):
                m2.get(("users", "u1"), "k")


# ---- batches, round trips, deletes -----------------------------------------------------


def _count(store: Any) -> list[Any]:
    seen: list[Any] = []
    driver = store._saver._conn
    inner = driver.execute
    if asyncio.iscoroutinefunction(inner):

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


def _puts(ttl: float | None = None) -> list[Any]:
    return [
        PutOp(("a", str(i)), f"k{j}", {"text": "apple", "n": j}, ttl=ttl)
        for i in range(5)
        for j in range(4)
    ]


_READS = [
    GetOp(("a", "1"), "k1", refresh_ttl=False),
    GetOp(("a", "2"), "k2", refresh_ttl=False),
    SearchOp(("a",), filter={"n": {"$gt": 1}}, limit=3, refresh_ttl=False),
    SearchOp(("a", "3"), query="apple", refresh_ttl=False),
    ListNamespacesOp(max_depth=1),
]


@pytest.mark.parametrize("mode", cases.MODES)
def test_one_round_trip_per_batch(server: str, redis_prefix: str, mode: str) -> None:
    with RedisStore.from_conn_string(
        server, tenant=uuid.uuid4().hex, **_options(mode, redis_prefix)
    ) as store:
        store.put(("warm",), "up", {"v": 0})  # the tenant's data key (encryption) is made
        sent = _count(store)
        store.batch(_puts())
        assert len(sent) == 1 and isinstance(sent[0], Script)
        sent.clear()
        got = store.batch(_READS)
        assert len(sent) == 1
        assert got[0].value["n"] == 1 and len(got[2]) == 3 and got[4] == [("a",), ("warm",)]
        sent.clear()
        got = store.batch([*_READS, PutOp(("a", "1"), "k1", None), PutOp(("b",), "x", {"n": 1})])
        assert len(sent) == 1  # reads and writes in one script
        assert got[0].value["n"] == 1  # the reads saw the store before the batch
        assert store.get(("a", "1"), "k1") is None


def test_a_refreshing_search_adds_one_call_a_get_none(redis_url: str, redis_prefix: str) -> None:
    async def run() -> None:
        async with AsyncRedisStore.from_conn_string(
            redis_url,
            tenant=uuid.uuid4().hex,
            **_options("encrypted", redis_prefix, ttl={"default_ttl": 5.0}),
        ) as store:
            await store.aput(("warm",), "up", {"v": 0})
            sent = _count(store)
            await store.abatch(_puts(ttl=5.0))
            assert len(sent) == 1
            sent.clear()
            await store.abatch(_READS)
            assert len(sent) == 1  # refresh_ttl=False: no second call
            sent.clear()
            got = await store.abatch([SearchOp(("a",), limit=2), GetOp(("a", "1"), "k1")])
            assert len(got[0]) == 2 and got[1] is not None
            assert len(sent) == 2  # the script, then one call extending what it returned
            sent.clear()
            got = await store.abatch([GetOp(("a", "1"), "k1"), GetOp(("a", "2"), "k1")])
            assert got[0] is not None and got[1] is not None
            assert len(sent) == 1  # the script extends what a refreshing get reads

    asyncio.run(run())


def test_delete_namespace_sync_and_async(redis_url: str, redis_prefix: str) -> None:
    tenant = uuid.uuid4().hex
    with RedisStore.from_conn_string(redis_url, prefix=redis_prefix, tenant=tenant) as store:
        for ns in [("a",), ("a", "b"), ("a", "b", "c"), ("ab",), ("a-b",), ("b", "a")]:
            store.put(ns, "k", {"v": 1})
        store.put(("a", "b"), "k2\x00{}", {"v": 2})  # a key may hold NUL and braces
        assert store.get(("a", "b"), "k2\x00{}").value == {"v": 2}  # type: ignore[union-attr]
        assert store.delete_namespace(("a", "b")) == 3
        assert sorted(store.list_namespaces()) == [("a",), ("a-b",), ("ab",), ("b", "a")]
        with pytest.raises(InvalidNamespaceError):
            store.delete_namespace(())

    async def run() -> None:
        async with AsyncRedisStore.from_conn_string(
            redis_url, prefix=redis_prefix, tenant=tenant
        ) as astore:
            assert await astore.adelete_namespace(("a",)) == 1
            assert sorted(await astore.alist_namespaces()) == [("a-b",), ("ab",), ("b", "a")]

    asyncio.run(run())


def test_delete_namespace_in_chunks(redis_url: str, redis_prefix: str, monkeypatch: Any) -> None:
    monkeypatch.setattr("langgraph_durable.redis._store.DROP_CHUNK", 3)
    with RedisStore.from_conn_string(redis_url, prefix=redis_prefix, tenant="t") as store:
        store.batch([PutOp(("a", str(i % 2)), f"k{i}", {"v": i}) for i in range(7)])
        store.put(("b",), "k", {"v": 1})
        sent = _count(store)
        assert store.delete_namespace(("a",)) == 7
        assert len(sent) == 3
        assert store.list_namespaces() == [("b",)]


def test_a_search_over_too_many_items_is_refused(redis_url: str, redis_prefix: str) -> None:
    clock = FakeClock()
    with RedisStore.from_conn_string(
        redis_url, prefix=redis_prefix, tenant="t", max_search_items=5, clock=clock
    ) as store:
        store.batch([PutOp(("a", str(i % 2)), f"k{i}", {"v": i}, ttl=1.0) for i in range(6)])
        assert len(store.search(("a", "0"), refresh_ttl=False)) == 3
        clock.advance(50)
        with pytest.raises(InvalidInputError, match="max_search_items=5"):
            store.batch([GetOp(("a", "0"), "k0"), SearchOp(("a",)), PutOp(("b",), "k", {"v": 1})])
        assert store.get(("b",), "k") is None  # nothing of the refused batch was written
        clock.advance(20)
        assert store.get(("a", "0"), "k0") is None  # nor was the get's refresh
    with pytest.raises(ConfigurationError):
        RedisStore(redis_url, max_search_items=0)


def test_redaction_applies_to_stored_values(redis_url: str, redis_prefix: str) -> None:
    with RedisStore.from_conn_string(
        redis_url, prefix=redis_prefix, tenant="t", redaction=Redaction()
    ) as store:
        cases.check_redaction(store, lambda: _dump(redis_url, redis_prefix)[1])


def test_sync_methods_of_the_async_store_from_another_thread(
    redis_url: str, redis_prefix: str
) -> None:
    async def run() -> None:
        async with AsyncRedisStore.from_conn_string(
            redis_url, prefix=redis_prefix, tenant=uuid.uuid4().hex
        ) as store:
            await store.setup()
            await asyncio.to_thread(store.put, ("a",), "k", {"v": 1})
            item = await asyncio.to_thread(store.get, ("a",), "k")
            assert item is not None and item.value == {"v": 1}
            assert await asyncio.to_thread(store.delete_namespace, ("a",)) == 1
            with pytest.raises(ConfigurationError):
                store.get(("a",), "k")  # on the loop's own thread: refused, not a deadlock

    asyncio.run(run())


def test_a_batch_meeting_newer_key_versions_is_sent_once(redis_url: str, redis_prefix: str) -> None:
    """A reader with fresh cached keys opens items of versions made elsewhere: its keys
    are loaded and the reply opened again; the batch's script is not sent again (its
    reads would see its own writes)."""
    kr = LocalKeyring({"k": os.urandom(32)}, "k")
    opts = {"prefix": redis_prefix, "tenant": "t"}
    with (
        RedisStore.from_conn_string(
            redis_url, encryption=Encryption(kr, max_key_uses=2), **opts
        ) as writer,
        RedisStore.from_conn_string(redis_url, encryption=Encryption(kr), **opts) as reader,
    ):
        writer.put(("a",), "k0", {"v": 0})
        assert reader.get(("a",), "k0") is not None  # the reader caches version 1
        for i in range(1, 6):
            writer.put(("a",), f"k{i}", {"v": i})
        sent = _count(reader)
        got = reader.batch(
            [
                GetOp(("a",), "k5"),
                SearchOp(("a",), limit=100),
                PutOp(("a",), "k5", {"v": 50}),
                PutOp(("a",), "new", {"v": 99}),
            ]
        )
        assert got[0].value == {"v": 5}  # the store before the batch
        assert sorted(i.value["v"] for i in got[1]) == [0, 1, 2, 3, 4, 5]
        scripts = [r for r in sent if isinstance(r, Script) and r.script.name == "store_batch"]
        assert len(scripts) == 1 and len(sent) > 1  # the key loading came in between
        assert reader.get(("a",), "k5").value == {"v": 50}  # type: ignore[union-attr]


# ---- inside a graph ---------------------------------------------------------------------


def test_a_graph_remembers_in_one_thread_and_recalls_in_another(
    server: str, redis_prefix: str
) -> None:
    keys = local_encryption()

    def open_store(n: int) -> Any:
        # the second store object has the same keys, not their cache (another process)
        encryption = keys if n == 0 else Encryption(keys.keyring)
        return RedisStore.from_conn_string(
            server, prefix=redis_prefix, index=index_config(), encryption=encryption
        )

    cases.check_graph_remembers(open_store)


def test_sweep_every_tenant_sync_and_async(server: str, redis_prefix: str) -> None:
    clock = FakeClock()
    tenants = ["t1", "t{2}:x", "t%3"]  # found back from their key names
    opts: dict[str, Any] = {"prefix": redis_prefix, "clock": clock}
    now = ["t1"]
    with RedisStore.from_conn_string(server, tenant=lambda: now[0], **opts) as store:
        for n, tenant in enumerate(tenants):
            now[0] = tenant
            store.batch([PutOp(("a",), f"k{i}", {"v": i}, ttl=1.0) for i in range(n + 1)])
            store.put(("a",), "kept", {"v": 0}, ttl=None)
        assert store.sweep_all_expired() == {}  # none expired yet
        clock.advance(61)

        async def run() -> dict[str, int]:
            async with AsyncRedisStore.from_conn_string(server, tenant="t1", **opts) as astore:
                return await astore.asweep_all_expired()

        assert asyncio.run(run()) == {"t1": 1, "t{2}:x": 2, "t%3": 3}
        assert store.sweep_all_expired() == {}  # no tenant has items with a TTL now
        for tenant in tenants:
            now[0] = tenant
            assert [i.key for i in store.search(("a",))] == ["kept"]
