"""The store's PostgreSQL operations (pure: no psycopg import, no I/O).

Items live in ``store_items`` (migration 9, see ``_schema``): one row per
(tenant, namespace, key), the namespace as its labels joined by ``.`` (labels
cannot hold one) under the C collation, so the namespaces under a prefix are one
range of the primary key. The value and the embeddings are sealed by the record
pipeline (redaction, serialization, encryption bound to the tenant, the
namespace, the key and the clear fields a read trusts: see ``core.item_identity``);
times are Unix seconds from the store's clock.

A batch is one statement: its writes (deletes and upserts, data-modifying CTEs)
and its reads (every get, every search prefix, the namespaces a listing needs:
one ``UNION ALL``), which still see the store as it was before the statement. A
search with neither a filter nor scoring reads only the newest ``offset + limit``
items under its prefix; any other reads every live item under it (the filter
needs the opened values), except a search with a query and no filter where a vector
index is (``_store_vectors``): the index's nearest items, beside those it does not
hold. A second statement extends the TTLs the reads returned,
if any, and carries the writes under row-level security (see ``store.py``).
Everything between (filters, ordering, scoring, limits, TTL) is decided by the
pure core (``langgraph_durable._core.store``), after the values are opened.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import SearchOp

from .._core import store as core
from .._core.records import RecordIdentity, Sealed
from .._core.store_settings import DEFAULT_MAX_SEARCH_ITEMS, search_too_large
from ..errors import CorruptRecordError
from . import _rls
from ._query import Query
from ._schema import validate_schema_name
from ._store_vectors import EXACT, VectorMode, VectorOps

__all__ = ["StoreOps"]

_NO_VECTORS = Sealed("", b"")


def _bounds(
    prefixes: Iterable[tuple[str, ...]],
) -> tuple[list[str | None], list[str], list[str | None]]:
    """Arrays (exact, low, high) for the namespaces under each prefix (see ``_RANGE``)."""
    exact: list[str | None] = []
    low: list[str] = []
    high: list[str | None] = []
    for prefix in prefixes:
        bounds = core.ns_prefix_bounds(prefix)
        if bounds is None:  # every namespace
            exact.append(None)
            low.append("")
            high.append(None)
        else:
            exact.append(core.ns_text(prefix))
            low.append(bounds[0])
            high.append(bounds[1])
    return exact, low, high


_RANGE = "(i.prefix = b.ex OR (i.prefix >= b.lo AND (b.hi IS NULL OR i.prefix < b.hi)))"
_COLUMNS = (
    "i.prefix, i.key, i.value_type, i.value, i.vectors_type, i.vectors, "
    "i.created_at, i.updated_at, i.ttl_minutes, i.expires_at"
)
_LIVE = "(i.expires_at IS NULL OR i.expires_at > %(now)s)"
_NO_ROW = (  # the columns of a row that is not an item
    ", NULL::text, NULL::bytea, NULL::text, NULL::bytea, "
    "NULL::float8, NULL::float8, NULL::float8, NULL::float8"
)
_COUNTS = (
    "SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM ins), (SELECT count(*) FROM ref)"
)


@dataclass(frozen=True, slots=True)
class Read:
    """What a batch's read found: items by (namespace, key) for its gets, the items
    under its search prefixes, the live namespaces for its listings, and whether its
    writes went with it."""

    found: dict[tuple[tuple[str, ...], str], core.StoredItem]
    searched: list[core.StoredItem]
    namespaces: list[tuple[str, ...]]
    wrote: bool


#: What a batch's searches read: the prefixes read whole, those read in part (newest
#: first, how many) and the searches served by the vector index (with how many).
Searches = tuple[list[tuple[str, ...]], dict[tuple[str, ...], int], list[tuple[SearchOp, int]]]


class StoreOps:
    """The store's statements on one schema, and the reading of their rows.

    Args:
        schema: The schema (the saver's) holding ``store_items``.
    """

    def __init__(self, schema: str, max_search_items: int = DEFAULT_MAX_SEARCH_ITEMS) -> None:
        self.schema = validate_schema_name(schema)
        self._s = f'"{self.schema}"'
        self.max_search_items = max_search_items
        self.vectors = VectorOps(self.schema)

    def _searches(
        self,
        plan: core.BatchPlan,
        indexed: bool,
        mode: VectorMode = EXACT,
        query_vectors: Mapping[str, Sequence[float]] | None = None,
    ) -> Searches:
        """The prefixes searches read whole (a filter or a query without the vector
        index: every live item under them, at most ``max_search_items``), those read in
        part (newest first, how many) and the searches whose candidates come from the
        vector index (with how many)."""
        whole: list[tuple[str, ...]] = []
        cuts: dict[tuple[str, ...], int] = {}
        nearest: list[tuple[SearchOp, int]] = []
        per_item = mode.index.per_item if mode.index is not None else 1
        for i in plan.searches:
            op = plan.ops[i]
            assert isinstance(op, SearchOp)
            k = core.ann_candidates(op, mode.ann and indexed, per_item)
            vector = (query_vectors or {}).get(op.query) if op.query else None
            if k is not None and vector is not None:
                nearest.append((op, k))
                continue
            n = core.cut_in_storage(op, indexed)
            if n is None:
                whole.append(op.namespace_prefix)
            else:
                cuts[op.namespace_prefix] = max(n, cuts.get(op.namespace_prefix, 0))
        whole = core.covering(whole)
        cuts = {p: n for p, n in cuts.items() if not any(core.under(p, w) for w in whole)}
        nearest = [
            (op, k)
            for op, k in nearest
            if not any(core.under(op.namespace_prefix, w) for w in whole)
        ]
        return whole, cuts, nearest

    def _too_many(self) -> str:
        """Whether a prefix read whole holds more than ``max_search_items`` live items
        (``wx``, ``wl``, ``wh``, ``wm``: its bounds, the bound plus one); ``b.j`` its place."""
        return (
            f"(SELECT count(*) FROM (SELECT 1 FROM {self._s}.store_items i "
            f"WHERE i.tenant_id = %(tenant)s AND {_RANGE} AND {_LIVE} LIMIT %(wm)s) AS c) "
            ">= %(wm)s"
        )

    def _guard(self) -> str:
        """True when no prefix read whole is over the bound: the batch's reads and writes
        apply only then (the refusal is raised before anything is written)."""
        return (
            "NOT EXISTS (SELECT 1 FROM unnest(%(wx)s::text[], %(wl)s::text[], %(wh)s::text[]) "
            f"AS b(ex, lo, hi) WHERE {self._too_many()})"
        )

    def read_query(
        self,
        tenant: str,
        plan: core.BatchPlan,
        now: float,
        indexed: bool = False,
        mode: VectorMode = EXACT,
        query_vectors: Mapping[str, Sequence[float]] | None = None,
        settings: tuple[tuple[str, str], ...] = (),
        searches: Searches | None = None,
    ) -> Query | None:
        """The one statement that reads what a batch's gets, searches and listings need.

        A search with neither a filter nor scoring reads only the ``offset + limit``
        newest items under its prefix (``core.cut_in_storage``); a search with a query
        and no filter, where ``mode`` has a vector index, its candidates from the index
        (``core.ann_candidates``); any other reads every live item under its prefix
        (the filter needs the opened values). ``settings`` (the tenant's, under
        row-level security) go with the statement when the index needs settings too.
        """
        s = self._s
        parts: list[str] = []
        params: dict[str, Any] = {"tenant": tenant, "now": now}
        if plan.get_keys:
            params["gp"] = [core.ns_text(ns) for ns, _ in plan.get_keys]
            params["gk"] = [k for _, k in plan.get_keys]
            parts.append(
                f"SELECT 'i', {_COLUMNS} FROM unnest(%(gp)s::text[], %(gk)s::text[]) AS g(p, k) "
                f"JOIN {s}.store_items i ON i.tenant_id = %(tenant)s AND i.prefix = g.p "
                f"AND i.key = g.k WHERE {_LIVE}"
            )
        if searches is None:
            searches = self._searches(plan, indexed, mode, query_vectors)
        whole, cuts, nearest = searches
        for j, (op, k) in enumerate(nearest):
            assert op.query is not None and query_vectors is not None
            found, more = self.vectors.search_parts(
                mode,
                f"a{j}",
                op.namespace_prefix,
                query_vectors[op.query],
                k,
                op.limit,
                _COLUMNS,
                _LIVE,
            )
            parts.extend(found)
            params.update(more)
        if cuts:
            ex, lo, hi = _bounds(cuts)
            params.update(cx=ex, cl=lo, ch=hi, cn=list(cuts.values()))
            parts.append(
                f"SELECT 's', {_COLUMNS} FROM unnest(%(cx)s::text[], %(cl)s::text[], "
                "%(ch)s::text[], %(cn)s::int[]) AS b(ex, lo, hi, n) CROSS JOIN LATERAL ("
                f"SELECT * FROM {s}.store_items i WHERE i.tenant_id = %(tenant)s AND {_RANGE} "
                f"AND {_LIVE} ORDER BY i.updated_at DESC, i.prefix, i.key LIMIT b.n) AS i"
            )
        if whole:
            ex, lo, hi = _bounds(whole)
            params.update(wx=ex, wl=lo, wh=hi, wm=self.max_search_items + 1)
            parts.append(
                f"SELECT 's', {_COLUMNS} FROM unnest(%(wx)s::text[], %(wl)s::text[], "
                f"%(wh)s::text[]) AS b(ex, lo, hi) JOIN {s}.store_items i "
                f"ON i.tenant_id = %(tenant)s AND {_RANGE} WHERE {_LIVE} AND {self._guard()}"
            )
            parts.append(  # which prefixes are over the bound (the batch is refused)
                f"SELECT 't', b.j::text, ''{_NO_ROW} FROM unnest(%(wx)s::text[], "
                f"%(wl)s::text[], %(wh)s::text[]) WITH ORDINALITY AS b(ex, lo, hi, j) "
                f"WHERE {self._too_many()}"
            )
        if plan.listings:
            heads = [core.listing_prefix(plan.ops[i]) for i in plan.listings]  # type: ignore[arg-type]
            ex, lo, hi = _bounds(core.covering(heads))
            params.update(lx=ex, ll=lo, lh=hi)
            parts.append(
                f"SELECT DISTINCT 'n', i.prefix, ''{_NO_ROW} "
                f"FROM unnest(%(lx)s::text[], %(ll)s::text[], %(lh)s::text[]) AS b(ex, lo, hi) "
                f"JOIN {s}.store_items i ON i.tenant_id = %(tenant)s AND {_RANGE} WHERE {_LIVE}"
            )
        if not parts:
            return None
        extra = VectorOps.settings(mode, max((k for _, k in nearest), default=0))
        return Query(
            " UNION ALL ".join(parts), params, "all", settings=settings + extra if extra else ()
        )

    def read(
        self,
        tenant: str,
        plan: core.BatchPlan,
        now: float,
        open: Callable[[RecordIdentity, Sealed], Any],
        indexed: bool = False,
        writes: Sequence[core.ItemWrite] = (),
        seal: Callable[[RecordIdentity, Any], Sealed] | None = None,
        fetched: list[Any] | None = None,
        mode: VectorMode = EXACT,
        query_vectors: Mapping[str, Sequence[float]] | None = None,
        settings: tuple[tuple[str, str], ...] = (),
    ) -> Generator[Any, Any, Read]:
        """Read a batch's items (opened) and live namespaces.

        With ``writes`` (and ``seal``), the batch's writes go in the same statement,
        as data-modifying CTEs: its reads still see the store as it was before the
        statement (PostgreSQL's snapshot rule), as a batch's reads must.

        ``fetched`` keeps the rows across attempts of one batch: when opening them
        needs a data-key version not loaded yet, the caller loads it and runs the
        batch again, which opens the same rows instead of sending the statement (and
        its writes) twice. ``mode``, ``query_vectors`` and ``settings``: see
        :meth:`read_query`.
        """
        searches = self._searches(plan, indexed, mode, query_vectors)
        whole = searches[0]  # the prefixes read whole, in the statement's order
        query = self.read_query(tenant, plan, now, indexed, mode, query_vectors, settings, searches)
        if query is None:
            return Read({}, [], [], False)
        applied = bool(writes) and seal is not None
        if applied:
            assert seal is not None
            guard = self._guard() if whole else ""
            ctes, params = self._write_ctes(tenant, now, writes, (), seal, mode, guard)
            query = Query(
                f"{ctes} {query.sql}",
                {**params, **dict(query.params)},
                "all",
                settings=query.settings,
            )
        if fetched:
            rows = fetched[0]
        else:
            rows = yield query
            if fetched is not None:
                fetched.append(rows)
        found: dict[tuple[tuple[str, ...], str], core.StoredItem] = {}
        searched: dict[tuple[str, str], core.StoredItem] = {}
        namespaces: list[tuple[str, ...]] = []
        cache: dict[tuple[str, str], core.StoredItem] = {}
        over = sorted(int(row[1]) for row in rows if row[0] == "t")
        if over:  # nothing was read nor written
            raise search_too_large(whole[over[0] - 1], None, self.max_search_items)
        for row in rows:
            part, prefix = row[0], row[1]
            if part == "n":
                namespaces.append(core.ns_from_text(prefix))
                continue
            stored = cache.get((prefix, row[2]))
            if stored is None:
                stored = cache[(prefix, row[2])] = _stored(tenant, row, open)
            if part == "i":
                found[(stored.namespace, stored.key)] = stored
            else:
                searched[(prefix, row[2])] = stored
        return Read(found, list(searched.values()), namespaces, applied)

    def write_query(
        self,
        tenant: str,
        now: float,
        writes: Sequence[core.ItemWrite],
        refreshes: Sequence[core.Refresh],
        seal: Callable[[RecordIdentity, Any], Sealed],
        mode: VectorMode = EXACT,
    ) -> Query | None:
        """The one statement that applies a batch's deletes, puts and TTL refreshes."""
        if not writes and not refreshes:
            return None
        ctes, params = self._write_ctes(tenant, now, writes, refreshes, seal, mode)
        return Query(ctes + " " + _COUNTS, params, "one")

    def _write_ctes(
        self,
        tenant: str,
        now: float,
        writes: Sequence[core.ItemWrite],
        refreshes: Sequence[core.Refresh],
        seal: Callable[[RecordIdentity, Any], Sealed],
        mode: VectorMode = EXACT,
        guard: str = "",
    ) -> tuple[str, dict[str, Any]]:
        """``WITH del AS (...), ins AS (...), ref AS (...)`` and its parameters (and the
        vector table's ``vdel``, ``vins``: ``_store_vectors``), each applied only where
        ``guard``, an SQL condition, holds: see :meth:`_guard`."""
        s = self._s
        deletes = [w for w in writes if w.value is None]
        puts = [w for w in writes if w.value is not None]
        params: dict[str, Any] = {"tenant": tenant, "now": now}
        params["dp"] = [core.ns_text(w.namespace) for w in deletes]
        params["dk"] = [w.key for w in deletes]
        cols: dict[str, list[Any]] = {n: [] for n in ("pp", "pk", "vt", "v", "wt", "w", "tt", "te")}
        for w in puts:
            prefix = core.ns_text(w.namespace)
            identity = core.item_identity(
                tenant, prefix, w.key, w.ttl_minutes, now, bool(w.vectors)
            )
            value = seal(identity, w.value)
            vectors = (
                seal(core.vectors_identity(tenant, prefix, w.key, now), w.vectors)
                if w.vectors
                else _NO_VECTORS
            )
            for name, item in zip(
                cols,
                (prefix, w.key, value.type, value.data, vectors.type, vectors.data),
                strict=False,
            ):
                cols[name].append(item)
            cols["tt"].append(w.ttl_minutes)
            cols["te"].append(w.expires_at)
        params.update(cols)
        params["rp"] = [core.ns_text(r.namespace) for r in refreshes]
        params["rk"] = [r.key for r in refreshes]
        params["re"] = [r.expires_at for r in refreshes]
        params["ru"] = [r.updated_at for r in refreshes]
        only = f" AND {guard}" if guard else ""
        params["ix"] = mode.ann
        vector_ctes, vector_params = self.vectors.write_ctes(mode, puts, only)
        params.update(vector_params)
        sql = f"""WITH del AS (
    DELETE FROM {s}.store_items i USING unnest(%(dp)s::text[], %(dk)s::text[]) AS d(p, k)
    WHERE i.tenant_id = %(tenant)s AND i.prefix = d.p AND i.key = d.k{only} RETURNING 1
), ins AS (
    INSERT INTO {s}.store_items AS i (tenant_id, prefix, key, value_type, value,
        vectors_type, vectors, created_at, updated_at, ttl_minutes, expires_at, vectors_indexed)
    SELECT %(tenant)s, u.p, u.k, u.vt, u.v, u.wt, u.w, %(now)s, %(now)s, u.tt, u.te,
        u.wt <> '' AND %(ix)s
    FROM unnest(%(pp)s::text[], %(pk)s::text[], %(vt)s::text[], %(v)s::bytea[],
                %(wt)s::text[], %(w)s::bytea[], %(tt)s::float8[], %(te)s::float8[])
        AS u(p, k, vt, v, wt, w, tt, te) WHERE true{only}
    ON CONFLICT (tenant_id, prefix, key) DO UPDATE SET
        value_type = excluded.value_type, value = excluded.value,
        vectors_type = excluded.vectors_type, vectors = excluded.vectors,
        created_at = CASE WHEN i.expires_at IS NOT NULL AND i.expires_at <= excluded.updated_at
                          THEN excluded.created_at ELSE i.created_at END,
        updated_at = excluded.updated_at, ttl_minutes = excluded.ttl_minutes,
        expires_at = excluded.expires_at, vectors_indexed = excluded.vectors_indexed
    RETURNING 1
), ref AS (
    UPDATE {s}.store_items i SET expires_at = r.e
    FROM unnest(%(rp)s::text[], %(rk)s::text[], %(re)s::float8[], %(ru)s::float8[])
        AS r(p, k, e, u)
    WHERE i.tenant_id = %(tenant)s AND i.prefix = r.p AND i.key = r.k
        AND i.updated_at = r.u AND i.ttl_minutes IS NOT NULL{only}
    RETURNING 1
)"""
        return sql + vector_ctes, params

    def sweep(
        self, now: float, batch: int, tenant: str | None = None
    ) -> Generator[Any, Any, dict[str, int]]:
        """Delete the items expired at ``now`` of ``tenant`` (None: of every tenant,
        which under row-level security needs BYPASSRLS), ``batch`` rows per statement
        (short statements, so writers are not held up): {tenant: items deleted}."""
        if tenant is None:
            yield from _rls.require_bypass(self.schema, "sweeping expired store items")
        mine = "" if tenant is None else "tenant_id = %(tenant)s AND "
        total: dict[str, int] = {}
        while True:
            rows = yield Query(
                f"WITH d AS (DELETE FROM {self._s}.store_items WHERE ctid = ANY(ARRAY("
                f"SELECT ctid FROM {self._s}.store_items WHERE {mine}expires_at <= %(now)s "
                "LIMIT %(n)s)) RETURNING tenant_id) SELECT tenant_id, count(*) FROM d "
                "GROUP BY tenant_id",
                {"now": now, "n": batch, "tenant": tenant},
                "all",
            )
            for name, count in rows:
                total[name] = total.get(name, 0) + int(count)
            if sum(int(count) for _, count in rows) < batch:
                return total

    def delete_namespace_query(self, tenant: str, prefix: tuple[str, ...]) -> Query:
        """The statement that deletes every item of ``tenant`` under ``prefix`` (a count)."""
        ex, lo, hi = _bounds([prefix])
        return Query(
            f"DELETE FROM {self._s}.store_items i USING "
            "(SELECT %(ex)s::text AS ex, %(lo)s::text AS lo, %(hi)s::text AS hi) AS b "
            f"WHERE i.tenant_id = %(tenant)s AND {_RANGE}",
            {"tenant": tenant, "ex": ex[0], "lo": lo[0], "hi": hi[0]},
            "none",
        )


def _stored(
    tenant: str, row: Sequence[Any], open: Callable[[RecordIdentity, Sealed], Any]
) -> core.StoredItem:
    (_part, prefix, key, vtype, value, wtype, vectors, created, updated, ttl, expiry) = row
    identity = core.item_identity(tenant, prefix, key, ttl, updated, bool(wtype))
    opened = open(identity, Sealed(vtype, bytes(value)))
    if not isinstance(opened, dict):
        raise CorruptRecordError(
            f"store item {key!r} of namespace {prefix!r} (tenant {tenant!r}) does not hold a dict"
        )
    vecs: Mapping[str, Any] = {}
    if wtype:
        vecs = open(
            core.vectors_identity(tenant, prefix, key, updated), Sealed(wtype, bytes(vectors))
        )
    return core.StoredItem(
        core.ns_from_text(prefix),
        key,
        opened,
        float(created),
        float(updated),
        None if expiry is None else float(expiry),
        None if ttl is None else float(ttl),
        {str(p): list(v) for p, v in vecs.items()},
    )
