"""What every group of the saver's Redis operations shares.

:class:`OpsBase` holds an operation set's state (key layout, codec, retention
policy, the threads awaiting their index mark) and the helpers the writes, the
reads, the effect journal and the admin operations all use: identifier checks,
the expiry specs the scripts take, and the tenant index (registering a thread,
reading the index, dropping entries of threads that are gone).
``_ops.RedisOps`` puts the groups together. Pure: no redis import, no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Sequence
from typing import Any

from .._core.codec import CheckpointCodec, ThreadKey
from .._core.retention import DELETE, Retention
from ..errors import DurableError, StorageError
from ._keys import KeyLayout, _ident
from ._records import _text
from ._requests import BATCH_SIZE, Batch, Command, Script, _chunks
from ._scripts import INDEX_FORGET, INDEX_PAGE

__all__ = ["OpsBase", "expiry_spec"]

log = logging.getLogger("langgraph_durable.redis")

#: Thread ids per read of a tenant's index.
INDEX_CHUNK = 1000
#: Threads remembered as registered but not yet marked (see ``_register``).
PENDING_MARKS_MAX = 10_000


def expiry_spec(policy: Retention | None) -> str:
    """The expiry spec a write passes its script (see ``expire_all``, ``lua/lib/expire.lua``).

    ``"0"``: no expiry (no policy, or ``keep_latest``, which the pruner carries
    out); ``"<idle ms>:<absolute ms>"`` (either may be empty) under ``delete``.
    """
    if policy is None or policy.strategy != DELETE:
        return "0"
    idle = "" if policy.idle is None else str(max(1, round(policy.idle.total_seconds() * 1000)))
    absolute = (
        ""
        if policy.absolute is None
        else str(max(1, round(policy.absolute.total_seconds() * 1000)))
    )
    return f"{idle}:{absolute}"


class OpsBase:
    """The state and helpers of an operation set (see ``_ops.RedisOps`` for the arguments)."""

    def __init__(
        self,
        prefix: str,
        refresh_ttl_on_read: bool,
        page_size: int,
        codec: CheckpointCodec,
        index_in_script: bool = False,
        retention: Callable[[str], Retention | None] | None = None,
    ) -> None:
        self.keys = KeyLayout(prefix)
        self._index_in_script = index_in_script
        self.codec = codec
        self.page_size = page_size
        self._refresh_on_read = refresh_ttl_on_read
        self._retention = retention
        # Threads this process added to their tenant's index whose mark is not yet
        # set; their next write sets it (saving a round trip on the first one).
        self._pending_marks: dict[tuple[str, str], None] = {}

    def _thread_parts(self, key: ThreadKey) -> tuple[str, str, str]:
        return (
            _ident(key.tenant, "tenant id"),
            _ident(key.thread, "thread_id"),
            _ident(key.ns, "checkpoint_ns"),
        )

    def _mark_flag(self, tenant: str, thread: str) -> str:
        return "1" if (tenant, thread) in self._pending_marks else "0"

    def _specs(self, tenant: str) -> tuple[str, str]:
        """The expiry specs (see ``lua/lib/expire.lua``) of a write and of a read.

        A write always records the thread's times; it sets an expiry only under a
        ``delete`` policy with a time bound (``keep_latest`` leaves trimming to
        the pruner: an expiry would delete the whole thread). A read records
        and refreshes only with ``refresh_ttl_on_read`` and a policy.
        """
        policy = None if self._retention is None else self._retention(tenant)
        if policy is None:
            return "0", ""
        write = expiry_spec(policy)
        return write, write if self._refresh_on_read else ""

    def _write_spec(self, tenant: str) -> str:
        return self._specs(tenant)[0]

    def _read_spec(self, tenant: str) -> str:
        return self._specs(tenant)[1]

    def _register(
        self, tenant: str, thread: str, result: Sequence[Any]
    ) -> Generator[Any, Any, None]:
        """Add a thread its write script reported unregistered to the tenant's index.

        The index lives in another slot, so this is a second step: if it fails,
        the thread stays unmarked and the next write reports it again.
        """
        self._pending_marks.pop((tenant, thread), None)
        if not result or int(result[0]) != 1:
            return None
        try:
            yield Command(("ZADD", self.keys.tenant_index(tenant), int(result[1]), thread))
        except StorageError as exc:
            log.warning(
                "thread %r was stored but not added to tenant %r's index (%s); "
                "its next write adds it",
                thread,
                tenant,
                exc,
            )
            return None
        if len(self._pending_marks) >= PENDING_MARKS_MAX:
            self._pending_marks.clear()
        self._pending_marks[(tenant, thread)] = None
        return None

    def _threads(self, tenant: str) -> Generator[Any, Any, Sequence[tuple[str, bytes]]]:
        """Every (thread id, registration score) in a tenant's index."""
        index = self.keys.tenant_index(tenant)
        out: list[tuple[str, bytes]] = []
        seen: set[str] = set()
        start = 0
        while True:
            flat = yield Script(INDEX_PAGE, (index,), (start, start + INDEX_CHUNK - 1))
            for j in range(0, len(flat) - 1, 2):
                thread = _text(flat[j])
                if thread not in seen:
                    seen.add(thread)
                    out.append((thread, bytes(flat[j + 1])))
            if len(flat) < 2 * INDEX_CHUNK:
                return out
            start += INDEX_CHUNK

    def _forget(self, tenant: str, gone: Sequence[tuple[str, bytes]]) -> Generator[Any, Any, None]:
        """Lazily drop threads that expired or lost their checkpoints from the index."""
        index = self.keys.tenant_index(tenant)
        for chunk in _chunks(gone, BATCH_SIZE):
            results = yield Batch(
                tuple(Script(INDEX_FORGET, (index,), (thread, score)) for thread, score in chunk)
            )
            for result in results:
                if isinstance(result, DurableError):
                    log.info("could not drop an expired thread from the index: %s", result)
        return None

    def _forget_deleted(self, tenant: str, thread: str) -> None:
        """Forget what this process remembers of a thread it deleted."""
        self._pending_marks.pop((tenant, thread), None)
        self.codec.forget_thread(tenant, thread)
