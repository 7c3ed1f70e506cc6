"""Run graphs on a sync saver, or on an async saver from sync test code.

``Runner("sync")`` opens a sync saver and calls ``graph.invoke``;
``Runner("async")`` opens the async saver on an event loop in a background
thread and calls ``graph.ainvoke`` there, so one test body covers both.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from contextlib import AsyncExitStack, ExitStack
from typing import Any

from tests.redaction_helpers import SaverSpec, aopen_saver, open_saver


class Runner:
    def __init__(self, flavour: str, spec: SaverSpec, **saver_kwargs: Any) -> None:
        self.flavour = flavour
        self.spec = SaverSpec(
            spec.backend, spec.conn, {**spec.kwargs, **saver_kwargs}, spec.mode, spec.key
        )
        self.saver: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stack: Any = None

    @property
    def is_async(self) -> bool:
        return self.flavour == "async"

    def __enter__(self) -> Runner:
        if not self.is_async:
            self._stack = ExitStack()
            self.saver = self._stack.enter_context(open_saver(self.spec))
            return self
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._stack = AsyncExitStack()
        self.saver = self.call(self._stack.enter_async_context(aopen_saver(self.spec)))
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.is_async:
            self._stack.close()
            return
        assert self._loop is not None and self._thread is not None
        self.call(self._stack.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(120)

    def invoke(self, graph: Any, value: Any, config: dict[str, Any]) -> Any:
        if self.is_async:
            return self.call(graph.ainvoke(value, config))
        return graph.invoke(value, config)

    def state(self, graph: Any, config: dict[str, Any]) -> Any:
        if self.is_async:
            return self.call(graph.aget_state(config))
        return graph.get_state(config)

    def history(self, graph: Any, config: dict[str, Any]) -> list[Any]:
        if self.is_async:

            async def collect() -> list[Any]:
                return [s async for s in graph.aget_state_history(config)]

            return self.call(collect())  # type: ignore[no-any-return]
        return list(graph.get_state_history(config))

    def update(self, graph: Any, config: dict[str, Any], values: Any, as_node: str) -> Any:
        if self.is_async:
            return self.call(graph.aupdate_state(config, values, as_node=as_node))
        return graph.update_state(config, values, as_node=as_node)

    def journal(self) -> Any:
        from langgraph_durable.effects import EffectJournal

        return EffectJournal(self.saver)

    def entries(self, thread: str) -> list[Any]:
        journal = self.journal()
        if self.is_async:
            return self.call(journal.aentries(thread))  # type: ignore[no-any-return]
        return journal.entries(thread)  # type: ignore[no-any-return]

    def saver_call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A saver method (``delete_thread``, ``copy_thread``, ...) in the runner's flavour."""
        if self.is_async:
            return self.call(getattr(self.saver, "a" + name)(*args, **kwargs))
        return getattr(self.saver, name)(*args, **kwargs)
