"""Run the pure operations of ``_ops`` on psycopg connections (sync and async).

The only module of the Postgres backend that talks to the database. It owns
connection handling (a connection, a pool, or a URL), autocommit, prepared
statements, and the translation of psycopg errors into ours.

A statement with settings (row-level security: the tenant) is sent in pipeline
mode: ``set_config(...)``, the statement and one Sync leave together and come
back together, one round trip, with the settings local to the (implicit or
enclosing) transaction. Both drivers send the statements that write payloads
another way, also one round trip: prepared once per connection, then
``SELECT set_config(...); EXECUTE name(...)`` as one query, the values as
literals (``_Statements``, ``_literals``), except a signed tenant
(``tenant_signing_key``): it goes by the pipeline, as bound parameters, so that
no query text (``pg_stat_activity``) shows the signature.
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import psycopg
import psycopg.errors
from psycopg import AsyncConnection, Connection
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from .. import _drive
from .._core.sansio import Operation
from ..errors import (
    ConfigurationError,
    DurableError,
    InvalidInputError,
    MissingPartitionError,
    SchemaError,
    StorageError,
    StorageUnavailableError,
)
from ._literals import literal
from ._query import Query
from ._rls import signed

R = TypeVar("R")

_SCHEMA_STATES = ("42P01", "3F000", "42883")  # undefined table, schema, function


#: How many times a statement marked ``retry`` runs again when its connection broke.
#: Each time follows psycopg_pool's ``check()``, and a cut may land again before the
#: statement's reply: a graph run under cuts every 50 ms on a slow machine needed a
#: fifth sending up to three times per thousand statements
#: (tests/faults/test_runs_under_cuts.py; benchmarks/NOTES.md, "a statement's resends").
#: A statement that breaks its connection every time is reported after 1 + RESENDS.
RESENDS = 10


def translate(exc: BaseException) -> DurableError:
    """Our error for a psycopg (or pool) error."""
    if isinstance(exc, DurableError):
        return exc
    if isinstance(exc, PoolTimeout):
        return StorageUnavailableError(f"no PostgreSQL connection available: {exc}")
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate == "55P03":  # lock_not_available: lock_timeout ran out
        return StorageUnavailableError(
            "PostgreSQL: a lock another session holds was not granted within the saver's "
            f"lock_timeout ({str(exc).strip()}); raise lock_timeout or end that session"
        )
    if sqlstate == "23514" and "no partition" in str(exc):
        return MissingPartitionError(str(exc).strip())
    if sqlstate in _SCHEMA_STATES:
        return SchemaError(
            f"the saver's tables are missing or outdated ({str(exc).strip()}): "
            "call setup() (or run `langgraph-durable setup`) once before use"
        )
    if sqlstate == "42501":
        return _refused(str(exc).strip())
    if isinstance(exc, psycopg.DataError):
        return InvalidInputError(f"PostgreSQL cannot store this value: {str(exc).strip()}")
    if isinstance(exc, psycopg.OperationalError):
        return StorageUnavailableError(f"PostgreSQL is unavailable: {str(exc).strip()}")
    if isinstance(exc, psycopg.Error):
        return StorageError(f"PostgreSQL error: {str(exc).strip()}")
    return StorageError(f"unexpected error talking to PostgreSQL: {exc!r}")


def _refused(message: str) -> StorageError:
    """Our error for SQLSTATE 42501 (a privilege or a row-level security policy)."""
    if "row-level security" in message:
        return StorageError(
            f"PostgreSQL refused a row under row-level security ({message}): a schema with "
            "row-level security on needs savers with row_level_security=True, and "
            "cross-tenant work a role with BYPASSRLS (docs/security.md)"
        )
    return StorageError(
        f"PostgreSQL refused this role a privilege ({message}): setup() needs the migration "
        "role that owns the schema, the application the grants of docs/security.md"
    )


def _check_url(url: str) -> str:
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError(f"a PostgreSQL URL is required, got {url!r}")
    return url


def _connect_timeout(pool_timeout: float) -> int:
    """libpq's ``connect_timeout`` (whole seconds, 2 at least) for a probe."""
    return max(2, math.ceil(pool_timeout))


def _probe_error(url: str, exc: psycopg.Error) -> DurableError:
    """Our error for a failed first connection to ``url`` (the URL itself left out:
    it may hold a password)."""
    text = " ".join(part.strip() for part in str(exc).replace(url, "<URL>").splitlines())
    text = text.strip() or type(exc).__name__
    if isinstance(exc, psycopg.OperationalError):
        return StorageUnavailableError(f"cannot connect to PostgreSQL: {text}")
    return ConfigurationError(
        f"invalid PostgreSQL connection string ({text}): use "
        "postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME or libpq key=value pairs"
    )


def _session_kwargs(options: Any) -> dict[str, Any]:
    """Connection arguments of a pool the saver opens: autocommit, and the saver's
    ``lock_timeout`` as a startup option (not behind PgBouncer, which refuses them)."""
    kwargs: dict[str, Any] = {"autocommit": True}
    lock_timeout = getattr(options, "lock_timeout", None)
    if lock_timeout is not None and options.prepare:
        kwargs["options"] = f"-c lock_timeout={max(1, round(lock_timeout * 1000))}"
    return kwargs


def _probe(url: str, pool_timeout: float) -> None:
    """Connect once before opening a pool on ``url``.

    A pool retries an unreachable server in the background, logging each attempt,
    until a caller's wait runs out; one direct connection first turns a wrong URL,
    a server that is down or a refused login into one clear error, at once.
    """
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=_connect_timeout(pool_timeout))
    except psycopg.Error as exc:
        raise _probe_error(url, exc) from None
    conn.close()


async def _aprobe(url: str, pool_timeout: float) -> None:
    """:func:`_probe` for the async driver."""
    try:
        conn = await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=_connect_timeout(pool_timeout)
        )
    except psycopg.Error as exc:
        raise _probe_error(url, exc) from None
    await conn.close()


def _classify(conn: Any, pool_type: type, conn_type: type, saver: str) -> tuple[Any, Any]:
    """(pool, None) or (None, connection) for what a saver was given."""
    if isinstance(conn, pool_type):
        return conn, None
    if isinstance(conn, conn_type):
        return None, conn
    raise ConfigurationError(
        f"{saver} needs a psycopg {conn_type.__name__}, a psycopg_pool "
        f"{pool_type.__name__} or a URL string, got {type(conn).__name__}"
    )


class SyncConnector:
    """Hands out connections to the sync driver.

    Args:
        conn: A ``psycopg.Connection``, a ``psycopg_pool.ConnectionPool`` or a URL
            (for which the connector opens and owns a pool of ``pool_size``).
        options: The saver's ``PostgresOptions`` (prepared statements, pool size
            and timeout for a pool opened from a URL).
    """

    def __init__(self, conn: Any, options: Any) -> None:
        self.prepare = options.prepare
        self.owns = False
        self._lock: threading.Lock | None = None
        if isinstance(conn, str):
            _probe(_check_url(conn), options.pool_timeout)
            try:
                conn = ConnectionPool(
                    conn,
                    min_size=1,
                    max_size=options.pool_size,
                    timeout=options.pool_timeout,
                    kwargs=_session_kwargs(options),
                    open=True,
                    name="langgraph-durable",
                )
            except Exception as exc:
                raise translate(exc) from exc
            self.owns = True
        self.pool, self.conn = _classify(conn, ConnectionPool, Connection, "PostgresSaver")
        if self.conn is not None:
            self._lock = threading.Lock()

    @contextmanager
    def connection(self) -> Iterator[Connection[Any]]:
        """A connection in autocommit mode (unless the caller's is inside a transaction)."""
        if self.pool is not None:
            with self.pool.connection() as conn, _autocommit(conn):
                yield conn
        else:
            assert self.conn is not None and self._lock is not None
            with self._lock, _autocommit(self.conn):
                yield self.conn

    def run_one(self, step: Any) -> Any:
        """Run one statement on a connection of its own, in autocommit.

        A statement marked ``retry`` whose connection broke (a network cut, a
        server restart: the pool may hold more connections that died the same
        way) runs again, up to RESENDS times, each after psycopg_pool's
        ``check()`` has replaced the pool's dead connections.
        """
        q = _request(step)
        pool = self.pool
        if pool is None:  # the caller's one connection: nothing to replace, no resend
            with self.connection() as conn:
                return self.execute(conn, q)
        for attempt in range(RESENDS + 1):
            # the pool's context alone: the statement runs on every call, so the
            # connection() layer and, for a pool in autocommit, _autocommit() are
            # skipped (2-3% of graph steps/s, benchmarks/NOTES.md)
            with pool.connection() as conn:
                try:
                    if conn.autocommit:
                        return self.execute(conn, q)
                    with _autocommit(conn):
                        return self.execute(conn, q)
                except psycopg.OperationalError:
                    if attempt == RESENDS or not (conn.broken and q.retry):
                        raise
            pool.check()
        raise AssertionError("unreachable")

    def execute(self, conn: Connection[Any], step: Any) -> Any:
        q = _request(step)
        prepare = self.prepare and q.prepare
        if q.settings:
            return self._execute_with_settings(conn, q, prepare)
        cur = _cursor(conn)
        cur.execute(q.sql, q.params or None, prepare=prepare)  # type: ignore[arg-type]
        return _fetch(cur, q.fetch)

    def _execute_with_settings(self, conn: Connection[Any], q: Query, prepare: bool) -> Any:
        if prepare and _writes_payloads(q) and not signed(q.settings):
            name = _statements.ready(conn, q.sql)
            if name is not None:
                return self._execute_prepared_with_settings(conn, q, name)
        # The pipeline's exit sends the one Sync and reads every result back; the
        # cursor keeps the last statement's.
        setter, setter_params = q.setter()
        cur = _cursor(conn)
        with conn.pipeline():
            cur.execute(setter, setter_params, prepare=prepare)
            cur.execute(q.sql, q.params or None, prepare=prepare)  # type: ignore[arg-type]
        return _fetch(cur, q.fetch)

    def _execute_prepared_with_settings(self, conn: Connection[Any], q: Query, name: str) -> Any:
        # One simple-protocol string, SELECT set_config(...); EXECUTE name(literals):
        # one round trip, one implicit (or the enclosing) transaction, and a plan
        # prepared once per connection (see _Statements).
        with psycopg.ClientCursor(conn, row_factory=tuple_row) as cur:
            try:
                cur.execute(_statements.call(cur, q, name), prepare=False)
            except psycopg.errors.InvalidSqlStatementName:
                # the session lost it (DISCARD ALL, a reset): nothing ran; once more
                _statements.forget(conn)
                again = _statements.ready(conn, q.sql)
                if again is None:
                    raise
                cur.execute(_statements.call(cur, q, again), prepare=False)
            while cur.nextset():
                pass
            return _fetch(cur, q.fetch)

    def close(self) -> None:
        if self.owns and self.pool is not None:
            self.pool.close()


_PLACEHOLDER = re.compile(r"%\((\w+)\)[sb]|%[sb]|%%")


class _Statements:
    """Server-side prepared statements for the statements sent with settings.

    A statement with settings (row-level security's tenant) cannot go as one
    extended-protocol message with its setter, and pipeline mode costs about
    twice a plain statement's client CPU. Instead the driver PREPAREs the
    statement once per connection (``$n`` placeholders, types inferred by the
    server) and sends ``SELECT set_config(...); EXECUTE name(literal, ...)``
    as one simple-protocol query. A statement the server will not prepare, or
    a connection inside a transaction that has not prepared it yet, goes the
    pipeline way.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: dict[str, tuple[str, str, tuple[str | int, ...]]] = {}
        self._refused: set[str] = set()
        self._prepared: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()

    def _shape(self, sql: str) -> tuple[str, str, tuple[str | int, ...]] | None:
        with self._lock:
            found = self._names.get(sql)
            if found is not None or sql in self._refused:
                return found
        order: list[str | int] = []
        numbers: dict[str | int, int] = {}

        def number(m: re.Match[str]) -> str:
            if m.group(0) == "%%":
                return "%"
            key: str | int = m.group(1) if m.group(1) is not None else len(order)
            if key not in numbers or isinstance(key, int):
                order.append(key)
                numbers[key] = len(order)
            return f"${numbers[key]}"

        text = _PLACEHOLDER.sub(number, sql)
        with self._lock:
            shape = (f"lgd_s{len(self._names) + 1}", text, tuple(order))
            return self._names.setdefault(sql, shape)

    def _lookup(self, conn: Any, sql: str) -> tuple[str, str | None] | None:
        """(name, the PREPARE to run first or None), or None: use the pipeline."""
        shape = self._shape(sql)
        if shape is None:
            return None
        name, text, _order = shape
        with self._lock:
            if name in self._prepared.setdefault(conn, set()):
                return name, None
        if conn.info.transaction_status != TransactionStatus.IDLE:
            return None  # a failed PREPARE would abort the caller's transaction
        return name, f"PREPARE {name} AS {text}"

    def _outcome(self, conn: Any, sql: str, name: str, prepared: bool) -> str | None:
        """Record whether the PREPARE of ``name`` took; its name, or None (use the pipeline)."""
        with self._lock:
            if not prepared:
                self._refused.add(sql)
                return None
            self._prepared.setdefault(conn, set()).add(name)
        return name

    def ready(self, conn: Connection[Any], sql: str) -> str | None:
        """The statement's name on ``conn``, prepared now if need be; None: use the pipeline."""
        found = self._lookup(conn, sql)
        if found is None:
            return None
        name, prepare = found
        if prepare is None:
            return name
        try:
            conn.execute(prepare, prepare=False)
        except psycopg.errors.ProgrammingError:
            return self._outcome(conn, sql, name, False)
        return self._outcome(conn, sql, name, True)

    async def aready(self, conn: AsyncConnection[Any], sql: str) -> str | None:
        """:meth:`ready` on an async connection."""
        found = self._lookup(conn, sql)
        if found is None:
            return None
        name, prepare = found
        if prepare is None:
            return name
        try:
            await conn.execute(prepare, prepare=False)
        except psycopg.errors.ProgrammingError:
            return self._outcome(conn, sql, name, False)
        return self._outcome(conn, sql, name, True)

    def call(self, cur: Any, q: Query, name: str) -> str:
        """``SELECT set_config(...); EXECUTE name(...)`` with every value as a literal.

        Our own rendering (``_literals``) where the connection has standard
        conforming strings, psycopg's for any value it does not cover.
        """
        _name, _text, order = self._names[q.sql]
        params = q.params
        if isinstance(params, dict):
            values = [params[str(k)] for k in order]
        else:
            values = list(params)
        ours = cur.connection.info.parameter_status("standard_conforming_strings") == "on"

        def lit(value: Any) -> str:
            text = literal(value) if ours else None
            return cur.mogrify("%s", (value,)) if text is None else text  # type: ignore[no-any-return]

        calls = ", ".join(f"set_config({lit(k)}, {lit(v)}, true)" for k, v in q.settings)
        if not values:
            return f"SELECT {calls}; EXECUTE {name}"
        return f"SELECT {calls}; EXECUTE {name}({', '.join(lit(v) for v in values)})"

    def forget(self, conn: Any) -> None:
        with self._lock:
            self._prepared.pop(conn, None)


_statements = _Statements()


_BYTES = (bytes, bytearray, memoryview)


def _writes_payloads(q: Query) -> bool:
    """Whether a statement sends payload bytes (checkpoint and write records).

    Those go by EXECUTE (:class:`_Statements`), which measured cheaper than the
    pipeline for them. Reads stay on the pipeline: the simple protocol returns
    results as text, so every payload read would come back hex-encoded.
    """
    values = q.params.values() if isinstance(q.params, dict) else q.params
    for v in values:
        if isinstance(v, _BYTES) or (isinstance(v, list) and v and isinstance(v[0], _BYTES)):
            return True
    return False


@contextmanager
def _autocommit(conn: Connection[Any]) -> Iterator[None]:
    # pgconn's status is the int behind conn.info.transaction_status, read without
    # building the info object and the enum on every call
    if conn.autocommit or conn.pgconn.transaction_status != TransactionStatus.IDLE:
        yield
        return
    conn.autocommit = True
    try:
        yield
    finally:
        if conn.pgconn.transaction_status == TransactionStatus.IDLE:
            conn.autocommit = False


_CURSOR_ATTR = "_lgd_cursor"


def _cursor(conn: Any) -> Any:
    """The connection's cursor for the saver's statements (binary, rows as tuples).

    Made once per connection and kept on it: a new cursor looks up the dumper of
    every parameter and the loader of every column again, about 10 us of client
    CPU per statement. A connection is used by one caller at a time (the pool's
    or the driver's lock), so its cursor is too; ``execute`` resets it. The cursor
    holds its last result until the next statement: at most one row (a checkpoint
    with its blobs) or a count, since a statement that fetches all its rows closes
    it (``_fetch``) and the next one makes a new cursor.
    """
    cur = getattr(conn, _CURSOR_ATTR, None)
    if cur is None or cur.closed:
        cur = conn.cursor(row_factory=tuple_row, binary=True)
        try:
            setattr(conn, _CURSOR_ATTR, cur)
        except AttributeError:  # a connection class that takes no attributes: one per call
            pass
    return cur


def _fetch(cur: psycopg.Cursor[Any], fetch: str) -> Any:
    if fetch == "all":
        rows = cur.fetchall()
        cur.close()  # many rows (a page): their result is not kept on the connection
        return rows
    if fetch == "one":
        return cur.fetchone()
    return cur.rowcount


async def _afetch(cur: psycopg.AsyncCursor[Any], fetch: str) -> Any:
    if fetch == "all":
        rows = await cur.fetchall()
        await cur.close()  # as _fetch
        return rows
    if fetch == "one":
        return await cur.fetchone()
    return cur.rowcount


def _request(step: Any) -> Query:
    if not isinstance(step, Query):
        raise TypeError(f"operation yielded {step!r}, expected a Query")
    return step


def run(connector: SyncConnector, op: Operation[R]) -> R:
    """Run an operation to its result.

    A transactional operation runs on one connection inside one transaction;
    any other runs each statement on its own, in autocommit.
    """
    if not op.transaction:
        return _drive.run(op, connector.run_one, translate)
    try:
        with connector.connection() as conn, conn.transaction():
            return _drive.run(op, lambda q: connector.execute(conn, q), translate)
    except (psycopg.Error, PoolTimeout) as exc:
        raise translate(exc) from exc


class Transaction:
    """A transaction the caller runs its own statements and our operations in (sync).

    Attributes:
        connection: The psycopg connection, inside the transaction.
    """

    __slots__ = ("_connector", "connection")

    def __init__(self, connector: SyncConnector, connection: Connection[Any]) -> None:
        self._connector = connector
        self.connection = connection

    def run(self, op: Operation[R]) -> R:
        """Run an operation's statements on this connection, inside this transaction."""
        return _drive.run(op, lambda q: self._connector.execute(self.connection, q), translate)

    @classmethod
    @contextmanager
    def open(cls, connector: SyncConnector) -> Iterator[Transaction]:
        """A connection of the connector inside a transaction; committed unless the body raises.

        An exception from the body rolls back and propagates unchanged; a
        failure to get a connection or to commit is translated.
        """
        body_error: BaseException | None = None
        try:
            with connector.connection() as conn, conn.transaction():
                try:
                    yield cls(connector, conn)
                except BaseException as exc:
                    body_error = exc
                    raise
        except (psycopg.Error, PoolTimeout) as exc:
            if exc is body_error:
                raise
            raise translate(exc) from exc


def iterate(connector: SyncConnector, op: Operation[Any]) -> Iterator[Any]:
    """Run a streaming operation, each page on a connection of its own.

    A session operation runs every statement on one connection (in
    autocommit); its session-level advisory locks are released at the end.
    """
    if op.transaction:
        raise TypeError("a transactional operation cannot stream")
    if op.session:
        return _session(connector, op)
    return _drive.iterate(op, connector.run_one, translate)


_END_SESSION = Query("SELECT pg_advisory_unlock_all()", (), "one", False)


def _session(connector: SyncConnector, op: Operation[Any]) -> Iterator[Any]:
    try:
        with connector.connection() as conn:
            try:
                yield from _drive.iterate(op, lambda q: connector.execute(conn, q), translate)
            finally:
                if conn.info.transaction_status != TransactionStatus.IDLE:
                    conn.rollback()
                connector.execute(conn, _END_SESSION)
    except (psycopg.Error, PoolTimeout) as exc:
        raise translate(exc) from exc


class AsyncConnector:
    """Hands out connections to the async driver (see :class:`SyncConnector`)."""

    def __init__(self, conn: Any, options: Any) -> None:
        self.prepare = options.prepare
        self.owns = False
        self._opened = True
        self._lock: asyncio.Lock | None = None
        self._url: str | None = None
        self._pool_timeout = options.pool_timeout
        if isinstance(conn, str):
            self._url = _check_url(conn)
            conn = AsyncConnectionPool(
                conn,
                min_size=1,
                max_size=options.pool_size,
                timeout=options.pool_timeout,
                kwargs=_session_kwargs(options),
                open=False,
                name="langgraph-durable",
            )
            self.owns = True
            self._opened = False
        self.pool, self.conn = _classify(
            conn, AsyncConnectionPool, AsyncConnection, "AsyncPostgresSaver"
        )
        if self.conn is not None:
            self._lock = asyncio.Lock()

    async def open(self) -> None:
        if not self._opened and self.pool is not None:
            if self._url is not None:
                await _aprobe(self._url, self._pool_timeout)
            try:
                await self.pool.open(wait=True)
            except Exception as exc:
                raise translate(exc) from exc
            self._opened = True

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        if self.pool is not None:
            if not self._opened:
                await self.open()
            async with self.pool.connection() as conn, _aautocommit(conn):
                yield conn
        else:
            assert self.conn is not None and self._lock is not None
            async with self._lock, _aautocommit(self.conn):
                yield self.conn

    async def run_one(self, step: Any) -> Any:
        """Run one statement on a connection of its own, in autocommit (see
        ``SyncConnector.run_one`` for when it runs again)."""
        q = _request(step)
        pool = self.pool
        if pool is None:
            async with self.connection() as conn:
                return await self.execute(conn, q)
        if not self._opened:
            await self.open()
        for attempt in range(RESENDS + 1):
            async with pool.connection() as conn:
                try:
                    if conn.autocommit:
                        return await self.execute(conn, q)
                    async with _aautocommit(conn):
                        return await self.execute(conn, q)
                except psycopg.OperationalError:
                    if attempt == RESENDS or not (conn.broken and q.retry):
                        raise
            await pool.check()
        raise AssertionError("unreachable")

    async def execute(self, conn: AsyncConnection[Any], step: Any) -> Any:
        q = _request(step)
        prepare = self.prepare and q.prepare
        if q.settings:
            return await self._execute_with_settings(conn, q, prepare)
        cur = _cursor(conn)
        await cur.execute(q.sql, q.params or None, prepare=prepare)  # type: ignore[arg-type]
        return await _afetch(cur, q.fetch)

    async def _execute_with_settings(
        self, conn: AsyncConnection[Any], q: Query, prepare: bool
    ) -> Any:
        # One round trip: see SyncConnector._execute_with_settings.
        if prepare and _writes_payloads(q) and not signed(q.settings):
            name = await _statements.aready(conn, q.sql)
            if name is not None:
                return await self._execute_prepared_with_settings(conn, q, name)
        setter, setter_params = q.setter()
        cur = _cursor(conn)
        async with conn.pipeline():
            await cur.execute(setter, setter_params, prepare=prepare)
            await cur.execute(q.sql, q.params or None, prepare=prepare)  # type: ignore[arg-type]
        return await _afetch(cur, q.fetch)

    async def _execute_prepared_with_settings(
        self, conn: AsyncConnection[Any], q: Query, name: str
    ) -> Any:
        # see SyncConnector._execute_prepared_with_settings
        async with psycopg.AsyncClientCursor(conn, row_factory=tuple_row) as cur:
            try:
                await cur.execute(_statements.call(cur, q, name), prepare=False)
            except psycopg.errors.InvalidSqlStatementName:
                _statements.forget(conn)
                again = await _statements.aready(conn, q.sql)
                if again is None:
                    raise
                await cur.execute(_statements.call(cur, q, again), prepare=False)
            while cur.nextset():
                pass
            return await _afetch(cur, q.fetch)

    async def close(self) -> None:
        if self.owns and self.pool is not None:
            await self.pool.close()


@asynccontextmanager
async def _aautocommit(conn: AsyncConnection[Any]) -> AsyncIterator[None]:
    # pgconn's status is the int behind conn.info.transaction_status, read without
    # building the info object and the enum on every call
    if conn.autocommit or conn.pgconn.transaction_status != TransactionStatus.IDLE:
        yield
        return
    await conn.set_autocommit(True)
    try:
        yield
    finally:
        if conn.info.transaction_status == TransactionStatus.IDLE:
            await conn.set_autocommit(False)


async def arun(connector: AsyncConnector, op: Operation[R]) -> R:
    """Run an operation to its result (see :func:`run`)."""
    if not op.transaction:
        return await _drive.arun(op, connector.run_one, translate)
    try:
        async with connector.connection() as conn, conn.transaction():
            return await _drive.arun(op, lambda q: connector.execute(conn, q), translate)
    except (psycopg.Error, PoolTimeout) as exc:
        raise translate(exc) from exc


class AsyncTransaction:
    """A transaction the caller runs its own statements and our operations in (see
    :class:`Transaction`).

    Attributes:
        connection: The psycopg async connection, inside the transaction.
    """

    __slots__ = ("_connector", "connection")

    def __init__(self, connector: AsyncConnector, connection: AsyncConnection[Any]) -> None:
        self._connector = connector
        self.connection = connection

    async def arun(self, op: Operation[R]) -> R:
        """Run an operation's statements on this connection, inside this transaction."""
        return await _drive.arun(
            op, lambda q: self._connector.execute(self.connection, q), translate
        )

    @classmethod
    @asynccontextmanager
    async def open(cls, connector: AsyncConnector) -> AsyncIterator[AsyncTransaction]:
        """A connection of the connector inside a transaction (see :meth:`Transaction.open`)."""
        body_error: BaseException | None = None
        try:
            async with connector.connection() as conn, conn.transaction():
                try:
                    yield cls(connector, conn)
                except BaseException as exc:
                    body_error = exc
                    raise
        except (psycopg.Error, PoolTimeout) as exc:
            if exc is body_error:
                raise
            raise translate(exc) from exc


def aiterate(connector: AsyncConnector, op: Operation[Any]) -> AsyncIterator[Any]:
    """Run a streaming operation, each page on a connection of its own (see :func:`iterate`)."""
    if op.transaction:
        raise TypeError("a transactional operation cannot stream")
    if op.session:
        return _asession(connector, op)
    return _drive.aiterate(op, connector.run_one, translate)


async def _asession(connector: AsyncConnector, op: Operation[Any]) -> AsyncIterator[Any]:
    try:
        async with connector.connection() as conn:
            try:
                async for item in _drive.aiterate(
                    op, lambda q: connector.execute(conn, q), translate
                ):
                    yield item
            finally:
                if conn.info.transaction_status != TransactionStatus.IDLE:
                    await conn.rollback()
                await connector.execute(conn, _END_SESSION)
    except (psycopg.Error, PoolTimeout) as exc:
        raise translate(exc) from exc
