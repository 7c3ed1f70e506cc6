"""A bounded, thread-safe memo of each thread's partition epoch.

A thread's epoch (the time bucket its rows are partitioned under) is fixed
when the thread is first written and never changes while the thread exists.
Knowing it lets a read name the one partition it needs as a plain parameter,
which the database can prune before execution; without it the read has to
look the epoch up in the same statement, and every partition's scan is set up.

The memo can only be stale after the thread was deleted and started again in
a later bucket; readers treat "nothing found with a remembered epoch" as a
reason to forget it and look again.

It also remembers when this process last wrote a thread through the statement
that registers it (creates or refreshes its registry row): a thread registered
moments ago may be written by a leaner statement that only checks the
registry row is still there.
"""

from __future__ import annotations

import threading
import time

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
        self._registered: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def get(self, tenant: str, thread: str) -> int | None:
        """The remembered epoch of a thread, or None."""
        return self._entries.get((tenant, thread))

    def remember(
        self, tenant: str, thread: str, epoch: int | None, registered: bool = False
    ) -> None:
        """Remember a thread's epoch (None is ignored); ``registered``: this process
        has just written the thread's registry row (see :meth:`registered_within`)."""
        if epoch is None:
            return
        key, epoch = (tenant, thread), int(epoch)
        with self._lock:
            if key not in self._entries and len(self._entries) >= self._max:
                oldest = next(iter(self._entries))
                self._entries.pop(oldest)
                self._registered.pop(oldest, None)
            if self._entries.get(key, epoch) != epoch:
                self._registered.pop(key, None)  # another epoch: not registered by us
            self._entries[key] = epoch
            if registered:
                self._registered[key] = time.monotonic()

    def registered_within(self, tenant: str, thread: str, seconds: float) -> bool:
        """Whether this process registered the thread, in its remembered epoch, at
        most ``seconds`` ago."""
        at = self._registered.get((tenant, thread))
        return at is not None and time.monotonic() - at <= seconds

    def forget(self, tenant: str, thread: str) -> None:
        """Forget a thread (after it was deleted, or its epoch proved stale)."""
        with self._lock:
            self._entries.pop((tenant, thread), None)
            self._registered.pop((tenant, thread), None)

    def __len__(self) -> int:
        return len(self._entries)
