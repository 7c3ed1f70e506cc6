"""Upstream's store tests against our stores: the pytest plugin ``run_store_tests.py`` loads.

This module is not imported by our test suite. ``run_store_tests.py`` unpacks the tests
of two sdists into work directories, copies this file into each one's ``tests/`` package
(as ``tests/lgd_store_adapter.py``, beside ``conftest_durable.py`` whose store factories
and service plumbing it uses), loads it with ``-p tests.lgd_store_adapter`` and patches
the test modules so that their stores are ours:

* ``langgraph-checkpoint``'s ``tests/test_store.py`` (the ``InMemoryStore`` tests: only
  the ``BaseStore`` interface): every test that makes an ``InMemoryStore`` (directly or
  through the file's ``MockAsyncBatchedStore``) runs once per backend (``lgd-pg``,
  ``lgd-redis``, ``lgd-dynamodb``), with the module's ``InMemoryStore`` name bound to a
  subclass of our sync store (``PostgresStore``, ``RedisStore``, ``DynamoDBStore``) whose
  constructor takes the same options (``index=``, ``ttl=``) and opens a store of its own;
* ``langgraph-checkpoint-postgres``'s ``tests/test_store.py`` and
  ``tests/test_async_store.py``: their ``store`` and ``vector_store`` fixtures and their
  ``_create_vector_store`` helper are replaced by ours (sync stores in the first file,
  async ones in the second), once per backend, with the options the originals pass
  (their TTL settings, their ``IndexConfig``); the ``conn`` / ``clear_test_db``
  fixtures of their conftest (a server of theirs on port 5441) are replaced by no-ops.

The stores of one process share a PostgreSQL schema, a Redis key prefix and a DynamoDB
table, made at first use and removed when the process exits; each store has a tenant of
its own (``tenant=``), which our stores keep apart on every backend. A schema, prefix or
table per store cost more than most of these tests (a TRUNCATE, a SCAN of the server's
keys, seconds for a table on moto), and leftovers of other tenants in the listings and
searches of a test would make it fail: the tenant separation is exercised too.

The TTL tests (``test_store_ttl``) wait 17 seconds with ``time.sleep`` /
``asyncio.sleep``: for them the store gets an injected clock (``clock=``) and the test
module's ``sleep`` advances that clock instead of waiting.

``INCOMPATIBLE`` names every test that does not apply to our stores, with the reason;
they are deselected and listed in the run's summary (``run_store_tests.py``). A test
run again with another pgvector ``vector_type`` (or, but on PostgreSQL,
``distance_type``) is deselected as a duplicate (``SAME_AS``, ``SAME_AS_PG``).
``KNOWN_BUGS`` are failures caused by our stores, reported and not yet fixed:
``xfail(strict=True)``, so that a fix makes the run fail until the entry goes.
``SLOW`` names the load tests, run only when ``LGD_STORE_TESTS_SLOW=1``.
Everything else must pass.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import os
import secrets
import time
import types
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from tests.conftest_durable import (
    DYNAMODB_ENDPOINT_ENV,
    DYNAMODB_REGION,
    REDIS_PREFIX,
    REDIS_URL_ENV,
    TABLE_PREFIX,
    _create_schema,
    _delete_redis_keys,
    _dynamodb_client,
    _postgres_url,
    _required_env,
    _Schemas,
)

BACKENDS = ("pg", "redis", "dynamodb")
#: Narrows the backends (comma-separated), e.g. ``LGD_STORE_TESTS_BACKENDS=pg``.
BACKENDS_ENV = "LGD_STORE_TESTS_BACKENDS"
SLOW_ENV = "LGD_STORE_TESTS_SLOW"
#: The parameter ids of the backends (distinct from anything else in a test id).
IDS = {b: f"lgd-{b}" for b in BACKENDS}

# (test module, test function, backends it applies to or None for all, parameter values
# that must all match or None, reason). Module "test_store" of the postgres sdist is
# "pg:test_store", of langgraph-checkpoint "cp:test_store" (see _module_key).
INCOMPATIBLE: list[tuple[str, str, tuple[str, ...] | None, dict[str, Any] | None, str]] = [
    (
        "cp:test_store",
        "test_cannot_put_empty_namespace",
        None,
        None,
        "its last part asserts that batch/abatch accept a PutOp under the root label "
        "'langgraph' (upstream reserves it only in put/aput); ours refuse it on every "
        "path, on purpose (issue 28: `langgraph` reserved); the rest of the test (every "
        "other refusal) is the same as in test_rejects_invalid_namespace_labels",
    ),
    (
        "pg:test_store",
        "test_escape_like_literal",
        None,
        None,
        "tests upstream's private helper langgraph.store.postgres.base._escape_like_literal "
        "(no store involved)",
    ),
    (
        "pg:test_store",
        "test_namespace_match_pattern",
        None,
        None,
        "tests upstream's private helper _namespace_match_pattern (no store involved)",
    ),
    (
        "pg:test_store",
        "test_nonnull_migrations",
        None,
        None,
        "tests upstream PostgresStore.MIGRATIONS (our migrations are the saver's, tested "
        "in tests/)",
    ),
    *[
        (
            module,
            name,
            None,
            None,
            "raw SQL on upstream's table `store` through upstream's private _cursor() "
            "(our items live in `store_items`, Redis keys or DynamoDB items); the "
            "behaviour it checks, expired items never returned whether swept or not, "
            "holds always in ours and is tested in tests/store",
        )
        for module in ("pg:test_store", "pg:test_async_store")
        for name in (
            "test_omit_expired_filters_read_paths",
            "test_omit_expired_refresh_ttl_only_refreshes_live_rows",
            "test_omit_expired_search_pagination",
        )
    ],
    *[
        (
            module,
            "test_omit_expired_disabled_preserves_expired_rows",
            None,
            None,
            "asserts that expired rows are returned when upstream's TTLConfig "
            "omit_expired is off; ours never return an expired item, on purpose "
            "(issue 28), and have no omit_expired switch",
        )
        for module in ("pg:test_store", "pg:test_async_store")
    ],
    (
        "pg:test_async_store",
        "test_abatch_uses_single_pool_checkout",
        None,
        None,
        "counts checkouts of upstream's private connection helper "
        "langgraph.checkpoint.postgres._ainternal.get_connection",
    ),
    (
        "pg:test_async_store",
        "test_store_ttl",
        ("redis", "dynamodb"),
        None,
        "calls start_ttl_sweeper(), which only our PostgreSQL stores have (Redis expires "
        "keys itself, DynamoDB has its native TTL; both never return an expired item)",
    ),
]

# Failures caused by our stores that are not on purpose: reported, not fixed here (the
# code is outside the store modules). Marked xfail(strict=True): once fixed, the test
# passes, pytest fails the run, and the entry is to be removed.
KNOWN_BUGS: list[tuple[str, str, tuple[str, ...] | None, str]] = []

# Parameters that select pgvector settings a backend does not distinguish: a test run
# again with another vector_type is the same test for our stores (our PostgreSQL store
# takes halfvec where pgvector has it, 0.7 on), with another distance_type the same
# test for the Redis and DynamoDB stores (they score by cosine similarity); our
# PostgreSQL store scores by the distance_type, with or without pgvector.
SAME_AS = {"vector_type": "vector", "distance_type": "cosine"}
SAME_AS_PG = {"vector_type": "vector"}

SLOW: list[tuple[str, str, tuple[str, ...] | None, str]] = [
    (
        "pg:test_async_store",
        "test_large_batches",
        None,
        "6,000 sync calls from 10 threads (a load test)",
    ),
    (
        "pg:test_async_store",
        "test_large_batches_async",
        None,
        "60,000 concurrent async calls (a load test). Fails on our PostgreSQL and Redis "
        "stores (December 2026): each call is its own abatch waiting for one of the "
        "pool's connections, and after pool_timeout (30 s) StorageUnavailableError; "
        "upstream's AsyncPostgresStore (an AsyncBatchedBaseStore) merges concurrent "
        "calls into one batch",
    ),
]


def _module_key(module: Any) -> str:
    """``cp:test_store`` (langgraph-checkpoint) or ``pg:...`` (checkpoint-postgres)."""
    kind = os.environ.get("LGD_STORE_TESTS_PACKAGE", "")
    return f"{kind}:{module.__name__.rpartition('.')[2]}"


def _backends() -> tuple[str, ...]:
    chosen = os.environ.get(BACKENDS_ENV, "").strip()
    if not chosen:
        return BACKENDS
    names = tuple(b.strip() for b in chosen.split(",") if b.strip())
    unknown = [b for b in names if b not in BACKENDS]
    if unknown:
        raise pytest.UsageError(f"{BACKENDS_ENV}: unknown backend(s) {unknown}")
    return names


# --- the stores ------------------------------------------------------------------

_SHARED: dict[str, Any] = {}


def _tenant() -> str:
    return f"t{secrets.token_hex(6)}"


def _pg_schema() -> str:
    """This process's schema for the stores (dropped when the process exits)."""
    if "pg" not in _SHARED:
        _SHARED["pg"] = _Schemas.take("store-tests", _create_schema)
    return str(_SHARED["pg"])


def _redis_shared_prefix() -> str:
    """This process's key prefix for the stores (its keys deleted at exit)."""
    if "redis" not in _SHARED:
        url = _required_env(REDIS_URL_ENV, "a Redis URL")
        prefix = f"{REDIS_PREFIX}{secrets.token_hex(6)}"
        atexit.register(_delete_redis_keys, url, prefix)
        _SHARED["redis"] = prefix
    return str(_SHARED["redis"])


def _dynamodb_settings() -> dict[str, Any]:
    """Settings of this process's table (made at first use, deleted at exit)."""
    endpoint = _required_env(DYNAMODB_ENDPOINT_ENV, "a DynamoDB endpoint URL")
    client = _dynamodb_client(endpoint)
    if "dynamodb" not in _SHARED:
        from langgraph_durable.dynamodb import DynamoDBStore

        table = f"{TABLE_PREFIX}store-{secrets.token_hex(6)}"
        settings = {"table": table, "region": DYNAMODB_REGION, "endpoint_url": endpoint}
        # Made with a TTL so that the table's TTL is on for the stores that have one.
        DynamoDBStore(client, ttl={"default_ttl": 60}, **settings).setup()
        _SHARED["dynamodb"] = table

        def drop() -> None:
            with contextlib.suppress(Exception):
                client.delete_table(TableName=table)

        atexit.register(drop)
    return {
        "client": client,
        "table": _SHARED["dynamodb"],
        "region": DYNAMODB_REGION,
        "endpoint_url": endpoint,
    }


def _connection(backend: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments of a new store on ``backend``: the process's schema / prefix / table
    and a tenant of its own."""
    if backend == "pg":
        return (_postgres_url(),), {"schema": _pg_schema(), "tenant": _tenant()}
    if backend == "redis":
        url = _required_env(REDIS_URL_ENV, "a Redis URL")
        return (url,), {"prefix": _redis_shared_prefix(), "tenant": _tenant()}
    return (), {**_dynamodb_settings(), "tenant": _tenant()}


def substitute_class(backend: str, stack: contextlib.ExitStack) -> type:
    """A subclass of our sync store for ``backend`` whose constructor takes only the
    store's options and opens a store of its own (closed and cleaned by ``stack``)."""
    if backend == "pg":
        from langgraph_durable.postgres import PostgresStore as base
    elif backend == "redis":
        from langgraph_durable.redis import RedisStore as base  # type: ignore[assignment]
    else:
        from langgraph_durable.dynamodb import DynamoDBStore as base  # type: ignore[assignment]

    class Substitute(base):  # type: ignore[misc,valid-type]
        def __init__(self, **options: Any) -> None:
            args, settings = _connection(backend)
            super().__init__(*args, **settings, **options)
            stack.callback(self.close)
            self.setup()

    Substitute.__name__ = Substitute.__qualname__ = f"Lgd{base.__name__}"
    return Substitute


@contextlib.contextmanager
def open_sync_store(backend: str, **options: Any) -> Iterator[Any]:
    with contextlib.ExitStack() as stack:
        yield substitute_class(backend, stack)(**options)


@contextlib.asynccontextmanager
async def open_async_store(backend: str, **options: Any) -> AsyncIterator[Any]:
    if backend == "pg":
        from langgraph_durable.postgres import AsyncPostgresStore as cls
    elif backend == "redis":
        from langgraph_durable.redis import AsyncRedisStore as cls  # type: ignore[assignment]
    else:
        from langgraph_durable.dynamodb import AsyncDynamoDBStore as cls  # type: ignore[assignment]
    args, settings = _connection(backend)
    if args:  # PostgreSQL, Redis: from a URL
        opened = cls.from_conn_string(*args, **settings, **options)  # type: ignore[attr-defined]
    else:  # DynamoDB: with the process's client, an async context manager itself
        opened = cls(**settings, **options)
    async with opened as store:
        await store.setup()
        yield store


# --- time: the TTL tests' sleeps advance the stores' clock -----------------------

FAKE_TIME_TESTS = ("test_store_ttl",)


class _Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    async def asleep(self, seconds: float, result: Any = None) -> Any:
        self.now += seconds
        return result


class _Proxy(types.SimpleNamespace):
    """A module stand-in: ``sleep`` replaced, everything else from the real module."""

    def __init__(self, module: types.ModuleType, sleep: Any) -> None:
        super().__init__(sleep=sleep)
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _clock_for(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An injected clock for the TTL tests (their module's sleeps advance it), else None."""
    if request.node.originalname not in FAKE_TIME_TESTS:
        return None
    clock = _Clock()
    module = request.module
    if hasattr(module, "time"):
        monkeypatch.setattr(module, "time", _Proxy(time, clock.sleep))
    if hasattr(module, "asyncio"):
        import asyncio

        monkeypatch.setattr(module, "asyncio", _Proxy(asyncio, clock.asleep))
    return clock


# --- fixtures replacing those of langgraph-checkpoint-postgres's store tests ------

TTL_SECONDS = 6  # theirs
TTL_CONFIG = {
    "default_ttl": TTL_SECONDS / 60,
    "refresh_on_read": True,
    "sweep_interval_minutes": TTL_SECONDS / 120,
}


def _vector_index(
    fake_embeddings: Any, vector_type: str, distance_type: str, fields: list[str] | None
) -> dict[str, Any]:
    """Their IndexConfig, as they build it (pgvector's options included)."""
    return {
        "dims": fake_embeddings.dims,
        "embed": fake_embeddings,
        "ann_index_config": {"vector_type": vector_type},
        "distance_type": distance_type,
        "fields": fields,
    }


@pytest.fixture(name="store", params=_backends(), ids=[IDS[b] for b in _backends()])
def sync_store_fixture(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    clock = _clock_for(request, monkeypatch)
    options: dict[str, Any] = {"ttl": dict(TTL_CONFIG)}
    if clock is not None:
        options["clock"] = clock
    with open_sync_store(request.param, **options) as store:
        sweeper = getattr(store, "start_ttl_sweeper", None)
        if sweeper is not None:
            sweeper()
        yield store
        if sweeper is not None:
            store.stop_ttl_sweeper()


@pytest.fixture(name="store", params=_backends(), ids=[IDS[b] for b in _backends()])
async def async_store_fixture(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    clock = _clock_for(request, monkeypatch)
    options: dict[str, Any] = {"ttl": dict(TTL_CONFIG)}
    if clock is not None:
        options["clock"] = clock
    async with open_async_store(request.param, **options) as store:
        sweeper = getattr(store, "start_ttl_sweeper", None)
        if sweeper is not None:
            await sweeper()
        yield store
        if sweeper is not None:
            await store.stop_ttl_sweeper()


# _create_vector_store(vector_type, distance_type, fake_embeddings, text_fields=None,
# enable_ttl=True): theirs makes a database; ours a store on the test's backend.
_BACKEND_OF_TEST: dict[str, str] = {}


def _test_backend() -> str:
    return _BACKEND_OF_TEST.get("current", BACKENDS[0])


@contextlib.contextmanager
def create_sync_vector_store(
    vector_type: str,
    distance_type: str,
    fake_embeddings: Any,
    text_fields: list[str] | None = None,
    enable_ttl: bool = True,
) -> Iterator[Any]:
    index = _vector_index(fake_embeddings, vector_type, distance_type, text_fields)
    ttl = {"default_ttl": 2, "refresh_on_read": True} if enable_ttl else None
    with open_sync_store(_test_backend(), index=index, ttl=ttl) as store:
        yield store


@contextlib.asynccontextmanager
async def create_async_vector_store(
    vector_type: str,
    distance_type: str,
    fake_embeddings: Any,
    text_fields: list[str] | None = None,
) -> AsyncIterator[Any]:
    index = _vector_index(fake_embeddings, vector_type, distance_type, text_fields)
    async with open_async_store(_test_backend(), index=index) as store:
        yield store


@pytest.fixture(name="vector_store", params=_backends(), ids=[IDS[b] for b in _backends()])
def sync_vector_store_fixture(request: pytest.FixtureRequest, fake_embeddings: Any) -> Any:
    # One store per backend: their vector/halfvec x l2/inner_product/cosine variants
    # are pgvector settings our stores do not have (they would run the same test 7 times).
    with open_sync_store(
        request.param,
        index=_vector_index(fake_embeddings, "vector", "cosine", None),
        ttl={"default_ttl": 2, "refresh_on_read": True},
    ) as store:
        yield store


@pytest.fixture(name="vector_store", params=_backends(), ids=[IDS[b] for b in _backends()])
async def async_vector_store_fixture(request: pytest.FixtureRequest, fake_embeddings: Any) -> Any:
    async with open_async_store(
        request.param, index=_vector_index(fake_embeddings, "vector", "cosine", None)
    ) as store:
        yield store


@pytest.fixture(name="conn")
def no_conn() -> None:
    """Their conftest's connection to a server of theirs: not used."""
    return None


@pytest.fixture(name="clear_test_db", autouse=True)
def no_clear_test_db() -> None:
    """Their conftest empties upstream's tables before each test: ours start empty."""
    return None


# --- the plugin: parametrize, substitute, deselect, report -----------------------

_STORE_WORDS = ("InMemoryStore", "MockAsyncBatchedStore", "_create_vector_store")
_STORE_FIXTURES = ("store", "vector_store")


def _uses_store(metafunc: pytest.Metafunc) -> bool:
    try:
        source = inspect.getsource(metafunc.function)
    except (OSError, TypeError):
        return False
    return any(word in source for word in _STORE_WORDS)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that makes its stores itself runs once per backend (``lgd_backend``)."""
    if any(f in metafunc.fixturenames for f in _STORE_FIXTURES):
        return
    if _uses_store(metafunc):
        backends = _backends()
        metafunc.fixturenames.append("lgd_backend")
        metafunc.parametrize("lgd_backend", backends, ids=[IDS[b] for b in backends])


@pytest.fixture(autouse=True)
def _lgd_substitute(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Bind the test module's ``InMemoryStore`` to our store of the test's backend."""
    backend = _backend_of(request.node)
    if backend is not None:
        _BACKEND_OF_TEST["current"] = backend
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or "lgd_backend" not in callspec.params:
        yield
        return
    with contextlib.ExitStack() as stack:
        if hasattr(request.module, "InMemoryStore"):
            monkeypatch.setattr(
                request.module, "InMemoryStore", substitute_class(str(backend), stack)
            )
        yield


def _backend_of(item: Any) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for name in ("lgd_backend", *_STORE_FIXTURES):
        if name in callspec.params:
            return str(callspec.params[name])
    return None


_DESELECTED: list[tuple[str, str]] = []  # (node id, reason)


def _matches(item: Any, backends: tuple[str, ...] | None, params: dict[str, Any] | None) -> bool:
    backend = _backend_of(item)
    if backends is not None and backend not in backends:
        return False
    if params:
        callspec = getattr(item, "callspec", None)
        values = callspec.params if callspec is not None else {}
        return all(values.get(k) == v for k, v in params.items())
    return True


def pytest_collection_modifyitems(config: pytest.Config, items: list[Any]) -> None:
    keep, dropped = [], []
    slow_ok = os.environ.get(SLOW_ENV) == "1"
    for item in items:
        module = getattr(item, "module", None)
        key = _module_key(module) if module is not None else ""
        name = getattr(item, "originalname", item.name)
        reason = None
        if _backend_of(item) is None:
            reason = "no store in this test (it tests langgraph's own helpers)"
        for r_module, r_name, r_backends, r_params, r_reason in INCOMPATIBLE:
            if (r_module, r_name) == (key, name) and _matches(item, r_backends, r_params):
                reason = f"incompatible: {r_reason}"
        callspec = getattr(item, "callspec", None)
        values = callspec.params if callspec is not None else {}
        same = SAME_AS_PG if _backend_of(item) == "pg" else SAME_AS
        if reason is None and any(k in values and values[k] != v for k, v in same.items()):
            reason = (
                "same test again: vector_type / distance_type are upstream's pgvector "
                "options, which this store does not distinguish (it runs with "
                + " / ".join(same.values())
                + ")"
            )
        for b_module, b_name, b_backends, b_reason in KNOWN_BUGS:
            if (b_module, b_name) == (key, name) and _matches(item, b_backends, None):
                item.add_marker(pytest.mark.xfail(reason=b_reason, strict=True))
        if not slow_ok:
            for s_module, s_name, s_backends, s_reason in SLOW:
                if (s_module, s_name) == (key, name) and _matches(item, s_backends, None):
                    reason = f"slow, runs with {SLOW_ENV}=1: {s_reason}"
        if reason is None:
            keep.append(item)
        else:
            dropped.append(item)
            _DESELECTED.append((item.nodeid, reason))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    path = os.environ.get("LGD_STORE_TESTS_DESELECTED")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            for nodeid, reason in _DESELECTED:
                out.write(f"{nodeid}\t{reason}\n")
