"""Checkpointer factories that plug our savers into LangGraph's own test suite.

This module is not imported by our test suite. ``run_suite.py`` copies it into the
unpacked LangGraph ``tests/`` package (as ``tests/conftest_durable.py``) and patches
LangGraph's ``tests/conftest.py`` so that its ``sync_checkpointer`` and
``async_checkpointer`` fixtures also take the names in ``SYNC_FACTORIES`` and
``ASYNC_FACTORIES`` and dispatch them here.

Every factory works on the PostgreSQL server named by the environment variable
``LGD_POSTGRES_URL``: it creates a schema with a unique name, builds the saver in
that schema, runs ``setup()``, yields the saver and drops the schema afterwards.

``upstream_pg`` / ``upstream_pg_async`` run the stock ``langgraph-checkpoint-postgres``
savers through the same plumbing (confined to the schema via ``search_path``), as a
baseline for our own results.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import Any

URL_ENV = "LGD_POSTGRES_URL"
SCHEMA_PREFIX = "lgd_suite_"


def _postgres_url() -> str:
    url = os.environ.get(URL_ENV, "").strip()
    if not url:
        raise RuntimeError(
            f"{URL_ENV} is not set: run LangGraph's suite through "
            "tests/langgraph_suite/run_suite.py, or set it to a PostgreSQL URL"
        )
    return url


def _new_schema() -> str:
    # Not uuid.uuid4(): some tests patch it to hand out a fixed sequence of ids, and a
    # fixture that draws from it shifts every id the test expects.
    return f"{SCHEMA_PREFIX}{secrets.token_hex(8)}"


def _apply_strict_msgpack(saver: Any) -> None:
    """Honour LANGGRAPH_STRICT_MSGPACK the way the suite's built-in factories do."""
    try:
        from tests.conftest_checkpointer import _apply_strict_msgpack as apply
    except ImportError:  # an sdist without the helper: nothing to honour
        return
    apply(saver)


@contextmanager
def _sync_schema() -> Iterator[tuple[str, str]]:
    import psycopg
    from psycopg import sql

    url = _postgres_url()
    schema = _new_schema()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield url, schema
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@asynccontextmanager
async def _async_schema() -> AsyncIterator[tuple[str, str]]:
    import psycopg
    from psycopg import sql

    url = _postgres_url()
    schema = _new_schema()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield url, schema
    finally:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )


def _with_search_path(url: str, schema: str) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(url, options=f"-c search_path={schema}")


# --- our savers ------------------------------------------------------------------


@contextmanager
def durable_pg() -> Iterator[Any]:
    from langgraph_durable.postgres import PostgresSaver

    with _sync_schema() as (url, schema):
        with PostgresSaver.from_conn_string(url, schema=schema) as saver:
            saver.setup()
            _apply_strict_msgpack(saver)
            yield saver


@asynccontextmanager
async def durable_pg_async() -> AsyncIterator[Any]:
    from langgraph_durable.postgres import AsyncPostgresSaver

    async with _async_schema() as (url, schema):
        async with AsyncPostgresSaver.from_conn_string(url, schema=schema) as saver:
            await saver.setup()
            _apply_strict_msgpack(saver)
            yield saver


# --- stock langgraph-checkpoint-postgres savers (baseline) -----------------------


@contextmanager
def upstream_pg() -> Iterator[Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    with _sync_schema() as (url, schema):
        with PostgresSaver.from_conn_string(_with_search_path(url, schema)) as saver:
            saver.setup()
            _apply_strict_msgpack(saver)
            yield saver


@asynccontextmanager
async def upstream_pg_async() -> AsyncIterator[Any]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with _async_schema() as (url, schema):
        async with AsyncPostgresSaver.from_conn_string(_with_search_path(url, schema)) as saver:
            await saver.setup()
            _apply_strict_msgpack(saver)
            yield saver


# Names added to the suite's fixture parameter lists; each appears in the ids of the
# tests it runs. run_suite.py builds -k expressions that tell apart names containing
# one another (durable_pg / durable_pg_async).
SYNC_FACTORIES: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "durable_pg": durable_pg,
    "upstream_pg": upstream_pg,
}
ASYNC_FACTORIES: dict[str, Callable[[], AbstractAsyncContextManager[Any]]] = {
    "durable_pg_async": durable_pg_async,
    "upstream_pg_async": upstream_pg_async,
}
SYNC_NAMES = tuple(SYNC_FACTORIES)
ASYNC_NAMES = tuple(ASYNC_FACTORIES)


def sync_checkpointer_for(name: str) -> AbstractContextManager[Any]:
    return SYNC_FACTORIES[name]()


def async_checkpointer_for(name: str) -> AbstractAsyncContextManager[Any]:
    return ASYNC_FACTORIES[name]()
