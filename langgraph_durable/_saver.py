"""What every backend's savers share: call resolution and the public methods.

A backend provides an *ops* object whose methods build sans-IO operations
(``langgraph_durable._core.sansio.Operation``) and a way to run them: a sync
saver defines ``_run(op)`` and ``_iterate(op)``, an async saver ``_arun(op)``
and ``_aiterate(op)``. The public ``BaseCheckpointSaver`` methods below are
then written once for every backend, in a sync and an async flavour that only
differ in how they hand the operation to the driver.

The operations come from ``_saver_base.DurableSaverBase`` (call resolution,
keys, the effect journal) and ``_saver_admin.SaverAdmin`` (deletes, copies,
pruning, verify).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from ._core.retention import DEFAULT_THROTTLE, PruneProgress, PruneReport, Retention
from ._core.sansio import Operation
from ._saver_admin import (
    SaverAdmin,
    VerifyReport,
    _collect_report,
    _final,
    _verify_item,
    _verify_steps,
)
from ._saver_base import DurableSaverBase, OpenedEffect, TenantResolver
from .errors import InvalidInputError

__all__ = [
    "DurableSaverBase",
    "SyncSaverMethods",
    "AsyncSaverMethods",
    "TenantResolver",
    "OpenedEffect",
    "VerifyReport",
]


class SyncSaverMethods(SaverAdmin):
    """The public sync methods, for a saver that defines ``_run`` and ``_iterate``."""

    def _run(self, op: Operation[Any]) -> Any:
        raise NotImplementedError

    def _iterate(self, op: Operation[Any]) -> Iterator[Any]:
        raise NotImplementedError

    def rotate_keys(self, tenant_id: str | None = None) -> dict[str, int]:
        """Rewrap stored data keys under the keyring's active key (no payload is rewritten).

        Args:
            tenant_id: Only this tenant (default: every tenant with data keys).

        Returns:
            ``{"tenants": n, "rewrapped": n, "current": n}``.
        """
        return self._run(Operation(self._rotate_steps(tenant_id)))  # type: ignore[no-any-return]

    def shred_tenant(self, tenant_id: str) -> int:
        """Crypto-shred a tenant: delete its wrapped data keys; the number of versions."""
        return self._run(Operation(self._admin_keys().shred(self._ops, str(tenant_id))))  # type: ignore[no-any-return]

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

    def prune_expired(
        self,
        retention: Retention | None = None,
        *,
        tenant_id: str | None = None,
        dry_run: bool = False,
        max_seconds: float | None = None,
        now: float | None = None,
        batch: int = 500,
        throttle: float = DEFAULT_THROTTLE,
        progress: Callable[[PruneProgress], None] | None = None,
    ) -> PruneReport:
        """Remove (or trim) the threads that retention says have expired.

        Args:
            retention: The policy to apply; default: the saver's ``retention=``,
                else each thread's stored expiry (written under that setting).
            tenant_id: Only this tenant (default: every tenant).
            dry_run: Count what a run would remove; change nothing.
            max_seconds: Stop between batches after this long (the report
                says ``budget_exhausted``; a later run resumes).
            now: The time (Unix seconds) that decides expiry (default: now).
            batch: Threads per batch (one short transaction each where the
                backend has them).
            throttle: After each batch, rest this many times as long as the
                batch took, so writers keep the database's attention
                (0: flat out; 1: busy half the time).
            progress: Called after each batch.

        Returns:
            What was removed; ``locked`` when another pruner was running.
        """
        op = self._prune_expired_op(
            retention, tenant_id, dry_run, max_seconds, now, batch, throttle
        )
        return _collect_report(self._iterate(op), progress)

    def stored_retention(self) -> Retention | None:
        """The retention policy ``setup()`` stored, or None when none is stored.

        It is what ``langgraph-durable prune`` applies when given no policy flags. A
        saver's ``setup()`` stores its ``retention=`` when that is a plain ``Retention``
        (not a callable).
        """
        text = self._run(self._ops.retention_get())
        return Retention.from_json(text) if text else None

    def verify(
        self,
        *,
        tenant_id: str | None = None,
        thread_id: str | None = None,
        on_broken: Callable[[Any], None] | None = None,
        progress: Callable[[VerifyReport], None] | None = None,
        page: int = 200,
        heads: Iterable[Any] | None = None,
        on_head: Callable[[Any], None] | None = None,
    ) -> VerifyReport:
        """Check the hash chain of stored threads (needs ``integrity=``).

        Every record's tag and every checkpoint's link to its parent (or to
        the tombstone a trim left) is checked, thread by thread, so memory
        stays bounded by the largest thread. No payload is decrypted.

        Args:
            tenant_id: Only this tenant (default: every tenant).
            thread_id: Only this thread (of ``tenant_id``, or the default tenant).
            on_broken: Called with each broken link
                (``langgraph_durable._core.audit.Broken``: tenant, thread, ns,
                checkpoint_id, reason).
            progress: Called with the running report after each thread.
            page: Threads read per page while walking the store.
            heads: Heads anchored outside the store (as ``on_head`` gave
                them, or their ``to_json()`` dicts): each must still be found
                in its thread (or removed by a signed trim), else it is a
                broken link. This detects removal of a thread's newest
                checkpoints, or of a whole thread, which the chain alone cannot.
            on_head: Called with each checked thread's heads
                (``langgraph_durable._core.audit.Head``: tenant, thread, ns,
                checkpoint_id, digest; ``to_json()``), the newest checkpoint
                of each namespace and its chain digest, to keep elsewhere.

        Returns:
            The counts; ``report.ok`` is False when a link is broken.
        """
        op = Operation(_verify_steps(self, tenant_id, thread_id, page, heads, on_head is not None))
        report = VerifyReport()
        for item in self._iterate(op):
            _verify_item(item, on_broken, progress, on_head)
            if isinstance(item, VerifyReport):
                report = item
        return report


class AsyncSaverMethods(SaverAdmin):
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

    async def arotate_keys(self, tenant_id: str | None = None) -> dict[str, int]:
        """Async :meth:`SyncSaverMethods.rotate_keys`."""
        self._bind_loop()
        return await self._arun(Operation(self._rotate_steps(tenant_id)))  # type: ignore[no-any-return]

    async def ashred_tenant(self, tenant_id: str) -> int:
        """Async :meth:`SyncSaverMethods.shred_tenant`."""
        self._bind_loop()
        return await self._arun(Operation(self._admin_keys().shred(self._ops, str(tenant_id))))  # type: ignore[no-any-return]

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

    async def aprune_expired(
        self,
        retention: Retention | None = None,
        *,
        tenant_id: str | None = None,
        dry_run: bool = False,
        max_seconds: float | None = None,
        now: float | None = None,
        batch: int = 500,
        throttle: float = DEFAULT_THROTTLE,
        progress: Callable[[PruneProgress], None] | None = None,
    ) -> PruneReport:
        """Async :meth:`SyncSaverMethods.prune_expired` (same arguments and result)."""
        op = self._prune_expired_op(
            retention, tenant_id, dry_run, max_seconds, now, batch, throttle
        )
        report: PruneReport | None = None
        async for item in self._aiterate(op):
            if isinstance(item, PruneReport):
                report = item
            elif progress is not None:
                progress(item)
        return _final(report)

    async def astored_retention(self) -> Retention | None:
        """Async :meth:`SyncSaverMethods.stored_retention`."""
        text = await self._arun(self._ops.retention_get())
        return Retention.from_json(text) if text else None

    async def averify(
        self,
        *,
        tenant_id: str | None = None,
        thread_id: str | None = None,
        on_broken: Callable[[Any], None] | None = None,
        progress: Callable[[VerifyReport], None] | None = None,
        page: int = 200,
        heads: Iterable[Any] | None = None,
        on_head: Callable[[Any], None] | None = None,
    ) -> VerifyReport:
        """Async :meth:`SyncSaverMethods.verify` (same arguments and result)."""
        op = Operation(_verify_steps(self, tenant_id, thread_id, page, heads, on_head is not None))
        report = VerifyReport()
        async for item in self._aiterate(op):
            _verify_item(item, on_broken, progress, on_head)
            if isinstance(item, VerifyReport):
                report = item
        return report

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

    def prune_expired(
        self,
        retention: Retention | None = None,
        *,
        tenant_id: str | None = None,
        dry_run: bool = False,
        max_seconds: float | None = None,
        now: float | None = None,
        batch: int = 500,
        throttle: float = DEFAULT_THROTTLE,
        progress: Callable[[PruneProgress], None] | None = None,
    ) -> PruneReport:
        return self._call_on_loop(  # type: ignore[no-any-return]
            self.aprune_expired(
                retention,
                tenant_id=tenant_id,
                dry_run=dry_run,
                max_seconds=max_seconds,
                now=now,
                batch=batch,
                throttle=throttle,
                progress=progress,
            )
        )
