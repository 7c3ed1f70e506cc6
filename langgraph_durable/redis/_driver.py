"""Run the pure operations of ``_ops`` on redis-py clients (sync and async).

The only module of the Redis backend that talks to the server. It owns the
clients (given, or opened from a URL), script calls (EVALSHA, falling back to
EVAL when the server has forgotten the script, so a restart, failover or
``SCRIPT FLUSH`` never reaches the caller), pipelines, and the translation of
redis-py errors into ours.

Every request the operations yield is idempotent (scripts write the same
values again, or delete what is already gone; an effect claim or completion
carries a call id, so sent again it finds its own change), so a request whose
connection dropped is sent once more on a fresh connection before its error is
raised.

On one server (not a cluster, not a client held to one connection) a script
call is packed here (``_packed``) and sent on a connection taken from the
client's own pool, under that connection's own ``retry`` policy
(``_pooled_script``): redis-py's ``execute_command`` spends about 10 us more
client CPU on the same call (70-72 against 58-64 us for a ``put_writes``, ``python
benchmarks/redis_calls.py``), some 5% of a saver call. Everything else goes
through ``execute_command``. A sync client the driver opens itself also skips
redis-py's check for unread data on a connection its script path handed back
with the whole reply read (``_ScriptPool``).

A cluster client opened from a URL retries through a primary's failover
(``CLUSTER_RETRIES``); with ``wait_replicas`` a write is followed by ``WAIT``
in the same pipeline, on the same connection (``_acked_script``).
"""

from __future__ import annotations

import codecs
import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
import redis.retry
from redis import exceptions as rx
from redis.backoff import ExponentialBackoff

from .. import _drive
from .._core.sansio import Operation
from ..errors import (
    ConfigurationError,
    DurableError,
    InvalidInputError,
    StorageError,
    StorageUnavailableError,
)
from ._keys import split_cluster_url
from ._requests import Batch, Command, ScanKeys, ScanPage, Script
from ._scripts import REPLICATED

R = TypeVar("R")

_SYNC_TYPES = (redis.Redis, redis.cluster.RedisCluster)
_ASYNC_TYPES = (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)
_CLUSTER_TYPES = (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)
# AuthorizationError is newer than redis-py 5.0.
_AUTH_ERRORS: tuple[type[BaseException], ...] = (
    rx.AuthenticationError,
    getattr(rx, "AuthorizationError", rx.AuthenticationError),
)
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    rx.ConnectionError,
    rx.TimeoutError,
    rx.ClusterDownError,
    rx.TryAgainError,
    rx.ReadOnlyError,
    getattr(rx, "SlotNotCoveredError", rx.ClusterDownError),
)


#: What redis-py's ``BlockingConnectionPool`` says when no connection came in time.
_POOL_EMPTY = "No connection available."


def translate(exc: BaseException) -> DurableError:
    """Our error for a redis-py error."""
    if isinstance(exc, DurableError):
        return exc
    text = str(exc).strip()
    if isinstance(exc, _AUTH_ERRORS):
        return StorageError(f"Redis refused the credentials: {text}")
    if isinstance(exc, rx.ConnectionError) and text == _POOL_EMPTY:
        return StorageUnavailableError(
            "no Redis connection available: every connection of the saver's pool stayed "
            "busy for pool_timeout; raise pool_size or pool_timeout"
        )
    if isinstance(exc, _UNAVAILABLE):
        return StorageUnavailableError(f"Redis is unavailable: {text or type(exc).__name__}")
    if isinstance(exc, rx.OutOfMemoryError):
        return StorageError(
            f"Redis is out of memory ({text}): nothing was written; raise maxmemory or "
            "free memory (e.g. prune old threads, set a ttl)"
        )
    if isinstance(exc, rx.DataError):
        return InvalidInputError(f"Redis cannot store this value: {text}")
    if isinstance(exc, rx.ResponseError):
        return StorageError(f"Redis error: {text}")
    if isinstance(exc, (rx.RedisError, rx.RedisClusterException)):
        return StorageError(f"Redis client error: {text or type(exc).__name__}")
    if isinstance(exc, UnicodeError):
        return InvalidInputError(f"Redis cannot store this text: {exc}")
    return StorageError(f"unexpected error talking to Redis: {exc!r}")


#: Seconds a client the saver opens waits to connect, and for a reply, before the
#: request counts as failed (and is retried): a server that stops answering (a
#: partition) ends in ``StorageUnavailableError``, never a hang. A URL's own
#: ``socket_timeout`` / ``socket_connect_timeout`` query parameters win.
SOCKET_TIMEOUT_S = 5.0


def _timeouts() -> dict[str, Any]:
    return {"socket_timeout": SOCKET_TIMEOUT_S, "socket_connect_timeout": SOCKET_TIMEOUT_S}


class _FirstAtOnce(ExponentialBackoff):
    """Exponential backoff whose first retry is immediate: the common first failure is a
    connection the server closed while it sat idle, which the sync pool does not check
    before a script call when the connection's last call read its whole reply
    (``_ScriptPool``); a new connection needs no wait."""

    def compute(self, failures: int) -> float:
        return 0.0 if failures <= 1 else super().compute(failures - 1)


def _retry_kwargs(retry_type: Any) -> dict[str, Any]:
    """Retry settings for a single-server client the saver opens itself."""
    return {
        "retry": retry_type(_FirstAtOnce(cap=1.0, base=0.05), 3),
        "retry_on_error": [rx.ConnectionError, rx.TimeoutError],
    }


#: Retries of a cluster client the saver opens itself. A primary that fails over
#: leaves its slots without a reachable owner until its replica is promoted (a
#: crash: ``cluster-node-timeout`` and about a second of election; ``CLUSTER
#: FAILOVER``: well under a second); redis-py's cluster client retries a command
#: (or a pipeline) after a connection error, refreshing its slot map, and follows
#: the MOVED that the old primary answers once demoted. Its default backoff is
#: jittered (2-5 s of waiting in all, at random); this one waits 0.1, 0.2, 0.4,
#: 0.8 s and then 1 s per retry: 9.5 s over 12 retries, whatever the draw. A
#: request that still fails with a connection error is sent once more
#: (``execute``), which waits the same again.
CLUSTER_RETRIES = 12
CLUSTER_BACKOFF_BASE_S = 0.05
CLUSTER_BACKOFF_CAP_S = 1.0


def _cluster_retry(retry_type: Any) -> Any:
    """The ``retry=`` of a cluster client the saver opens itself (see ``CLUSTER_RETRIES``)."""
    backoff = ExponentialBackoff(cap=CLUSTER_BACKOFF_CAP_S, base=CLUSTER_BACKOFF_BASE_S)
    return retry_type(backoff, CLUSTER_RETRIES)


class _WaitFailed(rx.ConnectionError):
    """``WAIT`` failed where the write went (its node failed over in between): the
    request is sent again (``_resend``), like one whose connection dropped."""


def _wait_target(client: Any, request: Script, cluster: bool) -> dict[str, Any]:
    """Where ``WAIT`` goes: the node the script's first key lives on (its connection in
    the pipeline is the script's, and ``WAIT`` counts the replicas that have what
    that connection wrote)."""
    return {"target_nodes": client.get_node_from_key(request.keys[0])} if cluster else {}


def _acked(reply: Any, acked: Any, wanted: int, timeout_ms: int) -> Any:
    """A script's reply once ``WAIT`` said enough replicas have its write."""
    if isinstance(reply, BaseException):
        raise reply
    if isinstance(acked, BaseException):
        raise _WaitFailed(f"WAIT after the write failed: {acked}") from acked
    if int(acked) < wanted:
        raise StorageUnavailableError(
            f"Redis applied the write on the primary, but {int(acked)} of the "
            f"{wanted} replicas asked for (wait_replicas) confirmed it within "
            f"{timeout_ms} ms; a failover now could lose it. Calling again is safe "
            "(the write is idempotent); a replica may be down or lagging."
        )
    return reply


def _resend(exc: BaseException) -> bool:
    """Whether a request that failed with ``exc`` is worth sending once more (not one
    that already waited ``pool_timeout`` for a connection)."""
    return (
        isinstance(exc, rx.ConnectionError)
        and not isinstance(exc, _AUTH_ERRORS)
        and str(exc).strip() != _POOL_EMPTY
    )


def _check_client(client: Any, types: tuple[type, ...], saver: str) -> None:
    if not isinstance(client, types):
        other = "async" if isinstance(client, _ASYNC_TYPES) else "sync"
        hint = (
            f" (that is an {other} client: use the other saver class)"
            if isinstance(client, _SYNC_TYPES + _ASYNC_TYPES)
            else ""
        )
        names = " or ".join(f"{t.__module__}.{t.__name__}" for t in types)
        raise ConfigurationError(
            f"{saver} needs a {names} client or a URL string, got {type(client).__name__}{hint}"
        )
    if _decodes_responses(client):
        raise ConfigurationError(
            f"{saver} needs a client with decode_responses=False (checkpoints are binary); "
            "create one for the saver or pass a URL"
        )


def _decodes_responses(client: Any) -> bool:
    return bool(client.get_encoder().decode_responses)


def _script_call(request: Script, source: bool) -> tuple[Any, ...]:
    script = request.script
    head = ("EVAL", script.source) if source else ("EVALSHA", script.sha)
    return (*head, len(request.keys), *request.keys, *request.args)


def _packed(args: tuple[Any, ...]) -> list[bytes] | None:
    """A command in the Redis protocol (an array of bulk strings), or None when an
    argument is not str, bytes or int (redis-py then packs it)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if type(arg) is str:
            arg = arg.encode()
        elif type(arg) is int:
            arg = b"%d" % arg
        elif type(arg) is not bytes:
            return None
        parts.append(b"$%d\r\n" % len(arg))
        parts.append(arg)
        parts.append(b"\r\n")
    return [b"".join(parts)]


def _pooled(client: Any) -> Any:
    """``(pool, get_connection's arguments)`` for script calls on pooled connections, or
    None: a cluster client, a client held to one connection, or one that encodes text
    other than as strict UTF-8 (``_packed`` encodes it so)."""
    if isinstance(client, _CLUSTER_TYPES) or any(
        getattr(client, held, None)  # the async client connects its one connection later
        for held in ("connection", "single_connection_client", "_single_connection_client")
    ):
        return None
    encoder = client.get_encoder()
    if codecs.lookup(encoder.encoding).name != "utf-8" or encoder.encoding_errors != "strict":
        return None
    pool = client.connection_pool
    # redis-py before 5.3 takes the command's name; later ones warn when given it
    name = inspect.signature(pool.get_connection).parameters.get("command_name")
    return pool, () if name is None or name.default is not name.empty else ("EVALSHA",)


class _ScriptPool(redis.BlockingConnectionPool):
    """The connection pool of a one-server sync client the saver opens itself.

    Before it hands out a connection, redis-py's pool checks that nothing is left to
    read on it (a reply a failed call left behind, or the end of a connection the
    server closed): a read that must not block, between two changes of the socket's
    timeout, three system calls that each let go of the GIL. In a graph run, where
    other threads wait for the GIL, that check cost 35-55 us of client CPU per call,
    more than packing and parsing the call. A connection the script path hands back
    after reading its whole reply (``release_read``) has nothing left to read, so the
    next taker skips the check; any other connection is checked. One the server
    closed meanwhile fails its next call with a connection error, which the call's
    retry handles (its first retry is immediate: ``_FirstAtOnce``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read: set[int] = set()  # ids of connections handed back with no reply pending

    def release_read(self, connection: Any) -> None:
        """Hand back a connection whose last reply was read whole."""
        self._read.add(id(connection))
        self.release(connection)

    def ensure_connection(self, connection: Any) -> None:
        if id(connection) in self._read:
            self._read.discard(id(connection))
            connection.connect()  # at once when connected; connects one that was closed
            return
        super().ensure_connection(connection)


def _send(conn: Any, packed: Any) -> Any:
    conn.send_packed_command(packed)
    return conn.read_response()


async def _asend(conn: Any, packed: Any) -> Any:
    await conn.send_packed_command(packed)
    return await conn.read_response()


def _per_primary(result: Any, cluster: bool) -> list[Any]:
    if cluster and isinstance(result, dict):
        return list(result.values())
    return [result]


def _queue(pipe: Any, request: Batch) -> None:
    """Add a batch's requests to a pipeline (scripts by SHA)."""
    for item in request.requests:
        if isinstance(item, Script):
            pipe.execute_command(*_script_call(item, False))
        else:
            pipe.execute_command(*item.args)


def _forgotten(request: Batch, results: list[Any]) -> list[tuple[int, Script]]:
    """The scripts of a batch the server did not know (to send again with EVAL)."""
    return [
        (j, item)
        for j, (item, result) in enumerate(zip(request.requests, results, strict=True))
        if isinstance(item, Script) and isinstance(result, rx.NoScriptError)
    ]


def _translated(results: list[Any]) -> list[Any]:
    return [translate(r) if isinstance(r, BaseException) else r for r in results]


Request = Command | Script | Batch | ScanKeys | ScanPage


def _request(step: Any) -> Request:
    if not isinstance(step, (Command, Script, Batch, ScanKeys, ScanPage)):
        raise TypeError(
            f"operation yielded {step!r}, expected a Command, Script, Batch, ScanKeys or ScanPage"
        )
    return step


def _primary(names: list[str], node: str) -> str:
    """The primary a :class:`ScanPage` names ("": the first, in name order)."""
    if not names:
        raise StorageError("the Redis cluster reports no primaries")
    if not node:
        return names[0]
    if node not in names:
        raise StorageError(
            f"Redis cluster node {node!r} is no longer a primary (a failover or resharding "
            "happened during the walk); start the walk again"
        )
    return node


def _scan_next(names: list[str], node: str, cursor: Any) -> tuple[str, int] | None:
    """Where a :class:`ScanPage` walk goes on after ``node`` returned ``cursor``."""
    cursor = int(cursor)
    if cursor:
        return node, cursor
    later = [name for name in names if name > node]
    return (later[0], 0) if later else None


# ---------------------------------------------------------------- sync


class SyncDriver:
    """Runs operations on a ``redis.Redis`` or ``redis.cluster.RedisCluster``.

    Args:
        conn: A client, or a URL for which the driver opens (and owns) one.
    """

    def __init__(
        self,
        conn: Any,
        *,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        pool_size: int = 16,
        pool_timeout: float = 30.0,
    ) -> None:
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.owns = isinstance(conn, str)
        if self.owns:
            url, cluster = split_cluster_url(conn)
            try:
                if cluster:
                    conn = redis.cluster.RedisCluster.from_url(
                        url,
                        decode_responses=False,
                        retry=_cluster_retry(redis.retry.Retry),
                        **_timeouts(),
                    )
                else:
                    conn = redis.Redis.from_pool(
                        _ScriptPool.from_url(
                            url,
                            max_connections=pool_size,
                            timeout=pool_timeout,
                            decode_responses=False,
                            **_retry_kwargs(redis.retry.Retry),
                            **_timeouts(),
                        )
                    )
            except (rx.RedisError, rx.RedisClusterException, ValueError) as exc:
                raise _connect_error(exc) from exc
        _check_client(conn, _SYNC_TYPES, "RedisSaver")
        self.client = conn
        self.cluster = isinstance(conn, _CLUSTER_TYPES)
        self._pool = _pooled(conn)

    def close(self) -> None:
        """Close the client if the driver opened it."""
        if self.owns:
            self.client.close()

    def execute(self, request: Request) -> Any:
        """Run one request; sent once more if its connection dropped (requests are idempotent)."""
        try:
            return self._execute(request)
        except Exception as exc:
            if not _resend(exc):
                raise
        return self._execute(request)

    def _execute(self, request: Request) -> Any:
        if isinstance(request, Script):
            return self._script(request)
        if isinstance(request, Command):
            return self._command(request)
        if isinstance(request, ScanKeys):
            # a cluster client's scan_iter walks every primary with its own cursor
            found = self.client.scan_iter(match=request.match, count=request.count)
            return list(dict.fromkeys(found))
        if isinstance(request, ScanPage):
            return self._scan_page(request)
        return self._batch(request)

    def _scan_page(self, request: ScanPage) -> tuple[list[Any], tuple[str, int] | None]:
        if not self.cluster:
            cursor, keys = self.client.scan(
                cursor=request.cursor, match=request.match, count=request.count
            )
            return list(keys), _scan_next([""], "", cursor)
        names = sorted(node.name for node in self.client.get_primaries())
        name = _primary(names, request.node)
        cursors, keys = self.client.scan(
            cursor=request.cursor,
            match=request.match,
            count=request.count,
            target_nodes=self.client.get_node(node_name=name),
        )
        return list(keys), _scan_next(names, name, cursors[name])

    def _command(self, request: Command) -> Any:
        if request.every_primary and self.cluster:
            result = self.client.execute_command(
                *request.args, target_nodes=redis.cluster.RedisCluster.PRIMARIES
            )
            return _per_primary(result, True)
        result = self.client.execute_command(*request.args)
        return [result] if request.every_primary else result

    def _script(self, request: Script) -> Any:
        if self.wait_replicas and request.script.sha in REPLICATED:
            return self._acked_script(request)
        if self._pool is not None:
            packed = _packed(_script_call(request, False))
            if packed is not None:
                return self._pooled_script(request, packed)
        try:
            return self.client.execute_command(*_script_call(request, False))
        except rx.NoScriptError:
            return self.client.execute_command(*_script_call(request, True))

    def _pooled_script(self, request: Script, packed: list[bytes]) -> Any:
        """EVALSHA (then EVAL if the server forgot the script) on one pooled connection."""
        pool, name = self._pool
        conn = pool.get_connection(*name)
        read = False
        try:
            try:
                reply = conn.retry.call_with_retry(
                    lambda: _send(conn, packed), lambda _exc: conn.disconnect()
                )
            except rx.NoScriptError:
                source = _packed(_script_call(request, True))
                reply = conn.retry.call_with_retry(
                    lambda: _send(conn, source), lambda _exc: conn.disconnect()
                )
            read = True
            return reply
        finally:
            if read and isinstance(pool, _ScriptPool):
                pool.release_read(conn)
            else:
                pool.release(conn)

    def _acked_script(self, request: Script) -> Any:
        """The script and ``WAIT`` in one pipeline (one round trip, one connection)."""
        target = _wait_target(self.client, request, self.cluster)
        for source in (False, True):
            pipe = self.client.pipeline(transaction=False)
            try:
                pipe.execute_command(*_script_call(request, source))
                pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms, **target)
                reply, acked = pipe.execute(raise_on_error=False)
            finally:
                pipe.reset()
            if source or not isinstance(reply, rx.NoScriptError):
                break
        return _acked(reply, acked, self.wait_replicas, self.wait_timeout_ms)

    def _batch(self, request: Batch) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        try:
            _queue(pipe, request)
            results = list(pipe.execute(raise_on_error=False))
        finally:
            pipe.reset()
        for j, item in _forgotten(request, results):
            try:
                results[j] = self.client.execute_command(*_script_call(item, True))
            except Exception as exc:  # noqa: BLE001 - kept per request, as in a pipeline
                results[j] = exc
        return _translated(results)


def run(driver: SyncDriver, op: Operation[R]) -> R:
    """Run an operation to its result (it must not emit items)."""
    return _drive.run(op, lambda step: driver.execute(_request(step)), translate)


def iterate(driver: SyncDriver, op: Operation[Any]) -> Iterator[Any]:
    """Run an operation, yielding the items it emits."""
    return _drive.iterate(op, lambda step: driver.execute(_request(step)), translate)


# ---------------------------------------------------------------- async


class AsyncDriver:
    """Runs operations on a ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``.

    Args:
        conn: A client, or a URL for which the driver opens (and owns) one.
    """

    def __init__(
        self,
        conn: Any,
        *,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        pool_size: int = 16,
        pool_timeout: float = 30.0,
    ) -> None:
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.owns = isinstance(conn, str)
        if self.owns:
            url, cluster = split_cluster_url(conn)
            try:
                if cluster:
                    conn = redis.asyncio.cluster.RedisCluster.from_url(
                        url,
                        decode_responses=False,
                        retry=_cluster_retry(redis.asyncio.retry.Retry),
                        **_timeouts(),
                    )
                else:
                    conn = redis.asyncio.Redis.from_pool(
                        redis.asyncio.BlockingConnectionPool.from_url(
                            url,
                            max_connections=pool_size,
                            timeout=pool_timeout,
                            decode_responses=False,
                            **_retry_kwargs(redis.asyncio.retry.Retry),
                            **_timeouts(),
                        )
                    )
            except (rx.RedisError, rx.RedisClusterException, ValueError) as exc:
                raise _connect_error(exc) from exc
        _check_client(conn, _ASYNC_TYPES, "AsyncRedisSaver")
        self.client = conn
        self.cluster = isinstance(conn, _CLUSTER_TYPES)
        self._pool = _pooled(conn)

    async def close(self) -> None:
        """Close the client if the driver opened it."""
        if self.owns:
            closer = getattr(self.client, "aclose", None) or self.client.close
            await closer()

    async def execute(self, request: Request) -> Any:
        """Run one request; sent once more if its connection dropped (requests are idempotent)."""
        try:
            return await self._execute(request)
        except Exception as exc:
            if not _resend(exc):
                raise
        return await self._execute(request)

    async def _execute(self, request: Request) -> Any:
        if isinstance(request, Script):
            return await self._script(request)
        if isinstance(request, Command):
            return await self._command(request)
        if isinstance(request, ScanKeys):
            found = self.client.scan_iter(match=request.match, count=request.count)
            return list(dict.fromkeys([key async for key in found]))
        if isinstance(request, ScanPage):
            return await self._scan_page(request)
        return await self._batch(request)

    async def _scan_page(self, request: ScanPage) -> tuple[list[Any], tuple[str, int] | None]:
        if not self.cluster:
            cursor, keys = await self.client.scan(
                cursor=request.cursor, match=request.match, count=request.count
            )
            return list(keys), _scan_next([""], "", cursor)
        names = sorted(node.name for node in self.client.get_primaries())
        name = _primary(names, request.node)
        cursors, keys = await self.client.scan(
            cursor=request.cursor,
            match=request.match,
            count=request.count,
            target_nodes=self.client.get_node(node_name=name),
        )
        return list(keys), _scan_next(names, name, cursors[name])

    async def _command(self, request: Command) -> Any:
        if request.every_primary and self.cluster:
            result = await self.client.execute_command(
                *request.args, target_nodes=redis.asyncio.cluster.RedisCluster.PRIMARIES
            )
            return _per_primary(result, True)
        result = await self.client.execute_command(*request.args)
        return [result] if request.every_primary else result

    async def _script(self, request: Script) -> Any:
        if self.wait_replicas and request.script.sha in REPLICATED:
            return await self._acked_script(request)
        if self._pool is not None:
            packed = _packed(_script_call(request, False))
            if packed is not None:
                return await self._pooled_script(request, packed)
        try:
            return await self.client.execute_command(*_script_call(request, False))
        except rx.NoScriptError:
            return await self.client.execute_command(*_script_call(request, True))

    async def _pooled_script(self, request: Script, packed: list[bytes]) -> Any:
        """EVALSHA (then EVAL if the server forgot the script) on one pooled connection."""
        pool, name = self._pool
        conn = await pool.get_connection(*name)
        try:
            try:
                return await conn.retry.call_with_retry(
                    lambda: _asend(conn, packed), lambda _exc: conn.disconnect()
                )
            except rx.NoScriptError:
                source = _packed(_script_call(request, True))
                return await conn.retry.call_with_retry(
                    lambda: _asend(conn, source), lambda _exc: conn.disconnect()
                )
        finally:
            await pool.release(conn)

    async def _acked_script(self, request: Script) -> Any:
        """The script and ``WAIT`` in one pipeline (one round trip, one connection)."""
        if self.cluster:
            await self.client.initialize()  # the slot map (at once once there is one)
        target = _wait_target(self.client, request, self.cluster)
        for source in (False, True):
            pipe = self.client.pipeline(transaction=False)
            try:
                pipe.execute_command(*_script_call(request, source))
                pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms, **target)
                reply, acked = await pipe.execute(raise_on_error=False)
            finally:
                reset = pipe.reset()
                if reset is not None:
                    await reset
            if source or not isinstance(reply, rx.NoScriptError):
                break
        return _acked(reply, acked, self.wait_replicas, self.wait_timeout_ms)

    async def _batch(self, request: Batch) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        try:
            _queue(pipe, request)
            results = list(await pipe.execute(raise_on_error=False))
        finally:
            reset = pipe.reset()
            if reset is not None:  # a coroutine on most async pipelines
                await reset
        for j, item in _forgotten(request, results):
            try:
                results[j] = await self.client.execute_command(*_script_call(item, True))
            except Exception as exc:  # noqa: BLE001 - kept per request, as in a pipeline
                results[j] = exc
        return _translated(results)


async def arun(driver: AsyncDriver, op: Operation[R]) -> R:
    """Run an operation to its result (it must not emit items)."""
    return await _drive.arun(op, lambda step: driver.execute(_request(step)), translate)


def aiterate(driver: AsyncDriver, op: Operation[Any]) -> AsyncIterator[Any]:
    """Run an operation, yielding the items it emits."""
    return _drive.aiterate(op, lambda step: driver.execute(_request(step)), translate)


def _connect_error(exc: BaseException) -> DurableError:
    if isinstance(exc, ValueError) and not isinstance(exc, rx.RedisError):
        return ConfigurationError(f"invalid Redis URL: {exc}")
    return translate(exc)
