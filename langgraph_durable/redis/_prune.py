"""The Redis pruner: expired threads deleted or trimmed, tenant indexes swept.

Pure like ``_ops`` (no redis import, no I/O): generators that yield requests
and receive their results. The decisions come from the pure core
(``langgraph_durable._core.retention``): whether a thread has expired
(``thread_expired``) and which checkpoints ``keep_latest`` keeps
(``keep_set``); the scripts (``lua/prune_*.lua``, loaded by ``_scripts``)
only read what those need and carry out the answer, each on one thread,
atomically, in the thread's slot.

A run, for each thread of each tenant index (``P:threads:{tenant}``, read with
ZSCAN so entries removed meanwhile never make it skip others):

1. ``PRUNE_INSPECT`` reads whether the thread still exists, its creation and
   last-write times, its latest checkpoint id and the size of its header hash.
2. A thread that is gone (expired natively, deleted elsewhere) loses its index
   entry (the sweep). A thread the policy says has expired is deleted whole
   (``PRUNE_DROP``, the same deletion as ``delete_thread``) or trimmed
   (``PRUNE_NODES`` reads its checkpoints' parents and flags, ``keep_set``
   plans, ``PRUNE_TRIM`` deletes the rest and the blobs nothing kept needs).
   With ``integrity=``, one pipelined read of the bodies comes first and
   ``PRUNE_TRIM`` also writes the chain tombstones (``_tombstones``).
3. ``PRUNE_DROP`` and ``PRUNE_TRIM`` first check that the thread is as it was
   read (its last-write time and header-hash size); a thread written meanwhile
   is looked at again (up to ``ATTEMPTS`` times in a run).

Every change is one script on one thread, so a run killed at any point leaves
each thread whole or gone; the index entry of a thread deleted just before the
kill is swept by the next run. One pruner runs at a time: ``P:prune-lock``
holds its name (``pruner_identity``) with a lease of ``LOCK_LEASE_SECONDS``,
renewed after every batch; a holder that is a dead process on this host is
taken over at once.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from .._core.audit import Broken, trim_refused
from .._core.chain import ChainKey
from .._core.retention import (
    DELETE,
    LOCK_LEASE_SECONDS,
    CheckpointNode,
    PruneProgress,
    PruneReport,
    PruneRequest,
    Retention,
    holder_gone,
    keep_set,
    pruner_identity,
    thread_expired,
)
from .._core.sansio import Blocking, Emit, Sleep
from ..errors import ChainKeyRequiredError, DurableError, InvalidInputError, StorageError
from ._keys import KeyLayout, _ident
from ._records import _text
from ._requests import Batch, Command, ScanKeys, ScanPage, Script, _chunks, _first_error
from ._scripts import (
    INDEX_FORGET,
    INDEX_SCAN,
    LOCK_RELEASE,
    LOCK_TAKE,
    PRUNE_DROP,
    PRUNE_INSPECT,
    PRUNE_NODES,
    PRUNE_SCRIPTS,
    PRUNE_TRIM,
)
from ._tombstones import Links, signed_trims, tombstone_args
from ._tombstones import links as _links

__all__ = [
    "PRUNE_SCRIPTS",
    "prune_expired",
    "trim_threads",
    "thread_page",
    "checkpoint_seconds",
]

log = logging.getLogger("langgraph_durable.redis")

#: Times a run looks again at a thread that was written while it was pruned.
ATTEMPTS = 3
#: Tenant index entries read per ZSCAN (a hint).
SCAN_COUNT = 500
#: Pipelined scripts per request when trimming named threads (``prune``).
TRIM_CHUNK = 100
#: Stands for "whatever the thread's last-write time" in PRUNE_TRIM.
ANY_TIME = "*"
#: 100-ns intervals between the UUID epoch (1582-10-15) and the Unix epoch.
_UUID_EPOCH = 0x01B21DD213814000

# ---------------------------------------------------------------- helpers


def checkpoint_seconds(checkpoint_id: str) -> float | None:
    """When a uuid6 checkpoint id (LangGraph's) was made, in Unix seconds; else None."""
    try:
        value = uuid.UUID(checkpoint_id)
    except (ValueError, TypeError, AttributeError):
        return None
    if value.version != 6:
        return None
    stamp = ((value.int >> 80) << 12) | ((value.int >> 64) & 0xFFF)
    return (stamp - _UUID_EPOCH) / 1e7


def _ms(raw: Any) -> float | None:
    """A stored server time (ms, text) in Unix seconds; None when missing or unreadable."""
    text = _text(raw) if raw is not None else ""
    try:
        return float(text) / 1000.0 if text else None
    except ValueError:
        return None


_GLOB = re.compile(r"([*?\[\]\\])")
_TAG_CODES = re.compile(r"%(25|3A|7B|7D)")
_TAG_CHARS = {"25": "%", "3A": ":", "7B": "{", "7D": "}"}


def _index_pattern(keys: KeyLayout) -> str:
    """A SCAN pattern matching every tenant index of the prefix."""
    return _GLOB.sub(r"\\\1", keys.prefix) + ":threads:{*}"


def _index_tenant(keys: KeyLayout, key: Any) -> str | None:
    """The tenant of a tenant-index key name (None for another key)."""
    text = _text(key)
    head = keys.prefix + ":threads:{"
    if not text.startswith(head) or not text.endswith("}"):
        return None
    body = text[len(head) : -1]
    if "{" in body or "}" in body:
        return None
    return _TAG_CODES.sub(lambda m: _TAG_CHARS[m.group(1)], body)


@dataclass(frozen=True, slots=True)
class _Item:
    """One tenant-index entry: a thread and the score it was registered with."""

    tenant: str
    thread: str
    score: bytes


@dataclass(frozen=True, slots=True)
class _Seen:
    """What PRUNE_INSPECT read of a thread the pruner acts on."""

    item: _Item
    hlen: str
    touched: str


class _IndexWalk:
    """Reads the tenant indexes, one ZSCAN page at a time, each thread once."""

    def __init__(self, keys: KeyLayout, tenants: Sequence[str]) -> None:
        self._keys = keys
        self._tenants = list(tenants)
        self._tenant: str | None = None
        self._cursor = "0"
        self._buffer: list[_Item] = []
        self._seen: set[str] = set()

    def more(self) -> bool:
        """Whether entries may remain."""
        return bool(self._buffer or self._tenant is not None or self._tenants)

    def take(self, n: int) -> Generator[Any, Any, list[_Item]]:
        """Up to ``n`` entries (fewer only when the indexes are exhausted)."""
        while len(self._buffer) < n and (self._tenant is not None or self._tenants):
            if self._tenant is None:
                self._tenant = self._tenants.pop(0)
                self._cursor = "0"
                self._seen = set()
            index = self._keys.tenant_index(self._tenant)
            cursor, flat = yield Script(INDEX_SCAN, (index,), (self._cursor, SCAN_COUNT))
            for j in range(0, len(flat) - 1, 2):
                thread = _text(flat[j])
                if thread not in self._seen:
                    self._seen.add(thread)
                    self._buffer.append(_Item(self._tenant, thread, bytes(flat[j + 1])))
            self._cursor = _text(cursor)
            if self._cursor == "0":
                self._tenant = None
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out


def _expired(policy: Retention, raw: Sequence[Any], item: _Item, now: float) -> bool:
    """Whether a thread PRUNE_INSPECT read has expired under ``policy`` at ``now``.

    Created: the stored creation time, else when the thread joined its index.
    Updated: the stored last-write time; a thread written before the saver
    stored it counts as last written when its latest checkpoint was made (the
    uuid6 time of its id), or else when it was created.
    """
    _exists, created_raw, touched_raw, latest, _hlen = raw
    created = _ms(created_raw)
    if created is None:
        created = _ms(item.score)
    updated = _ms(touched_raw)
    if updated is None:
        latest_id = _text(latest).partition("\x00")[0]
        updated = checkpoint_seconds(latest_id) if latest_id else None
        if updated is None:
            updated = created
    return thread_expired(policy, created, updated, now)


# ---------------------------------------------------------------- the run


class _Run:
    """One pruner run's state: the report, the policies, the requests' builders."""

    def __init__(
        self,
        keys: KeyLayout,
        request: PruneRequest,
        policy: Callable[[str], Retention | None] | None,
        forget_thread: Callable[[str, str], None],
        chain: ChainKey | None = None,
        check: TrimCheck | None = None,
    ) -> None:
        self.keys = keys
        self.chain = chain
        self.check = check
        self.request = request
        self.dry = "1" if request.dry_run else "0"
        self.report = PruneReport(dry_run=request.dry_run)
        self._policy = policy
        self._policies: dict[str, Retention | None] = {}
        self._forget_thread = forget_thread
        self._expired: set[tuple[str, str]] = set()  # of the batch being pruned

    def policy(self, tenant: str) -> Retention | None:
        """The tenant's policy (asked once per run)."""
        if self._policy is None:
            return None
        if tenant not in self._policies:
            self._policies[tenant] = self._policy(tenant)
        return self._policies[tenant]

    def thread_keys(self, item: _Item) -> tuple[str, ...]:
        return self.keys.thread(item.tenant, item.thread)

    def batch(self, items: Sequence[_Item]) -> Generator[Any, Any, None]:
        """Prune one batch of threads; threads written meanwhile are looked at again.

        Adds to ``threads_seen`` the threads found expired (each once, however
        often it is looked at again): the count PostgreSQL's pruner keeps, which
        leaves out live threads and threads already gone.
        """
        todo = list(items)
        self._expired = set()
        try:
            for _ in range(ATTEMPTS):
                todo = yield from self._once(todo)
                if not todo:
                    return None
        finally:
            self.report.threads_seen += len(self._expired)
        log.info(
            "pruner: %d thread(s) kept changing while being pruned; the next run prunes them",
            len(todo),
        )
        return None

    def _once(self, items: Sequence[_Item]) -> Generator[Any, Any, list[_Item]]:
        if not items:
            return []
        now = self.request.now
        results = yield Batch(tuple(Script(PRUNE_INSPECT, self.thread_keys(i)) for i in items))
        _first_error(results)
        gone: list[_Item] = []
        drops: list[_Seen] = []
        trims: list[_Seen] = []
        for item, raw in zip(items, results, strict=True):
            if not int(raw[0]):
                gone.append(item)
                continue
            policy = self.policy(item.tenant)
            if policy is None:
                continue  # native expiry (or nothing) applies: only the sweep
            if _expired(policy, raw, item, now):
                self._expired.add((item.tenant, item.thread))
                seen = _Seen(item, str(int(raw[4])), _text(raw[2]))
                (drops if policy.strategy == DELETE else trims).append(seen)
        retry: list[_Item] = []
        deleted = yield from self._drop(drops, gone, retry)
        yield from self._trim(trims, gone, retry)
        yield from self._sweep(gone, deleted)
        return retry

    def _drop(
        self, drops: Sequence[_Seen], gone: list[_Item], retry: list[_Item]
    ) -> Generator[Any, Any, list[_Item]]:
        deleted: list[_Item] = []
        if not drops:
            return deleted
        results = yield Batch(
            tuple(
                Script(PRUNE_DROP, self.thread_keys(s.item), (s.hlen, s.touched, self.dry))
                for s in drops
            )
        )
        _first_error(results)
        report = self.report
        for seen, (status, checkpoints, size) in zip(drops, results, strict=True):
            item = seen.item
            if int(status) == 1:
                report.threads += 1
                report.checkpoints += int(checkpoints)
                report.bytes += int(size)
                report.record(item.tenant, item.thread)
                if not self.request.dry_run:
                    self._forget_thread(item.tenant, item.thread)
                    deleted.append(item)
            elif int(status) == 0:
                gone.append(item)
            else:
                retry.append(item)
        return deleted

    def _trim(
        self, trims: Sequence[_Seen], gone: list[_Item], retry: list[_Item]
    ) -> Generator[Any, Any, None]:
        if not trims:
            return None
        results = yield Batch(tuple(Script(PRUNE_NODES, self.thread_keys(s.item)) for s in trims))
        _first_error(results)
        plans: list[tuple[_Seen, _Trim]] = []
        links = not self.request.dry_run  # tombstones, or the check that none is needed
        for seen, (exists, hlen, touched, flat) in zip(trims, results, strict=True):
            if not int(exists):
                gone.append(seen.item)
            elif str(int(hlen)) != seen.hlen or _text(touched) != seen.touched:
                retry.append(seen.item)  # written since it was inspected
            else:
                policy = self.policy(seen.item.tenant)
                keep = policy.keep if policy is not None else 1
                trim = _plan(flat, keep, links)
                if trim.drop:
                    plans.append((seen, trim))
        if self.check is not None and plans:
            # never sign tombstones over a link not verified: check what goes first
            checked: list[tuple[_Seen, _Trim]] = []
            for seen, trim in plans:
                broken = yield from self.check(seen.item.tenant, seen.item.thread, _gone(trim))
                if broken:
                    self.report.refuse(broken)
                else:
                    checked.append((seen, trim))
            plans = checked
        if not plans:
            return None
        # with the hash chain: tombstones for survivors whose parent goes (one read)
        sealed = yield from tombstone_args(
            self.keys, self.chain, [(s.item.tenant, s.item.thread, t.links) for s, t in plans]
        )
        ready: list[tuple[_Seen, _Trim, list[bytes]]] = []
        for (seen, trim), args in zip(plans, sealed, strict=True):
            if isinstance(args, ChainKeyRequiredError):
                raise args  # a configuration to fix, not one thread's problem
            if isinstance(args, DurableError):
                log.warning(
                    "pruner: thread %r of tenant %r is not trimmed: %s",
                    seen.item.thread,
                    seen.item.tenant,
                    args,
                )
            else:
                ready.append((seen, trim, args))
        if not ready:
            return None
        results = yield Batch(
            tuple(
                Script(
                    PRUNE_TRIM,
                    self.thread_keys(s.item),
                    (s.hlen, s.touched, self.dry, len(args) // 3, *args, *trim.drop),
                )
                for s, trim, args in ready
            )
        )
        _first_error(results)
        report = self.report
        for (seen, _trim, _args), (status, checkpoints, size) in zip(ready, results, strict=True):
            item = seen.item
            if int(status) == 1:
                if int(checkpoints):
                    report.trimmed += 1
                    report.checkpoints += int(checkpoints)
                    report.bytes += int(size)
                    report.record(item.tenant, item.thread)
            elif int(status) == 0:
                gone.append(item)
            else:
                retry.append(item)
        return None

    def _sweep(self, gone: Sequence[_Item], deleted: Sequence[_Item]) -> Generator[Any, Any, None]:
        """Drop the index entries of threads that are gone (counted) or just deleted."""
        if self.request.dry_run:
            self.report.index_entries += len(gone)
            return None
        entries = [*gone, *deleted]
        if not entries:
            return None
        results = yield Batch(
            tuple(
                Script(
                    INDEX_FORGET,
                    (self.keys.tenant_index(i.tenant),),
                    (i.thread, i.score),
                )
                for i in entries
            )
        )
        for item, result in zip(entries[: len(gone)], results, strict=False):
            if isinstance(result, DurableError):
                log.info("pruner: could not drop thread %r from its index: %s", item.thread, result)
            elif int(result):
                self.report.index_entries += 1
        for result in results[len(gone) :]:
            if isinstance(result, DurableError):  # the next run sweeps it
                log.info("pruner: a deleted thread's index entry stays until the next run")
        return None


@dataclass(frozen=True, slots=True)
class _Trim:
    """A planned trim: the header-hash fields to delete, and (with the hash
    chain) the surviving checkpoints whose parent goes (see ``_tombstones``)."""

    drop: list[bytes]
    links: Links


#: Checks a thread before a trim signs over it: (tenant, thread, what goes) -> broken links.
TrimCheck = Callable[[str, str, set[tuple[str, str]]], Generator[Any, Any, list[Broken]]]


def _gone(trim: _Trim) -> set[tuple[str, str]]:
    """(namespace, checkpoint id) of what a planned trim removes."""
    out: set[tuple[str, str]] = set()
    for f in trim.drop:
        ns, _, cid = f.decode().partition("\x00")
        out.add((ns, cid))
    return out


def _plan(flat: Sequence[Any], keep: int, links: bool = False) -> _Trim:
    """What ``keep_set`` does not keep; with ``links``, what survivors lose."""
    nodes: list[CheckpointNode] = []
    fields: dict[tuple[str, str], bytes] = {}
    for j in range(0, len(flat) - 4, 5):
        f = bytes(flat[j])
        ns, _, cid = f.decode().partition("\x00")
        parent = _text(flat[j + 2])
        nodes.append(
            CheckpointNode(
                ns=ns,
                checkpoint_id=cid,
                parent_id=parent or None,
                version=int(flat[j + 1]),
                delta=bool(int(flat[j + 3])),
                parent_sends=bool(int(flat[j + 4])),
            )
        )
        fields[(ns, cid)] = f
    kept = keep_set(nodes, keep)
    drop = [f for where, f in sorted(fields.items()) if where not in kept]
    return _Trim(drop, _links(nodes, kept) if links and drop else {})


def _take_lock(lock: str, me: str) -> Generator[Any, Any, bool]:
    """Take the pruner's lock; a dead holder on this host is taken over."""
    lease = str(int(LOCK_LEASE_SECONDS * 1000))
    reply = yield Script(LOCK_TAKE, (lock,), (me, lease, ""))
    if int(reply[0]):
        return True
    holder = _text(reply[1])
    if not (yield Blocking(holder_gone, (holder,))):
        return False
    log.warning("pruner: taking over the lock of %s, a process that is gone", holder)
    reply = yield Script(LOCK_TAKE, (lock,), (me, lease, holder))
    return bool(int(reply[0]))


def _renew_lock(lock: str, me: str) -> Generator[Any, Any, bool]:
    lease = str(int(LOCK_LEASE_SECONDS * 1000))
    reply = yield Script(LOCK_TAKE, (lock,), (me, lease, ""))
    return bool(int(reply[0]))


def _tenants(keys: KeyLayout, tenant: str | None) -> Generator[Any, Any, list[str]]:
    if tenant is not None:
        return [_ident(tenant, "tenant id")]
    found = yield ScanKeys(_index_pattern(keys), 1000)
    names = {name for name in (_index_tenant(keys, key) for key in found) if name is not None}
    return sorted(names)


def prune_expired(
    keys: KeyLayout,
    request: PruneRequest,
    policy: Callable[[str], Retention | None] | None,
    forget_thread: Callable[[str, str], None],
    chain: ChainKey | None = None,
    check: TrimCheck | None = None,
) -> Generator[Any, Any, None]:
    """The pruner run (see the module docstring); emits progress, then its report.

    Args:
        keys: The saver's key layout.
        request: What to prune and how.
        policy: A tenant's policy, or None: the threads' native expiry applies
            and the run only sweeps the indexes.
        forget_thread: Called for each thread deleted (the codec's and the
            registration memory of it).
        chain: The saver's chain key (``integrity=``): trims then write
            tombstones (``_tombstones``).
        check: With the chain key, what checks a thread before a trim signs
            over it (``_core.audit.check_trim``); a thread with a broken link in
            what would go is left whole and reported (``report.refuse``).
    """
    started = request.monotonic()
    run = _Run(keys, request, policy, forget_thread, chain, None if request.dry_run else check)
    report = run.report
    me = pruner_identity()
    lock = keys.prune_lock()
    if not (yield from _take_lock(lock, me)):
        report.locked = True
        report.seconds = request.monotonic() - started
        yield Emit(report)
        return None
    try:
        yield from _walk(run, lock, me)
    except GeneratorExit:
        raise  # abandoned by the caller: the lease runs out on its own
    except BaseException:
        try:
            yield Script(LOCK_RELEASE, (lock,), (me,))
        except DurableError:
            pass
        raise
    yield Script(LOCK_RELEASE, (lock,), (me,))
    report.seconds = request.monotonic() - started
    yield Emit(report)
    return None


def _walk(run: _Run, lock: str, me: str) -> Generator[Any, Any, None]:
    request, report = run.request, run.report
    tenants = yield from _tenants(run.keys, request.tenant)
    total: int | None = None
    if tenants:
        counts = yield Batch(tuple(Command(("ZCARD", run.keys.tenant_index(t))) for t in tenants))
        total = sum(int(c) for c in counts if not isinstance(c, DurableError))
    walk = _IndexWalk(run.keys, tenants)
    walked = 0
    while True:
        started = request.monotonic()
        items = yield from walk.take(request.batch)
        if not items:
            return None
        yield from run.batch(items)
        walked += len(items)
        yield Emit(PruneProgress(walked, total, report.threads, report.checkpoints))
        if not (yield from _renew_lock(lock, me)):
            log.warning("pruner: another pruner took the lock over; stopping")
            report.locked = True
            return None
        if request.out_of_time() and walk.more():
            report.budget_exhausted = True
            return None
        rest = request.rest_after(started)
        if rest > 0:
            yield Sleep(rest)


def trim_threads(
    keys: KeyLayout,
    tenant: str,
    threads: Sequence[str],
    keep: int,
    chain: ChainKey | None = None,
    check: TrimCheck | None = None,
) -> Generator[Any, Any, int]:
    """Trim named threads to ``keep_set(..., keep)`` now (``prune(keep_latest)``).

    With ``chain`` (``integrity=``), survivors whose parent goes get a
    tombstone in the same script (``_tombstones``). Returns the number of
    checkpoints deleted.

    Raises:
        StorageError: A thread kept changing while it was trimmed.
        CorruptRecordError: A record a tombstone needs cannot be read.
        IntegrityError: ``check`` found a broken link in what a thread's trim
            would remove (that thread and the rest of its chunk not trimmed).
    """
    removed = 0
    for chunk in _chunks(list(threads), TRIM_CHUNK):
        todo = list(chunk)
        for _ in range(ATTEMPTS + 2):
            if not todo:
                break
            results = yield Batch(tuple(Script(PRUNE_NODES, keys.thread(tenant, t)) for t in todo))
            _first_error(results)
            plans: list[tuple[str, str, _Trim]] = []
            for thread, (exists, hlen, _touched, flat) in zip(todo, results, strict=True):
                if int(exists):
                    trim = _plan(flat, keep, True)
                    if trim.drop:
                        plans.append((thread, str(int(hlen)), trim))
            todo = []
            if not plans:
                break
            if check is not None:  # never sign tombstones over a link not verified
                for t, _hlen, trim in plans:
                    broken = yield from check(tenant, t, _gone(trim))
                    if broken:
                        raise trim_refused(broken)
            sealed = yield from signed_trims(
                keys, chain, [(tenant, t, trim.links) for t, _hlen, trim in plans]
            )
            results = yield Batch(
                tuple(
                    Script(
                        PRUNE_TRIM,
                        keys.thread(tenant, t),
                        (hlen, ANY_TIME, "0", len(args) // 3, *args, *trim.drop),
                    )
                    for (t, hlen, trim), args in zip(plans, sealed, strict=True)
                )
            )
            _first_error(results)
            for (thread, _hlen, _trim), (status, checkpoints, _size) in zip(
                plans, results, strict=True
            ):
                if int(status) < 0:
                    todo.append(thread)
                else:
                    removed += int(checkpoints)
        if todo:
            raise StorageError(
                f"prune: thread {todo[0]!r} kept changing while it was pruned; try again"
            )
    return removed


# ---------------------------------------------------------------- thread enumeration

#: SCAN's COUNT per thread still wanted: every thread has at least four keys.
_KEYS_PER_THREAD = 4
#: Bounds of SCAN's COUNT hint in ``thread_page``.
_SCAN_COUNT_MIN, _SCAN_COUNT_MAX = 64, 10_000


def thread_page(
    keys: KeyLayout, tenant: str | None, cursor: Any, limit: int
) -> Generator[Any, Any, tuple[list[tuple[str, str]], Any]]:
    """Up to ``limit`` (tenant, thread) pairs of threads with a checkpoint, and the next cursor.

    SCANs the keyspace of every primary (on a cluster, one after the other in
    node-name order) for the threads' ``i`` keys (``KeyLayout.thread_of``),
    which exist exactly while a thread has a checkpoint, so a thread missing
    from its tenant's index (a failed registration on a cluster) is found too;
    with ``tenant`` the MATCH pattern names it (still a walk of the whole
    keyspace, server side). The cursor is ``(node, scan cursor, pending)``:
    the primary being scanned (None once all are done), its SCAN cursor, and
    the pairs a SCAN call returned beyond ``limit`` (fewer than about
    ``limit``), handed out first on the next page. None after the last page.

    A thread present throughout the walk is returned at least once; twice only
    if the keyspace was resized (rehashed) meanwhile, as SCAN guarantees.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInputError(f"limit must be a positive integer, got {limit!r}")
    if tenant is not None:
        tenant = _ident(tenant, "tenant id")
    node: str | None
    pending: list[tuple[str, str]]
    if cursor is None:
        node, position, pending = "", 0, []
    else:
        try:
            raw_node, raw_position, raw_pending = cursor
            node = None if raw_node is None else str(raw_node)
            position = int(raw_position)
            pending = [(str(t), str(th)) for t, th in raw_pending]
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"not a thread_page cursor: {cursor!r}") from exc
    match = keys.checkpoint_index_pattern(tenant)
    out, pending = pending[:limit], pending[limit:]
    seen = set(out)
    while node is not None and len(out) < limit:
        count = (limit - len(out)) * _KEYS_PER_THREAD
        found, after = yield ScanPage(
            match, node, position, min(max(count, _SCAN_COUNT_MIN), _SCAN_COUNT_MAX)
        )
        for key in found:
            pair = keys.thread_of(key)
            if pair is None or pair in seen or (tenant is not None and pair[0] != tenant):
                continue
            seen.add(pair)
            (out if len(out) < limit else pending).append(pair)
        node, position = (None, 0) if after is None else (str(after[0]), int(after[1]))
    if node is None and not pending:
        return out, None
    return out, (node, position, tuple(pending))
