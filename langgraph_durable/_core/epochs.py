"""A bounded, thread-safe memo of each thread's partition epoch.

A thread's epoch (the time bucket its rows are partitioned under) is fixed
when the thread is first written and never changes while the thread exists.
Knowing it lets a read name the one partition it needs as a plain parameter,
which the database can prune before execution; without it the read has to
look the epoch up in the same statement, and every partition's scan is set up.

The memo can only be stale after the thread was deleted and started again in
a later bucket; readers treat "nothing found with a remembered epoch" as a
reason to forget it and look again.
"""

from __future__ import annotations

import threading

__all__ = ["EpochCache"]


class EpochCache:
    """(tenant, thread) -> epoch, forgetting the oldest entries past ``max_entries``.

    Args:
        max_entries: Upper bound on remembered threads (about 150 bytes each).
    """

    def __init__(self, max_entries: int = 100_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._max = max_entries
        self._entries: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def get(self, tenant: str, thread: str) -> int | None:
        """The remembered epoch of a thread, or None."""
        return self._entries.get((tenant, thread))

    def remember(self, tenant: str, thread: str, epoch: int | None) -> None:
        """Remember a thread's epoch (None is ignored)."""
        if epoch is None:
            return
        key = (tenant, thread)
        with self._lock:
            if key not in self._entries and len(self._entries) >= self._max:
                self._entries.pop(next(iter(self._entries)))
            self._entries[key] = int(epoch)

    def forget(self, tenant: str, thread: str) -> None:
        """Forget a thread (after it was deleted, or its epoch proved stale)."""
        with self._lock:
            self._entries.pop((tenant, thread), None)

    def __len__(self) -> int:
        return len(self._entries)
