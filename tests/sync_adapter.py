"""Drive a saver's synchronous methods through the async API, for async-only test suites.

``langgraph-checkpoint-conformance`` calls only ``aput``, ``aget_tuple``, ``alist``
and the other async methods, and counts a capability as present only when the
saver's class overrides the async method. :class:`SyncSaverAdapter` overrides
all of them and runs the wrapped saver's *sync* methods in a worker thread
(never on the event-loop thread, where a sync method that waits on the loop
would block forever), so the same suite exercises the sync code path.

Nothing here is backend specific: wrap any ``BaseCheckpointSaver``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

__all__ = ["SyncSaverAdapter"]

_EXHAUSTED = object()


class SyncSaverAdapter(BaseCheckpointSaver):
    """A saver whose async methods call ``inner``'s sync methods in a worker thread.

    Sync methods are passed straight through, so the adapter is a complete saver
    that can stand in wherever ``inner`` could.

    Args:
        inner: The saver whose synchronous implementation is under test.
    """

    def __init__(self, inner: BaseCheckpointSaver) -> None:
        super().__init__(serde=inner.serde)
        self.serde = inner.serde
        self.inner = inner

    def __repr__(self) -> str:
        return f"SyncSaverAdapter({self.inner!r})"

    @property
    def config_specs(self) -> list:
        return self.inner.config_specs

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> SyncSaverAdapter:
        derived = self.inner.with_allowlist(extra_allowlist)
        return self if derived is self.inner else SyncSaverAdapter(derived)

    # ------------------------------------------------------------------ sync: pass-through

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.inner.get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self.inner.list(config, filter=filter, before=before, limit=limit)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.inner.put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.inner.put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.inner.delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.inner.copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.inner.prune(thread_ids, strategy=strategy)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    # ------------------------------------------------------------------ async: via a thread

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.inner.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        # Creating and advancing the iterator both run the saver's code (a generator
        # does its I/O lazily), so each step happens in a worker thread.
        iterator = await asyncio.to_thread(
            lambda: iter(self.inner.list(config, filter=filter, before=before, limit=limit))
        )
        try:
            while True:
                item = await asyncio.to_thread(next, iterator, _EXHAUSTED)
                if item is _EXHAUSTED:
                    return
                yield cast(CheckpointTuple, item)
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                await asyncio.to_thread(close)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.inner.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.inner.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.inner.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.inner.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.inner.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(lambda: self.inner.prune(thread_ids, strategy=strategy))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(
            lambda: self.inner.get_delta_channel_history(config=config, channels=channels)
        )
