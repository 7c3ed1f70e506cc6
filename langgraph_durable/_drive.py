"""The loop that runs a sans-IO operation, shared by every backend's drivers.

A backend driver supplies ``execute(request) -> result`` (sync or async) and
``translate(exc) -> DurableError``; this module handles everything else: items
an operation emits (:class:`~langgraph_durable._core.sansio.Emit`), pauses it
asks for (:class:`~langgraph_durable._core.sansio.Sleep`), blocking calls it
needs (:class:`~langgraph_durable._core.sansio.Blocking`, in a worker thread
when async), throwing translated
errors back into the operation, and closing it when the caller stops early.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

from ._core.sansio import Blocking, Emit, Operation, Sleep, Stepper

__all__ = ["run", "iterate", "arun", "aiterate"]

R = TypeVar("R")
Translate = Callable[[BaseException], BaseException]


def _steps(stepper: Stepper, execute: Callable[[Any], Any], translate: Translate) -> Iterator[Any]:
    step = stepper.first()
    try:
        while step is not None:
            if isinstance(step, Emit):
                yield step.value
                step = stepper.send(None)
            elif isinstance(step, Sleep):
                time.sleep(step.seconds)
                step = stepper.send(None)
            elif isinstance(step, Blocking):
                try:
                    result = step.fn(*step.args)
                except Exception as exc:  # the keyring's own errors, not the backend's
                    step = stepper.throw(exc)
                    continue
                step = stepper.send(result)
            else:
                try:
                    result = execute(step)
                except Exception as exc:
                    step = stepper.throw(translate(exc))
                    continue
                step = stepper.send(result)
    finally:
        stepper.close()


async def _asteps(
    stepper: Stepper, execute: Callable[[Any], Awaitable[Any]], translate: Translate
) -> AsyncIterator[Any]:
    step = stepper.first()
    try:
        while step is not None:
            if isinstance(step, Emit):
                yield step.value
                step = stepper.send(None)
            elif isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                step = stepper.send(None)
            elif isinstance(step, Blocking):
                try:
                    result = await asyncio.to_thread(step.fn, *step.args)
                except Exception as exc:  # the keyring's own errors, not the backend's
                    step = stepper.throw(exc)
                    continue
                step = stepper.send(result)
            else:
                try:
                    result = await execute(step)
                except Exception as exc:
                    step = stepper.throw(translate(exc))
                    continue
                step = stepper.send(result)
    finally:
        stepper.close()


def run(op: Operation[R], execute: Callable[[Any], Any], translate: Translate) -> R:
    """Run an operation to its result (it must not emit items)."""
    stepper = Stepper(op.steps)
    for _ in _steps(stepper, execute, translate):
        raise TypeError("run() was given a streaming operation; use iterate()")
    return stepper.result  # type: ignore[no-any-return]


def iterate(
    op: Operation[Any], execute: Callable[[Any], Any], translate: Translate
) -> Iterator[Any]:
    """Run an operation, yielding the items it emits."""
    return _steps(Stepper(op.steps), execute, translate)


async def arun(
    op: Operation[R], execute: Callable[[Any], Awaitable[Any]], translate: Translate
) -> R:
    """Run an operation to its result on the event loop (it must not emit items)."""
    stepper = Stepper(op.steps)
    async for _ in _asteps(stepper, execute, translate):
        raise TypeError("arun() was given a streaming operation; use aiterate()")
    return stepper.result  # type: ignore[no-any-return]


def aiterate(
    op: Operation[Any], execute: Callable[[Any], Awaitable[Any]], translate: Translate
) -> AsyncIterator[Any]:
    """Run an operation on the event loop, yielding the items it emits."""
    return _asteps(Stepper(op.steps), execute, translate)
