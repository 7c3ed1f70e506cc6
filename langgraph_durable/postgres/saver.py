"""``PostgresSaver`` and ``AsyncPostgresSaver``.

Both run the same pure operations (``_sql.PostgresOps``) through a sync or an
async driver (``_driver``); a saver method only resolves the call's tenant and
thread and hands the operation to its driver.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._core.codec import CheckpointCodec, ThreadKey, tenant_from_config, thread_key
from .._core.sansio import Operation
from .._core.versions import next_version
from ..errors import ConfigurationError, InvalidInputError
from ..protect.pipeline import IdentityPipeline
from . import _driver
from ._sql import PostgresOps, validate_schema_name

__all__ = ["PostgresSaver", "AsyncPostgresSaver", "PostgresOptions"]

TenantResolver = Callable[[RunnableConfig | None], "str | None"]


@dataclass(frozen=True)
class PostgresOptions:
    """Validated settings of a Postgres saver.

    Attributes:
        schema: Schema holding the saver's tables (created by ``setup()``).
        default_tenant: Tenant used when a call names none.
        partition_days: Width of a partition's time bucket, fixed at the first
            ``setup()`` of a schema.
        prepare: Use server-side prepared statements for hot-path statements.
            Turn off (``prepare_threshold=None``) behind PgBouncer in
            transaction mode.
        pool_size: Size of the pool the saver opens when given a URL.
        pool_timeout: Seconds to wait for a connection from that pool.
    """

    schema: str = "langgraph_durable"
    default_tenant: str = "default"
    partition_days: int = 7
    prepare: bool = True
    pool_size: int = 4
    pool_timeout: float = 30.0

    def __post_init__(self) -> None:
        validate_schema_name(self.schema)
        if not isinstance(self.default_tenant, str) or not self.default_tenant:
            raise ConfigurationError(
                f"default_tenant must be a non-empty string, got {self.default_tenant!r}"
            )
        if not isinstance(self.partition_days, int) or not 1 <= self.partition_days <= 3660:
            raise ConfigurationError(
                f"partition_days must be an integer from 1 to 3660, got {self.partition_days!r}"
            )
        if not isinstance(self.pool_size, int) or self.pool_size < 1:
            raise ConfigurationError(
                f"pool_size must be a positive integer, got {self.pool_size!r}"
            )
        if not isinstance(self.pool_timeout, (int, float)) or self.pool_timeout <= 0:
            raise ConfigurationError(
                f"pool_timeout must be a positive number of seconds, got {self.pool_timeout!r}"
            )


def _options(
    schema: str,
    default_tenant: str,
    partition_days: int,
    prepare_threshold: int | None,
    pool_size: int,
    pool_timeout: float,
) -> PostgresOptions:
    if prepare_threshold is not None and (
        not isinstance(prepare_threshold, int) or prepare_threshold < 0
    ):
        raise ConfigurationError(
            f"prepare_threshold must be None (no prepared statements) or an integer >= 0, "
            f"got {prepare_threshold!r}"
        )
    return PostgresOptions(
        schema=schema,
        default_tenant=default_tenant,
        partition_days=partition_days,
        prepare=prepare_threshold is not None,
        pool_size=pool_size,
        pool_timeout=pool_timeout,
    )


class _PostgresSaverBase(BaseCheckpointSaver[str]):
    """What the sync and async savers share: call resolution into operations."""

    options: PostgresOptions
    _ops: PostgresOps
    _connector: Any

    def __init__(
        self,
        conn: Any,
        *,
        schema: str = "langgraph_durable",
        serde: SerializerProtocol | None = None,
        tenant: str | TenantResolver | None = None,
        default_tenant: str = "default",
        partition_days: int = 7,
        prepare_threshold: int | None = 5,
        pool_size: int = 4,
        pool_timeout: float = 30.0,
    ) -> None:
        super().__init__(serde=serde)
        self.options = _options(
            schema, default_tenant, partition_days, prepare_threshold, pool_size, pool_timeout
        )
        if tenant is None:
            self._tenant: TenantResolver = tenant_from_config
        elif isinstance(tenant, str):
            fixed = tenant
            self._tenant = lambda _config: fixed
        elif callable(tenant):
            self._tenant = tenant
        else:
            raise ConfigurationError(
                f"tenant must be None, a string or a callable(config) -> str, got {tenant!r}"
            )
        self._build_ops()
        self._conn = self._connector(conn, self.options)

    def _build_ops(self) -> None:
        self.pipeline = IdentityPipeline(self.serde)
        self._ops = PostgresOps(self.options.schema, CheckpointCodec(self.pipeline))

    @property
    def schema(self) -> str:
        """The schema holding this saver's tables."""
        return self.options.schema

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> Any:
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self:
            cast(_PostgresSaverBase, clone)._build_ops()
        return clone

    def get_next_version(self, current: str | None, channel: None = None) -> str:  # type: ignore[override]
        return next_version(current)

    # ---- call resolution -------------------------------------------------------

    def _tenant_of(self, config: RunnableConfig | None, tenant_id: str | None = None) -> str:
        if tenant_id is not None:
            return str(tenant_id)
        resolved = self._tenant(config)
        return str(resolved) if resolved is not None else self.options.default_tenant

    def _key(self, config: RunnableConfig) -> ThreadKey:
        if not isinstance(config, dict):
            raise InvalidInputError(f"config must be a RunnableConfig dict, got {config!r}")
        key = thread_key(config, self._tenant_of(config), self.options.default_tenant)
        echo = "tenant_id" in (config.get("configurable") or {})
        return ThreadKey(key.tenant, key.thread, key.ns, echo)

    def _setup_op(self) -> Operation[list[int]]:
        return self._ops.setup(self.options.partition_days)

    def _put_op(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Operation[Any]:
        return self._ops.put(self._key(config), config, checkpoint, metadata, new_versions)  # type: ignore[arg-type]

    def _put_writes_op(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Operation[None]:
        key = self._key(config)
        checkpoint_id = config["configurable"].get("checkpoint_id")
        if not checkpoint_id:
            raise InvalidInputError(
                "put_writes needs config['configurable']['checkpoint_id'] (the checkpoint "
                "the writes belong to)"
            )
        return self._ops.put_writes(key, str(checkpoint_id), writes, str(task_id), task_path or "")

    def _get_op(self, config: RunnableConfig) -> Operation[CheckpointTuple | None]:
        key = self._key(config)
        return self._ops.get_tuple(key, config["configurable"].get("checkpoint_id"))

    def _list_op(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Operation[None]:
        configurable = (config or {}).get("configurable") or {}
        thread = configurable.get("thread_id")
        ns = configurable.get("checkpoint_ns")
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        return self._ops.list(
            self._tenant_of(config),
            None if thread is None else str(thread),
            None if ns is None else str(ns),
            configurable.get("checkpoint_id"),
            filter,
            before_id,
            limit,
            "tenant_id" in configurable,
        )

    def _delete_thread_op(self, thread_id: str, tenant_id: str | None) -> Operation[None]:
        return self._ops.delete_thread(self._tenant_of(None, tenant_id), str(thread_id))

    def _delete_for_runs_op(self, run_ids: Sequence[str], tenant_id: str | None) -> Operation[int]:
        return self._ops.delete_for_runs(self._tenant_of(None, tenant_id), run_ids)

    def _copy_thread_op(self, source: str, target: str, tenant_id: str | None) -> Operation[None]:
        return self._ops.copy_thread(self._tenant_of(None, tenant_id), str(source), str(target))

    def _prune_op(
        self, thread_ids: Sequence[str], strategy: str, tenant_id: str | None
    ) -> Operation[None]:
        return self._ops.prune(self._tenant_of(None, tenant_id), thread_ids, strategy)


class PostgresSaver(_PostgresSaverBase):
    """A LangGraph checkpoint saver on PostgreSQL (sync).

    Args:
        conn: A ``psycopg.Connection``, a ``psycopg_pool.ConnectionPool`` (a plain
            ``ConnectionPool(url)`` works: no row factory or autocommit needed),
            or a URL, for which the saver opens and owns a pool.
        schema: Schema for the saver's tables.
        serde: LangGraph serializer (default: LangGraph's JsonPlusSerializer).
        tenant: None (read ``config["configurable"]["tenant_id"]``), a fixed
            tenant id, or a callable ``(config) -> tenant id``.
        default_tenant: Tenant used when a call names none.
        partition_days: Partition width in days (fixed at the first setup).
        prepare_threshold: None to never use prepared statements (PgBouncer in
            transaction mode); otherwise hot-path statements are prepared.
        pool_size: Pool size when ``conn`` is a URL.
        pool_timeout: Seconds to wait for a connection from that pool.

    Example:
        >>> with PostgresSaver.from_conn_string("postgresql://localhost/db") as saver:
        ...     saver.setup()
        ...     graph = builder.compile(checkpointer=saver)
    """

    _connector = _driver.SyncConnector

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Iterator[PostgresSaver]:
        """A saver on its own pool for ``conn_string``, closed on exit.

        Keyword arguments are those of the constructor.
        """
        saver = cls(conn_string, **kwargs)
        try:
            yield saver
        finally:
            saver.close()

    def close(self) -> None:
        """Close the pool the saver opened (a caller's connection or pool stays open)."""
        self._conn.close()

    def setup(self) -> list[int]:
        """Create or migrate the schema (safe from many processes at once).

        Returns:
            The migration versions this call applied (empty if up to date).
        """
        return _driver.run(self._conn, self._setup_op())

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return _driver.run(self._conn, self._get_op(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return _driver.iterate(self._conn, self._list_op(config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return _driver.run(self._conn, self._put_op(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        _driver.run(self._conn, self._put_writes_op(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str, *, tenant_id: str | None = None) -> None:
        _driver.run(self._conn, self._delete_thread_op(thread_id, tenant_id))

    def delete_for_runs(self, run_ids: Sequence[str], *, tenant_id: str | None = None) -> None:
        _driver.run(self._conn, self._delete_for_runs_op(run_ids, tenant_id))

    def copy_thread(
        self, source_thread_id: str, target_thread_id: str, *, tenant_id: str | None = None
    ) -> None:
        _driver.run(self._conn, self._copy_thread_op(source_thread_id, target_thread_id, tenant_id))

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        tenant_id: str | None = None,
    ) -> None:
        _driver.run(self._conn, self._prune_op(thread_ids, strategy, tenant_id))


class AsyncPostgresSaver(_PostgresSaverBase):
    """A LangGraph checkpoint saver on PostgreSQL (asyncio).

    Takes a ``psycopg.AsyncConnection``, a ``psycopg_pool.AsyncConnectionPool``
    or a URL; other arguments as :class:`PostgresSaver`. Its sync methods work
    from other threads (they run on the saver's event loop), not from the
    loop's own thread.
    """

    _connector = _driver.AsyncConnector
    loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, **kwargs: Any
    ) -> AsyncIterator[AsyncPostgresSaver]:
        """A saver on its own pool for ``conn_string``, closed on exit."""
        saver = cls(conn_string, **kwargs)
        saver._bind_loop()
        try:
            await saver._conn.open()
            yield saver
        finally:
            await saver.close()

    async def close(self) -> None:
        """Close the pool the saver opened (a caller's connection or pool stays open)."""
        await self._conn.close()

    def _bind_loop(self) -> None:
        if self.loop is None:
            self.loop = asyncio.get_running_loop()

    async def setup(self) -> list[int]:
        """Create or migrate the schema; returns the migration versions applied."""
        self._bind_loop()
        return await _driver.arun(self._conn, self._setup_op())

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self._bind_loop()
        return await _driver.arun(self._conn, self._get_op(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        self._bind_loop()
        async for item in _driver.aiterate(
            self._conn, self._list_op(config, filter, before, limit)
        ):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._bind_loop()
        return await _driver.arun(
            self._conn, self._put_op(config, checkpoint, metadata, new_versions)
        )

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._bind_loop()
        await _driver.arun(self._conn, self._put_writes_op(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str, *, tenant_id: str | None = None) -> None:
        await _driver.arun(self._conn, self._delete_thread_op(thread_id, tenant_id))

    async def adelete_for_runs(
        self, run_ids: Sequence[str], *, tenant_id: str | None = None
    ) -> None:
        await _driver.arun(self._conn, self._delete_for_runs_op(run_ids, tenant_id))

    async def acopy_thread(
        self, source_thread_id: str, target_thread_id: str, *, tenant_id: str | None = None
    ) -> None:
        await _driver.arun(
            self._conn, self._copy_thread_op(source_thread_id, target_thread_id, tenant_id)
        )

    async def aprune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        tenant_id: str | None = None,
    ) -> None:
        await _driver.arun(self._conn, self._prune_op(thread_ids, strategy, tenant_id))

    # ---- sync access from other threads --------------------------------------

    def _call_on_loop(self, coro: Any) -> Any:
        loop = self.loop
        if loop is None or loop.is_closed():
            coro.close()
            raise InvalidInputError(
                "AsyncPostgresSaver's sync methods need the saver's event loop running in "
                "another thread; use the async methods (aget_tuple, alist, ...) instead"
            )
        try:
            if asyncio.get_running_loop() is loop:
                coro.close()
                raise InvalidInputError(
                    "a sync method of AsyncPostgresSaver was called from its own event loop, "
                    "which would block forever; await the async method instead"
                )
        except RuntimeError:
            pass
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._call_on_loop(self.aget_tuple(config))  # type: ignore[no-any-return]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        yield from self._call_on_loop(collect())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._call_on_loop(  # type: ignore[no-any-return]
            self.aput(config, checkpoint, metadata, new_versions)
        )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._call_on_loop(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str, *, tenant_id: str | None = None) -> None:
        self._call_on_loop(self.adelete_thread(thread_id, tenant_id=tenant_id))

    def delete_for_runs(self, run_ids: Sequence[str], *, tenant_id: str | None = None) -> None:
        self._call_on_loop(self.adelete_for_runs(run_ids, tenant_id=tenant_id))

    def copy_thread(
        self, source_thread_id: str, target_thread_id: str, *, tenant_id: str | None = None
    ) -> None:
        self._call_on_loop(
            self.acopy_thread(source_thread_id, target_thread_id, tenant_id=tenant_id)
        )

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        tenant_id: str | None = None,
    ) -> None:
        self._call_on_loop(self.aprune(thread_ids, strategy=strategy, tenant_id=tenant_id))
