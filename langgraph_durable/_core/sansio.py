"""The sans-IO protocol between saver operations and their drivers.

A saver operation is a generator: it yields requests (a SQL statement, a batch
of commands, an API call), receives each request's result, and finally returns
the operation's result. It never touches a connection. A backend's sync driver
and async driver both run the same generator, so every decision (what to
write, how to decode, what to retry) is written once.

A request may also be :class:`Emit`, which hands one item to the caller of a
streaming operation (``list``); the driver sends ``None`` back.
If a request fails, the driver throws the (already translated) error into the
generator, which may handle it (e.g. create a missing partition and retry).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, overload

__all__ = [
    "Emit",
    "Sleep",
    "Blocking",
    "Operation",
    "Stepper",
    "operation",
    "select_emits",
    "collect_emits",
]

R = TypeVar("R")
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Emit:
    """An item a streaming operation hands to its caller."""

    value: Any


@dataclass(frozen=True, slots=True)
class Sleep:
    """A pause the operation asks for (e.g. backoff before a retry); the driver sends None."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Blocking:
    """A blocking call outside the backend the operation needs (a KMS request).

    A sync driver calls ``fn(*args)``; an async driver runs it in a worker
    thread. Its result is sent back, or its exception thrown into the operation.
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Operation(Generic[R]):
    """A saver operation and how the driver must run it.

    Attributes:
        steps: The operation's generator.
        transaction: Run every request on one connection inside one
            transaction (otherwise each request runs on its own, in autocommit).
        session: Run every request on one connection, each in autocommit
            (session state such as a PostgreSQL advisory lock lasts for the
            whole operation and ends with it); backends without sessions
            ignore it.
    """

    steps: Generator[Any, Any, R]
    transaction: bool = False
    session: bool = False


@overload
def operation(func: Callable[P, Generator[Any, Any, R]], /) -> Callable[P, Operation[R]]: ...


@overload
def operation(
    *, transaction: bool = False, session: bool = False
) -> Callable[[Callable[P, Generator[Any, Any, R]]], Callable[P, Operation[R]]]: ...


def operation(
    func: Callable[P, Generator[Any, Any, R]] | None = None,
    /,
    *,
    transaction: bool = False,
    session: bool = False,
) -> Any:
    """Turn a generator method into one returning its :class:`Operation`.

    Use as ``@operation``, ``@operation(transaction=True)`` or
    ``@operation(session=True)``. Calling the
    decorated method only builds the generator: its body (argument checks
    included) runs when the driver first advances it.
    """

    def decorate(gen: Callable[P, Generator[Any, Any, R]]) -> Callable[P, Operation[R]]:
        @functools.wraps(gen)
        def build(*args: P.args, **kwargs: P.kwargs) -> Operation[R]:
            return Operation(gen(*args, **kwargs), transaction, session)

        return build

    return decorate if func is None else decorate(func)


def select_emits(
    steps: Generator[Any, Any, Any], keep: Callable[[Any], bool], limit: int | None
) -> Generator[Any, Any, Any]:
    """Run a streaming operation, emitting only the items ``keep`` accepts, at most ``limit``.

    Requests pass through unchanged (results and errors go back to ``steps``).
    Returns the operation's result (None when the limit ended it early).
    """
    if limit == 0:
        steps.close()
        return None
    emitted = 0
    stepper = Stepper(steps)
    step = stepper.first()
    try:
        while step is not None:
            if isinstance(step, Emit):
                if keep(step.value):
                    yield step
                    emitted += 1
                    if limit is not None and emitted >= limit:
                        return None
                step = stepper.send(None)
                continue
            try:
                result = yield step
            except Exception as exc:
                step = stepper.throw(exc)
                continue
            step = stepper.send(result)
    finally:
        stepper.close()
    return stepper.result


def collect_emits(steps: Generator[Any, Any, Any]) -> Generator[Any, Any, list[Any]]:
    """Run a streaming operation inside another one; return the items it emitted."""
    items: list[Any] = []

    def collect(item: Any) -> bool:
        items.append(item)
        return False

    yield from select_emits(steps, collect, None)
    return items


class Stepper:
    """Advances an operation's generator; shared by the sync and async drivers."""

    __slots__ = ("_steps", "result")

    def __init__(self, steps: Generator[Any, Any, Any]) -> None:
        self._steps = steps
        self.result: Any = None

    def first(self) -> Any | None:
        """The first request, or None if the operation finished at once."""
        return self.send(None)

    def send(self, value: Any) -> Any | None:
        """Send a request's result; get the next request or None when done."""
        try:
            return self._steps.send(value)
        except StopIteration as stop:
            self.result = stop.value
            return None

    def throw(self, error: BaseException) -> Any | None:
        """Throw a request's error into the operation; the next request or None."""
        try:
            return self._steps.throw(error)
        except StopIteration as stop:
            self.result = stop.value
            return None

    def close(self) -> None:
        """Abandon the operation (e.g. a caller stopped iterating a listing)."""
        self._steps.close()
