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
   expired ones has its live threads moved forward first, so that it drops
   whole too. This phase is ``_partitions``.
2. **Rows.** Expired threads elsewhere (live threads keep an old partition
   alive) go in batches of ``request.batch`` threads: one statement per batch
   deletes each thread's registry row, checkpoints, blobs, writes and journal
   entries together, re-checking expiry on the locked registry row, so a
   thread is gone or whole and writers wait for at most one batch.
   ``keep_latest`` trims instead: the pure core picks what stays
   (``keep_set``), one statement deletes the rest of the batch's
   checkpoints with their writes, a second the blobs nothing kept references.
   With ``integrity=`` a trim also leaves chain tombstones (see
   ``_trim.trim_batch``).

:func:`thread_page` walks the registry a page at a time (``verify``).

Expiry is decided in SQL by one predicate on a registry row ``th``: with a
policy, ``updated_at``/``created_at`` against the tenant's ``idle`` and
``absolute`` (tenants' policies passed as arrays); without, the stored
``expires_at`` that the saver wrote under its ``retention=``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from .._core.retention import DELETE, PruneReport, PruneRequest
from .._core.sansio import Emit
from ..errors import InvalidInputError
from . import _rls
from ._base import OpsBase
from ._partitions import _drop_partitions
from ._prune_plan import (
    _BATCH,
    Policy,
    _after,
    _after_params,
    _arrays,
    _Plan,
    _Progress,
    _q,
    _rest,
)
from ._query import Query
from ._trim import trim_batch

__all__ = ["prune_expired", "thread_page"]


def prune_expired(
    ops: OpsBase, request: PruneRequest, policy: Policy | None
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


# ---- phase 2: rows, in batches ------------------------------------------------------


def _prune_rows(
    ops: OpsBase,
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


def _delete_picked(
    ops: OpsBase, plan: _Plan, pick: str, params: dict[str, Any], report: PruneReport
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
    ops: OpsBase, plan: _Plan, batch: list[tuple[str, str, int]], report: PruneReport
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


# ---- thread enumeration (``verify``) ----------------------------------------------


def thread_page(
    ops: OpsBase, tenant: str | None, cursor: Any, limit: int
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
            settings = _rls.tenant_settings(ops, str(tenant))
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
