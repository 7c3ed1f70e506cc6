"""What the PostgreSQL pruner's phases share (pure, no psycopg import).

The expiry predicate of a run (:class:`_Plan`, see ``_prune``), its progress
events, the keyset cursor over the registry, the rest between batches, and a
batch of threads as arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from .._core.retention import (
    DELETE,
    KEEP_LATEST,
    PruneProgress,
    PruneReport,
    PruneRequest,
    Retention,
)
from .._core.sansio import Emit, Sleep
from ._query import Query

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
    return Query(sql, params, fetch, False)


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
