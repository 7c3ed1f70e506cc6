"""The saver's checkpoint reads on Redis: ``get_tuple`` and ``list``.

A read is one script on the thread's keys per round trip (``lua/get.lua``,
``lua/page.lua``); a listing across a tenant's threads reads its index, then
merges the threads' newest-first id streams (``lua/ids.lua``) and fetches the
checkpoints in pages of the merged order (``lua/fetch.lua``). Pure: no redis
import, no I/O.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Generator, Sequence
from typing import Any

from .._core.codec import ThreadKey
from .._core.filters import metadata_matches, normalize_filter
from .._core.sansio import Emit, operation
from ._base import OpsBase
from ._keys import SEP, _ident
from ._records import _Entry, _text
from ._requests import BATCH_SIZE, Batch, Script, _chunks, _first_error
from ._scripts import FETCH, GET, IDS, PAGE

__all__ = ["ReadOps", "LIST_PAGE_SIZE"]

#: Checkpoints per list page (one round trip each).
LIST_PAGE_SIZE = 100
#: Ids first read per thread when listing across threads.
MERGE_PROBE = 20


class ReadOps(OpsBase):
    """Checkpoint reads and listings."""

    @operation
    def get_tuple(self, key: ThreadKey, checkpoint_id: str | None) -> Generator[Any, Any, Any]:
        """The latest (or the given) checkpoint of a thread namespace: one round trip."""
        tenant, thread, ns = self._thread_parts(key)
        cid = _ident(checkpoint_id, "checkpoint id") if checkpoint_id else ""
        raw = yield Script(
            GET, self.keys.thread(tenant, thread), (ns, cid, self._read_spec(tenant))
        )
        if not raw:
            return None
        return self.codec.decode(key, _Entry(raw, {}).stored(thread))

    @operation
    def list(
        self,
        tenant: str,
        thread: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        filter: dict[str, Any] | None,
        before_id: str | None,
        limit: int | None,
        echo_tenant: bool,
    ) -> Generator[Any, Any, None]:
        """Stream matching checkpoints newest first, a page per round trip.

        ``thread`` None lists across the tenant's threads (through its index);
        ``ns`` None across namespaces of the thread. Filters are matched in
        Python on each checkpoint's stored metadata index.
        """
        if limit == 0:  # the saver base has checked limit and filter
            return None
        wanted = normalize_filter(filter)
        tenant = _ident(tenant, "tenant id")
        cid = _ident(checkpoint_id, "checkpoint id") if checkpoint_id else None
        before = _ident(before_id, "before checkpoint id") if before_id else None
        if cid is not None and before is not None and not cid < before:
            return None
        if thread is None:
            yield from self._list_threads(tenant, cid, wanted, before, limit, echo_tenant)
            return None
        thread = _ident(thread, "thread_id")
        if ns is not None:
            ns = _ident(ns, "checkpoint_ns")
        zset, hi, lo = _ranges(ns, cid, before)
        keys = self.keys.thread(tenant, thread)
        remaining = limit
        memo = self.codec.list_memo()
        read_spec = self._read_spec(tenant)
        while True:
            count = self.page_size
            if remaining is not None and wanted is None:
                count = min(remaining, count)
            more, last, entries = yield Script(PAGE, keys, (zset, hi, lo, count, read_spec))
            seen: dict[tuple[str, str, str], Any] = {}
            for raw in entries:
                entry = _Entry(raw, seen)
                if wanted is not None and not metadata_matches(entry.metadata_index(), wanted):
                    continue
                row_key = ThreadKey(tenant, thread, entry.ns, echo_tenant)
                yield Emit(self.codec.decode(row_key, entry.stored(thread), memo))
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return None
            if not int(more):
                return None
            hi = "(" + _text(last)

    def _list_threads(
        self,
        tenant: str,
        cid: str | None,
        wanted: dict[str, Any] | None,
        before: str | None,
        limit: int | None,
        echo_tenant: bool,
    ) -> Generator[Any, Any, None]:
        """Merge the newest-first id streams of every thread of a tenant.

        First the ids (a few per thread, a pipeline per ``BATCH_SIZE`` threads),
        then the full checkpoints in pages of the merged order.
        """
        _, hi, lo = _ranges(None, cid, before)
        threads = yield from self._threads(tenant)
        heap: list[_Desc] = []
        gone: list[tuple[str, bytes]] = []
        probe = min(MERGE_PROBE, limit) if limit is not None else MERGE_PROBE
        for chunk in _chunks(threads, BATCH_SIZE):
            cursors = [_Cursor(t, self.keys.thread(tenant, t)) for t, _ in chunk]
            results = yield Batch(tuple(Script(IDS, c.keys, (hi, lo, probe)) for c in cursors))
            _first_error(results)
            for (thread, score), cursor, (exists, more, members) in zip(
                chunk, cursors, results, strict=True
            ):
                if not int(exists):
                    gone.append((thread, score))
                    continue
                cursor.fill(more, members)
                item = cursor.head()
                if item is not None:
                    heapq.heappush(heap, item)
        yield from self._forget(tenant, gone)
        remaining = limit
        memo = self.codec.list_memo()
        read_spec = self._read_spec(tenant)
        while heap:
            want = self.page_size
            if remaining is not None and wanted is None:
                want = min(remaining, want)
            picked: list[tuple[str, str, str]] = []
            while heap and len(picked) < want:
                item = heapq.heappop(heap)
                cursor = item.cursor
                cursor.members.popleft()
                picked.append(item.key)
                if not cursor.members and cursor.more:
                    exists, more, members = yield Script(
                        IDS, cursor.keys, (b"(" + bytes(cursor.last), lo, self.page_size)
                    )
                    cursor.fill(more if int(exists) else 0, members if int(exists) else [])
                nxt = cursor.head()
                if nxt is not None:
                    heapq.heappush(heap, nxt)
            by_thread: dict[str, list[str]] = {}
            for checkpoint_id, thread, ns in picked:
                by_thread.setdefault(thread, []).append(ns + SEP + checkpoint_id)
            order = list(by_thread)
            results = yield Batch(
                tuple(
                    Script(
                        FETCH,
                        self.keys.thread(tenant, t),
                        (read_spec, *by_thread[t]),
                    )
                    for t in order
                )
            )
            _first_error(results)
            found: dict[tuple[str, str, str], _Entry] = {}
            for thread, entries in zip(order, results, strict=True):
                seen: dict[tuple[str, str, str], Any] = {}
                for raw in entries:
                    entry = _Entry(raw, seen)
                    found[(entry.checkpoint_id, thread, entry.ns)] = entry
            for pick in picked:
                hit = found.get(pick)
                if hit is None:  # deleted since its id was read
                    continue
                if wanted is not None and not metadata_matches(hit.metadata_index(), wanted):
                    continue
                thread = pick[1]
                row_key = ThreadKey(tenant, thread, hit.ns, echo_tenant)
                yield Emit(self.codec.decode(row_key, hit.stored(thread), memo))
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return None
        return None


def _ranges(ns: str | None, cid: str | None, before: str | None) -> tuple[str, str, str]:
    """(sorted set, max, min) of ZREVRANGEBYLEX for a listing's conditions."""
    if ns is not None:
        base = ns + SEP
        if cid is not None:
            return "i", "[" + base + cid, "[" + base + cid
        hi = "(" + base + before if before is not None else "(" + ns + "\x01"
        return "i", hi, "[" + base
    if cid is not None:
        return "n", "(" + cid + "\x01", "[" + cid + SEP
    return "n", ("(" + before + SEP) if before is not None else "+", "-"


class _Desc:
    """Heap item that pops the largest key first."""

    __slots__ = ("key", "cursor")

    def __init__(self, key: tuple[str, str, str], cursor: _Cursor) -> None:
        self.key = key
        self.cursor = cursor

    def __lt__(self, other: _Desc) -> bool:
        return self.key > other.key


class _Cursor:
    """Where a cross-thread listing is in one thread."""

    __slots__ = ("thread", "keys", "members", "more", "last")

    def __init__(self, thread: str, keys: tuple[str, ...]) -> None:
        self.thread = thread
        self.keys = keys
        self.members: deque[bytes] = deque()
        self.more = False
        self.last = b""

    def fill(self, more: int, members: Sequence[bytes]) -> None:
        self.members.extend(members)
        self.more = bool(more)
        if members:
            self.last = members[-1]

    def head(self) -> _Desc | None:
        if not self.members:
            return None
        cid, _, ns = self.members[0].partition(b"\x00")
        return _Desc((cid.decode(), self.thread, ns.decode()), self)
