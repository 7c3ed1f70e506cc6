"""The PostgreSQL pruner: retention carried out as SQL (pure, no psycopg import).

``prune_expired`` is one session operation (every statement on one
connection, in autocommit) under a session advisory lock, so two pruners never
run at once and a killed pruner's lock ends with its connection. It works in
two phases:

1. **Partitions.** An epoch older than the current one whose threads have all
   expired (under a ``delete`` policy) loses its threads' registry rows and
   journal entries in one short transaction (the threads are gone from that
   commit on: every read finds a thread's epoch through its registry row),
   then its three partitions are detached concurrently (writers are never
   blocked). The detached partitions of every epoch are dropped together at
   the end of the phase. A run killed after the commit leaves partitions no
   registry row names; the next run drops them. An epoch at least two older
   than the current one whose live threads hold no more checkpoints than its
   expired ones has its live threads moved forward first (``_move_live``), so
   that it drops whole too.
2. **Rows.** Expired threads elsewhere (live threads keep an old partition
   alive) go in batches of ``request.batch`` threads: one statement per batch
   deletes each thread's registry row, checkpoints, blobs, writes and journal
   entries together, re-checking expiry on the locked registry row, so a
   thread is gone or whole and writers wait for at most one batch.
   ``keep_latest`` trims instead: the pure core picks what stays
   (``keep_set``), one statement deletes the rest of the batch's
   checkpoints with their writes, a second the blobs nothing kept references.
   With ``integrity=`` a trim also leaves chain tombstones (see
   :func:`trim_batch`).

:func:`thread_page` walks the registry a page at a time (``verify``).

Expiry is decided in SQL by one predicate on a registry row ``th``: with a
policy, ``updated_at``/``created_at`` against the tenant's ``idle`` and
``absolute`` (tenants' policies passed as arrays); without, the stored
``expires_at`` that the saver wrote under its ``retention=``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.serde.types import TASKS

from .._core.chain import refuse_unkeyed_trim, tombstone_bodies
from .._core.records import Sealed
from .._core.retention import (
    DELETE,
    KEEP_LATEST,
    CheckpointNode,
    PruneProgress,
    PruneReport,
    PruneRequest,
    Retention,
    keep_set,
)
from .._core.sansio import Emit, Sleep
from ..errors import InvalidInputError
from . import _rls
from ._query import Query

if TYPE_CHECKING:
    from ._sql import PostgresOps

__all__ = ["prune_expired", "trim_batch", "thread_page"]

_TABLES = ("checkpoints", "blobs", "writes")
_LEAF = re.compile(r"^(checkpoints|blobs|writes)_e(-?\d+)$")

Policy = Callable[[str], "Retention | None"]


class _Plan:
    """The expiry predicate and its parameters for one run (see the module docstring)."""

    def keep_of(self, tenant: str) -> int:
        """How many checkpoints per namespace ``keep_latest`` keeps for ``tenant``."""
        return self.keep.get(tenant, 1)

    def __init__(self, request: PruneRequest, policy: Policy | None, tenants: list[str]) -> None:
        self.params: dict[str, Any] = {"now": request.now, "dropped": []}
        #: Epochs whose partitions phase 1 dropped (or, in a dry run, would drop).
        self.dropped: set[int] = set()
        self.strategies: set[str] = set()
        tenant_filter = ""
        if request.tenant is not None:
            self.params["only_tenant"] = request.tenant
            tenant_filter = " AND th.tenant_id = %(only_tenant)s"
        if policy is None:
            self.strategies.add(DELETE)
            self.by_strategy = {
                DELETE: "th.expires_at <= to_timestamp(%(now)s)" + tenant_filter,
            }
            self.keep: dict[str, int] = {}
            return
        names: list[str] = []
        idles: list[float | None] = []
        absolutes: list[float | None] = []
        strategies: list[str] = []
        self.keep = {}
        for tenant in tenants:
            p = policy(tenant)
            if p is None:
                continue
            names.append(tenant)
            idles.append(p.idle_seconds)
            absolutes.append(p.absolute_seconds)
            strategies.append(p.strategy)
            self.keep[tenant] = p.keep
            self.strategies.add(p.strategy)
        self.params.update(p_tenants=names, p_idle=idles, p_abs=absolutes, p_strategy=strategies)
        self.by_strategy = {}
        for strategy in (DELETE, KEEP_LATEST):
            self.params[f"s_{strategy}"] = strategy
            self.by_strategy[strategy] = (
                "EXISTS (SELECT 1 FROM unnest(%(p_tenants)s::text[], "
                "%(p_idle)s::double precision[], %(p_abs)s::double precision[], "
                "%(p_strategy)s::text[]) AS p(tenant, idle, abs, strategy) "
                f"WHERE p.tenant = th.tenant_id AND p.strategy = %(s_{strategy})s AND ("
                "(p.idle IS NULL AND p.abs IS NULL) "
                "OR th.updated_at <= to_timestamp(%(now)s) - make_interval(secs => p.idle) "
                "OR th.created_at <= to_timestamp(%(now)s) - make_interval(secs => p.abs)))"
                + tenant_filter
            )


def prune_expired(
    ops: PostgresOps, request: PruneRequest, policy: Policy | None
) -> Generator[Any, Any, None]:
    """The pruner (see the module docstring); emits progress, then one ``PruneReport``."""
    s = ops._s
    report = PruneReport(dry_run=request.dry_run)
    started = request.monotonic()
    row = yield _q("SELECT pg_try_advisory_lock(hashtext(%s))", (ops._lock_key + ":prune",))
    if not row[0]:
        report.locked = True
        report.seconds = request.monotonic() - started
        yield Emit(report)
        return None
    if request.tenant is not None:
        tenants = [request.tenant]
    else:
        rows = yield _q(f"SELECT DISTINCT tenant_id FROM {s}.threads", (), "all")
        tenants = [r[0] for r in rows]
    plan = _Plan(request, policy, tenants)
    total = 0
    for strategy in plan.strategies:
        row = yield _q(
            f"SELECT count(*) FROM {s}.threads th WHERE {plan.by_strategy[strategy]}",
            plan.params,
        )
        total += int(row[0])
    progress = _Progress(report, total)
    # Phase 1 also drops old partitions no thread uses any more (emptied by
    # deletes, or left by a pruner killed between its commit and its drops).
    finished = yield from _drop_partitions(ops, request, plan, report, progress)
    plan.params["dropped"] = sorted(plan.dropped)
    if not finished:
        yield from _finish(request, report, started, budget=True)
        return None
    for strategy in sorted(plan.strategies):
        finished = yield from _prune_rows(ops, request, plan, strategy, report, progress)
        if not finished:
            yield from _finish(request, report, started, budget=True)
            return None
    yield from _finish(request, report, started, budget=False)
    return None


def _finish(
    request: PruneRequest, report: PruneReport, started: float, budget: bool
) -> Generator[Any, Any, None]:
    report.budget_exhausted = budget
    report.seconds = request.monotonic() - started
    yield Emit(report)


class _Progress:
    def __init__(self, report: PruneReport, total: int) -> None:
        self.report = report
        self.total = total
        self.done = 0

    def step(self, threads: int) -> Emit:
        self.done += threads
        r = self.report
        return Emit(PruneProgress(self.done, self.total, r.threads + r.trimmed, r.checkpoints))


def _q(sql: str, params: Any = (), fetch: str = "one") -> Any:
    from ._sql import Query

    return Query(sql, params, fetch, False)


# ---- phase 1: whole partitions ------------------------------------------------------


def _drop_partitions(
    ops: PostgresOps,
    request: PruneRequest,
    plan: _Plan,
    report: PruneReport,
    progress: _Progress,
) -> Generator[Any, Any, bool]:
    """Drop every old epoch whose threads have all expired; False when out of time."""
    s = ops._s
    schema = ops.schema
    rows = yield _q(
        "SELECT c.relname, i.inhrelid IS NOT NULL, coalesce(i.inhdetachpending, false) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "LEFT JOIN pg_inherits i ON i.inhrelid = c.oid "
        "WHERE n.nspname = %s AND c.relkind = 'r'",
        (schema,),
        "all",
    )
    row = yield _q(f"SELECT {s}.current_epoch()")
    current = int(row[0])
    leaves: dict[int, list[tuple[str, bool, bool]]] = {}
    for name, attached, pending in rows:
        m = _LEAF.match(name)
        if m is not None:
            leaves.setdefault(int(m.group(2)), []).append((name, attached, pending))
    expired = plan.by_strategy.get(DELETE, "false")
    detached: list[str] = []
    for epoch in sorted(leaves):
        if epoch >= current:
            continue
        row = yield _q(
            f"SELECT count(*), count(*) FILTER (WHERE NOT ({expired})) "
            f"FROM {s}.threads th WHERE th.epoch = %(epoch)s",
            {**plan.params, "epoch": epoch},
        )
        count, live = int(row[0]), int(row[1])
        names = [n for n, _a, _p in leaves[epoch]]
        kept = _Moved()  # what moved forward: its rows stay in the partitions dropped
        if live:
            if epoch >= current - 1 or f"checkpoints_e{epoch}" not in names:
                continue  # the row phase removes this epoch's expired threads
            if request.out_of_time():
                yield from _drop_tables(ops, detached)
                return False
            kept = yield from _count_live(ops, plan, epoch, payload=request.dry_run)
            stored = yield _q(f'SELECT count(*) FROM {s}."checkpoints_e{epoch}"')
            if not _worth_moving(kept.checkpoints, int(stored[0])):
                continue  # the row phase removes this epoch's expired threads
            if not request.dry_run:
                moved = yield from _move_live(ops, request, plan, epoch, current, progress)
                if moved is None:
                    yield from _drop_tables(ops, detached)
                    return False  # out of time: the next run moves the rest
                kept = moved
            report.moved += kept.threads
            count -= kept.threads
        if request.out_of_time():
            yield from _drop_tables(ops, detached)
            return False  # a droppable epoch is left
        started = request.monotonic()
        sizes = yield _q(
            "SELECT coalesce(sum(pg_total_relation_size("
            "format('%%I.%%I', %s::text, t)::regclass)), 0) FROM unnest(%s::text[]) AS t",
            (schema, names),
        )
        checkpoints = 0
        if f"checkpoints_e{epoch}" in names:
            counted = yield _q(f'SELECT count(*) FROM {s}."checkpoints_e{epoch}"')
            checkpoints = int(counted[0]) - kept.checkpoints
        size = max(0, int(sizes[0]) - kept.bytes)
        if request.dry_run:
            if count:
                ids = yield _q(
                    f"SELECT th.tenant_id, th.thread_id FROM {s}.threads th "
                    f"WHERE th.epoch = %(epoch)s AND ({expired}) LIMIT 10000",
                    {**plan.params, "epoch": epoch},
                    "all",
                )
                for tenant, thread in ids:
                    report.record(tenant, thread)
            _count(report, count, checkpoints, size, len(names))
            plan.dropped.add(epoch)
            yield progress.step(count)
            continue
        gone = yield from _forget_epoch(ops, plan, epoch)
        if gone is None:
            continue  # a thread of the epoch was written meanwhile
        for name, attached, pending in sorted(leaves[epoch]):
            if attached:
                parent = name.rsplit("_e", 1)[0]
                how = "FINALIZE" if pending else "CONCURRENTLY"
                yield _q(
                    f'ALTER TABLE {s}."{parent}" DETACH PARTITION {s}."{name}" {how}', (), "none"
                )
            detached.append(name)
        plan.dropped.add(epoch)
        for tenant, thread in gone:
            ops.epochs.forget(tenant, thread)
        _count(report, len(gone), checkpoints, size, len(names))
        yield progress.step(len(gone))
        yield from _rest(request, started)
    yield from _drop_tables(ops, detached)
    return True


# ---- moving live threads forward --------------------------------------------------

#: The columns of each data table; the epoch's is replaced when rows move.
_COLUMNS = {
    "checkpoints": (
        "tenant_id, thread_id, checkpoint_ns, checkpoint_id, epoch, parent_checkpoint_id, v, "
        "run_id, blob_channels, blob_versions, metadata_index, checkpoint_type, checkpoint, "
        "metadata_type, metadata, created_at"
    ),
    "blobs": (
        "tenant_id, thread_id, checkpoint_ns, channel, version, epoch, type, blob, created_at, "
        "base, base_count"
    ),
    "writes": (
        "tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx, epoch, task_path, "
        "channel, type, blob, created_at"
    ),
}
_PAYLOAD = {
    "checkpoints": "octet_length(checkpoint) + octet_length(metadata)",
    "blobs": "coalesce(octet_length(blob), 0)",
    "writes": "octet_length(blob)",
}


#: At most this many threads move per transaction: a write to one of them waits
#: for the transaction (its registry row is locked), so it is kept short.
MOVE_BATCH = 50
#: Live threads read per page (without a lock) before they move, a batch at a time.
_MOVE_PAGE = 5000


class _Moved:
    """Live threads moved (or, in a dry run, to move) out of an epoch, with their rows."""

    __slots__ = ("threads", "checkpoints", "bytes")

    def __init__(self) -> None:
        self.threads = 0
        self.checkpoints = 0
        self.bytes = 0


def _worth_moving(live_checkpoints: int, checkpoints: int) -> bool:
    """Whether to move an old epoch's live threads forward so that the epoch drops whole.

    Moving copies the live threads' rows; deleting the expired threads removes
    theirs one by one: moving is the cheaper when the live threads hold no
    more checkpoints than the expired ones. Only epochs at least two older
    than the current one move (see ``_move_live``).
    """
    return live_checkpoints <= checkpoints - live_checkpoints


def _count_live(
    ops: PostgresOps, plan: _Plan, epoch: int, payload: bool
) -> Generator[Any, Any, _Moved]:
    """The live threads of ``epoch`` and their checkpoints (with ``payload``, the bytes of
    their rows too: a dry run's report). Each thread's rows are counted by an index
    probe of its own (a live thread is a few rows among the epoch's many)."""
    s = ops._s
    expired = plan.by_strategy.get(DELETE, "false")
    tables = tuple(_COLUMNS) if payload else ("checkpoints",)
    per_thread = "".join(
        "CROSS JOIN LATERAL (SELECT count(*) AS n, "
        + (f"coalesce(sum({_PAYLOAD[t]}), 0)" if payload else "0")
        + f' AS b FROM {s}."{t}_e{int(epoch)}" x WHERE x.tenant_id = th.tenant_id '
        f"AND x.thread_id = th.thread_id) AS k_{t} "
        for t in tables
    )
    size = " + ".join(f"coalesce(sum(k_{t}.b), 0)" for t in tables)
    row = yield _q(
        f"SELECT count(*), coalesce(sum(k_checkpoints.n), 0), {size} "
        f"FROM {s}.threads th {per_thread}"
        f"WHERE th.epoch = %(epoch)s AND NOT ({expired})",
        {**plan.params, "epoch": epoch},
    )
    out = _Moved()
    out.threads, out.checkpoints, out.bytes = int(row[0]), int(row[1]), int(row[2])
    return out


def _move_live(
    ops: PostgresOps,
    request: PruneRequest,
    plan: _Plan,
    epoch: int,
    current: int,
    progress: _Progress,
) -> Generator[Any, Any, _Moved | None]:
    """Move the live threads of ``epoch`` to the current epoch, a batch per transaction.

    The live threads are read a page at a time; each transaction locks a batch
    of them (at most ``MOVE_BATCH`` threads, FOR UPDATE, in key order; those
    no longer live are left), copies their checkpoints, blobs and writes into
    the current epoch's partitions, and points the registry rows there. Writes to
    a thread of an older epoch read its registry row FOR KEY SHARE (see
    ``PostgresOps``): a write in flight finishes first (the copy, a later
    statement, sees it), and a write that comes meanwhile waits and then goes
    to the new epoch. ``delete_thread``, ``delete_for_runs`` and
    ``copy_thread`` lock the row in a statement of their own first. Readers
    see the thread whole in one epoch or the other: reads follow the registry
    row, and the old rows stay behind, unread, until the epoch's partitions
    are dropped. A killed move leaves either the old epoch or the new one
    (one transaction per batch). Returns what moved, or None when out of time.

    Only epochs at least two older than the current one move: a write's "is
    this thread of an older epoch" uses its own clock reading, up to a
    statement's time earlier than the pruner's.
    """
    s = ops._s
    expired = plan.by_strategy.get(DELETE, "false")
    yield _q(f"SELECT {s}.ensure_partitions(%s)", (current,))
    moved = _Moved()
    batch = max(1, min(request.batch, MOVE_BATCH))
    params = {**plan.params, "epoch": epoch, "to": current}
    copies = ", ".join(
        f"k_{t} AS (INSERT INTO {s}.{t} ({cols}) SELECT "
        + cols.replace("epoch", "%(to)s::integer")
        + f' FROM {s}."{t}_e{int(epoch)}" x JOIN m USING (tenant_id, thread_id) '
        f"ON CONFLICT DO NOTHING RETURNING {_PAYLOAD[t]} AS n)"
        for t, cols in _COLUMNS.items()
    )
    after: tuple[str, str] | None = None
    while True:
        # The next page of the epoch's live threads (read without a lock: each
        # batch locks its threads and checks them again).
        page = yield _q(
            f"SELECT th.tenant_id, th.thread_id FROM {s}.threads th "
            f"WHERE th.epoch = %(epoch)s AND NOT ({expired}) "
            + _after(after)
            + "ORDER BY th.tenant_id, th.thread_id LIMIT %(page)s",
            {**params, **_after_params(after), "page": _MOVE_PAGE},
            "all",
        )
        for at in range(0, len(page), batch):
            if request.out_of_time():
                return None
            started = request.monotonic()
            chunk = page[at : at + batch]
            yield from _move_batch(ops, copies, expired, params, chunk, moved)
            yield progress.step(0)  # a progress bar moves on; no thread removed yet
            yield from _rest(request, started)
        if len(page) < _MOVE_PAGE:
            return moved
        after = (str(page[-1][0]), str(page[-1][1]))


def _move_batch(
    ops: PostgresOps,
    copies: str,
    expired: str,
    params: dict[str, Any],
    chunk: list[Any],
    moved: _Moved,
) -> Generator[Any, Any, None]:
    """One transaction of ``_move_live``: lock the threads still live, copy, repoint."""
    s = ops._s
    ids = {"m_t": [str(t) for t, _th in chunk], "m_th": [str(th) for _t, th in chunk]}
    yield _q("BEGIN", (), "none")
    try:
        locked = yield _q(
            f"SELECT th.tenant_id, th.thread_id FROM {s}.threads th JOIN unnest("
            "%(m_t)s::text[], %(m_th)s::text[]) AS m(tenant_id, thread_id) "
            "ON th.tenant_id = m.tenant_id AND th.thread_id = m.thread_id "
            f"WHERE th.epoch = %(epoch)s AND NOT ({expired}) "
            "ORDER BY th.tenant_id, th.thread_id FOR UPDATE OF th",
            {**params, **ids},
            "all",
        )
        if not locked:
            yield _q("COMMIT", (), "none")
            return None
        row = yield _q(
            "WITH m AS (SELECT * FROM unnest(%(m_t)s::text[], %(m_th)s::text[]) "
            f"AS m(tenant_id, thread_id)), {copies}, "
            f"u AS (UPDATE {s}.threads th SET epoch = %(to)s FROM m "
            "WHERE th.tenant_id = m.tenant_id AND th.thread_id = m.thread_id "
            "AND th.epoch = %(epoch)s RETURNING 1) "
            "SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM k_checkpoints), "
            "(SELECT coalesce(sum(n), 0) FROM k_checkpoints) "
            "+ (SELECT coalesce(sum(n), 0) FROM k_blobs) "
            "+ (SELECT coalesce(sum(n), 0) FROM k_writes)",
            {
                **params,
                "m_t": [str(t) for t, _th in locked],
                "m_th": [str(th) for _t, th in locked],
            },
        )
        yield _q("COMMIT", (), "none")
    except Exception:
        yield _q("ROLLBACK", (), "none")
        raise
    moved.threads += int(row[0])
    moved.checkpoints += int(row[1])
    moved.bytes += int(row[2])
    for tenant, thread in locked:
        ops.epochs.forget(str(tenant), str(thread))
    return None


def _drop_tables(ops: PostgresOps, names: list[str]) -> Generator[Any, Any, None]:
    """Drop the detached partitions, all in one statement.

    Dropping a table truncates its files when the transaction commits, and
    the file system's work can hold up concurrent commits (their WAL flush)
    for some milliseconds: one drop of every table at the end costs writers
    one such pause instead of one per table. Detached tables a killed run
    left are dropped by the next run (no registry row names their epoch).
    """
    if names:
        tables = ", ".join(f'{ops._s}."{name}"' for name in names)
        yield _q(f"DROP TABLE IF EXISTS {tables}", (), "none")


def _count(report: PruneReport, threads: int, checkpoints: int, size: int, tables: int) -> None:
    report.threads += threads
    report.checkpoints += checkpoints
    report.bytes += size
    report.partitions += tables
    report.threads_seen += threads


def _forget_epoch(
    ops: PostgresOps, plan: _Plan, epoch: int
) -> Generator[Any, Any, list[tuple[str, str]] | None]:
    """Delete an epoch's registry rows and journal entries if all its threads expired.

    One transaction: the expired threads' rows are deleted (expiry re-checked on
    each locked row, so a thread written meanwhile stays), then if any thread
    of the epoch is left, all is rolled back and the epoch kept. Returns the
    threads deleted, or None.
    """
    s = ops._s
    params = {**plan.params, "epoch": epoch}
    yield _q("BEGIN", (), "none")
    try:
        gone = yield _q(
            f"WITH t AS (DELETE FROM {s}.threads th WHERE th.epoch = %(epoch)s AND ("
            + plan.by_strategy.get(DELETE, "false")
            + ") RETURNING tenant_id, thread_id), "
            f"e AS (DELETE FROM {s}.effects e USING t WHERE e.tenant_id = t.tenant_id "
            "AND e.thread_id = t.thread_id) SELECT tenant_id, thread_id FROM t",
            params,
            "all",
        )
        left = yield _q(f"SELECT EXISTS (SELECT 1 FROM {s}.threads WHERE epoch = %s)", (epoch,))
        if left[0]:
            yield _q("ROLLBACK", (), "none")
            return None
        yield _q("COMMIT", (), "none")
    except Exception:
        yield _q("ROLLBACK", (), "none")
        raise
    return [(t, th) for t, th in gone]


# ---- phase 2: rows, in batches ------------------------------------------------------


def _prune_rows(
    ops: PostgresOps,
    request: PruneRequest,
    plan: _Plan,
    strategy: str,
    report: PruneReport,
    progress: _Progress,
) -> Generator[Any, Any, bool]:
    """Delete or trim the expired threads left, a batch at a time; False when out of time."""
    s = ops._s
    expired = plan.by_strategy[strategy]
    after: tuple[str, str] | None = None
    while True:
        if request.out_of_time():
            left = yield _q(
                f"SELECT EXISTS (SELECT 1 FROM {s}.threads th WHERE {expired} "
                "AND th.epoch <> ALL(%(dropped)s::integer[]) " + _after(after) + ")",
                {**plan.params, **_after_params(after)},
            )
            return not left[0]  # False: expired threads are left
        started = request.monotonic()
        pick = (
            f"SELECT th.tenant_id, th.thread_id, th.epoch, th.ctid FROM {s}.threads th "
            f"WHERE {expired} AND th.epoch <> ALL(%(dropped)s::integer[]) "
            + _after(after)
            + "ORDER BY th.tenant_id, th.thread_id LIMIT %(batch)s"
        )
        params = {**plan.params, **_after_params(after), "batch": request.batch}
        if strategy == DELETE and not request.dry_run:
            # Pick and delete in one statement (one round trip per batch).
            picked, last = yield from _delete_picked(ops, plan, pick, params, report)
        else:
            rows = yield _q(pick, params, "all")
            picked = len(rows)
            last = (rows[-1][0], rows[-1][1]) if rows else None
            batch = [(str(t), str(th), int(e)) for t, th, e, _ctid in rows]
            if strategy == DELETE:
                yield from _count_batch(ops, plan, batch, report)
            elif batch:
                yield from trim_batch(ops, request.dry_run, plan.keep_of, batch, report)
        if not picked:
            return True
        after = last
        report.threads_seen += picked
        yield progress.step(picked)
        if picked < request.batch:
            return True
        yield from _rest(request, started)


def _after(after: tuple[str, str] | None) -> str:
    """The keyset condition that resumes after the last thread of the previous batch."""
    return "" if after is None else "AND (th.tenant_id, th.thread_id) > (%(a_t)s, %(a_th)s) "


def _after_params(after: tuple[str, str] | None) -> dict[str, str]:
    return {} if after is None else {"a_t": after[0], "a_th": after[1]}


def _rest(request: PruneRequest, started: float) -> Generator[Any, Any, None]:
    """After a unit of work, rest as ``request.throttle`` asks."""
    rest = request.rest_after(started)
    if rest > 0:
        yield Sleep(rest)


def _arrays(batch: list[tuple[str, str, int]]) -> dict[str, Any]:
    return {
        "d_tenants": [t for t, _th, _e in batch],
        "d_threads": [th for _t, th, _e in batch],
        "d_epochs": [e for _t, _th, e in batch],
    }


_BATCH = (
    "unnest(%(d_tenants)s::text[], %(d_threads)s::text[], %(d_epochs)s::integer[]) "
    "AS d(tenant_id, thread_id, epoch)"
)


def _delete_picked(
    ops: PostgresOps, plan: _Plan, pick: str, params: dict[str, Any], report: PruneReport
) -> Generator[Any, Any, tuple[int, tuple[str, str] | None]]:
    """Pick the next batch of expired threads and delete each whole, in one statement.

    The registry rows are found by ``ctid`` (no join over the registry) and
    re-checked for expiry once locked, so a thread written meanwhile stays.
    Returns how many threads were picked and the last one (the keyset cursor).
    """
    s = ops._s
    mine = "{a}.tenant_id = t.tenant_id AND {a}.thread_id = t.thread_id AND {a}.epoch = t.epoch"
    row = yield _q(
        f"WITH p AS ({pick}), "
        f"t AS (DELETE FROM {s}.threads th WHERE th.ctid = ANY(ARRAY(SELECT ctid FROM p)) "
        f"AND {plan.by_strategy[DELETE]} RETURNING th.tenant_id, th.thread_id, th.epoch), "
        f"c AS (DELETE FROM {s}.checkpoints c USING t WHERE {mine.format(a='c')} "
        "RETURNING octet_length(c.checkpoint) + octet_length(c.metadata) AS n), "
        f"b AS (DELETE FROM {s}.blobs b USING t WHERE {mine.format(a='b')} "
        "RETURNING coalesce(octet_length(b.blob), 0) AS n), "
        f"w AS (DELETE FROM {s}.writes w USING t WHERE {mine.format(a='w')} "
        "RETURNING octet_length(w.blob) AS n), "
        f"e AS (DELETE FROM {s}.effects e USING t WHERE e.tenant_id = t.tenant_id "
        "AND e.thread_id = t.thread_id), "
        "l AS (SELECT tenant_id, thread_id FROM p ORDER BY tenant_id DESC, thread_id DESC "
        "LIMIT 1) "
        "SELECT (SELECT count(*) FROM t), (SELECT count(*) FROM c), "
        "(SELECT coalesce(sum(n), 0) FROM c) + (SELECT coalesce(sum(n), 0) FROM b) "
        "+ (SELECT coalesce(sum(n), 0) FROM w), "
        "(SELECT array_agg(tenant_id) FROM t), (SELECT array_agg(thread_id) FROM t), "
        "(SELECT count(*) FROM p), (SELECT tenant_id FROM l), (SELECT thread_id FROM l)",
        params,
    )
    for tenant, thread in zip(row[3] or [], row[4] or [], strict=True):
        ops.epochs.forget(tenant, thread)
    report.threads += int(row[0])
    report.checkpoints += int(row[1])
    report.bytes += int(row[2])
    picked = int(row[5])
    return picked, (None if not picked else (str(row[6]), str(row[7])))


def _count_batch(
    ops: PostgresOps, plan: _Plan, batch: list[tuple[str, str, int]], report: PruneReport
) -> Generator[Any, Any, None]:
    """Dry run: count what deleting a batch of expired threads would remove."""
    s = ops._s
    params = {**plan.params, **_arrays(batch)}
    mine = "{a}.tenant_id = t.tenant_id AND {a}.thread_id = t.thread_id AND {a}.epoch = t.epoch"
    t_cte = (
        f"t AS (SELECT th.tenant_id, th.thread_id, th.epoch FROM {s}.threads th "
        f"JOIN {_BATCH} ON th.tenant_id = d.tenant_id AND th.thread_id = d.thread_id "
        f"WHERE {plan.by_strategy[DELETE]})"
    )
    row = yield _q(
        f"WITH {t_cte} SELECT (SELECT count(*) FROM t), "
        f"(SELECT count(*) FROM {s}.checkpoints c JOIN t ON {mine.format(a='c')}), "
        "(SELECT coalesce(sum(octet_length(c.checkpoint) + octet_length(c.metadata)), 0) "
        f"FROM {s}.checkpoints c JOIN t ON {mine.format(a='c')}) + "
        "(SELECT coalesce(sum(coalesce(octet_length(b.blob), 0)), 0) "
        f"FROM {s}.blobs b JOIN t ON {mine.format(a='b')}) + "
        "(SELECT coalesce(sum(octet_length(w.blob)), 0) "
        f"FROM {s}.writes w JOIN t ON {mine.format(a='w')}), "
        "(SELECT array_agg(tenant_id) FROM t), (SELECT array_agg(thread_id) FROM t)",
        params,
    )
    for tenant, thread in zip(row[3] or [], row[4] or [], strict=True):
        report.record(tenant, thread)
    report.threads += int(row[0])
    report.checkpoints += int(row[1])
    report.bytes += int(row[2])


def trim_batch(
    ops: PostgresOps,
    dry_run: bool,
    keep: Callable[[str], int],
    batch: list[tuple[str, str, int]],
    report: PruneReport,
) -> Generator[Any, Any, None]:
    """Trim threads (tenant, thread, epoch) to what ``keep_latest`` keeps (``keep_set``).

    Also the upstream-style ``prune(thread_ids, "keep_latest")`` (keep 1).

    With the hash chain on (``ops.codec.chain``), every surviving checkpoint
    whose parent goes gets a tombstone in its body's chain block
    (``tombstone_bodies``): one more statement per batch reads the bodies of
    those survivors and of their removed parents, and the survivors' new
    bodies are written by the statement that deletes the removed checkpoints
    (one statement: the rewrite and the delete commit together). Without the
    chain key the same read checks that no survivor carries a chain block
    (``ChainKeyRequiredError`` otherwise, nothing of the batch deleted).
    """
    s = ops._s
    params = _arrays(batch)
    rows = yield _q(
        "SELECT c.tenant_id, c.thread_id, c.epoch, c.checkpoint_ns, c.checkpoint_id, "
        "c.parent_checkpoint_id, c.v, c.metadata_index ? 'counters_since_delta_snapshot', "
        f"EXISTS (SELECT 1 FROM {s}.writes w WHERE w.tenant_id = c.tenant_id "
        "AND w.thread_id = c.thread_id AND w.epoch = c.epoch "
        "AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.parent_checkpoint_id "
        f"AND w.channel = '{TASKS}'), "
        "octet_length(c.checkpoint) + octet_length(c.metadata) "
        f"FROM {s}.checkpoints c JOIN {_BATCH} ON c.tenant_id = d.tenant_id "
        "AND c.thread_id = d.thread_id AND c.epoch = d.epoch",
        params,
        "all",
    )
    threads: dict[tuple[str, str, int], list[tuple[CheckpointNode, int]]] = {}
    for tenant, thread, epoch, ns, cid, parent, v, delta, sends, size in rows:
        node = CheckpointNode(ns, cid, parent, int(v), bool(delta), bool(sends))
        threads.setdefault((tenant, thread, int(epoch)), []).append((node, int(size or 0)))
    doomed: dict[str, list[Any]] = {k: [] for k in ("t", "th", "e", "ns", "id")}
    trimmed: list[tuple[str, str, int]] = []
    links: dict[_Scope, _Links] = {}
    size = 0
    for (tenant, thread, epoch), members in threads.items():
        kept = keep_set((n for n, _ in members), keep(tenant))
        gone = [(n, b) for n, b in members if (n.ns, n.checkpoint_id) not in kept]
        if not gone:
            continue
        trimmed.append((tenant, thread, epoch))
        report.record(tenant, thread)
        for node, b in gone:
            doomed["t"].append(tenant)
            doomed["th"].append(thread)
            doomed["e"].append(epoch)
            doomed["ns"].append(node.ns)
            doomed["id"].append(node.checkpoint_id)
            size += b
        if not dry_run:  # tombstones, or (no chain key) the check that none is needed
            _link(
                links, (tenant, thread, epoch), members, {(n.ns, n.checkpoint_id) for n, _ in gone}
            )
    if not trimmed:
        return None
    report.trimmed += len(trimmed)
    report.checkpoints += len(doomed["id"])
    gone_rows = (
        "unnest(%(g_t)s::text[], %(g_th)s::text[], %(g_e)s::integer[], %(g_ns)s::text[], "
        "%(g_id)s::text[]) AS g(tenant_id, thread_id, epoch, checkpoint_ns, checkpoint_id)"
    )
    gp = {f"g_{k}": v for k, v in doomed.items()}
    key = (
        "{a}.tenant_id = g.tenant_id AND {a}.thread_id = g.thread_id AND {a}.epoch = g.epoch "
        "AND {a}.checkpoint_ns = g.checkpoint_ns AND {a}.checkpoint_id = g.checkpoint_id"
    )
    # The blobs still needed: those a surviving checkpoint references and,
    # for deltas, every base of their chains; the thread's other blobs go.
    needed = (
        "WITH RECURSIVE need AS ("
        "SELECT c.tenant_id, c.thread_id, c.epoch, c.checkpoint_ns, r.channel, r.version "
        f"FROM {s}.checkpoints c JOIN {_BATCH} ON c.tenant_id = d.tenant_id "
        "AND c.thread_id = d.thread_id AND c.epoch = d.epoch "
        "CROSS JOIN LATERAL unnest(c.blob_channels, c.blob_versions) AS r(channel, version) "
        "WHERE true {extra} "
        "UNION SELECT b.tenant_id, b.thread_id, b.epoch, b.checkpoint_ns, b.channel, b.base "
        f"FROM need n JOIN {s}.blobs b ON b.tenant_id = n.tenant_id "
        "AND b.thread_id = n.thread_id AND b.epoch = n.epoch "
        "AND b.checkpoint_ns = n.checkpoint_ns AND b.channel = n.channel "
        "AND b.version = n.version WHERE b.base IS NOT NULL) "
    )
    unneeded = (
        f"FROM {s}.blobs b JOIN {_BATCH} ON b.tenant_id = d.tenant_id "
        "AND b.thread_id = d.thread_id AND b.epoch = d.epoch WHERE NOT EXISTS ("
        "SELECT 1 FROM need n WHERE n.tenant_id = b.tenant_id AND n.thread_id = b.thread_id "
        "AND n.epoch = b.epoch AND n.checkpoint_ns = b.checkpoint_ns "
        "AND n.channel = b.channel AND n.version = b.version)"
    )
    tparams = {**_arrays(trimmed), **gp}
    if dry_run:
        survivors = f"AND NOT EXISTS (SELECT 1 FROM {gone_rows} WHERE {key.format(a='c')})"
        row = yield _q(
            needed.format(extra=survivors)
            + "SELECT (SELECT coalesce(sum(octet_length(w.blob)), 0) "
            f"FROM {s}.writes w JOIN {gone_rows} ON {key.format(a='w')}), "
            "(SELECT coalesce(sum(coalesce(octet_length(b.blob), 0)), 0) " + unneeded + ")",
            tparams,
        )
        report.bytes += size + int(row[0]) + int(row[1])
        return None
    # Tombstones first (one read), written by the statement that deletes.
    stones = (yield from _tombstones(ops, links)) if links else None
    rewrite = ""
    if stones:
        rewrite = rewrite_cte(s)
        tparams.update(stones)
    row = yield _q(
        f"WITH {rewrite}c AS (DELETE FROM {s}.checkpoints c USING {gone_rows} "
        f"WHERE {key.format(a='c')} RETURNING 1), "
        f"w AS (DELETE FROM {s}.writes w USING {gone_rows} WHERE {key.format(a='w')} "
        "RETURNING octet_length(w.blob) AS n) "
        "SELECT (SELECT coalesce(sum(n), 0) FROM w)",
        tparams,
    )
    report.bytes += size + int(row[0])
    row = yield _q(
        needed.format(extra="")
        + f", gone AS (DELETE FROM {s}.blobs x USING (SELECT b.tenant_id, b.thread_id, "
        "b.epoch, b.checkpoint_ns, b.channel, b.version "
        + unneeded
        + ") AS u WHERE x.tenant_id = u.tenant_id AND x.thread_id = u.thread_id "
        "AND x.epoch = u.epoch AND x.checkpoint_ns = u.checkpoint_ns "
        "AND x.channel = u.channel AND x.version = u.version "
        "RETURNING coalesce(octet_length(x.blob), 0) AS n) "
        "SELECT coalesce(sum(n), 0) FROM gone",
        tparams,
    )
    report.bytes += int(row[0])
    return None


# ---- chain tombstones (``integrity=``) ------------------------------------------------


def rewrite_cte(s: str) -> str:
    """``r AS (UPDATE ...), ``: the survivors' new bodies (the ``n_*`` arrays of
    :func:`_tombstones`), for the statement that deletes their parents."""
    return (
        f"r AS (UPDATE {s}.checkpoints c SET checkpoint = n.body FROM unnest("
        "%(n_t)s::text[], %(n_th)s::text[], %(n_e)s::integer[], %(n_ns)s::text[], "
        "%(n_id)s::text[], %(n_type)s::text[], %(n_body)s::bytea[]) AS n(tenant_id, "
        "thread_id, epoch, checkpoint_ns, checkpoint_id, type, body) "
        "WHERE c.tenant_id = n.tenant_id AND c.thread_id = n.thread_id "
        "AND c.epoch = n.epoch AND c.checkpoint_ns = n.checkpoint_ns "
        "AND c.checkpoint_id = n.checkpoint_id AND c.checkpoint_type = n.type), "
    )


def run_tombstones(
    ops: PostgresOps, tenant: str, rows: list[Any]
) -> Generator[Any, Any, dict[str, list[Any]]]:
    """``delete_for_runs``' tombstones: the survivors' new bodies (``n_*`` arrays).

    ``rows``: (thread, epoch, namespace, checkpoint id, parent id, made by one of
    the runs) of every checkpoint of the threads the runs wrote to. A checkpoint
    that stays while its parent goes gets a tombstone, as in a ``keep_latest``
    trim (one more statement reads the bodies; none when no parent of a
    survivor goes). Without the chain key the same read refuses the delete when
    such a survivor carries a chain block (``ChainKeyRequiredError``).
    """
    members: dict[tuple[str, str, int], list[tuple[CheckpointNode, int]]] = {}
    gone: dict[tuple[str, str, int], set[tuple[str, str]]] = {}
    for thread, epoch, ns, cid, parent, doomed in rows:
        at = (tenant, str(thread), int(epoch))
        node = CheckpointNode(str(ns), str(cid), parent or None, 4, False, False)
        members.setdefault(at, []).append((node, 0))
        if doomed:
            gone.setdefault(at, set()).add((node.ns, node.checkpoint_id))
    links: dict[_Scope, _Links] = {}
    for at, doomed_here in gone.items():
        _link(links, at, members[at], doomed_here)
    if not links:
        return {}
    return (yield from _tombstones(ops, links))


_Scope = tuple[str, str, int, str]  # tenant, thread, epoch, namespace


class _Links:
    """One namespace of a trimmed thread: survivors whose parent goes, and what goes."""

    __slots__ = ("survivors", "removed")

    def __init__(self) -> None:
        #: surviving checkpoint id -> its removed parent's id
        self.survivors: dict[str, str] = {}
        #: every removed checkpoint id of the namespace
        self.removed: list[str] = []


def _link(
    links: dict[_Scope, _Links],
    thread: tuple[str, str, int],
    members: list[tuple[CheckpointNode, int]],
    gone: set[tuple[str, str]],
) -> None:
    """Note, per namespace of one thread, the survivors that will need a tombstone."""
    scoped: dict[str, _Links] = {}
    for node, _size in members:
        at = scoped.setdefault(node.ns, _Links())
        if (node.ns, node.checkpoint_id) in gone:
            at.removed.append(node.checkpoint_id)
        elif node.parent_id is not None and (node.ns, node.parent_id) in gone:
            at.survivors[node.checkpoint_id] = node.parent_id
    tenant, thread_id, epoch = thread
    for ns, at in scoped.items():
        if at.survivors:
            links[(tenant, thread_id, epoch, ns)] = at


def _tombstones(
    ops: PostgresOps, links: dict[_Scope, _Links]
) -> Generator[Any, Any, dict[str, list[Any]]]:
    """The survivors' new bodies, as the arrays of the rewrite (one statement reads).

    Reads the stored bodies of the survivors in ``links`` and of their removed
    parents, and returns the rows to rewrite (``n_*`` arrays; empty when no
    body carries a chain block). Without the chain key it reads the survivors
    only and raises ``ChainKeyRequiredError`` if one carries a chain block
    (before anything of the batch is deleted).
    """
    chain = ops.codec.chain
    out: dict[str, list[Any]] = {
        k: [] for k in ("n_t", "n_th", "n_e", "n_ns", "n_id", "n_type", "n_body")
    }
    want: dict[str, list[Any]] = {k: [] for k in ("t", "th", "e", "ns", "id")}
    for (tenant, thread, epoch, ns), at in links.items():
        # without the key only the survivors: a chained one stops the trim
        ids = {*at.survivors, *at.survivors.values()} if chain is not None else set(at.survivors)
        for cid in ids:
            for k, v in zip(want, (tenant, thread, epoch, ns, cid), strict=True):
                want[k].append(v)
    rows = yield _q(
        "SELECT c.tenant_id, c.thread_id, c.epoch, c.checkpoint_ns, c.checkpoint_id, "
        f"c.checkpoint_type, c.checkpoint FROM {ops._s}.checkpoints c JOIN unnest("
        "%(w_t)s::text[], %(w_th)s::text[], %(w_e)s::integer[], %(w_ns)s::text[], "
        "%(w_id)s::text[]) AS w(tenant_id, thread_id, epoch, checkpoint_ns, checkpoint_id) "
        "ON c.tenant_id = w.tenant_id AND c.thread_id = w.thread_id AND c.epoch = w.epoch "
        "AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id",
        {f"w_{k}": v for k, v in want.items()},
        "all",
    )
    bodies: dict[tuple[str, str, int, str, str], Sealed] = {
        (str(t), str(th), int(e), str(ns), str(cid)): Sealed(str(typ), bytes(data))
        for t, th, e, ns, cid, typ, data in rows
    }
    if chain is None:
        for (tenant, thread, epoch, ns), at in links.items():
            refuse_unkeyed_trim(
                tenant, thread, (bodies.get((tenant, thread, epoch, ns, c)) for c in at.survivors)
            )
        return {}
    for (tenant, thread, epoch, ns), at in links.items():
        survivors: dict[str, tuple[str | None, Sealed]] = {}
        for cid, parent in at.survivors.items():
            stored = bodies.get((tenant, thread, epoch, ns, cid))
            if stored is not None:  # gone meanwhile: nothing to mark
                survivors[cid] = (parent, stored)
        removed = {cid: bodies.get((tenant, thread, epoch, ns, cid)) for cid in at.removed}
        for cid, body in tombstone_bodies(chain, tenant, thread, ns, survivors, removed).items():
            for k, v in zip(
                out, (tenant, thread, epoch, ns, cid, body.type, body.data), strict=True
            ):
                out[k].append(v)
    return out if out["n_id"] else {}


# ---- thread enumeration (``verify``) ----------------------------------------------


def thread_page(
    ops: PostgresOps, tenant: str | None, cursor: Any, limit: int
) -> Generator[Any, Any, tuple[list[tuple[str, str]], Any]]:
    """Up to ``limit`` (tenant, thread) pairs of threads with a checkpoint, and the next cursor.

    Walks the ``threads`` registry in (tenant, thread) order from ``cursor``
    (None to start; the last pair of the previous page after that) and
    returns the next cursor, or None after the last page. One statement per
    page (two with ``tenant`` None: across tenants the role must bypass
    row-level security, as the pruner's). A registry row whose thread has no
    checkpoint left (``delete_for_runs`` removed them all) is skipped.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInputError(f"limit must be a positive integer, got {limit!r}")
    s = ops._s
    params: dict[str, Any] = {"limit": limit + 1}
    where = [
        f"EXISTS (SELECT 1 FROM {s}.checkpoints c WHERE c.tenant_id = th.tenant_id "
        "AND c.thread_id = th.thread_id AND c.epoch = th.epoch)"
    ]
    settings: tuple[tuple[str, str], ...] = ()
    if tenant is None:
        yield from _rls.require_bypass(ops.schema, "listing every tenant's threads")
    else:
        params["tenant"] = str(tenant)
        where.append("th.tenant_id = %(tenant)s")
        if ops.row_level_security:
            settings = ((_rls.TENANT_SETTING, str(tenant)),)
    if cursor is not None:
        try:
            after_tenant, after_thread = (str(part) for part in cursor)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"not a thread_page cursor: {cursor!r}") from exc
        params.update(a_t=after_tenant, a_th=after_thread)
        where.append("(th.tenant_id, th.thread_id) > (%(a_t)s, %(a_th)s)")
    rows = yield Query(
        f"SELECT th.tenant_id, th.thread_id FROM {s}.threads th WHERE "
        + " AND ".join(where)
        + " ORDER BY th.tenant_id, th.thread_id LIMIT %(limit)s",
        params,
        "all",
        False,
        settings,
    )
    page = [(str(t), str(th)) for t, th in rows[:limit]]
    return page, (page[-1] if len(rows) > limit else None)
