"""``stored_retention()`` / ``astored_retention()``: the policy ``setup()`` stored, on every
backend, read through the public API (what ``langgraph-durable prune`` applies)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import timedelta
from typing import Any

import pytest

from langgraph_durable import Retention

POLICY = Retention(idle=timedelta(days=30), absolute=timedelta(days=90))
TRIM = Retention(strategy="keep_latest", keep=2)


def _sync(backend: str, request: pytest.FixtureRequest) -> Callable[..., AbstractContextManager]:
    if backend == "postgres":
        from langgraph_durable.postgres import PostgresSaver

        url, schema = request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
        return lambda **kw: PostgresSaver.from_conn_string(url, schema=schema, **kw)
    if backend == "redis":
        from langgraph_durable.redis import RedisSaver

        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        return lambda **kw: RedisSaver.from_conn_string(url, prefix=prefix, **kw)
    from langgraph_durable.dynamodb import DynamoDBSaver

    endpoint = request.getfixturevalue("dynamodb_endpoint")
    table = request.getfixturevalue("dynamodb_table")
    url = f"dynamodb://{table}?region=us-east-1&endpoint={endpoint}"
    return lambda **kw: DynamoDBSaver.from_conn_string(url, **kw)


def _async(
    backend: str, request: pytest.FixtureRequest
) -> Callable[..., AbstractAsyncContextManager]:
    if backend == "postgres":
        from langgraph_durable.postgres import AsyncPostgresSaver

        url, schema = request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
        return lambda **kw: AsyncPostgresSaver.from_conn_string(url, schema=schema, **kw)
    if backend == "redis":
        from langgraph_durable.redis import AsyncRedisSaver

        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        return lambda **kw: AsyncRedisSaver.from_conn_string(url, prefix=prefix, **kw)
    from langgraph_durable.dynamodb import AsyncDynamoDBSaver

    endpoint = request.getfixturevalue("dynamodb_endpoint")
    table = request.getfixturevalue("dynamodb_table")
    url = f"dynamodb://{table}?region=us-east-1&endpoint={endpoint}"
    return lambda **kw: AsyncDynamoDBSaver.from_conn_string(url, **kw)


BACKENDS = ["postgres", "redis", "dynamodb"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_stored_retention_is_what_setup_stored(
    backend: str, request: pytest.FixtureRequest
) -> None:
    opened = _sync(backend, request)
    with opened() as saver:
        saver.setup()
        assert saver.stored_retention() is None
    with opened(retention=POLICY) as saver:
        saver.setup()
    with opened() as saver:  # another process, without a policy of its own
        assert saver.stored_retention() == POLICY
    with opened(retention=TRIM) as saver:
        saver.setup()
        assert saver.stored_retention() == TRIM


@pytest.mark.parametrize("backend", BACKENDS)
async def test_astored_retention_is_what_setup_stored(
    backend: str, request: pytest.FixtureRequest
) -> None:
    opened: Any = _async(backend, request)
    async with opened() as saver:
        await saver.setup()
        assert await saver.astored_retention() is None
    async with opened(retention=POLICY) as saver:
        await saver.setup()
    async with opened() as saver:
        assert await saver.astored_retention() == POLICY
