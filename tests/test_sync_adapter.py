"""The sync-to-async adapter itself, checked on LangGraph's in-memory saver."""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator, Iterator
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver

from tests.conformance import TESTS_PER_CAPABILITY, run_conformance
from tests.sync_adapter import SyncSaverAdapter

BASE = ("put", "put_writes", "get_tuple", "list", "delete_thread")


class _ThreadRecordingSaver(InMemorySaver):
    """Records which thread ran each sync method and whether a listing was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: dict[str, set[int]] = {}
        self.list_closed = False

    def _note(self, method: str) -> None:
        self.threads.setdefault(method, set()).add(threading.get_ident())

    def put(self, *args: Any, **kwargs: Any) -> Any:
        self._note("put")
        return super().put(*args, **kwargs)

    def get_tuple(self, *args: Any, **kwargs: Any) -> Any:
        self._note("get_tuple")
        return super().get_tuple(*args, **kwargs)

    def list(self, *args: Any, **kwargs: Any) -> Iterator[CheckpointTuple]:
        self._note("list")
        try:
            for item in super().list(*args, **kwargs):
                self._note("list-next")
                yield item
        finally:
            self.list_closed = True


async def test_adapter_passes_base_conformance_on_in_memory_saver() -> None:
    async def factory() -> AsyncGenerator[BaseCheckpointSaver, None]:
        yield SyncSaverAdapter(InMemorySaver())

    run = await run_conformance("SyncSaverAdapter(InMemorySaver)", factory)

    # Every async method is overridden, so all eight capabilities are detected ...
    assert run.detected() == set(TESTS_PER_CAPABILITY), run.summary()
    # ... and the ones InMemorySaver implements synchronously all pass through it.
    run.assert_full(BASE)


async def test_adapter_runs_sync_methods_off_the_event_loop_thread() -> None:
    inner = _ThreadRecordingSaver()
    saver = SyncSaverAdapter(inner)
    loop_thread = threading.get_ident()
    config: RunnableConfig = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    checkpoint: Checkpoint = {
        "v": 1,
        "id": "1f000000-0000-6000-8000-000000000001",
        "ts": "2025-01-01T00:00:00+00:00",
        "channel_values": {"x": 1},
        "channel_versions": {"x": 1},
        "versions_seen": {},
        "updated_channels": None,
    }
    stored = await saver.aput(config, checkpoint, {"source": "input", "step": -1}, {"x": 1})
    got = await saver.aget_tuple(stored)
    assert got is not None and got.checkpoint["channel_values"] == {"x": 1}

    listing = cast(AsyncGenerator[CheckpointTuple, None], saver.alist(config))
    first = await listing.__anext__()
    assert first.config["configurable"]["checkpoint_id"] == checkpoint["id"]
    await listing.aclose()  # abandoning a listing closes the sync generator

    assert inner.list_closed
    for method in ("put", "get_tuple", "list", "list-next"):
        assert inner.threads[method], method
        assert loop_thread not in inner.threads[method], f"{method} ran on the event loop"
