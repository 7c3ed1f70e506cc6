"""Waits that end: an exhausted pool, a server that never answers and a lock another
session never releases end in our typed error after the documented timeout, never a hang
(docs/reliability.md, bounded waits)."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from langgraph_durable.errors import StorageUnavailableError
from langgraph_durable.postgres import PostgresSaver
from langgraph_durable.redis import AsyncRedisSaver, RedisSaver
from tests.faults.proxy import FaultProxy, step_args
from tests.helpers import cfg, put_chain


def test_an_exhausted_pool_raises_after_pool_timeout(pg_url: str, pg_schema: str) -> None:
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, pool_size=1, pool_timeout=0.5
    ) as s:
        s.setup()
        put_chain(s, "t", 1)
        with s._conn.pool.connection():  # another user holds the only connection
            started = time.monotonic()
            with pytest.raises(StorageUnavailableError, match="no PostgreSQL connection"):
                s.get_tuple(cfg("t"))
            assert 0.4 <= time.monotonic() - started < 5
        assert s.get_tuple(cfg("t")) is not None  # released: served again


def test_a_server_that_never_answers_is_reported_at_open(pg_url: str, pg_proxy: FaultProxy) -> None:
    pg_proxy.black_hole = True
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError):
        PostgresSaver.from_conn_string(pg_proxy.url(pg_url), pool_timeout=1.0).__enter__()
    assert time.monotonic() - started < 10  # libpq's connect_timeout: 2 s at least


@pytest.mark.parametrize(
    ("call", "lock"),
    [
        # a maintenance session stuck while holding the checkpoints table
        ("put", "LOCK TABLE {s}.checkpoints IN EXCLUSIVE MODE"),
        # a session stuck while holding the thread's registry row
        ("delete_thread", "SELECT 1 FROM {s}.threads WHERE thread_id = 't' FOR UPDATE"),
    ],
)
def test_a_stuck_lock_raises_after_lock_timeout(
    pg_url: str, pg_schema: str, call: str, lock: str
) -> None:
    """Another session holds a lock in a transaction it never ends."""
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as first:
        first.setup()
        config = put_chain(first, "t", 1)[-1]
    with psycopg.connect(pg_url) as holder:  # not autocommit: the lock is held until rollback
        holder.execute(lock.format(s=pg_schema))
        with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, lock_timeout=0.3) as s:
            started = time.monotonic()
            with pytest.raises(StorageUnavailableError, match="lock_timeout"):
                if call == "put":
                    s.put(*step_args(1, config))
                else:
                    s.delete_thread("t")
            assert 0.25 <= time.monotonic() - started < 5
            holder.rollback()
            s.put(*step_args(1, config))  # the lock released: served again
            assert len(list(s.list(cfg("t")))) == 2


def test_a_redis_server_that_stops_answering_is_reported(
    redis_url: str, redis_prefix: str, redis_proxy: FaultProxy
) -> None:
    """A partition on open connections: the reply never comes; the socket timeout (5 s by
    default; 0.3 s in this URL) and redis-py's retries end the call, never a hang."""
    url = redis_proxy.url(redis_url)
    url += ("&" if "?" in url else "?") + "socket_timeout=0.3&socket_connect_timeout=0.3"
    with RedisSaver.from_conn_string(url, prefix=redis_prefix) as s:
        put_chain(s, "t", 1)
        redis_proxy.black_hole = True
        started = time.monotonic()
        with pytest.raises(StorageUnavailableError):
            s.get_tuple(cfg("t"))
        assert time.monotonic() - started < 15
        redis_proxy.black_hole = False
        assert s.get_tuple(cfg("t")) is not None  # the partition over: served again


def test_redis_clients_the_saver_opens_time_out_by_default(redis_url: str) -> None:
    with RedisSaver.from_conn_string(redis_url) as s:
        kwargs = s._conn.client.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == 5.0


async def test_a_redis_pool_serves_more_concurrent_calls_than_it_has_connections(
    redis_url: str, redis_prefix: str
) -> None:
    """200 calls at once on 4 connections: each waits for one (redis-py's default pool
    would refuse the 101st concurrent call instead of waiting)."""
    async with AsyncRedisSaver.from_conn_string(redis_url, prefix=redis_prefix, pool_size=4) as s:
        await s.aput(*step_args(0, cfg("t")))
        got = await asyncio.gather(*(s.aget_tuple(cfg("t")) for _ in range(200)))
        assert all(t is not None for t in got)
        pool = s._conn.client.connection_pool
        assert pool.max_connections == 4


def test_an_exhausted_redis_pool_raises_after_pool_timeout(
    redis_url: str, redis_prefix: str
) -> None:
    with RedisSaver.from_conn_string(
        redis_url, prefix=redis_prefix, pool_size=1, pool_timeout=0.3
    ) as s:
        put_chain(s, "t", 1)
        pool = s._conn.client.connection_pool
        held = pool.get_connection()  # another user holds the only connection
        started = time.monotonic()
        with pytest.raises(StorageUnavailableError, match="no Redis connection available"):
            s.get_tuple(cfg("t"))
        assert 0.25 <= time.monotonic() - started < 5
        pool.release(held)
        assert s.get_tuple(cfg("t")) is not None  # released: served again
