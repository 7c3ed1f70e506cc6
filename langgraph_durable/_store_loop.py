"""What the async stores of every backend share: their sync methods, run on the store's loop."""

from __future__ import annotations

import asyncio
from typing import Any

from .errors import WrongEventLoopError

__all__ = ["run_on_loop"]


def run_on_loop(loop: asyncio.AbstractEventLoop | None, coro: Any, store: str) -> Any:
    """Run ``coro`` on ``loop`` (the async store's) from another thread and wait for it.

    Raises:
        WrongEventLoopError: there is no loop yet, or the caller is on it (waiting
            there would block the loop the coroutine needs).
    """
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is None or running is loop:
        coro.close()
        raise WrongEventLoopError(
            f"the sync methods of {store} run on the store's event loop from another "
            "thread: call the async methods (abatch, aget, ...) on the loop"
        )
    return asyncio.run_coroutine_threadsafe(coro, loop).result()
