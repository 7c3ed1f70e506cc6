"""The requests the pure Redis operations yield, and how their results come back.

An operation (see ``_ops.RedisOps``) is a generator that yields these requests
and receives their results (see ``langgraph_durable._core.sansio``); the sync
and async drivers (``_driver``) send them. Pure: no redis import, no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import DurableError

__all__ = ["LuaScript", "Command", "Script", "Batch", "ScanKeys", "ScanPage", "BATCH_SIZE"]

#: Scripts per pipeline when an operation touches many threads.
BATCH_SIZE = 100


@dataclass(frozen=True)
class LuaScript:
    """A Lua script the driver runs with EVALSHA (falling back to EVAL).

    Attributes:
        name: A short name for messages.
        source: The script text.
        sha: Its SHA-1, the name the server caches it under.
    """

    name: str
    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())


@dataclass(frozen=True, slots=True)
class Command:
    """One Redis command.

    Attributes:
        args: The command and its arguments (a multi-word command may be one
            string, e.g. ``"CONFIG GET"``).
        every_primary: Run it on every primary (a cluster) and receive a list
            with one result per primary; on a single server, a list of one.
    """

    args: tuple[Any, ...]
    every_primary: bool = False


@dataclass(frozen=True, slots=True)
class Script:
    """One Lua script call; on a cluster it is routed by its keys (all in one slot)."""

    script: LuaScript
    keys: tuple[str, ...]
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Batch:
    """Requests sent together in one pipeline (not a transaction).

    The result is a list with one entry per request: its result, or the
    (translated) :class:`~langgraph_durable.errors.DurableError` it failed with.
    """

    requests: tuple[Command | Script, ...]


@dataclass(frozen=True, slots=True)
class ScanKeys:
    """Every key name matching a pattern, on every primary (SCAN to the end).

    The result is a list of key names (each once). Meant for the few keys of a
    kind (tenant indexes), not for a thread's keys.
    """

    match: str
    count: int = 1000


@dataclass(frozen=True, slots=True)
class ScanPage:
    """One SCAN call on one primary: a page of the key names matching a pattern.

    Attributes:
        match: The SCAN MATCH pattern.
        node: The primary to scan (a cluster node's name, ``host:port``); ``""``
            for the first (on a cluster, the primaries are taken in name order;
            a single server has one).
        cursor: The SCAN cursor on that primary (0 to start it).
        count: The COUNT hint.

    The result is ``(keys, next)``: the key names this call returned (a key
    may come twice only if the keyspace was resized meanwhile) and where to
    go on, ``(node, cursor)``, or None once every primary has been scanned.
    """

    match: str
    node: str
    cursor: int
    count: int


def _first_error(results: Iterable[Any]) -> None:
    """Raise the first error in a :class:`Batch`'s results."""
    for result in results:
        if isinstance(result, DurableError):
            raise result


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
