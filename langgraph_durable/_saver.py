"""What every backend's savers share: call resolution and the public methods.

A backend provides an *ops* object whose methods build sans-IO operations
(``langgraph_durable._core.sansio.Operation``) and a way to run them: a sync
saver defines ``_run(op)`` and ``_iterate(op)``, an async saver ``_arun(op)``
and ``_aiterate(op)``. The public ``BaseCheckpointSaver`` methods below are
then written once for every backend, in a sync and an async flavour that only
differ in how they hand the operation to the driver.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Sequence
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

from ._core.codec import CheckpointCodec, ThreadKey, tenant_from_config, thread_key
from ._core.sansio import Operation
from ._core.versions import next_version
from .errors import ConfigurationError, InvalidInputError
from .protect.pipeline import IdentityPipeline

__all__ = ["DurableSaverBase", "SyncSaverMethods", "AsyncSaverMethods", "TenantResolver"]

TenantResolver = Callable[[RunnableConfig | None], "str | None"]


class DurableSaverBase(BaseCheckpointSaver[str]):
    """Tenant and thread resolution, the record pipeline, and backend operations.

    Subclasses implement :meth:`_make_ops` (the backend's operations object).
    """

    default_tenant: str
    _ops: Any

    def _init_base(
        self,
        serde: SerializerProtocol | None,
        tenant: str | TenantResolver | None,
        default_tenant: str,
    ) -> None:
        BaseCheckpointSaver.__init__(self, serde=serde)
        if not isinstance(default_tenant, str) or not default_tenant:
            raise ConfigurationError(
                f"default_tenant must be a non-empty string, got {default_tenant!r}"
            )
        self.default_tenant = default_tenant
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

    def _make_ops(self, codec: CheckpointCodec) -> Any:
        raise NotImplementedError

    def _delta_chain(self) -> int:
        """Most deltas between full copies of a list channel; 0: no delta encoding."""
        return 0

    def _build_ops(self) -> None:
        self.pipeline = IdentityPipeline(self.serde)
        self._ops = self._make_ops(CheckpointCodec(self.pipeline, self._delta_chain()))

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> Any:
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self:
            cast(DurableSaverBase, clone)._build_ops()
        return clone

    def get_next_version(self, current: str | None, channel: None = None) -> str:  # type: ignore[override]
        return next_version(current)

    # ---- call resolution -------------------------------------------------------

    def _tenant_of(self, config: RunnableConfig | None, tenant_id: str | None = None) -> str:
        if tenant_id is not None:
            return str(tenant_id)
        resolved = self._tenant(config)
        return str(resolved) if resolved is not None else self.default_tenant

    def _key(self, config: RunnableConfig) -> ThreadKey:
        if not isinstance(config, dict):
            raise InvalidInputError(f"config must be a RunnableConfig dict, got {config!r}")
        key = thread_key(config, self._tenant_of(config), self.default_tenant)
        echo = "tenant_id" in (config.get("configurable") or {})
        return ThreadKey(key.tenant, key.thread, key.ns, echo)

    def _put_op(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Operation[Any]:
        return self._ops.put(self._key(config), config, checkpoint, metadata, new_versions)  # type: ignore[no-any-return]

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
        return self._ops.put_writes(  # type: ignore[no-any-return]
            key, str(checkpoint_id), writes, str(task_id), task_path or ""
        )

    def _get_op(self, config: RunnableConfig) -> Operation[CheckpointTuple | None]:
        key = self._key(config)
        return self._ops.get_tuple(key, config["configurable"].get("checkpoint_id"))  # type: ignore[no-any-return]

    def _list_op(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Operation[None]:
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise InvalidInputError(f"limit must be a non-negative integer, got {limit!r}")
        if filter is not None and not isinstance(filter, dict):
            raise InvalidInputError(
                f"filter must be a dict of metadata keys to values, got {filter!r}"
            )
        configurable = (config or {}).get("configurable") or {}
        thread = configurable.get("thread_id")
        ns = configurable.get("checkpoint_ns")
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        return self._ops.list(  # type: ignore[no-any-return]
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
        return self._ops.delete_thread(self._tenant_of(None, tenant_id), str(thread_id))  # type: ignore[no-any-return]

    def _delete_for_runs_op(self, run_ids: Sequence[str], tenant_id: str | None) -> Operation[int]:
        return self._ops.delete_for_runs(self._tenant_of(None, tenant_id), run_ids)  # type: ignore[no-any-return]

    def _copy_thread_op(self, source: str, target: str, tenant_id: str | None) -> Operation[None]:
        return self._ops.copy_thread(  # type: ignore[no-any-return]
            self._tenant_of(None, tenant_id), str(source), str(target)
        )

    def _prune_op(
        self, thread_ids: Sequence[str], strategy: str, tenant_id: str | None
    ) -> Operation[None]:
        return self._ops.prune(self._tenant_of(None, tenant_id), thread_ids, strategy)  # type: ignore[no-any-return]


class SyncSaverMethods(DurableSaverBase):
    """The public sync methods, for a saver that defines ``_run`` and ``_iterate``."""

    def _run(self, op: Operation[Any]) -> Any:
        raise NotImplementedError

    def _iterate(self, op: Operation[Any]) -> Iterator[Any]:
        raise NotImplementedError

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._get_op(config))  # type: ignore[no-any-return]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self._iterate(self._list_op(config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._run(self._put_op(config, checkpoint, metadata, new_versions))  # type: ignore[no-any-return]

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._run(self._put_writes_op(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str, *, tenant_id: str | None = None) -> None:
        self._run(self._delete_thread_op(thread_id, tenant_id))

    def delete_for_runs(self, run_ids: Sequence[str], *, tenant_id: str | None = None) -> None:
        self._run(self._delete_for_runs_op(run_ids, tenant_id))

    def copy_thread(
        self, source_thread_id: str, target_thread_id: str, *, tenant_id: str | None = None
    ) -> None:
        self._run(self._copy_thread_op(source_thread_id, target_thread_id, tenant_id))

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        tenant_id: str | None = None,
    ) -> None:
        self._run(self._prune_op(thread_ids, strategy, tenant_id))


class AsyncSaverMethods(DurableSaverBase):
    """The public async methods, for a saver that defines ``_arun`` and ``_aiterate``.

    The sync methods work from other threads (they run on the saver's event
    loop), not from the loop's own thread, where they would block forever.
    """

    loop: asyncio.AbstractEventLoop | None = None

    async def _arun(self, op: Operation[Any]) -> Any:
        raise NotImplementedError

    def _aiterate(self, op: Operation[Any]) -> AsyncIterator[Any]:
        raise NotImplementedError

    def _bind_loop(self) -> None:
        if self.loop is None:
            self.loop = asyncio.get_running_loop()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self._bind_loop()
        return await self._arun(self._get_op(config))  # type: ignore[no-any-return]

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        self._bind_loop()
        async for item in self._aiterate(self._list_op(config, filter, before, limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._bind_loop()
        return await self._arun(self._put_op(config, checkpoint, metadata, new_versions))  # type: ignore[no-any-return]

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._bind_loop()
        await self._arun(self._put_writes_op(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str, *, tenant_id: str | None = None) -> None:
        await self._arun(self._delete_thread_op(thread_id, tenant_id))

    async def adelete_for_runs(
        self, run_ids: Sequence[str], *, tenant_id: str | None = None
    ) -> None:
        await self._arun(self._delete_for_runs_op(run_ids, tenant_id))

    async def acopy_thread(
        self, source_thread_id: str, target_thread_id: str, *, tenant_id: str | None = None
    ) -> None:
        await self._arun(self._copy_thread_op(source_thread_id, target_thread_id, tenant_id))

    async def aprune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        tenant_id: str | None = None,
    ) -> None:
        await self._arun(self._prune_op(thread_ids, strategy, tenant_id))

    # ---- sync access from other threads --------------------------------------

    def _call_on_loop(self, coro: Any) -> Any:
        loop = self.loop
        if loop is None or loop.is_closed():
            coro.close()
            raise InvalidInputError(
                f"{type(self).__name__}'s sync methods need the saver's event loop running in "
                "another thread; use the async methods (aget_tuple, alist, ...) instead"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise InvalidInputError(
                f"a sync method of {type(self).__name__} was called from its own event loop, "
                "which would block forever; await the async method instead"
            )
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
        return self._call_on_loop(self.aput(config, checkpoint, metadata, new_versions))  # type: ignore[no-any-return]

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
