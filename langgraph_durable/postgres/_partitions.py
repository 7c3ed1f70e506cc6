"""The PostgreSQL pruner's first phase: whole partitions (pure, no psycopg import).

An old epoch whose threads have all expired loses its registry rows, then its
partitions are detached and dropped; an old epoch whose live threads hold few
of its checkpoints has them moved forward first (see ``_prune`` for the run).
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import Any

from .._core.retention import DELETE, PruneReport, PruneRequest
from ._base import OpsBase
from ._prune_plan import _after, _after_params, _Plan, _Progress, _q, _rest

__all__ = ["MOVE_BATCH"]

_LEAF = re.compile(r"^(checkpoints|blobs|writes)_e(-?\d+)$")


# ---- phase 1: whole partitions ------------------------------------------------------


def _drop_partitions(
    ops: OpsBase,
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
    ops: OpsBase, plan: _Plan, epoch: int, payload: bool
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
    ops: OpsBase,
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
    ``_writes.WriteOps``): a write in flight finishes first (the copy, a later
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
    ops: OpsBase,
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


def _drop_tables(ops: OpsBase, names: list[str]) -> Generator[Any, Any, None]:
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
    ops: OpsBase, plan: _Plan, epoch: int
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
