"""The decisions of a LangGraph store (``BaseStore``), independent of any backend.

Pure: no driver import, no I/O, no clock (every time is an injected ``now`` in
Unix seconds). A backend's store reads candidate items, hands them here, and
stores what this module decides:

- namespaces: LangGraph's rules (:func:`check_namespace`, :func:`check_labels`)
  and their text form (:func:`ns_text`, :func:`ns_prefix_bounds`);
- a batch: :func:`plan_batch` dedupes its ops as LangGraph's batching does (reads
  see the store as it was before the batch; of several puts of one item the last
  wins) and says which reads and writes it needs;
- filters (:func:`matches`): ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``,
  ``$lte``, nested dicts and lists, numbers compared as numbers, strings as
  strings (a comparison across types is false, never an error);
- search results (:func:`search`): with a query, by cosine similarity of the
  item's best vector, items without vectors after them (as ``InMemoryStore``);
  without one, by ``updated_at`` newest first (ties by namespace text and key);
  ``offset``/``limit`` counted after the filter;
- namespace listings (:func:`list_namespaces`): prefix and suffix conditions with
  ``*`` wildcards, ``max_depth``, sorted, then ``offset``/``limit``;
- TTL (:func:`expires_at`, :func:`is_live`, :func:`refreshed`): an expired item is
  never returned; a read with ``refresh_ttl`` extends the items it returns;
- embeddings (:func:`texts_to_embed`, :func:`cosine`): which texts of a put are
  embedded (``IndexConfig.fields`` or the put's ``index``), exact scoring.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchItem,
    SearchOp,
)
from langgraph.store.base.embed import get_text_at_path, tokenize_path

from ..errors import InvalidInputError, InvalidNamespaceError

__all__ = [
    "RESERVED_ROOT",
    "StoredItem",
    "BatchPlan",
    "ItemWrite",
    "Refresh",
    "answer",
    "item_writes",
    "EmbedTask",
    "check_namespace",
    "check_labels",
    "check_op",
    "ns_text",
    "ns_from_text",
    "ns_prefix_bounds",
    "matches",
    "plan_batch",
    "search",
    "list_namespaces",
    "namespace_matches",
    "expires_at",
    "is_live",
    "refreshed",
    "texts_to_embed",
    "cosine",
    "covering",
    "cut_in_storage",
    "under",
    "listing_prefix",
    "index_fields",
    "vectors_by_item",
    "to_datetime",
]

#: The first label no namespace may have (LangGraph keeps it for itself).
RESERVED_ROOT = "langgraph"
#: The separator of a namespace's text form (labels cannot hold it).
SEP = "."

_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


# ---- namespaces --------------------------------------------------------------


def check_labels(namespace: Any, what: str = "namespace") -> tuple[str, ...]:
    """``namespace`` as a tuple whose labels follow LangGraph's rules (may be empty).

    Raises:
        InvalidNamespaceError: a label is not a string, is empty, or holds ``.`` or NUL.
    """
    if not isinstance(namespace, tuple):
        raise InvalidNamespaceError(
            f"a {what} must be a tuple of strings, got {type(namespace).__name__}"
        )
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespaceError(
                f"{what} {namespace!r}: label {label!r} is not a string "
                f"({type(label).__name__}); labels must be strings"
            )
        if not label:
            raise InvalidNamespaceError(f"{what} {namespace!r}: labels cannot be empty strings")
        if SEP in label:
            raise InvalidNamespaceError(
                f"{what} {namespace!r}: label {label!r} contains a period ('.'), "
                "which labels cannot hold"
            )
        if "\x00" in label:
            raise InvalidNamespaceError(
                f"{what} {namespace!r}: label {label!r} contains a NUL byte, "
                "which labels cannot hold"
            )
    return namespace


def check_namespace(namespace: Any) -> tuple[str, ...]:
    """A namespace an item may be stored under (non-empty, not under ``langgraph``)."""
    check_labels(namespace)
    if not namespace:
        raise InvalidNamespaceError("a namespace cannot be empty: give at least one label")
    if namespace[0] == RESERVED_ROOT:
        raise InvalidNamespaceError(
            f"namespace {namespace!r}: the root label {RESERVED_ROOT!r} is reserved by LangGraph"
        )
    return namespace


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


def ns_text(namespace: tuple[str, ...]) -> str:
    """The text form of a (checked) namespace: its labels joined by ``.``."""
    return SEP.join(namespace)


def ns_from_text(text: str) -> tuple[str, ...]:
    """The namespace of a text form (see :func:`ns_text`)."""
    return tuple(text.split(SEP)) if text else ()


def ns_prefix_bounds(prefix: tuple[str, ...]) -> tuple[str, str] | None:
    """``(low, high)``: the text forms of namespaces under ``prefix`` (the prefix's
    own excluded) are those ``low <= t < high`` in code-point order; None for ().

    A namespace equal to the prefix is matched separately (``t = ns_text(prefix)``).
    """
    if not prefix:
        return None
    base = ns_text(prefix)
    return base + SEP, base + chr(ord(SEP) + 1)


# ---- stored items and TTL ----------------------------------------------------


@dataclass(slots=True)
class StoredItem:
    """One item as a backend reads it back (value opened), times in Unix seconds.

    Attributes:
        namespace, key: The item's place.
        value: Its value (a dict).
        created_at, updated_at: When it was first stored and last written.
        expires_at: When it expires (None: never).
        ttl_minutes: The TTL it was stored with, for refreshes (None: none).
        vectors: Its embeddings by field path (empty when not indexed).
    """

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: float
    updated_at: float
    expires_at: float | None = None
    ttl_minutes: float | None = None
    vectors: dict[str, list[float]] = field(default_factory=dict)

    def item(self) -> Item:
        return Item(
            value=self.value,
            key=self.key,
            namespace=self.namespace,
            created_at=to_datetime(self.created_at),
            updated_at=to_datetime(self.updated_at),
        )

    def search_item(self, score: float | None = None) -> SearchItem:
        return SearchItem(
            namespace=self.namespace,
            key=self.key,
            value=self.value,
            created_at=to_datetime(self.created_at),
            updated_at=to_datetime(self.updated_at),
            score=score,
        )


def to_datetime(seconds: float) -> datetime:
    """Unix seconds as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, timezone.utc)


def expires_at(ttl_minutes: float | None, now: float) -> float | None:
    """When an item written or refreshed at ``now`` with ``ttl_minutes`` expires."""
    if ttl_minutes is None:
        return None
    return now + float(ttl_minutes) * 60.0


def is_live(expiry: float | None, now: float) -> bool:
    """Whether an item with this expiry may still be returned at ``now``."""
    return expiry is None or expiry > now


def refreshed(item: StoredItem, now: float) -> float | None:
    """The new expiry of an item a refreshing read returned; None: nothing to refresh."""
    if item.ttl_minutes is None:
        return None
    return expires_at(item.ttl_minutes, now)


# ---- filters -----------------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ordered(value: Any, operator: str, operand: Any) -> bool:
    """``value <op> operand``: numbers as numbers, strings as strings, else false."""
    if _number(value) and _number(operand):
        if isinstance(value, float) and math.isnan(value):
            return False
    elif not (isinstance(value, str) and isinstance(operand, str)):
        return False
    if operator == "$gt":
        return bool(value > operand)
    if operator == "$gte":
        return bool(value >= operand)
    if operator == "$lt":
        return bool(value < operand)
    return bool(value <= operand)


def _apply(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    if operator in _OPERATORS:
        return _ordered(value, operator, operand)
    raise InvalidInputError(
        f"unsupported filter operator {operator!r}: use one of {', '.join(_OPERATORS)}"
    )


def _compare(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_apply(value, k, v) for k, v in wanted.items())
        if not isinstance(value, Mapping):
            return False
        return all(_compare(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(wanted)
            and all(_compare(a, b) for a, b in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes a search filter (None or {}: every value)."""
    if not filter:
        return True
    return all(_compare(value.get(k), wanted) for k, wanted in filter.items())


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


def plan_batch(ops: Iterable[Op]) -> BatchPlan:
    """Check and plan a batch: reads see the store before the batch, puts apply after.

    Raises:
        InvalidNamespaceError, InvalidInputError: an op is malformed (nothing runs).
    """
    plan = BatchPlan(list(ops))
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


def covering(prefixes: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The fewest prefixes whose namespaces include those of every prefix given."""
    kept: list[tuple[str, ...]] = []
    for p in sorted(prefixes, key=len):
        if not any(p[: len(k)] == k for k in kept):
            kept.append(p)
    return kept


def under(namespace: tuple[str, ...], prefix: Sequence[str]) -> bool:
    """Whether ``namespace`` is ``prefix`` or below it."""
    return tuple(namespace[: len(prefix)]) == tuple(prefix)


# ---- search ------------------------------------------------------------------


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors (0.0 when either is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if na == 0 or nb == 0:
        return 0.0
    return dot / (na * nb)


def _recency(item: StoredItem) -> tuple[float, str, str]:
    """Newest first; ties by the namespace's text form, then the key, in code-point order
    (what a backend's ``ORDER BY updated_at DESC, prefix, key`` under the C collation
    gives, so a page it cuts in SQL is the page cut here)."""
    return (-item.updated_at, ns_text(item.namespace), item.key)


def search(
    op: SearchOp,
    candidates: Iterable[StoredItem],
    now: float,
    query_vector: Sequence[float] | None = None,
) -> list[SearchItem]:
    """The result of one search over ``candidates`` (items a backend read under a prefix
    that covers ``op.namespace_prefix``; expired and out-of-prefix ones are dropped here).

    With ``query_vector`` (the store has an index and the op a query), items are
    ranked by their best vector's cosine similarity; ``offset`` skips ranked items and
    items without vectors fill what ``limit`` leaves (as ``InMemoryStore`` does).
    Otherwise newest ``updated_at`` first.
    """
    kept = [
        c
        for c in candidates
        if under(c.namespace, op.namespace_prefix)
        and is_live(c.expires_at, now)
        and matches(c.value, op.filter)
    ]
    if query_vector is None or not op.query:
        kept.sort(key=_recency)
        return [c.search_item() for c in kept[op.offset : op.offset + op.limit]]
    scored: list[tuple[float, StoredItem]] = []
    scoreless: list[StoredItem] = []
    for c in kept:
        if c.vectors:
            best = max(cosine(query_vector, v) for v in c.vectors.values())
            scored.append((best, c))
        else:
            scoreless.append(c)
    scored.sort(key=lambda pair: (-pair[0], *_recency(pair[1])))
    page: list[SearchItem] = [
        c.search_item(float(s)) for s, c in scored[op.offset : op.offset + op.limit]
    ]
    if scoreless and len(page) < op.limit:
        scoreless.sort(key=_recency)
        page.extend(c.search_item() for c in scoreless[: op.limit - len(page)])
    return page


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
) -> tuple[list[Any], list[Refresh]]:
    """The results of a batch's ops (None for puts) and the expiries its reads refresh.

    Args:
        plan: The batch.
        found: The items the gets read, by (namespace, key) (expired ones may be in it).
        searched: The items under the batch's search prefixes (expired ones may be in it).
        namespaces: The namespaces that hold live items (for listings).
        now: The time of the batch.
        query_vectors: Each search query's embedding (None or missing: no index).
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
        page = search(op, pool, now, vector)
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


def cut_in_storage(op: SearchOp, indexed: bool) -> int | None:
    """How many of the newest items under its prefix a search needs, when that is all
    it needs (no filter, no scoring): ``offset + limit``; else None (every item)."""
    if op.filter or (indexed and op.query):
        return None
    return op.offset + op.limit


# ---- namespace listings ------------------------------------------------------


def namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether a namespace matches a prefix or suffix condition (``*``: any label)."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InvalidInputError(f"unsupported match type {condition.match_type!r}")
    return all(p == "*" or label == p for label, p in pairs)


def list_namespaces(
    op: ListNamespacesOp, namespaces: Iterable[tuple[str, ...]]
) -> list[tuple[str, ...]]:
    """The listing of ``op`` over the namespaces that hold live items."""
    found = {
        ns for ns in namespaces if all(namespace_matches(c, ns) for c in op.match_conditions or ())
    }
    if op.max_depth is not None:
        found = {ns[: op.max_depth] for ns in found}
    return sorted(found)[op.offset : op.offset + op.limit]


def listing_prefix(op: ListNamespacesOp) -> tuple[str, ...]:
    """The literal labels every listed namespace starts with (before any ``*``)."""
    best: tuple[str, ...] = ()
    for c in op.match_conditions or ():
        if c.match_type != "prefix":
            continue
        labels: list[str] = []
        for label in c.path:
            if label == "*":
                break
            labels.append(label)
        if len(labels) > len(best):
            best = tuple(labels)
    return best


# ---- embeddings --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EmbedTask:
    """One text of one put to embed, and where its vector goes."""

    namespace: tuple[str, ...]
    key: str
    path: str
    text: str


def index_fields(index: Mapping[str, Any] | None) -> list[str]:
    """The field paths an index embeds by default (``["$"]``: the whole value)."""
    if not index:
        return []
    return list(index.get("fields") or ["$"])


def texts_to_embed(puts: Iterable[PutOp], fields: Sequence[str]) -> list[EmbedTask]:
    """The texts of ``puts`` an index with ``fields`` embeds (none without an index).

    A put's ``index`` overrides ``fields`` (``False``: not embedded); a path that
    yields several texts stores one vector per text (``path.0``, ``path.1``, ...).
    """
    if not fields:
        return []
    tasks: list[EmbedTask] = []
    for op in puts:
        if op.value is None or op.index is False:
            continue
        paths = fields if op.index is None else list(op.index)
        for path in paths:
            texts = get_text_at_path(op.value, path if path == "$" else tokenize_path(path))
            if len(texts) == 1:
                tasks.append(EmbedTask(op.namespace, op.key, path, texts[0]))
            else:
                tasks.extend(
                    EmbedTask(op.namespace, op.key, f"{path}.{i}", text)
                    for i, text in enumerate(texts)
                )
    return tasks


def vectors_by_item(
    tasks: Sequence[EmbedTask], vectors: Sequence[Sequence[float]], dims: int | None = None
) -> dict[tuple[tuple[str, ...], str], dict[str, list[float]]]:
    """The embeddings of each put item, by field path.

    Raises:
        InvalidInputError: the embedder returned another number of vectors than texts,
            or a vector of another size than ``dims``.
    """
    if len(vectors) != len(tasks):
        raise InvalidInputError(
            f"the embedding function returned {len(vectors)} vectors for {len(tasks)} texts"
        )
    out: dict[tuple[tuple[str, ...], str], dict[str, list[float]]] = {}
    for task, vector in zip(tasks, vectors, strict=True):
        values = [float(x) for x in vector]
        if dims is not None and len(values) != dims:
            raise InvalidInputError(
                f"the embedding function returned a vector of {len(values)} dimensions, "
                f"the index says dims={dims}"
            )
        out.setdefault((task.namespace, task.key), {})[task.path] = values
    return out
