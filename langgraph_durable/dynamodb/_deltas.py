"""Delta blobs on DynamoDB: their attributes, and the chains a process remembers.

With delta encoding (``delta_chain`` > 0; see ``langgraph_durable._core.delta``)
a list channel that grew by appending is stored as a blob item holding only
the appended items (``d``, sealed like any payload) and:

* ``bv`` (S): the version it extends (its base, a blob item of the same
  namespace and channel);
* ``bn`` (N): the base's number of items;
* ``bc`` (S, JSON): its whole chain, ``[[version, chunks], ...]`` from the base
  down to the full copy the value is rebuilt from, with each one's chunk
  count: a reader that has the item knows every key the value needs.

The checkpoint pointer's ``refs`` repeat that chain for each delta value the
writer knows it of (``[channel, version, chunks, chain]``), so ``get_tuple``
fetches the blobs and every base in the same ``BatchGetItem``. A writer knows
the chains of the values it wrote or read lately (:class:`ChainMemory`); the
item's own ``bc`` is the authority, and a reader fetches what a stale or missing
hint left out in one more ``BatchGetItem``.

Items written before delta encoding (or with ``delta_chain=0``) have none of
these attributes: they are full copies, and a delta may extend them.

Pure (no boto3 import, no I/O).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

from ..errors import CorruptRecordError
from ._items import N, S, _num, _str

__all__ = [
    "BASE_VERSION",
    "BASE_COUNT",
    "CHAIN",
    "DELTA_ATTRIBUTES",
    "ChainMemory",
    "Chain",
    "delta_attributes",
    "item_chain",
    "parse_refs",
]

#: Attribute names of a delta blob item (see the module docstring).
BASE_VERSION = "bv"
BASE_COUNT = "bn"
CHAIN = "bc"
DELTA_ATTRIBUTES = (BASE_VERSION, BASE_COUNT, CHAIN)
#: Blob versions a :class:`ChainMemory` remembers (least recently used go first).
REMEMBERED_MAX = 8192

#: A chain: (version, chunk count) of each base, from the direct base down to
#: the full copy.
Chain = tuple[tuple[str, int], ...]


def delta_attributes(base: str, prefix: int, chain: Chain) -> dict[str, Any]:
    """The attributes that make a blob item a delta of ``base`` (``prefix`` items)."""
    return {
        BASE_VERSION: S(base),
        BASE_COUNT: N(prefix),
        CHAIN: S(json.dumps([list(link) for link in chain], separators=(",", ":"))),
    }


def item_chain(item: dict[str, Any], what: str) -> Chain | None:
    """The chain a blob item stores (None: a full copy).

    Raises:
        CorruptRecordError: The delta attributes are malformed or disagree.
    """
    base = _str(item, BASE_VERSION)
    if base is None:
        return None
    try:
        chain = tuple((str(v), int(n)) for v, n in json.loads(_str(item, CHAIN, "[]") or "[]"))
    except (ValueError, TypeError) as exc:
        raise CorruptRecordError(f"{what}: malformed delta chain ({exc})") from exc
    if not chain or chain[0][0] != base or _num(item, BASE_COUNT) is None:
        raise CorruptRecordError(f"{what}: its delta chain does not start at its base {base!r}")
    return chain


def parse_refs(text: str | None) -> list[tuple[str, str, int, Chain | None]]:
    """A pointer's ``refs``: (channel, version, chunk count or -1, chain hint or None).

    Raises:
        CorruptRecordError: ``text`` is not references the saver writes.
    """
    out: list[tuple[str, str, int, Chain | None]] = []
    try:
        for entry in json.loads(text or "[]"):
            channel, version, n = entry[0], entry[1], int(entry[2])
            hint = tuple((str(v), int(c)) for v, c in entry[3]) if len(entry) > 3 else None
            if not isinstance(channel, str) or not isinstance(version, (str, int)):
                raise ValueError(f"channel {channel!r} / version {version!r} is not text")
            out.append((channel, str(version), n, hint))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise CorruptRecordError(f"a checkpoint's blob references are malformed: {exc}") from exc
    return out


def refs_entry(channel: str, version: str, chunks: int, chain: Chain | None) -> list[Any]:
    """One entry of a pointer's ``refs`` (see :func:`parse_refs`)."""
    if chain:
        return [channel, version, chunks, [list(link) for link in chain]]
    return [channel, version, chunks]


class ChainMemory:
    """What one process knows of stored blobs: chunk count and base, per version.

    Filled by writes (every blob a ``put`` created) and by ``get_tuple`` (the
    values of the checkpoint it read, which the next ``put`` of the thread
    references); read to give a delta its chain and a pointer its hints. Safe
    to share between threads.

    Args:
        capacity: Most blob versions remembered.
    """

    def __init__(self, capacity: int = REMEMBERED_MAX) -> None:
        self._capacity = capacity
        self._known: OrderedDict[tuple[Hashable, str, str], tuple[int, str | None]] = OrderedDict()
        self._lock = threading.Lock()

    def remember(
        self, scope: Hashable, channel: str, version: str, chunks: int, chain: Chain | None
    ) -> None:
        """Record a stored blob: its chunk count and chain (None or empty: a full copy)."""
        links = [(version, chunks), *(chain or ())]
        with self._lock:
            for (ver, n), below in zip(links, [*links[1:], None], strict=True):
                key = (scope, channel, ver)
                self._known[key] = (n, None if below is None else below[0])
                self._known.move_to_end(key)
            while len(self._known) > self._capacity:
                self._known.popitem(last=False)

    def lookup(self, scope: Hashable, channel: str, version: str) -> tuple[int, Chain] | None:
        """(chunk count, chain) of a stored blob, or None when not all of it is known."""
        chain: list[tuple[str, int]] = []
        with self._lock:
            entry = self._known.get((scope, channel, version))
            if entry is None:
                return None
            chunks, base = entry
            while base is not None:
                below = self._known.get((scope, channel, base))
                if below is None or len(chain) > len(self._known):
                    return None
                chain.append((base, below[0]))
                base = below[1]
        return chunks, tuple(chain)

    def forget(self, match: Any) -> None:
        """Drop every blob whose scope ``match(scope)`` accepts."""
        with self._lock:
            for key in [k for k in self._known if match(k[0])]:
                del self._known[key]

    def forget_thread(self, tenant: str, thread: str) -> None:
        """Drop what is known of a thread's blobs (it was deleted or pruned)."""
        self.forget(lambda scope: scope[:2] == (tenant, thread))

    def forget_versions(self, scope: Hashable, channel: str, versions: Sequence[str]) -> None:
        """Drop some versions of one channel (stored by another writer: unknown)."""
        with self._lock:
            for version in versions:
                self._known.pop((scope, channel, version), None)
