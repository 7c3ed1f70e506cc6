"""RedisSaver / AsyncRedisSaver behaviour on a real Redis (and a real Redis Cluster)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from langgraph.checkpoint.serde.types import ERROR, TASKS
from redis.cluster import RedisCluster
from redis.crc import key_slot

from langgraph_durable._core.sansio import Operation
from langgraph_durable._core.versions import next_version
from langgraph_durable.errors import (
    ConfigurationError,
    InvalidInputError,
    StorageError,
    StorageUnavailableError,
)
from langgraph_durable.redis import AsyncRedisSaver, RedisOptions, RedisSaver
from langgraph_durable.redis._ops import SCRIPTS, Batch, Script
from tests.helpers import (
    aput_message_with_write,
    cfg,
    checkpoint_ids,
    config_ids,
    make_cp,
    put_chain,
    put_shared_blob_chain,
    tenant_from_org,
    versioned_cp,
    write_concurrently,
)
from tests.servers import RedisServer


class CountingConnection(redis.Connection):
    """Counts the packets redis-py writes: one per command, one per pipeline."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


def count_requests(saver: Any) -> list[Any]:
    """Record every request the saver's operations yield (a Batch counts once)."""
    seen: list[Any] = []
    driver = saver._conn
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


@pytest.fixture
def saver(redis_url: str, redis_prefix: str) -> Iterator[RedisSaver]:
    with RedisSaver.from_conn_string(redis_url, prefix=redis_prefix) as s:
        s.setup()
        yield s


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


# ---------------------------------------------------------------- setup, options, clients


def test_setup_checks_the_server_and_loads_every_script(
    saver: RedisSaver, raw: redis.Redis
) -> None:
    result = saver.setup()
    assert result.versions and all(int(v.split(".")[0]) >= 7 for v in result.versions)
    assert raw.script_exists(*[s.sha for s in SCRIPTS]) == [True] * len(SCRIPTS)


def test_setup_warns_when_the_server_may_evict_checkpoints(
    redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    with RedisServer(config={"maxmemory-policy": "allkeys-lru"}) as server:
        with RedisSaver.from_conn_string(server.url, prefix=redis_prefix) as s:
            with caplog.at_level(logging.WARNING, logger="langgraph_durable.redis"):
                result = s.setup()
    assert len(result.warnings) == 1
    assert "allkeys-lru" in result.warnings[0] and "persistence is off" in result.warnings[0]
    assert any("noeviction" in r.getMessage() for r in caplog.records)


def test_setup_tolerates_a_disabled_config_command(redis_prefix: str) -> None:
    with RedisServer(config={"rename-command": "CONFIG ''"}) as server:
        with RedisSaver.from_conn_string(server.url, prefix=redis_prefix) as s:
            assert s.setup().warnings == ()
            put_chain(s, "t", 1)


def test_clients_urls_and_options_are_checked(redis_url: str, redis_prefix: str) -> None:
    with pytest.raises(ConfigurationError, match="decode_responses"):
        RedisSaver(redis.Redis.from_url(redis_url, decode_responses=True))
    with pytest.raises(ConfigurationError, match="other saver class"):
        RedisSaver(redis.asyncio.Redis.from_url(redis_url))
    with pytest.raises(ConfigurationError, match="other saver class"):
        AsyncRedisSaver(redis.Redis.from_url(redis_url))
    with pytest.raises(ConfigurationError):
        RedisSaver(object())
    with pytest.raises(ConfigurationError, match="scheme"):
        RedisSaver("postgresql://localhost/db")
    with pytest.raises(ConfigurationError, match="prefix"):
        RedisSaver(redis_url, prefix="a{b}")
    with pytest.raises(ConfigurationError, match="ttl"):
        RedisSaver(redis_url, ttl=0)
    with pytest.raises(ConfigurationError, match="page_size"):
        RedisOptions(page_size=0)
    opts = RedisOptions(prefix=redis_prefix, ttl=__import__("datetime").timedelta(minutes=2))
    assert opts.ttl == 120.0 and opts.ttl_ms == 120_000
    client = redis.Redis.from_url(redis_url)
    s = RedisSaver(client, options=opts)
    s.close()  # a caller's client stays open
    assert client.ping()
    client.close()


def test_unreachable_server_is_storage_unavailable() -> None:
    with RedisSaver.from_conn_string("redis://127.0.0.1:1/0?socket_connect_timeout=1") as s:
        with pytest.raises(StorageUnavailableError):
            s.get_tuple(cfg("t"))
        with pytest.raises(StorageUnavailableError):
            s.setup()


def test_cluster_url_forms() -> None:
    from langgraph_durable.redis._ops import split_cluster_url

    assert split_cluster_url("redis+cluster://h:1") == ("redis://h:1", True)
    assert split_cluster_url("rediss+cluster://u:p@h:1/0") == ("rediss://u:p@h:1/0", True)
    assert split_cluster_url("redis://h:1?cluster=true&x=1") == ("redis://h:1?x=1", True)
    assert split_cluster_url("redis://h:1/2") == ("redis://h:1/2", False)
    with pytest.raises(ConfigurationError):
        split_cluster_url("redis://h:1?cluster=maybe")


# ---------------------------------------------------------------- keys


def test_a_threads_keys_share_one_slot_and_never_collide(saver: RedisSaver) -> None:
    pairs = [("a", "b:c"), ("a:b", "c"), ("{x", "y}"), ("%3A", ":"), ("t", "{a}{b}")]
    tags = set()
    for tenant, thread in pairs:
        put_chain(saver, thread, 1, tenant_id=tenant)
        keys = saver.keys.thread(tenant, thread)
        assert len({key_slot(k.encode()) for k in keys}) == 1
        assert len(keys) == 6
        tags.add(saver.keys.tag(tenant, thread))
    assert len(tags) == len(pairs)
    for tenant, thread in pairs:
        (only,) = saver.list(cfg(thread, tenant_id=tenant))
        assert only.config["configurable"] == {
            "thread_id": thread,
            "checkpoint_ns": "",
            "checkpoint_id": only.checkpoint["id"],
            "tenant_id": tenant,
        }


def test_tenants_never_mix(saver: RedisSaver) -> None:
    put_chain(saver, "same", 2, tenant_id="a")
    put_chain(saver, "same", 3, tenant_id="b")
    assert len(list(saver.list(cfg("same", tenant_id="a")))) == 2
    assert len(list(saver.list(cfg("same", tenant_id="b")))) == 3
    assert saver.get_tuple(cfg("same")) is None  # the default tenant has nothing
    tup = saver.get_tuple(cfg("same", tenant_id="a"))
    assert tup is not None and tup.config["configurable"]["tenant_id"] == "a"
    assert len(list(saver.list({"configurable": {"tenant_id": "b"}}))) == 3
    assert list(saver.list(None)) == []
    saver.delete_thread("same", tenant_id="a")
    assert saver.get_tuple(cfg("same", tenant_id="a")) is None
    assert len(list(saver.list(cfg("same", tenant_id="b")))) == 3


def test_fixed_and_callable_tenants(redis_url: str, redis_prefix: str) -> None:
    with RedisSaver.from_conn_string(redis_url, prefix=redis_prefix, tenant="fixed") as fixed:
        put_chain(fixed, "t", 1)
    with RedisSaver.from_conn_string(
        redis_url,
        prefix=redis_prefix,
        tenant=tenant_from_org,
    ) as by_org:
        assert by_org.get_tuple(cfg("t")) is None
        put_chain(by_org, "t", 2, org="fixed")
        assert len(list(by_org.list(cfg("t", org="fixed")))) == 3


# ---------------------------------------------------------------- reads


def test_list_pages_filters_and_limits(saver: RedisSaver) -> None:
    configs = put_chain(saver, "long", 230)
    want = config_ids(configs)
    assert checkpoint_ids(saver.list(cfg("long"))) == want[::-1]
    assert checkpoint_ids(saver.list(cfg("long", ns=""))) == want[::-1]
    assert len(list(saver.list(cfg("long"), limit=150))) == 150
    assert checkpoint_ids(saver.list(cfg("long"), before=configs[10], limit=3)) == want[9:6:-1]
    assert [t.metadata["step"] for t in saver.list(cfg("long"), filter={"step": 7})] == [7]
    assert checkpoint_ids(saver.list(None, filter={"step": 7, "source": "loop"})) == [want[7]]
    assert checkpoint_ids(saver.list(cfg("long", checkpoint_id=want[5]))) == [want[5]]
    assert checkpoint_ids(saver.list(cfg("long", checkpoint_id=want[5]), before=configs[3])) == []
    assert list(saver.list(cfg("long"), filter={"step": 7, "source": "input"})) == []
    # a streaming listing can be abandoned, and the saver still works
    it = saver.list(cfg("long"))
    next(it)
    it.close()
    assert saver.get_tuple(cfg("long")) is not None


def test_history_of_100_is_one_round_trip(saver: RedisSaver) -> None:
    put_chain(saver, "h", 100)
    seen = count_requests(saver)
    assert len(list(saver.list(cfg("h")))) == 100
    assert len(seen) == 1
    seen.clear()
    assert len(list(saver.list(cfg("h"), limit=10))) == 10
    assert len(seen) == 1
    seen.clear()
    assert len(list(saver.list(cfg("h"), filter={"source": "loop"}))) == 100
    assert len(seen) == 1


def test_round_trips_per_operation_on_the_wire(redis_url: str, redis_prefix: str) -> None:
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    client = redis.Redis(connection_pool=pool)
    s = RedisSaver(client, prefix=redis_prefix)
    s.setup()
    seen = count_requests(s)

    def measure(call: Any) -> tuple[int, int]:
        seen.clear()
        CountingConnection.sent = 0
        call()
        return len(seen), CountingConnection.sent

    cp = versioned_cp(messages=["hi"])
    first: dict[str, Any] = {}
    # on one server the first write of a thread adds it to the tenant's index in its script
    assert measure(lambda: first.update(s.put(cfg("t"), cp, {}, cp["channel_versions"]))) == (
        1,
        1,
    )
    assert client.zscore(s.keys.tenant_index("default"), "t") is not None
    for i in range(3):
        nxt = make_cp(messages=["hi", i])
        nxt["channel_versions"] = {"messages": next_version(cp["channel_versions"]["messages"])}
        assert measure(lambda: s.put(first, nxt, {}, nxt["channel_versions"])) == (1, 1)  # noqa: B023
    assert measure(lambda: s.put_writes(first, [("a", 1), ("b", [2])], "task")) == (1, 1)
    assert measure(lambda: s.get_tuple(cfg("t"))) == (1, 1)
    assert measure(lambda: s.get_tuple(first)) == (1, 1)
    put_chain(s, "long", 100)
    assert measure(lambda: list(s.list(cfg("long")))) == (1, 1)
    # a flushed script cache costs one more packet (EVAL), never an error. Another test
    # running beside this one on the same server may send the script again between the
    # flush and the read (the cache is the server's), so the flush is tried a few times.
    after_flush = set()
    for _ in range(5):
        client.script_flush()
        after_flush.add(measure(lambda: s.get_tuple(cfg("t"))))
        if (1, 2) in after_flush:
            break
    assert (1, 2) in after_flush and after_flush <= {(1, 1), (1, 2)}
    assert measure(lambda: s.get_tuple(cfg("t"))) == (1, 1)
    client.close()


def test_get_tuple_by_id_namespaces_and_pending_writes(saver: RedisSaver) -> None:
    root = put_chain(saver, "t", 2)
    child = put_chain(saver, "t", 3, ns="sub:1|inner:2")
    latest = saver.get_tuple(cfg("t"))
    assert latest is not None and latest.config == root[-1]
    got = saver.get_tuple(cfg("t", ns="sub:1|inner:2"))
    assert got is not None and got.config == child[-1]
    assert got.parent_config == child[-2]
    old = saver.get_tuple(root[0])
    assert old is not None and old.checkpoint["channel_values"] == {"step": 0, "payload": {"i": 0}}
    assert saver.get_tuple(cfg("t", checkpoint_id="nope")) is None
    assert saver.get_tuple(cfg("t", ns="sub")) is None  # a prefix of a namespace is not it
    assert len(list(saver.list(cfg("t") | {"configurable": {"thread_id": "t"}}))) == 5
    saver.put_writes(root[-1], [("a", {"v": 1}), ("b", 2)], "task-2", "p2")
    saver.put_writes(root[-1], [("c", 3)], "task-1", "p1")
    tup = saver.get_tuple(cfg("t"))
    assert tup is not None
    assert tup.pending_writes == [("task-1", "c", 3), ("task-2", "a", {"v": 1}), ("task-2", "b", 2)]


def test_regular_writes_keep_the_first_and_special_writes_replace(saver: RedisSaver) -> None:
    (config,) = put_chain(saver, "t", 1)
    saver.put_writes(config, [("a", 1), ("b", 1)], "task")
    saver.put_writes(config, [("a", 2), ("b", 2), ("c", 2)], "task")  # a retried task
    saver.put_writes(config, [(ERROR, "first")], "task")
    saver.put_writes(config, [(ERROR, "second")], "task")
    tup = saver.get_tuple(config)
    assert tup is not None
    assert sorted(tup.pending_writes) == [
        ("task", "__error__", "second"),
        ("task", "a", 1),
        ("task", "b", 1),
        ("task", "c", 2),
    ]


def test_odd_channel_names_round_trip(saver: RedisSaver) -> None:
    names = ['quo"te', "back\\slash", "com,ma", "NULL", "{brace}", "sp ace", "ünï", "a|b", ""]
    cp = versioned_cp(**{n: [n] for n in names})
    stored = saver.put(cfg("odd"), cp, {}, cp["channel_versions"])
    saver.put_writes(stored, [(n, n) for n in names], "task")
    tup = saver.get_tuple(cfg("odd"))
    assert tup is not None
    assert tup.checkpoint["channel_values"] == {n: [n] for n in names}
    assert [(c, v) for _, c, v in tup.pending_writes] == [(n, n) for n in names]


def test_pending_sends_of_old_checkpoints_come_from_the_parent(saver: RedisSaver) -> None:
    parent = make_cp()
    parent["v"] = 1
    p_config = saver.put(cfg("old"), parent, {"step": 0}, {})
    saver.put_writes(p_config, [(TASKS, "send-1"), (TASKS, "send-2"), ("x", 1)], "task")
    child = make_cp(count=1)
    child["v"] = 1
    child["channel_versions"] = {"count": "1"}
    saver.put(p_config, child, {"step": 1}, {"count": "1"})
    tup = saver.get_tuple(cfg("old"))
    assert tup is not None
    assert tup.checkpoint["channel_values"][TASKS] == ["send-1", "send-2"]
    saver.prune(["old"])  # keeps the parent: its writes hold the sends
    assert len(list(saver.list(cfg("old")))) == 2
    again = saver.get_tuple(cfg("old"))
    assert again is not None and again.checkpoint["channel_values"][TASKS] == ["send-1", "send-2"]


# ---------------------------------------------------------------- across threads


def test_list_across_threads_merges_newest_first(saver: RedisSaver, raw: redis.Redis) -> None:
    made: list[str] = []
    parents: dict[str, Any] = {}
    for step in range(30):
        for thread in ("a", "b", "c"):
            config = saver.put(
                parents.get(thread, cfg(thread)), make_cp(step=step), {"thread": thread}, {}
            )
            parents[thread] = config
            made.append(config["configurable"]["checkpoint_id"])
    newest = sorted(made, reverse=True)
    assert checkpoint_ids(saver.list(None)) == newest
    assert checkpoint_ids(saver.list(None, limit=7)) == newest[:7]
    assert checkpoint_ids(saver.list(None, filter={"thread": "b"}, limit=2)) == checkpoint_ids(
        saver.list(cfg("b"), limit=2)
    )
    cut = newest[40]
    assert checkpoint_ids(saver.list(None, before=cfg("x", checkpoint_id=cut))) == newest[41:]
    assert checkpoint_ids(saver.list({"configurable": {"checkpoint_id": cut}})) == [cut]
    # a thread whose keys vanished (expired, evicted) is skipped and dropped from the index
    index = saver.keys.tenant_index("default")
    raw.delete(*saver.keys.thread("default", "c"))
    assert len(list(saver.list(None))) == 60
    assert raw.zscore(index, "c") is None
    assert raw.zscore(index, "a") is not None


def test_list_across_many_threads_pages_and_refills(saver: RedisSaver) -> None:
    made: list[str] = []
    for i in range(130):  # more threads than one pipeline carries
        made += config_ids(put_chain(saver, f"t{i}", 1))
    for i in range(3):  # and threads longer than the first read of ids
        made += config_ids(put_chain(saver, f"long{i}", 45))
    newest = sorted(made, reverse=True)
    assert checkpoint_ids(saver.list(None)) == newest
    assert checkpoint_ids(saver.list(None, limit=150)) == newest[:150]
    assert len(list(saver.list(None, filter={"step": 44}))) == 3


def test_delete_for_runs_and_copy_thread_with_writes(saver: RedisSaver, raw: redis.Redis) -> None:
    configs = put_chain(saver, "src", 2, run_id="r1")
    saver.put_writes(configs[-1], [("a", {"v": 1})], "task-1", "path")
    keep = put_chain(saver, "other", 1, run_id="r2")
    saver.copy_thread("src", "dst")
    dst = saver.get_tuple(cfg("dst"))
    assert dst is not None and dst.pending_writes == [("task-1", "a", {"v": 1})]
    assert dst.checkpoint["channel_values"]["payload"] == {"i": 1}
    assert checkpoint_ids(saver.list(cfg("dst"))) == checkpoint_ids(saver.list(cfg("src")))
    assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {
        "src",
        "dst",
        "other",
    }
    with pytest.raises(InvalidInputError):
        saver.copy_thread("src", "src")
    saver.delete_for_runs(["r1"])
    assert list(saver.list(cfg("src"))) == []
    assert list(saver.list(cfg("dst"))) == []
    assert checkpoint_ids(saver.list(cfg("other"))) == [keep[0]["configurable"]["checkpoint_id"]]
    # nothing of the emptied threads is left, in them or in the index
    for thread in ("src", "dst"):
        assert raw.exists(*saver.keys.thread("default", thread)) == 0
    assert raw.zrange(saver.keys.tenant_index("default"), 0, -1) == [b"other"]


def test_delete_for_runs_keeps_blobs_still_referenced(saver: RedisSaver, raw: redis.Redis) -> None:
    big = next_version(None)
    cp = make_cp(big=["shared"], mine=["r1"])
    cp["channel_versions"] = {"big": big, "mine": "1"}
    first = saver.put(cfg("t", run_id="r1"), cp, {}, {"big": big, "mine": "1"})
    cp2 = make_cp(big=["shared"], mine=["r2"])
    cp2["channel_versions"] = {"big": big, "mine": "2"}
    saver.put(
        first | {"configurable": {**first["configurable"], "run_id": "r2"}}, cp2, {}, {"mine": "2"}
    )
    saver.delete_for_runs(["r1"])
    (left,) = saver.list(cfg("t"))
    assert left.checkpoint["channel_values"] == {"big": ["shared"], "mine": ["r2"]}
    assert raw.hlen(saver.keys.thread("default", "t")[2]) == 2  # r1's own blob is gone


def test_copy_thread_merges_into_an_existing_target(saver: RedisSaver) -> None:
    src = put_chain(saver, "src", 3)
    dst = put_chain(saver, "dst", 1)
    saver.copy_thread("src", "dst")
    assert set(checkpoint_ids(saver.list(cfg("dst")))) == set(config_ids(src + dst))
    saver.copy_thread("missing", "dst2")
    assert list(saver.list(cfg("dst2"))) == []


def test_unchanged_blob_survives_keep_latest(saver: RedisSaver) -> None:
    put_shared_blob_chain(saver, "t")
    saver.prune(["t"], strategy="keep_latest")
    (only,) = list(saver.list(cfg("t")))
    assert only.metadata == {}
    assert only.checkpoint["channel_values"] == {"big": ["kept"] * 10, "counter": [3]}
    assert saver.client.hlen(saver.keys.thread("default", "t")[2]) == 2


def test_prune_keeps_what_delta_channel_threads_need(saver: RedisSaver) -> None:
    put_chain(saver, "plain", 3)
    first = saver.put(cfg("d"), make_cp(), {}, {})
    second = saver.put(first, make_cp(), {"counters_since_delta_snapshot": {"m": [1, 1]}}, {})
    saver.put(second, make_cp(), {"counters_since_delta_snapshot": {"m": [2, 2]}}, {})
    saver.prune(["plain", "d"])
    assert len(list(saver.list(cfg("plain")))) == 1
    assert len(list(saver.list(cfg("d")))) == 3  # the chain back to a snapshot
    with pytest.raises(InvalidInputError, match="strategy"):
        saver.prune(["d"], strategy="everything")
    saver.prune(["plain", "d"], strategy="delete")
    assert list(saver.list(None)) == []


# ---------------------------------------------------------------- failures


def test_bad_input_gets_our_errors_and_loses_nothing(saver: RedisSaver) -> None:
    configs = put_chain(saver, "t", 2)
    with pytest.raises(InvalidInputError, match="thread_id"):
        saver.put({"configurable": {}}, make_cp(), {}, {})
    with pytest.raises(InvalidInputError, match="checkpoint_id"):
        saver.put_writes(cfg("t"), [("a", 1)], "task")
    with pytest.raises(InvalidInputError):
        saver.put(cfg("t\x00x"), make_cp(), {}, {})
    with pytest.raises(InvalidInputError):
        saver.put(cfg("t", ns="a\x00b"), make_cp(), {}, {})
    with pytest.raises(InvalidInputError):
        saver.put_writes(configs[-1], [("a", 1)], "task\x00")
    with pytest.raises(InvalidInputError):
        saver.put(cfg("t\ud800"), make_cp(), {}, {})
    with pytest.raises(InvalidInputError):
        list(saver.list(cfg("t"), limit=-1))
    with pytest.raises(InvalidInputError):
        list(saver.list(cfg("t"), filter=["step"]))  # type: ignore[arg-type]
    assert checkpoint_ids(saver.list(cfg("t"))) == config_ids(configs[::-1])


def test_a_write_that_fails_midway_changes_nothing(saver: RedisSaver, raw: redis.Redis) -> None:
    configs = put_chain(saver, "t", 2)
    saver.put_writes(configs[-1], [("a", 1)], "task")
    keys = saver.keys.thread("default", "t")
    before = {k: raw.dump(k) for k in keys}
    # Something else overwrites the by-id index, the last key a put writes.
    raw.delete(keys[5])
    raw.set(keys[5], "not a sorted set")
    before[keys[5]] = raw.dump(keys[5])
    cp = make_cp(step=99, payload={"i": 99})
    cp["channel_versions"] = {"payload": "99"}
    with pytest.raises(StorageError, match="WRONGTYPE"):
        saver.put(configs[-1], cp, {"step": 99}, {"payload": "99"})
    with pytest.raises(StorageError, match="WRONGTYPE"):
        saver.put_writes(configs[-1], [("b", 2)], "task-2")
    assert {k: raw.dump(k) for k in keys} == before  # not one byte changed
    latest = saver.get_tuple(cfg("t"))
    assert latest is not None and latest.config == configs[-1]
    assert latest.checkpoint["channel_values"] == {"step": 1, "payload": {"i": 1}}
    assert latest.pending_writes == [("task", "a", 1)]
    assert saver.get_tuple(cfg("t", checkpoint_id=cp["id"])) is None


def test_a_flushed_script_cache_never_reaches_the_caller(
    saver: RedisSaver, raw: redis.Redis
) -> None:
    configs = put_chain(saver, "t", 1)
    raw.script_flush()
    configs += put_chain(saver, "t", 1)
    raw.script_flush()
    saver.put_writes(configs[-1], [("a", 1)], "task")
    raw.script_flush()
    assert len(list(saver.list(cfg("t")))) == 2
    raw.script_flush()
    saver.delete_for_runs(["nothing"])  # a pipeline of scripts
    raw.script_flush()
    assert len(list(saver.list(None))) == 2


async def test_a_callers_client_without_retries_survives_a_restart(redis_prefix: str) -> None:
    # redis.asyncio clients retry nothing by default and keep dead pooled connections:
    # the driver sends an (idempotent) request once more on a fresh connection.
    with RedisServer(config={"appendonly": "yes", "appendfsync": "always"}) as server:
        client = redis.asyncio.Redis.from_url(server.url)
        s = AsyncRedisSaver(client, prefix=redis_prefix)
        await s.setup()
        cp = make_cp(step=1)
        config = await s.aput(cfg("t"), cp, {}, {})
        await asyncio.to_thread(server.restart, crash=True)  # pooled connections are dead
        await s.aput_writes(config, [("a", 1)], "task")
        tup = await s.aget_tuple(cfg("t"))
        assert tup is not None and tup.config == config
        assert tup.pending_writes == [("task", "a", 1)]
        await client.aclose()


def test_resp3_clients_work(redis_url: str, redis_prefix: str) -> None:
    client = redis.Redis.from_url(redis_url, protocol=3)
    s = RedisSaver(client, prefix=redis_prefix)
    assert s.setup().versions
    configs = put_chain(s, "t", 3)
    s.put_writes(configs[-1], [("a", None)], "task")
    tup = s.get_tuple(cfg("t"))
    assert tup is not None and tup.pending_writes == [("task", "a", None)]
    assert len(list(s.list(None))) == 3
    s.copy_thread("t", "u")
    s.prune(["u"])
    s.delete_for_runs(["none"])
    assert len(list(s.list(cfg("u")))) == 1
    client.close()


# ---------------------------------------------------------------- TTL


def pttls(raw: redis.Redis, keys: tuple[str, ...]) -> list[int]:
    return [raw.pttl(k) for k in keys if raw.exists(k)]


def test_ttl_expires_the_whole_thread_together_and_writes_refresh_it(
    redis_url: str, redis_prefix: str, raw: redis.Redis
) -> None:
    with RedisSaver.from_conn_string(redis_url, prefix=redis_prefix, ttl=1.5) as s:
        configs = put_chain(s, "t", 2)
        keys = s.keys.thread("default", "t")
        assert len(pttls(raw, keys)) == 5  # no writes yet
        time.sleep(0.5)
        s.put_writes(configs[-1], [("a", 1)], "task")
        ttls = pttls(raw, keys)
        assert len(ttls) == 6 and max(ttls) - min(ttls) < 50 and min(ttls) > 1300
        time.sleep(0.5)
        assert s.get_tuple(cfg("t")) is not None
        assert max(pttls(raw, keys)) < 1100  # reads do not refresh by default
        time.sleep(0.5)
        put_chain(s, "t", 1)  # 1.5 s after the first write: refreshed, still whole
        assert len(list(s.list(cfg("t")))) == 3
        time.sleep(1.7)
        assert raw.exists(*keys) == 0
        assert s.get_tuple(cfg("t")) is None
        assert list(s.list(None)) == []
        assert raw.zcard(s.keys.tenant_index("default")) == 0  # dropped lazily


def test_ttl_refreshed_on_read_when_asked(
    redis_url: str, redis_prefix: str, raw: redis.Redis
) -> None:
    with RedisSaver.from_conn_string(
        redis_url, prefix=redis_prefix, ttl=2, refresh_ttl_on_read=True
    ) as s:
        put_chain(s, "t", 1)
        keys = s.keys.thread("default", "t")
        time.sleep(0.6)
        assert max(pttls(raw, keys)) < 1500
        assert s.get_tuple(cfg("t")) is not None
        assert min(pttls(raw, keys)) > 1900
        time.sleep(0.6)
        assert len(list(s.list(cfg("t")))) == 1
        assert min(pttls(raw, keys)) > 1900


def test_without_ttl_keys_persist(redis_url: str, redis_prefix: str, raw: redis.Redis) -> None:
    with RedisSaver.from_conn_string(redis_url, prefix=redis_prefix, ttl=60) as s:
        put_chain(s, "t", 1)
    with RedisSaver.from_conn_string(redis_url, prefix=redis_prefix) as s:
        configs = put_chain(s, "t", 1)
        s.put_writes(configs[-1], [("a", 1)], "task")
        assert set(pttls(raw, s.keys.thread("default", "t"))) == {-1}


# ---------------------------------------------------------------- async, concurrency


async def test_async_saver_round_trip_and_sync_bridge(redis_url: str, redis_prefix: str) -> None:
    async with AsyncRedisSaver.from_conn_string(redis_url, prefix=redis_prefix) as s:
        assert (await s.setup()).versions
        seen = count_requests(s)
        cp, tup = await aput_message_with_write(s, "t")
        assert len(seen) == 3  # put (its script adds the thread to the index), writes, get
        assert all(not isinstance(r, Batch) for r in seen)
        assert tup is not None and tup.checkpoint["channel_values"] == {"messages": ["hi"]}
        assert tup.pending_writes == [("task", "messages", ["there"])]
        # the sync methods work from another thread, and refuse the loop's own thread
        other = await asyncio.to_thread(s.get_tuple, cfg("t"))
        assert other is not None and other.checkpoint["id"] == cp["id"]
        with pytest.raises(InvalidInputError, match="event loop"):
            s.get_tuple(cfg("t"))
        assert [t.checkpoint["id"] async for t in s.alist(None, limit=1)] == [cp["id"]]
        await s.acopy_thread("t", "u")
        await s.aprune(["t", "u"])
        await s.adelete_for_runs(["none"])
        await s.adelete_thread("t")
        assert [t.config["configurable"]["thread_id"] async for t in s.alist(None)] == ["u"]


def test_concurrent_writers_on_one_thread(saver: RedisSaver) -> None:
    errors = write_concurrently(saver, "shared", writers=4, puts=20)
    assert errors == []
    assert len(list(saver.list({"configurable": {"thread_id": "shared"}}))) == 80


def test_every_operation_is_a_plain_generator(saver: RedisSaver) -> None:
    op = saver._ops.get_tuple(saver._key(cfg("t")), None)
    assert isinstance(op, Operation)
    request = op.steps.send(None)
    assert isinstance(request, Script) and request.script.name == "get"
    assert request.keys == saver.keys.thread("default", "t")
    op.steps.close()


# ---------------------------------------------------------------- cluster


@pytest.fixture
def cluster_client(redis_cluster_url: str) -> Iterator[RedisCluster]:
    client = RedisCluster.from_url(redis_cluster_url)
    yield client
    client.close()


def test_cluster_saver_keeps_a_thread_in_one_slot(
    redis_cluster_conn_string: str, redis_prefix: str, cluster_client: RedisCluster
) -> None:
    with RedisSaver.from_conn_string(redis_cluster_conn_string, prefix=redis_prefix) as s:
        assert len(s.setup().versions) == 3
        threads = [f"thread-{i}" for i in range(12)] + ["{x}", "a:b"]
        for thread in threads:
            configs = put_chain(s, thread, 2, run_id=f"run-{thread}")
            s.put_writes(configs[-1], [("a", thread)], "task")
            keys = s.keys.thread("default", thread)
            slots = {cluster_client.execute_command("CLUSTER KEYSLOT", k) for k in keys}
            assert len(slots) == 1
            assert cluster_client.exists(*keys) == 6
        used = {cluster_client.keyslot(s.keys.thread("default", t)[0]) for t in threads}
        nodes = {
            cluster_client.get_node_from_key(s.keys.thread("default", t)[0]).name for t in threads
        }
        assert len(used) > 1 and len(nodes) > 1  # the threads spread over the primaries
        assert len(list(s.list(None))) == 2 * len(threads)
        s.copy_thread("thread-0", "copy")
        assert checkpoint_ids(s.list(cfg("copy"))) == checkpoint_ids(s.list(cfg("thread-0")))
        s.delete_for_runs(["run-thread-1", "run-a:b"])
        assert list(s.list(cfg("thread-1"))) == [] and list(s.list(cfg("a:b"))) == []
        s.prune(["thread-2", "thread-3"])
        assert len(list(s.list(cfg("thread-2")))) == 1
        s.delete_thread("thread-4")
        assert len(list(s.list(None))) == 2 * len(threads) + 2 - 4 - 2 - 2
        cluster_client.script_flush()
        assert s.get_tuple(cfg("thread-5")) is not None
        # on a cluster the index is in another slot: a thread's first write takes two steps
        seen = count_requests(s)
        put_chain(s, "fresh", 2)
        assert [type(r).__name__ for r in seen] == ["Script", "Command", "Script"]
        assert cluster_client.zscore(s.keys.tenant_index("default"), "fresh") is not None


def test_cluster_clients_and_url_forms(redis_cluster_url: str, redis_prefix: str) -> None:
    client = RedisCluster.from_url(redis_cluster_url)
    s = RedisSaver(client, prefix=redis_prefix)
    put_chain(s, "t", 2)
    client.close()
    with RedisSaver.from_conn_string(f"{redis_cluster_url}?cluster=true", prefix=redis_prefix) as q:
        assert len(list(q.list(cfg("t")))) == 2


async def test_async_cluster_saver(redis_cluster_conn_string: str, redis_prefix: str) -> None:
    async with AsyncRedisSaver.from_conn_string(
        redis_cluster_conn_string, prefix=redis_prefix, ttl=60
    ) as s:
        await s.setup()
        parent = None
        for thread in ("a", "b", "c"):
            cp = make_cp(v=[thread])
            cp["channel_versions"] = {"v": "1"}
            parent = await s.aput(cfg(thread), cp, {"thread": thread}, {"v": "1"})
            await s.aput_writes(parent, [("w", thread)], "task")
        assert [t.metadata["thread"] async for t in s.alist(None)] == ["c", "b", "a"]
        assert [t.metadata["thread"] async for t in s.alist(None, filter={"thread": "b"})] == ["b"]
        await s.acopy_thread("a", "a2")
        tup = await s.aget_tuple(cfg("a2"))
        assert tup is not None and tup.pending_writes == [("task", "w", "a")]
