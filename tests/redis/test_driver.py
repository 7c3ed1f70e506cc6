"""The Redis driver's script calls on one server: packed by the driver, sent on a pooled
connection (see ``langgraph_durable.redis._driver``), and the clients that go through
redis-py's ``execute_command`` instead."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.connection import Connection

from langgraph_durable.errors import StorageError
from langgraph_durable.redis import AsyncRedisSaver, RedisSaver
from langgraph_durable.redis._driver import _FirstAtOnce, _packed, _pooled, _ScriptPool
from tests.helpers import cfg, put_chain, versioned_cp

# str (with text that is not ASCII), bytes (empty, and above redis-py's 6,000-byte cut
# where it sends a blob as a buffer of its own) and int arguments
ARGS: tuple[Any, ...] = (
    "EVALSHA",
    "0" * 40,
    3,
    "{t:th}:a",
    "{t:th}:bé",
    "{t:th}:\u2603",
    b"",
    b"\x00\r\n$*\xff" * 3,
    b"x" * 7000,
    -12,
    0,
    "café",
)


def test_packed_is_what_redis_py_sends() -> None:
    ours = _packed(ARGS)
    assert ours is not None
    assert b"".join(ours) == b"".join(Connection().pack_command(*ARGS))


@pytest.mark.parametrize("other", [1.5, memoryview(b"ab"), True, None])
def test_packed_leaves_other_types_to_redis_py(other: Any) -> None:
    assert _packed(("EVALSHA", "0" * 40, 0, other)) is None


def test_pooled_only_for_one_utf8_server(redis_url: str, redis_cluster_url: str) -> None:
    from redis.cluster import RedisCluster

    plain = redis.Redis.from_url(redis_url)
    one = redis.Redis.from_url(redis_url, single_connection_client=True)
    latin = redis.Redis.from_url(redis_url, encoding="latin-1")
    lenient = redis.Redis.from_url(redis_url, encoding_errors="replace")
    cluster = RedisCluster.from_url(redis_cluster_url)
    try:
        pooled = _pooled(plain)
        assert pooled is not None and pooled[0] is plain.connection_pool
        assert _pooled(redis.Redis.from_url(redis_url, encoding="UTF8")) is not None
        assert _pooled(one) is None
        assert _pooled(latin) is None
        assert _pooled(lenient) is None
        assert _pooled(cluster) is None
    finally:
        for client in (plain, one, latin, lenient, cluster):
            client.close()


# A thread id and a channel value that are not ASCII: the pooled path encodes the keys
# itself, so it must name the same keys as redis-py's own encoding.
THREAD = "thread-é-\u2603"


def _clients(redis_url: str) -> dict[str, redis.Redis]:
    return {
        "pooled": redis.Redis.from_url(redis_url),
        "one_connection": redis.Redis.from_url(redis_url, single_connection_client=True),
        "latin1": redis.Redis.from_url(redis_url, encoding="latin-1"),
    }


@pytest.mark.parametrize("writer", ["pooled", "one_connection"])
def test_both_paths_name_the_same_keys(redis_url: str, redis_prefix: str, writer: str) -> None:
    clients = _clients(redis_url)
    try:
        savers = {
            name: RedisSaver(client, prefix=redis_prefix)
            for name, client in clients.items()
            if name != "latin1"
        }
        savers[writer].setup()
        written = put_chain(savers[writer], THREAD, 3)
        for name, saver in savers.items():
            got = saver.get_tuple(cfg(THREAD))
            assert got is not None, name
            assert got.config["configurable"]["checkpoint_id"] == _id(written[-1]), name
            assert got.checkpoint["channel_values"]["payload"] == {"i": 2}, name
            assert [_id(t.config) for t in saver.list(cfg(THREAD))] == [
                _id(c) for c in reversed(written)
            ], name
    finally:
        for client in clients.values():
            client.close()


def test_a_latin1_client_goes_through_redis_py(redis_url: str, redis_prefix: str) -> None:
    clients = _clients(redis_url)
    try:
        saver = RedisSaver(clients["latin1"], prefix=redis_prefix)
        assert saver._conn._pool is None
        saver.setup()
        written = put_chain(saver, "thread-é", 2)
        got = saver.get_tuple(cfg("thread-é"))
        assert got is not None and got.checkpoint["id"] == _id(written[-1])
    finally:
        for client in clients.values():
            client.close()


def test_a_pooled_call_survives_its_connections_killed(redis_url: str, redis_prefix: str) -> None:
    name = f"lgd-kill-{redis_prefix}"
    client = redis.Redis.from_url(redis_url, client_name=name)
    admin = redis.Redis.from_url(redis_url)
    try:
        saver = RedisSaver(client, prefix=redis_prefix)
        assert saver._conn._pool is not None
        saver.setup()
        put_chain(saver, "killed", 1)
        ids = [c["id"] for c in admin.client_list() if c.get("name") == name]
        assert ids
        for client_id in ids:
            admin.client_kill_filter(_id=client_id)
        written = put_chain(saver, "killed-2", 2)
        got = saver.get_tuple(cfg("killed-2"))
        assert got is not None and got.checkpoint["id"] == _id(written[-1])
    finally:
        client.close()
        admin.close()


def test_async_pooled_calls_and_a_forgotten_script(redis_url: str, redis_prefix: str) -> None:
    async def go() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        one = redis.asyncio.Redis.from_url(redis_url, single_connection_client=True)
        try:
            saver = AsyncRedisSaver(client, prefix=redis_prefix)
            assert saver._conn._pool is not None
            other = AsyncRedisSaver(one, prefix=redis_prefix)
            assert other._conn._pool is None
            await saver.setup()
            cp1 = await _aput(saver, THREAD)
            await client.script_flush()  # the pooled call sends the script again (EVAL)
            cp2 = await _aput(saver, THREAD, parent=cp1)
            for s in (saver, other):
                got = await s.aget_tuple(cfg(THREAD))
                assert got is not None and got.checkpoint["id"] == cp2
        finally:
            await client.aclose()
            await one.aclose()

    asyncio.run(go())


async def _aput(saver: AsyncRedisSaver, thread: str, parent: str | None = None) -> str:
    cp = versioned_cp(payload={"v": "é"})
    config = cfg(thread, checkpoint_id=parent)
    await saver.aput(config, cp, {"step": 0, "source": "loop"}, cp["channel_versions"])
    return str(cp["id"])


def _id(config: Any) -> str:
    return str(config["configurable"]["checkpoint_id"])


# ---------------------------------------------------------------- a client the saver opens


def _counting(pool: Any) -> dict[str, int]:
    """Count, on ``pool``, the connections handed out with and without redis-py's check."""
    counts = {"checked": 0, "skipped": 0}
    ensure = pool.ensure_connection

    def counted(connection: Any) -> None:
        counts["skipped" if id(connection) in pool._read else "checked"] += 1
        ensure(connection)

    pool.ensure_connection = counted
    return counts


def test_an_opened_client_skips_the_check_only_after_a_whole_reply(
    redis_url: str, redis_prefix: str
) -> None:
    with RedisSaver.from_conn_string(redis_url, prefix=redis_prefix, pool_size=1) as saver:
        pool = saver._conn.client.connection_pool
        assert isinstance(pool, _ScriptPool)
        saver.setup()
        counts = _counting(pool)
        put_chain(saver, "t", 5)
        assert counts["skipped"] >= 4  # every put after the first took a handed-back one
        # a script that fails (a key of the wrong type) hands its connection back unmarked
        raw = redis.Redis.from_url(redis_url)
        try:
            for key in saver._ops.keys.thread("default", "wrong"):
                raw.set(key, b"not a hash")
            before = dict(counts)
            with pytest.raises(StorageError):
                put_chain(saver, "wrong", 1)
            assert not pool._read  # the one connection was handed back unmarked
            assert counts["skipped"] == before["skipped"] + 1  # the failed put took it marked
            saver.get_tuple(cfg("t"))
            assert counts["checked"] == before["checked"] + 1  # so the next call checks it
        finally:
            raw.close()


def test_an_opened_client_retries_a_connection_the_server_closed_at_once(
    redis_url: str, redis_prefix: str
) -> None:
    name = f"lgd-closed-{redis_prefix}"
    admin = redis.Redis.from_url(redis_url)
    url = f"{redis_url}?client_name={name}"
    try:
        with RedisSaver.from_conn_string(url, prefix=redis_prefix, pool_size=1) as saver:
            saver.setup()
            put_chain(saver, "t", 1)
            pool = saver._conn.client.connection_pool
            assert pool._read  # the one connection was handed back with its reply read
            for client in admin.client_list():
                if client.get("name") == name:
                    admin.client_kill_filter(_id=client["id"])
            start = time.monotonic()
            written = put_chain(saver, "t2", 1)  # on the closed connection: retried at once
            assert time.monotonic() - start < 0.05
            got = saver.get_tuple(cfg("t2"))
            assert got is not None and got.config["configurable"]["checkpoint_id"] == _id(
                written[-1]
            )
    finally:
        admin.close()


def test_the_first_retry_of_an_opened_client_is_immediate() -> None:
    backoff = _FirstAtOnce(cap=1.0, base=0.05)
    assert [backoff.compute(n) for n in (1, 2, 3, 4, 5)] == [0.0, 0.1, 0.2, 0.4, 0.8]
