"""Delta encoding of list channels that grow by appending (a ``messages`` list).

LangGraph hands a saver the whole value of every changed channel on every
``put``. A conversation of n messages stored that way takes O(n^2) bytes, and
listing its history decodes O(n^2) messages. With delta encoding a new list
value whose first items are exactly the previous value this process wrote for
the same thread, namespace and channel is stored as "that version, plus these
items"; every ``max_chain`` deltas a full copy starts a new chain, so a read
never needs more than ``max_chain + 1`` blobs of a channel.

"Exactly" is decided on content, not identity: the new list is serialized (as
it would be to store it whole) and the part of its msgpack array that holds the
first items must be byte for byte the previous list's array (compared by a
SHA-256 digest cut to 128 bits), so an item changed in place is never mistaken
for the stored one. Values whose serialized form is not a msgpack array are
stored whole. The tracker only remembers versions this process wrote itself; a
process that has not written a thread yet stores one full copy first. A
backend that finds a delta's base gone (deleted or expired) when it writes asks
the codec for full copies instead, so a delta always points at a stored base.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .hashing import feed
from .records import BlobDelta, Sealed

__all__ = [
    "DeltaTracker",
    "DeltaPlan",
    "Written",
    "ListMemo",
    "DEFAULT_MAX_CHAIN",
    "join_arrays",
    "join_chain",
]

#: Deltas between two full copies of a list channel, by default.
DEFAULT_MAX_CHAIN = 32
#: (thread namespace, channel) pairs a tracker remembers (least recently used go first).
TRACKED_MAX = 4096
#: Decoded list values a listing keeps for the next checkpoints' deltas, at least.
MEMO_MIN = 64


@dataclass(frozen=True, slots=True)
class Written:
    """The list value a process wrote for one channel of one thread namespace.

    Attributes:
        version: Its channel version.
        depth: Deltas between it and the full copy it is rebuilt from (0: it
            is a full copy).
        items: Its number of items.
        size: Bytes of its serialized items (the msgpack array without header).
        digest: SHA-256 digest of those bytes, cut to 16 bytes.
    """

    version: str
    depth: int
    items: int
    size: int
    digest: bytes


@dataclass(frozen=True, slots=True)
class DeltaPlan:
    """How to store one list value.

    Attributes:
        base: The version a delta extends, or None to store the value whole.
        prefix: Items of ``base``.
        serialized: (type, bytes) of the whole value when it was serialized,
            for storing it whole without serializing it again.
        written: What to remember once stored (None: never a base).
        tail: For a delta, the msgpack array of the items past ``prefix``, cut
            from ``serialized`` (the bytes serializing those items would give:
            msgpack writes an array as its header and its items one after the
            other), so the delta is not serialized again; else None.
    """

    base: str | None
    prefix: int
    serialized: tuple[str, bytes] | None
    written: Written | None
    tail: bytes | None = None


def _array_header(n: int) -> bytes:
    """The shortest msgpack header of an array of ``n`` items (as every encoder writes it)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _array_span(type_: str, data: bytes) -> tuple[int, int] | None:
    """(items, offset of the first item) of a msgpack array; None if ``data`` is not one."""
    if type_ != "msgpack" or not data:
        return None
    head = data[0]
    if 0x90 <= head <= 0x9F:
        return head & 0x0F, 1
    if head == 0xDC and len(data) >= 3:
        return int.from_bytes(data[1:3], "big"), 3
    if head == 0xDD and len(data) >= 5:
        return int.from_bytes(data[1:5], "big"), 5
    return None


def _array_items(type_: str, data: bytes, count: int) -> memoryview | None:
    """The bytes of a msgpack array's items, if ``data`` is an array of ``count``."""
    span = _array_span(type_, data)
    if span is None or span[0] != count:
        return None
    return memoryview(data)[span[1] :]


def join_arrays(parts: Sequence[tuple[str, bytes]]) -> tuple[bytes, list[int]] | None:
    """One msgpack array of the items of the arrays ``parts``, in order, and each one's length.

    A delta chain's base and tails are arrays, so their items decode in one pass
    instead of one per part. None when a part is not a msgpack array (the caller
    then opens each part on its own, which reports what is wrong with it).
    """
    counts: list[int] = []
    pieces: list[bytes | memoryview] = [b""]
    for type_, data in parts:
        span = _array_span(type_, data)
        if span is None:
            return None
        counts.append(span[0])
        pieces.append(memoryview(data)[span[1] :])
    total = sum(counts)
    if total >= 1 << 32:
        return None
    pieces[0] = _array_header(total)
    return b"".join(pieces), counts


def join_chain(
    channel: str, delta: BlobDelta, bases: Mapping[tuple[str, str], Sealed | BlobDelta | None]
) -> tuple[bytes, int] | None:
    """A delta chain's items as one msgpack array (to decode in one pass), and how many.

    ``bases`` holds the chain's lower parts by (channel, version), as a backend
    reads them. None when the chain is not whole, loops, has a part that is not
    an array, or has a delta whose prefix is not the length below it: the codec
    then opens the parts one by one and reports the one at fault. Only for a
    pipeline that authenticates nothing, whose payloads are the serializer's
    bytes: those decode as trusted as when read part by part.
    """
    tails: list[BlobDelta] = []
    part: Sealed | BlobDelta | None = delta
    while isinstance(part, BlobDelta):
        tails.append(part)
        if len(tails) > len(bases) + 1:
            return None
        part = bases.get((channel, part.base))
    if part is None:
        return None
    tails.reverse()
    joined = join_arrays([(part.type, part.data)] + [(t.tail.type, t.tail.data) for t in tails])
    if joined is None:
        return None
    data, counts = joined
    have = counts[0]
    for step, count in zip(tails, counts[1:], strict=True):
        if step.prefix != have:
            return None
        have += count
    return data, have


class DeltaTracker:
    """Remembers the list values written per (scope, channel) and plans deltas.

    Safe to share between threads.

    Args:
        max_chain: Most deltas between two full copies (at least 1).
        capacity: Most (scope, channel) pairs remembered.
    """

    def __init__(self, max_chain: int, capacity: int = TRACKED_MAX) -> None:
        self.max_chain = max_chain
        self._capacity = capacity
        self._last: OrderedDict[tuple[Hashable, str], Written] = OrderedDict()
        self._lock = threading.Lock()

    def plan(
        self,
        scope: Hashable,
        channel: str,
        version: str,
        value: list[Any],
        serialized: tuple[str, bytes],
    ) -> DeltaPlan:
        """How to store ``value`` as ``version`` of ``channel`` (delta or full).

        Args:
            scope: Whose lists are compared (tenant, thread, namespace).
            channel: The channel.
            version: The version being written.
            value: The list.
            serialized: The (type, bytes) the list is stored as before any
                encryption (the record pipeline's ``serialize``).
        """
        body = _array_items(serialized[0], serialized[1], len(value))
        if body is None:
            return DeltaPlan(None, 0, serialized, None)
        with self._lock:
            prev = self._last.get((scope, channel))
        # SHA-256 rather than BLAKE2b: OpenSSL's runs on the CPU's SHA extensions, about
        # twice as fast on a conversation's bytes; fed in pieces that keep the GIL (hashing)
        h = hashlib.sha256()
        if (
            prev is not None
            and prev.version != version
            and 0 < prev.items <= len(value)
            and prev.size <= len(body)
            and prev.depth < self.max_chain
        ):
            feed(h, body[: prev.size])
            extends = h.digest()[:16] == prev.digest
            feed(h, body[prev.size :])
            if extends:
                written = Written(version, prev.depth + 1, len(value), len(body), h.digest()[:16])
                tail = _array_header(len(value) - prev.items) + body[prev.size :].tobytes()
                return DeltaPlan(prev.version, prev.items, serialized, written, tail)
        else:
            feed(h, body)
        return DeltaPlan(
            None, 0, serialized, Written(version, 0, len(value), len(body), h.digest()[:16])
        )

    def remember(self, scope: Hashable, channel: str, written: Written | None) -> None:
        """Record that ``written`` is now stored (call after the write succeeded)."""
        if written is None:
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

    def __init__(self, capacity: int = MEMO_MIN) -> None:
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
