"""Delta encoding of list channels that grow by appending (a ``messages`` list).

LangGraph hands a saver the whole value of every changed channel on every
``put``. A conversation of n messages stored that way takes O(n^2) bytes, and
listing its history decodes O(n^2) messages. With delta encoding a new list
value whose first items are exactly the previous value this process wrote for
the same thread, namespace and channel is stored as "that version, plus these
items"; every ``max_chain`` deltas a full copy starts a new chain, so a read
never needs more than ``max_chain + 1`` blobs of a channel.

"Exactly" is decided on content, not identity: each item is serialized and
digested, so an item changed in place is never mistaken for the stored one.
The tracker only remembers versions this process wrote itself; a process that
has not written a thread yet stores one full copy first. A backend that finds
a delta's base gone (deleted or expired) when it writes asks the codec for
full copies instead, so a delta always points at a stored base.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DeltaTracker", "Written", "ListMemo", "DEFAULT_MAX_CHAIN"]

#: Deltas between two full copies of a list channel, by default.
DEFAULT_MAX_CHAIN = 32
#: (thread namespace, channel) pairs a tracker remembers (least recently used go first).
TRACKED_MAX = 4096
#: Decoded list values a listing keeps for the next checkpoints' deltas.
MEMO_MAX = 256


@dataclass(frozen=True, slots=True)
class Written:
    """The list value a process wrote for one channel of one thread namespace.

    Attributes:
        version: Its channel version.
        depth: Deltas between it and the full copy it is rebuilt from (0: it
            is a full copy).
        digests: Digest of each serialized item, in order.
    """

    version: str
    depth: int
    digests: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class DeltaPlan:
    """How to store one list value: a delta of ``base`` (``prefix`` items), or full."""

    base: str | None
    prefix: int
    written: Written


class DeltaTracker:
    """Remembers the list values written per (scope, channel) and plans deltas.

    Safe to share between threads.

    Args:
        max_chain: Most deltas between two full copies (at least 1).
        digest: Digest of one list item's serialized form.
        capacity: Most (scope, channel) pairs remembered.
    """

    def __init__(
        self, max_chain: int, digest: Callable[[Any], bytes], capacity: int = TRACKED_MAX
    ) -> None:
        self.max_chain = max_chain
        self._digest = digest
        self._capacity = capacity
        self._last: OrderedDict[tuple[Hashable, str], Written] = OrderedDict()
        self._lock = threading.Lock()

    def plan(self, scope: Hashable, channel: str, version: str, value: list[Any]) -> DeltaPlan:
        """How to store ``value`` as ``version`` of ``channel`` (delta or full)."""
        try:
            digests = tuple(self._digest(item) for item in value)
        except Exception:  # an item the serializer rejects: the full write reports it
            digests = ()
        with self._lock:
            prev = self._last.get((scope, channel))
        full = DeltaPlan(None, 0, Written(version, 0, digests))
        if prev is None or not digests or prev.version == version:
            return full
        n = len(prev.digests)
        if n == 0 or prev.depth >= self.max_chain or len(digests) < n:
            return full
        if digests[:n] != prev.digests:
            return full
        return DeltaPlan(prev.version, n, Written(version, prev.depth + 1, digests))

    def remember(self, scope: Hashable, channel: str, written: Written) -> None:
        """Record that ``written`` is now stored (call after the write succeeded)."""
        if not written.digests:
            self.forget_channel(scope, channel)
            return
        with self._lock:
            self._last[(scope, channel)] = written
            self._last.move_to_end((scope, channel))
            while len(self._last) > self._capacity:
                self._last.popitem(last=False)

    def forget_channel(self, scope: Hashable, channel: str) -> None:
        """Drop what is known of one channel."""
        with self._lock:
            self._last.pop((scope, channel), None)

    def forget(self, match: Callable[[Hashable], bool]) -> None:
        """Drop every scope ``match`` accepts (after a delete, prune or failed write)."""
        with self._lock:
            for k in [k for k in self._last if match(k[0])]:
                del self._last[k]


class ListMemo:
    """Decoded list values of one listing, so each stored item is decoded once.

    A listing walks a thread newest first; the delta of each checkpoint is
    rebuilt from versions the previous one already decoded.
    """

    def __init__(self, capacity: int = MEMO_MAX) -> None:
        self._capacity = capacity
        self._items: OrderedDict[Hashable, tuple[Any, ...]] = OrderedDict()

    def get(self, key: Hashable) -> tuple[Any, ...] | None:
        return self._items.get(key)

    def put(self, key: Hashable, items: Sequence[Any]) -> tuple[Any, ...]:
        value = tuple(items)
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._capacity:
            self._items.popitem(last=False)
        return value
