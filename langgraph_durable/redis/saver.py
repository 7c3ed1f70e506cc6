"""``RedisSaver`` and ``AsyncRedisSaver``.

Both run the same pure operations (``_ops.RedisOps``) through a sync or an
async driver (``_driver``); a saver method only resolves the call's tenant and
thread and hands the operation to its driver.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from .._core.codec import CheckpointCodec
from .._core.delta import DEFAULT_MAX_CHAIN
from .._core.retention import Retention, RetentionPolicy
from .._core.sansio import Operation
from .._saver import AsyncSaverMethods, DurableSaverBase, SyncSaverMethods, TenantResolver
from ..errors import ConfigurationError
from ..protect.encryption import Encryption
from ..protect.redaction import Redaction
from . import _driver
from ._admin import SetupResult
from ._keys import KeyLayout, validate_prefix
from ._ops import RedisOps
from ._reads import LIST_PAGE_SIZE

__all__ = ["RedisSaver", "AsyncRedisSaver", "RedisOptions"]


@dataclass(frozen=True)
class RedisOptions:
    """Validated settings of a Redis saver.

    Attributes:
        prefix: First part of every key the saver writes (no ``{``, ``}``).
        ttl: Deprecated: pass ``retention=Retention(idle=...)`` to the saver.
            Seconds a thread lives after its last write (a number or a
            ``datetime.timedelta``; stored as seconds), or None. A saver given
            one applies ``Retention(idle=ttl)`` and warns.
        refresh_ttl_on_read: Whether ``get_tuple`` and ``list`` also count as
            writes for retention (they restart a thread's idle time).
        default_tenant: Tenant used when a call names none.
        page_size: Checkpoints fetched per ``list`` round trip (1-1000).
        delta_chain: A list channel that grows by appending (``messages``) is
            stored as the items added since the previous version, with a full
            copy after at most this many deltas (0-1000; 0 stores every
            version in full). See ``docs/redis.md``.
        wait_replicas: Replicas that must have each write before it counts
            as done (0-16; 0: off). After each write of a thread's records (a
            checkpoint, its writes, an effect-journal change, a copied thread;
            not deletions, which are batched) the saver sends ``WAIT`` to the
            thread's primary on the same connection, in the same round trip;
            if fewer replicas confirm within ``wait_timeout`` the call raises
            ``StorageUnavailableError`` (the write is on the primary; calling
            again is safe). Redis replicates asynchronously, so without it a
            primary that crashes can take an acknowledged write with it when
            its replica is promoted. See ``docs/redis.md``.
        wait_timeout: Seconds ``WAIT`` may block (0.001-60).
        pool_size: Connections of the client the saver opens from a URL of one
            server (1-10000); a call waits for a free one.
        pool_timeout: Seconds a call waits for a free connection of that
            client, then ``StorageUnavailableError`` (0.001-3600). A cluster
            client keeps redis-py's pools per node (100 connections each).
    """

    prefix: str = "lgd"
    ttl: float | None = None
    refresh_ttl_on_read: bool = False
    default_tenant: str = "default"
    page_size: int = LIST_PAGE_SIZE
    delta_chain: int = DEFAULT_MAX_CHAIN
    wait_replicas: int = 0
    wait_timeout: float = 1.0
    pool_size: int = 16
    pool_timeout: float = 30.0

    def __post_init__(self) -> None:
        validate_prefix(self.prefix)
        ttl: Any = self.ttl
        if isinstance(ttl, datetime.timedelta):
            ttl = ttl.total_seconds()
            object.__setattr__(self, "ttl", ttl)
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl >= 0.001
        ):
            raise ConfigurationError(
                f"ttl must be None (no expiry) or a positive number of seconds "
                f"(at least 0.001), got {self.ttl!r}"
            )
        if not isinstance(self.refresh_ttl_on_read, bool):
            raise ConfigurationError(
                f"refresh_ttl_on_read must be True or False, got {self.refresh_ttl_on_read!r}"
            )
        if not isinstance(self.default_tenant, str) or not self.default_tenant:
            raise ConfigurationError(
                f"default_tenant must be a non-empty string, got {self.default_tenant!r}"
            )
        _check_int("page_size", self.page_size, 1, 1000, "")
        _check_int("delta_chain", self.delta_chain, 0, 1000, " (0: no deltas)")
        _check_int("wait_replicas", self.wait_replicas, 0, 16, " (0: do not wait)")
        timeout = self.wait_timeout
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0.001 <= timeout <= 60
        ):
            raise ConfigurationError(
                f"wait_timeout must be a number of seconds from 0.001 to 60, got {timeout!r}"
            )
        _check_int("pool_size", self.pool_size, 1, 10000, "")
        timeout = self.pool_timeout
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0.001 <= timeout <= 3600
        ):
            raise ConfigurationError(
                f"pool_timeout must be a number of seconds from 0.001 to 3600, got {timeout!r}"
            )

    @property
    def ttl_ms(self) -> int | None:
        """The TTL in whole milliseconds (at least 1), or None (deprecated with ``ttl``)."""
        return None if self.ttl is None else max(1, round(self.ttl * 1000))


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CONTEXTLIB = os.path.abspath(contextlib.__file__)


def _caller_level() -> int:
    """The ``stacklevel`` that makes a warning name the first caller outside the package.

    Counted from the function that calls this one (``from_conn_string`` goes
    through contextlib, whose frames are skipped too).
    """
    level, frame = 2, sys._getframe(2)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not (name.startswith(_PACKAGE_DIR + os.sep) or name == _CONTEXTLIB):
            return level
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def _retention_setting(
    options: RedisOptions, retention: Retention | RetentionPolicy | None
) -> Retention | RetentionPolicy | None:
    """The saver's retention, with the deprecated ``ttl`` turned into ``Retention(idle=ttl)``."""
    if options.ttl is None:
        return retention
    if retention is not None:
        raise ConfigurationError(
            "pass retention= or the deprecated ttl=, not both: "
            f"retention=Retention(idle={options.ttl!r}) is what ttl={options.ttl!r} means"
        )
    warnings.warn(
        f"ttl= is deprecated: pass retention=Retention(idle={options.ttl!r}) "
        "(from langgraph_durable import Retention) instead",
        DeprecationWarning,
        stacklevel=_caller_level(),
    )
    return Retention(idle=datetime.timedelta(seconds=options.ttl))


def _check_int(name: str, value: Any, low: int, high: int, note: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigurationError(
            f"{name} must be an integer from {low} to {high}{note}, got {value!r}"
        )


class _RedisSaverBase(DurableSaverBase):
    """What the sync and async Redis savers share: options, operations, driver."""

    options: RedisOptions
    _ops: RedisOps
    _driver_type: Any

    def __init__(
        self,
        conn: Any,
        *,
        prefix: str = "lgd",
        ttl: float | datetime.timedelta | None = None,
        refresh_ttl_on_read: bool = False,
        serde: SerializerProtocol | None = None,
        tenant: str | TenantResolver | None = None,
        default_tenant: str = "default",
        page_size: int = LIST_PAGE_SIZE,
        delta_chain: int = DEFAULT_MAX_CHAIN,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        pool_size: int = 16,
        pool_timeout: float = 30.0,
        options: RedisOptions | None = None,
        encryption: Encryption | None = None,
        redaction: Redaction | None = None,
        retention: Retention | RetentionPolicy | None = None,
        integrity: Any = None,
    ) -> None:
        if options is None:
            options = RedisOptions(
                prefix=prefix,
                ttl=ttl,  # type: ignore[arg-type]  # a timedelta is normalized
                refresh_ttl_on_read=refresh_ttl_on_read,
                default_tenant=default_tenant,
                page_size=page_size,
                delta_chain=delta_chain,
                wait_replicas=wait_replicas,
                wait_timeout=wait_timeout,
                pool_size=pool_size,
                pool_timeout=pool_timeout,
            )
        elif not isinstance(options, RedisOptions):
            raise ConfigurationError(f"options must be a RedisOptions, got {options!r}")
        self.options = options
        retention = _retention_setting(options, retention)
        self._conn = self._driver_type(
            conn,
            wait_replicas=options.wait_replicas,
            wait_timeout_ms=max(1, round(options.wait_timeout * 1000)),
            pool_size=options.pool_size,
            pool_timeout=options.pool_timeout,
        )
        self._init_base(
            serde,
            tenant,
            options.default_tenant,
            encryption,
            redaction,
            retention=retention,
            integrity=integrity,
        )

    def _delta_chain(self) -> int:
        return self.options.delta_chain

    def _make_ops(self, codec: CheckpointCodec) -> RedisOps:
        o = self.options
        return RedisOps(
            o.prefix,
            o.refresh_ttl_on_read,
            o.page_size,
            codec,
            index_in_script=not self._conn.cluster,
            retention=None if self.retention is None else self._retention_for,
        )

    @property
    def prefix(self) -> str:
        """The prefix of this saver's keys."""
        return self.options.prefix

    @property
    def keys(self) -> KeyLayout:
        """The saver's key layout (key names of a thread or a tenant's index)."""
        return self._ops.keys

    @property
    def client(self) -> Any:
        """The redis-py client the saver uses."""
        return self._conn.client

    def _setup_op(self) -> Operation[SetupResult]:
        retention = self.retention
        stored = retention.to_json() if isinstance(retention, Retention) else None
        return self._ops.setup(retention is not None, stored)


class RedisSaver(SyncSaverMethods, _RedisSaverBase):
    """A LangGraph checkpoint saver on Redis or Valkey (sync).

    Args:
        conn: A ``redis.Redis`` or ``redis.cluster.RedisCluster`` client (with
            ``decode_responses=False``, the default), or a URL (``redis://``,
            ``rediss://``, ``unix://``; ``redis+cluster://``,
            ``rediss+cluster://`` or ``?cluster=true`` for a cluster), for which
            the saver opens and owns a client.
        prefix: First part of every key the saver writes.
        retention: How long threads are kept: a
            :class:`~langgraph_durable.Retention`, or a callable
            ``tenant -> Retention | None`` (asked on every write); None keeps
            threads until deleted. Under ``strategy="delete"`` a thread's keys
            expire natively, together, at min(last write + idle, creation +
            absolute); ``keep_latest`` is carried out by ``prune_expired``.
        ttl: Deprecated alias: ``ttl=X`` means ``retention=Retention(idle=X)``
            (and warns); giving both is a ``ConfigurationError``.
        refresh_ttl_on_read: Whether reads also count as writes for retention
            (they restart a thread's idle time).
        serde: LangGraph serializer (default: ``AllowlistSerializer`` of
            ``langgraph_durable.protect.allowlist``: LangGraph's format, and reads
            rebuild only allowlisted types; a serializer given here is used as is).
        tenant: None (read ``config["configurable"]["tenant_id"]``), a fixed
            tenant id, or a callable ``(config) -> tenant id``.
        default_tenant: Tenant used when a call names none.
        page_size: Checkpoints fetched per ``list`` round trip.
        delta_chain: Most deltas between two full copies of a list channel
            that grows by appending; 0 stores every version in full.
        wait_replicas: Replicas that must confirm each write (Redis ``WAIT``,
            in the same round trip) before the call returns; fewer within
            ``wait_timeout`` seconds raise ``StorageUnavailableError``. 0 (the
            default) does not wait: a crashed primary may then lose the last
            acknowledged writes when its replica takes over.
        wait_timeout: Seconds a write waits for ``wait_replicas`` (default 1).
        pool_size: Connections of the client opened for a URL of one server
            (default 16); a call waits for a free one.
        pool_timeout: Seconds a call waits for a free connection of that
            client (default 30), then ``StorageUnavailableError``.
        options: A :class:`RedisOptions`; when given it replaces the option
            arguments above (prefix, ttl, refresh_ttl_on_read, default_tenant,
            page_size, delta_chain, wait_replicas, wait_timeout, pool_size,
            pool_timeout; not retention).
        encryption: Envelope encryption of every stored payload
            (:class:`~langgraph_durable.protect.Encryption`); None: off.
        redaction: PII redaction before anything is stored
            (:class:`~langgraph_durable.protect.Redaction`); None: off.

    Example:
        >>> with RedisSaver.from_conn_string("redis://localhost:6379/0") as saver:
        ...     saver.setup()
        ...     graph = builder.compile(checkpointer=saver)
    """

    _driver_type = _driver.SyncDriver

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Iterator[RedisSaver]:
        """A saver on its own client for ``conn_string``, closed on exit.

        Keyword arguments are those of the constructor.
        """
        saver = cls(conn_string, **kwargs)
        try:
            yield saver
        finally:
            saver.close()

    def close(self) -> None:
        """Close the client the saver opened (a caller's client stays open)."""
        self._conn.close()

    def setup(self) -> SetupResult:
        """Check the server (Redis >= 7.0 or Valkey), load the scripts, check eviction.

        Safe to call any number of times from any number of processes. Logs a
        warning when the server may evict checkpoints on its own. A saver whose
        ``retention`` is a :class:`~langgraph_durable.Retention` (not a
        callable) stores it as JSON in ``<prefix>:retention`` for the CLI.

        Returns:
            What this call changed in the store's schema, as every saver's
            ``setup()`` does (empty when there was nothing to do): Redis keys
            need no schema, so always an empty list, a
            :class:`~langgraph_durable.redis.SetupResult` whose ``versions``
            and ``warnings`` say what it found on the servers.
        """
        return self._run(self._setup_op())  # type: ignore[no-any-return]

    def _run(self, op: Operation[Any]) -> Any:
        return _driver.run(self._conn, op)

    def _iterate(self, op: Operation[Any]) -> Iterator[Any]:
        return _driver.iterate(self._conn, op)


class AsyncRedisSaver(AsyncSaverMethods, _RedisSaverBase):
    """A LangGraph checkpoint saver on Redis or Valkey (asyncio).

    Takes a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``
    client or a URL; other arguments as :class:`RedisSaver`. Its sync methods
    work from other threads (they run on the saver's event loop), not from the
    loop's own thread.
    """

    _driver_type = _driver.AsyncDriver

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, **kwargs: Any
    ) -> AsyncIterator[AsyncRedisSaver]:
        """A saver on its own client for ``conn_string``, closed on exit."""
        saver = cls(conn_string, **kwargs)
        saver._bind_loop()
        try:
            yield saver
        finally:
            await saver.close()

    async def close(self) -> None:
        """Close the client the saver opened (a caller's client stays open)."""
        await self._conn.close()

    async def setup(self) -> SetupResult:
        """Check the server, load the scripts, check eviction (see ``RedisSaver.setup``)."""
        self._bind_loop()
        return await self._arun(self._setup_op())  # type: ignore[no-any-return]

    async def _arun(self, op: Operation[Any]) -> Any:
        return await _driver.arun(self._conn, op)

    def _aiterate(self, op: Operation[Any]) -> AsyncIterator[Any]:
        return _driver.aiterate(self._conn, op)
