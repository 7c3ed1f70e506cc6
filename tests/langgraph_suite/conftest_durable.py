"""Checkpointer factories that plug our savers into LangGraph's own test suite.

This module is not imported by our test suite. ``run_suite.py`` copies it into the
unpacked LangGraph ``tests/`` package (as ``tests/conftest_durable.py``) and patches
LangGraph's ``tests/conftest.py`` so that its ``sync_checkpointer`` and
``async_checkpointer`` fixtures also take the names in ``SYNC_FACTORIES`` and
``ASYNC_FACTORIES`` and dispatch them here.

Each factory gives its saver a namespace of its own on the service named by an
environment variable (``run_suite.py`` sets them from the test rig) and removes it
afterwards:

* ``durable_pg`` / ``durable_pg_async``: ``LGD_POSTGRES_URL``; a schema no other test
  is using, its tables emptied after the test (``_Schemas``: set up once per process,
  dropped when the process exits);
* ``durable_redis`` / ``durable_redis_async``: ``LGD_REDIS_URL`` (a single server); a
  unique key prefix, whose keys are deleted (SCAN + UNLINK);
* ``durable_dynamodb`` / ``durable_dynamodb_async``: ``LGD_DYNAMODB_ENDPOINT``
  (moto's server, credentials and region from the environment); a table with a unique
  name, created by ``setup()`` and deleted.

``durable_pg_all``, ``durable_redis_all_async`` and ``durable_dynamodb_all_async`` are
one saver per backend again with every protection on at once: envelope encryption (a
local keyring made per process), the hash chain (``integrity=``, a chain key made per
saver) and PII redaction (every detector, in ``tokenize`` mode with ``restore=True``, so
that reads give back what the graph wrote and the suite's assertions hold). The
PostgreSQL one also runs under row-level security, with the role recipe of
docs/security.md: a migration role (made per process) owns the schema and runs
``setup(row_level_security=True)``, and the saver connects as an application role (made
per process) that owns nothing and may only do what ``app_role_grants`` allows. Both
roles are dropped when the process exits.

``durable_store_pg``, ``durable_store_redis``, ``durable_store_dynamodb`` and their
``_async`` twins are our stores (``BaseStore``) for the suite's ``sync_store`` and
``async_store`` fixtures, each on a schema / key prefix / table of its own as the
savers above (``*_STORE_FACTORIES``); they take the store's options, so that
``store_adapter.py`` makes the stores of the store tests of ``langgraph-checkpoint`` and
``langgraph-checkpoint-postgres`` with them too.

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
REDIS_URL_ENV = "LGD_REDIS_URL"
DYNAMODB_ENDPOINT_ENV = "LGD_DYNAMODB_ENDPOINT"
SCHEMA_PREFIX = "lgd_suite_"
REDIS_PREFIX = "lgds"
TABLE_PREFIX = "lgd-suite-"
DYNAMODB_REGION = "us-east-1"


def _required_env(name: str, what: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise RuntimeError(
            f"{name} is not set: run LangGraph's suite through "
            f"tests/langgraph_suite/run_suite.py, or set it to {what}"
        )
    return value


def _postgres_url() -> str:
    return _required_env(URL_ENV, "a PostgreSQL URL")


# Unique names come from secrets, not uuid.uuid4(): some tests patch uuid4 to hand out a
# fixed sequence of ids, and a fixture that draws from it shifts every id they expect.


def _new_schema() -> str:
    return f"{SCHEMA_PREFIX}{secrets.token_hex(8)}"


def _apply_strict_msgpack(saver: Any) -> None:
    """Honour LANGGRAPH_STRICT_MSGPACK the way the suite's built-in factories do."""
    try:
        from tests.conftest_checkpointer import _apply_strict_msgpack as apply
    except ImportError:  # an sdist without the helper: nothing to honour
        return
    apply(saver)


class _Schemas:
    """Schemas this process has set up, emptied between tests and handed out again.

    Setting a schema up (every migration) cost about a second per test, most of the
    PostgreSQL savers' time in the suite. A test gets a schema no other test is using,
    with every table empty except the ones that hold the schema's own state (its
    migration version and settings); a schema whose emptying fails is dropped instead.
    Every schema is dropped when the process exits.

    The tables are emptied by ``DELETE``, all in one round trip on a connection the
    process keeps: a ``TRUNCATE`` of the schema's tables and partitions (new files for
    each, then a commit) took 45-60 ms per test, a ``DELETE`` of a test's few rows a
    few milliseconds. The savers' and stores' tables have no triggers a ``DELETE``
    would fire. That connection has ``row_security`` off: a ``DELETE`` that row-level
    security would narrow (a user who does not bypass it) fails instead of leaving
    rows behind, and the schema is dropped.
    """

    KEEP = ("settings", "schema_migrations", "checkpoint_migrations")  # ours, upstream's
    free: dict[str, list[str]] = {}
    made: list[str] = []
    _conn: Any = None

    @classmethod
    def take(cls, kind: str, create: Callable[[str], None]) -> str:
        if cls.free.get(kind):
            return cls.free[kind].pop()
        if not cls.made:
            import atexit

            atexit.register(cls.drop_all, _postgres_url())
        schema = _new_schema()
        cls.made.append(schema)
        create(schema)
        return schema

    @classmethod
    def _connection(cls) -> Any:
        import psycopg

        if cls._conn is None or cls._conn.closed:
            cls._conn = psycopg.connect(
                _postgres_url(), autocommit=True, options="-c row_security=off"
            )
        return cls._conn

    @classmethod
    def give_back(cls, kind: str, schema: str) -> None:
        import psycopg
        from psycopg import sql

        try:
            conn = cls._connection()
            tables = conn.execute(
                "SELECT c.relname FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') "
                "AND NOT c.relispartition AND c.relname <> ALL(%s)",
                (schema, list(cls.KEEP)),
            ).fetchall()
            if tables:
                # One simple-protocol query: every DELETE in one implicit transaction.
                conn.execute(
                    sql.SQL("; ").join(
                        sql.SQL("DELETE FROM {}").format(sql.Identifier(schema, name))
                        for (name,) in tables
                    )
                )
        except psycopg.Error:
            with psycopg.connect(_postgres_url(), autocommit=True) as fresh:
                fresh.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )
            return
        cls.free.setdefault(kind, []).append(schema)

    @classmethod
    def drop_all(cls, url: str) -> None:
        import psycopg
        from psycopg import sql

        if cls._conn is not None:
            cls._conn.close()
        with psycopg.connect(url, autocommit=True) as conn:
            for schema in cls.made:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )


def _create_schema(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(_postgres_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))


def _create_saver_schema(schema: str) -> None:
    """Create ``schema`` and migrate it with our saver's ``setup()``, once: the savers'
    schemas are handed from test to test with their migration state kept, so a
    ``setup()`` per test (12-16 ms) would find what the first one left."""
    from langgraph_durable.postgres import PostgresSaver

    _create_schema(schema)
    with PostgresSaver.from_conn_string(_postgres_url(), schema=schema, pool_size=1) as saver:
        saver.setup()


@contextmanager
def _sync_schema(
    kind: str = "ours", create: Callable[[str], None] = _create_schema
) -> Iterator[tuple[str, str]]:
    schema = _Schemas.take(kind, create)
    try:
        yield _postgres_url(), schema
    finally:
        _Schemas.give_back(kind, schema)


@asynccontextmanager
async def _async_schema(
    kind: str = "ours", create: Callable[[str], None] = _create_schema
) -> AsyncIterator[tuple[str, str]]:
    # The schema's set-up and emptying are synchronous: a few milliseconds outside a test.
    schema = _Schemas.take(kind, create)
    try:
        yield _postgres_url(), schema
    finally:
        _Schemas.give_back(kind, schema)


def _with_search_path(url: str, schema: str) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(url, options=f"-c search_path={schema}")


# --- our savers ------------------------------------------------------------------


class _RlsRoles:
    """The migration and application roles of this process (made at first use)."""

    owner = ""
    app = ""

    @classmethod
    def ensure(cls, url: str) -> tuple[str, str]:
        if not cls.owner:
            import atexit

            import psycopg
            from psycopg import sql

            suffix = secrets.token_hex(6)
            owner, app = f"lgd_suite_owner_{suffix}", f"lgd_suite_app_{suffix}"
            with psycopg.connect(url, autocommit=True) as conn:
                for role in (owner, app):
                    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            cls.owner, cls.app = owner, app
            atexit.register(cls.drop, url)
        return cls.owner, cls.app

    @classmethod
    def drop(cls, url: str) -> None:
        import psycopg
        from psycopg import sql

        roles = [cls.owner, cls.app]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
                (roles,),
            )
            for role in roles:
                conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
            for role in roles:
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@contextmanager
def _rls_schema() -> Iterator[tuple[str, str]]:
    """A schema set up with row-level security by its owner; the app role's URL and it."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    from langgraph_durable.postgres import PostgresSaver
    from langgraph_durable.postgres._rls import app_role_grants

    url = _postgres_url()
    owner, app = _RlsRoles.ensure(url)
    owner_url = make_conninfo(url, user=owner)

    def create(schema: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
                    sql.Identifier(schema), sql.Identifier(owner)
                )
            )
        with PostgresSaver.from_conn_string(
            owner_url, schema=schema, row_level_security=True, pool_size=1
        ) as saver:
            saver.setup()
        with psycopg.connect(owner_url, autocommit=True) as conn:
            for statement in app_role_grants(schema, app, owner):
                conn.execute(statement)  # type: ignore[arg-type]

    schema = _Schemas.take("rls", create)
    try:
        yield make_conninfo(url, user=app), schema
    finally:
        _Schemas.give_back("rls", schema)


@contextmanager
def durable_pg_all() -> Iterator[Any]:
    from langgraph_durable.postgres import PostgresSaver

    with _rls_schema() as (app_url, schema):
        with PostgresSaver.from_conn_string(
            app_url, schema=schema, row_level_security=True, **_all_protections()
        ) as saver:
            _apply_strict_msgpack(saver)
            yield saver


def _all_protections() -> dict[str, Any]:
    """Encryption, integrity and redaction settings for one saver."""
    from langgraph_durable.protect import Encryption, LocalKeyring, Redaction, Rule

    return {
        "encryption": Encryption(LocalKeyring({"suite": secrets.token_bytes(32)}, "suite")),
        "integrity": secrets.token_bytes(32),
        "redaction": Redaction([Rule(mode="tokenize")], key=secrets.token_bytes(32), restore=True),
    }


@contextmanager
def durable_pg() -> Iterator[Any]:
    from langgraph_durable.postgres import PostgresSaver

    with _sync_schema("saver", _create_saver_schema) as (url, schema):
        with PostgresSaver.from_conn_string(url, schema=schema) as saver:
            _apply_strict_msgpack(saver)
            yield saver


@asynccontextmanager
async def durable_pg_async() -> AsyncIterator[Any]:
    from langgraph_durable.postgres import AsyncPostgresSaver

    async with _async_schema("saver", _create_saver_schema) as (url, schema):
        async with AsyncPostgresSaver.from_conn_string(url, schema=schema) as saver:
            _apply_strict_msgpack(saver)
            yield saver


@contextmanager
def _redis_prefix() -> Iterator[tuple[str, str]]:
    url = _required_env(REDIS_URL_ENV, "a Redis URL")
    prefix = f"{REDIS_PREFIX}{secrets.token_hex(6)}"
    try:
        yield url, prefix
    finally:
        _delete_redis_keys(url, prefix)


def _delete_redis_keys(url: str, prefix: str) -> None:
    """SCAN + UNLINK every key starting with ``prefix`` (a single server, not a cluster)."""
    import redis

    with redis.Redis.from_url(url) as client:
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                client.unlink(*batch)
                batch.clear()
        if batch:
            client.unlink(*batch)


@contextmanager
def durable_redis() -> Iterator[Any]:
    from langgraph_durable.redis import RedisSaver

    with _redis_prefix() as (url, prefix):
        with RedisSaver.from_conn_string(url, prefix=prefix) as saver:
            saver.setup()
            _apply_strict_msgpack(saver)
            yield saver


@asynccontextmanager
async def durable_redis_async(**protections: Any) -> AsyncIterator[Any]:
    from langgraph_durable.redis import AsyncRedisSaver

    with _redis_prefix() as (url, prefix):
        async with AsyncRedisSaver.from_conn_string(url, prefix=prefix, **protections) as saver:
            await saver.setup()
            _apply_strict_msgpack(saver)
            yield saver


_DYNAMODB_CLIENTS: dict[str, Any] = {}


def _dynamodb_client(endpoint: str) -> Any:
    """One client per process and endpoint, made as the savers make their own.

    A boto3 client costs a tenth of a second or more to create (it loads the service's
    models); every test making two of them cost more than its DynamoDB calls on moto.
    boto3's clients are thread-safe; the savers leave a client they were given open.
    """
    client = _DYNAMODB_CLIENTS.get(endpoint)
    if client is None:
        from langgraph_durable.dynamodb._driver import make_client
        from langgraph_durable.dynamodb.saver import DynamoDBOptions

        options = DynamoDBOptions.from_settings(
            {"table": "unused", "region": DYNAMODB_REGION, "endpoint_url": endpoint}
        )
        client = _DYNAMODB_CLIENTS[endpoint] = make_client(options)
    return client


@contextmanager
def _dynamodb_table() -> Iterator[tuple[str, Any]]:
    """A connection string naming a fresh table, and the process's client; the table
    is deleted afterwards."""
    endpoint = _required_env(DYNAMODB_ENDPOINT_ENV, "a DynamoDB endpoint URL")
    table = f"{TABLE_PREFIX}{secrets.token_hex(6)}"
    client = _dynamodb_client(endpoint)
    try:
        yield f"dynamodb://{table}?region={DYNAMODB_REGION}&endpoint={endpoint}", client
    finally:
        try:
            client.delete_table(TableName=table)
        except client.exceptions.ResourceNotFoundException:
            pass


@contextmanager
def durable_dynamodb() -> Iterator[Any]:
    from langgraph_durable.dynamodb import DynamoDBSaver

    with _dynamodb_table() as (conn_string, client):
        with DynamoDBSaver.from_conn_string(conn_string, client=client) as saver:
            saver.setup()
            _apply_strict_msgpack(saver)
            yield saver


@asynccontextmanager
async def durable_dynamodb_async(**protections: Any) -> AsyncIterator[Any]:
    from langgraph_durable.dynamodb import AsyncDynamoDBSaver

    with _dynamodb_table() as (conn_string, client):
        async with AsyncDynamoDBSaver.from_conn_string(
            conn_string, client=client, **protections
        ) as saver:
            await saver.setup()
            _apply_strict_msgpack(saver)
            yield saver


# --- stock langgraph-checkpoint-postgres savers (baseline) -----------------------


@contextmanager
def upstream_pg() -> Iterator[Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    with _sync_schema("upstream") as (url, schema):
        with PostgresSaver.from_conn_string(_with_search_path(url, schema)) as saver:
            saver.setup()
            _apply_strict_msgpack(saver)
            yield saver


@asynccontextmanager
async def upstream_pg_async() -> AsyncIterator[Any]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with _async_schema("upstream") as (url, schema):
        async with AsyncPostgresSaver.from_conn_string(_with_search_path(url, schema)) as saver:
            await saver.setup()
            _apply_strict_msgpack(saver)
            yield saver


# --- our stores (BaseStore) -------------------------------------------------------
# Each takes the store's options (index=, ttl=, ...) so that the adapter for the store
# tests of langgraph-checkpoint / langgraph-checkpoint-postgres (store_adapter.py) can
# make the stores those tests ask for.


@contextmanager
def durable_store_pg(**options: Any) -> Iterator[Any]:
    from langgraph_durable.postgres import PostgresStore

    with _sync_schema() as (url, schema):
        with PostgresStore.from_conn_string(url, schema=schema, **options) as store:
            store.setup()
            yield store


@asynccontextmanager
async def durable_store_pg_async(**options: Any) -> AsyncIterator[Any]:
    from langgraph_durable.postgres import AsyncPostgresStore

    async with _async_schema() as (url, schema):
        async with AsyncPostgresStore.from_conn_string(url, schema=schema, **options) as store:
            await store.setup()
            yield store


@contextmanager
def durable_store_redis(**options: Any) -> Iterator[Any]:
    from langgraph_durable.redis import RedisStore

    with _redis_prefix() as (url, prefix):
        with RedisStore.from_conn_string(url, prefix=prefix, **options) as store:
            store.setup()
            yield store


@asynccontextmanager
async def durable_store_redis_async(**options: Any) -> AsyncIterator[Any]:
    from langgraph_durable.redis import AsyncRedisStore

    with _redis_prefix() as (url, prefix):
        async with AsyncRedisStore.from_conn_string(url, prefix=prefix, **options) as store:
            await store.setup()
            yield store


@contextmanager
def durable_store_dynamodb(**options: Any) -> Iterator[Any]:
    from langgraph_durable.dynamodb import DynamoDBStore

    with _dynamodb_table() as (conn_string, client):
        with DynamoDBStore.from_conn_string(conn_string, client=client, **options) as store:
            store.setup()
            yield store


@asynccontextmanager
async def durable_store_dynamodb_async(**options: Any) -> AsyncIterator[Any]:
    from langgraph_durable.dynamodb import AsyncDynamoDBStore

    with _dynamodb_table() as (conn_string, client):
        async with AsyncDynamoDBStore.from_conn_string(
            conn_string, client=client, **options
        ) as store:
            await store.setup()
            yield store


# Names added to the suite's fixture parameter lists; each appears in the ids of the
# tests it runs. run_suite.py builds -k expressions that tell apart names containing
# one another (durable_pg / durable_pg_async).
SYNC_FACTORIES: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "durable_pg": durable_pg,
    "durable_redis": durable_redis,
    "durable_dynamodb": durable_dynamodb,
    "durable_pg_all": durable_pg_all,
    "upstream_pg": upstream_pg,
}
ASYNC_FACTORIES: dict[str, Callable[[], AbstractAsyncContextManager[Any]]] = {
    "durable_pg_async": durable_pg_async,
    "durable_redis_async": durable_redis_async,
    "durable_dynamodb_async": durable_dynamodb_async,
    "durable_redis_all_async": lambda: durable_redis_async(**_all_protections()),
    "durable_dynamodb_all_async": lambda: durable_dynamodb_async(**_all_protections()),
    "upstream_pg_async": upstream_pg_async,
}
#: The test rig's service (see tests/servers.py) each saver needs.
SERVICE_OF: dict[str, str] = {
    "durable_pg": "postgres",
    "durable_pg_async": "postgres",
    "durable_redis": "redis",
    "durable_redis_async": "redis",
    "durable_dynamodb": "dynamodb",
    "durable_dynamodb_async": "dynamodb",
    "durable_pg_all": "postgres",
    "durable_redis_all_async": "redis",
    "durable_dynamodb_all_async": "dynamodb",
    "upstream_pg": "postgres",
    "upstream_pg_async": "postgres",
}
SYNC_NAMES = tuple(SYNC_FACTORIES)
ASYNC_NAMES = tuple(ASYNC_FACTORIES)

# Names added to the suite's ``sync_store`` / ``async_store`` fixtures. No saver name is
# a substring of one of them (``-k`` matches substrings), and all share ``durable_store_``.
SYNC_STORE_FACTORIES: dict[str, Callable[..., AbstractContextManager[Any]]] = {
    "durable_store_pg": durable_store_pg,
    "durable_store_redis": durable_store_redis,
    "durable_store_dynamodb": durable_store_dynamodb,
}
ASYNC_STORE_FACTORIES: dict[str, Callable[..., AbstractAsyncContextManager[Any]]] = {
    "durable_store_pg_async": durable_store_pg_async,
    "durable_store_redis_async": durable_store_redis_async,
    "durable_store_dynamodb_async": durable_store_dynamodb_async,
}
SERVICE_OF.update(
    {
        "durable_store_pg": "postgres",
        "durable_store_pg_async": "postgres",
        "durable_store_redis": "redis",
        "durable_store_redis_async": "redis",
        "durable_store_dynamodb": "dynamodb",
        "durable_store_dynamodb_async": "dynamodb",
    }
)
SYNC_STORE_NAMES = tuple(SYNC_STORE_FACTORIES)
ASYNC_STORE_NAMES = tuple(ASYNC_STORE_FACTORIES)


def sync_checkpointer_for(name: str) -> AbstractContextManager[Any]:
    return SYNC_FACTORIES[name]()


def async_checkpointer_for(name: str) -> AbstractAsyncContextManager[Any]:
    return ASYNC_FACTORIES[name]()


def sync_store_for(name: str) -> AbstractContextManager[Any]:
    return SYNC_STORE_FACTORIES[name]()


def async_store_for(name: str) -> AbstractAsyncContextManager[Any]:
    return ASYNC_STORE_FACTORIES[name]()
