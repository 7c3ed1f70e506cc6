"""``keep_latest`` trims and chain tombstones on PostgreSQL (pure, no psycopg import).

:func:`trim_batch` trims a batch of threads (the pruner's ``keep_latest``, and
``prune``); with ``integrity=`` a trim, and ``delete_for_runs``
(:func:`run_tombstones`), leave chain tombstones on the checkpoints whose
parent goes, written by the statement that deletes (:func:`rewrite_cte`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from langgraph.checkpoint.serde.types import TASKS

from .._core.audit import check_trim
from .._core.chain import refuse_unkeyed_trim, tombstone_bodies
from .._core.records import Sealed
from .._core.retention import CheckpointNode, PruneReport, keep_set
from ._base import OpsBase
from ._prune_plan import _BATCH, _arrays, _q

__all__ = ["trim_batch", "rewrite_cte", "run_tombstones"]


def trim_batch(
    ops: OpsBase,
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

    Before that, with the chain key, each thread's history is checked as
    ``verify`` checks it (``_core.audit.check_trim``: one listing per trimmed
    thread); a thread with a broken link in the region the trim removes is
    left whole and its broken links go to ``report.refuse``.
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
    chain = ops.codec.chain
    for (tenant, thread, epoch), members in threads.items():
        kept = keep_set((n for n, _ in members), keep(tenant))
        gone = [(n, b) for n, b in members if (n.ns, n.checkpoint_id) not in kept]
        if not gone:
            continue
        if chain is not None and not dry_run:
            # never sign tombstones over a link not verified: check what goes first
            broken = yield from check_trim(
                ops, chain, tenant, thread, {(n.ns, n.checkpoint_id) for n, _ in gone}
            )
            if broken:
                report.refuse(broken)
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
    ops: OpsBase, tenant: str, rows: list[Any]
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
    ops: OpsBase, links: dict[_Scope, _Links]
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
