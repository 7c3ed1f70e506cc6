"""A batch: its ops checked and planned, its answer, its writes (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.store.base import GetOp, ListNamespacesOp, Op, PutOp, SearchOp

from ...errors import InvalidInputError
from .items import StoredItem, expires_at, is_live, refreshed
from .namespaces import check_labels, check_namespace, covering, list_namespaces
from .search import search


def _check_key(key: Any) -> str:
    if not isinstance(key, str):
        raise InvalidInputError(f"a store key must be a string, got {type(key).__name__}")
    return key


def check_op(op: Any) -> None:
    """Check the namespace and key of one op (a put's namespace fully, others' labels)."""
    if isinstance(op, PutOp):
        check_namespace(op.namespace)
        _check_key(op.key)
        if op.value is not None and not isinstance(op.value, Mapping):
            raise InvalidInputError(
                f"a store value must be a dict (or None to delete), got {type(op.value).__name__}"
            )
        if op.ttl is not None and (
            isinstance(op.ttl, bool) or not isinstance(op.ttl, (int, float)) or op.ttl < 0
        ):
            raise InvalidInputError(f"ttl must be None or minutes >= 0, got {op.ttl!r}")
    elif isinstance(op, GetOp):
        check_labels(op.namespace)
        _check_key(op.key)
    elif isinstance(op, SearchOp):
        check_labels(op.namespace_prefix, "namespace prefix")
        if op.limit < 0 or op.offset < 0:
            raise InvalidInputError(
                f"search limit and offset must be >= 0, got {op.limit!r} and {op.offset!r}"
            )
    elif isinstance(op, ListNamespacesOp):
        for condition in op.match_conditions or ():
            if condition.match_type not in ("prefix", "suffix"):
                raise InvalidInputError(
                    f"unsupported match type {condition.match_type!r}: use 'prefix' or 'suffix'"
                )
            check_labels(tuple(condition.path), "match path")
        if op.max_depth is not None and op.max_depth < 1:
            raise InvalidInputError(f"max_depth must be None or >= 1, got {op.max_depth!r}")
    else:
        raise InvalidInputError(f"unknown store operation: {type(op).__name__}")


# ---- batches -----------------------------------------------------------------


@dataclass(slots=True)
class BatchPlan:
    """What one ``batch`` needs, its ops deduplicated as LangGraph's batching does.

    Attributes:
        ops: The ops in order (the results list has one entry per op).
        gets: Indexes of the get ops.
        searches: Indexes of the search ops.
        listings: Indexes of the namespace listings.
        puts: The last put of each (namespace, key), in first-seen order.
        get_keys: The distinct (namespace, key) the gets read.
        search_prefixes: The distinct namespace prefixes the searches read.
    """

    ops: list[Op]
    gets: list[int] = field(default_factory=list)
    searches: list[int] = field(default_factory=list)
    listings: list[int] = field(default_factory=list)
    puts: dict[tuple[tuple[str, ...], str], PutOp] = field(default_factory=dict)
    get_keys: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    search_prefixes: list[tuple[str, ...]] = field(default_factory=list)

    @property
    def reads(self) -> bool:
        return bool(self.gets or self.searches or self.listings)

    def writes(self) -> list[PutOp]:
        """The puts to apply (values) and deletes (``value`` None), last one per item."""
        return list(self.puts.values())

    def queries(self) -> list[str]:
        """The distinct search queries to embed, in order."""
        seen: dict[str, None] = {}
        for i in self.searches:
            op = self.ops[i]
            assert isinstance(op, SearchOp)
            if op.query:
                seen.setdefault(op.query, None)
        return list(seen)


def _tuple_namespaces(op: Op) -> Op:
    """``op`` with a namespace given as a list turned into a tuple (LangGraph's stores
    take a list of labels too)."""
    if isinstance(op, SearchOp) and isinstance(op.namespace_prefix, list):
        return op._replace(namespace_prefix=tuple(op.namespace_prefix))
    if isinstance(op, (GetOp, PutOp)) and isinstance(op.namespace, list):
        return op._replace(namespace=tuple(op.namespace))
    return op


def plan_batch(ops: Iterable[Op]) -> BatchPlan:
    """Check and plan a batch: reads see the store before the batch, puts apply after.

    Raises:
        InvalidNamespaceError, InvalidInputError: an op is malformed (nothing runs).
    """
    plan = BatchPlan([_tuple_namespaces(op) for op in ops])
    keys: dict[tuple[tuple[str, ...], str], None] = {}
    prefixes: dict[tuple[str, ...], None] = {}
    for i, op in enumerate(plan.ops):
        check_op(op)
        if isinstance(op, GetOp):
            plan.gets.append(i)
            keys.setdefault((op.namespace, op.key), None)
        elif isinstance(op, SearchOp):
            plan.searches.append(i)
            prefixes.setdefault(op.namespace_prefix, None)
        elif isinstance(op, ListNamespacesOp):
            plan.listings.append(i)
        else:
            assert isinstance(op, PutOp)
            place = (op.namespace, op.key)
            plan.puts.pop(place, None)  # keep first-seen order of the last put
            plan.puts[place] = op
    plan.get_keys = list(keys)
    plan.search_prefixes = covering(list(prefixes))
    return plan


# ---- a batch's answer and writes ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Refresh:
    """A new expiry for an item a refreshing read returned.

    ``updated_at`` is the write the read saw: a backend refreshes the item only while
    it is still that write (a put in between set its own expiry).
    """

    namespace: tuple[str, ...]
    key: str
    expires_at: float
    updated_at: float = 0.0


@dataclass(frozen=True, slots=True)
class ItemWrite:
    """What a batch stores for one item (``value`` None: delete it).

    Attributes:
        namespace, key: The item.
        value: Its new value, or None to delete it.
        ttl_minutes: The TTL it is stored with (None: none).
        expires_at: When it expires (None: never).
        vectors: Its embeddings by field path (empty: not indexed).
    """

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any] | None
    ttl_minutes: float | None = None
    expires_at: float | None = None
    vectors: dict[str, list[float]] = field(default_factory=dict)


def answer(
    plan: BatchPlan,
    found: Mapping[tuple[tuple[str, ...], str], StoredItem],
    searched: Iterable[StoredItem],
    namespaces: Iterable[tuple[str, ...]],
    now: float,
    query_vectors: Mapping[str, Sequence[float]] | None = None,
    distance_type: str = "cosine",
) -> tuple[list[Any], list[Refresh]]:
    """The results of a batch's ops (None for puts) and the expiries its reads refresh.

    Args:
        plan: The batch.
        found: The items the gets read, by (namespace, key) (expired ones may be in it).
        searched: The items under the batch's search prefixes (expired ones may be in it).
        namespaces: The namespaces that hold live items (for listings).
        now: The time of the batch.
        query_vectors: Each search query's embedding (None or missing: no index).
        distance_type: How searches score items (``search.similarity``).
    """
    results: list[Any] = [None] * len(plan.ops)
    returned: dict[tuple[tuple[str, ...], str], StoredItem] = {}
    for i in plan.gets:
        op = plan.ops[i]
        assert isinstance(op, GetOp)
        stored = found.get((op.namespace, op.key))
        if stored is not None and is_live(stored.expires_at, now):
            results[i] = stored.item()
            if op.refresh_ttl:
                returned[(stored.namespace, stored.key)] = stored
    pool = list(searched) if plan.searches else []
    for i in plan.searches:
        op = plan.ops[i]
        assert isinstance(op, SearchOp)
        vector = (query_vectors or {}).get(op.query) if op.query else None
        page = search(op, pool, now, vector, distance_type)
        results[i] = page
        if op.refresh_ttl and page:
            by_id = {(c.namespace, c.key): c for c in pool}
            for hit in page:
                place = (tuple(hit.namespace), hit.key)
                returned[place] = by_id[place]
    if plan.listings:
        live = list(namespaces)
        for i in plan.listings:
            op = plan.ops[i]
            assert isinstance(op, ListNamespacesOp)
            results[i] = list_namespaces(op, live)
    refreshes = []
    for place, stored in returned.items():
        expiry = refreshed(stored, now)
        if expiry is not None and place not in plan.puts:
            refreshes.append(Refresh(place[0], place[1], expiry, stored.updated_at))
    return results, refreshes


def item_writes(
    plan: BatchPlan,
    now: float,
    vectors: Mapping[tuple[tuple[str, ...], str], dict[str, list[float]]] | None = None,
) -> list[ItemWrite]:
    """What the batch's puts store (the last put of each item; None values delete)."""
    out = []
    for place, op in plan.puts.items():
        if op.value is None:
            out.append(ItemWrite(op.namespace, op.key, None))
            continue
        ttl = None if op.ttl is None else float(op.ttl)
        out.append(
            ItemWrite(
                op.namespace,
                op.key,
                dict(op.value),
                ttl,
                expires_at(ttl, now),
                dict((vectors or {}).get(place, {})),
            )
        )
    return out
