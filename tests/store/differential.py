"""A differential harness for LangGraph stores: a store under test against ``InMemoryStore``.

A *program* is a list of batches; each batch is a list of ops (``PutOp`` with a
value or ``None`` to delete, ``GetOp``, ``SearchOp`` with filters, limit, offset
and sometimes a query, ``ListNamespacesOp`` with prefix/suffix conditions and
``max_depth``). :func:`run_program` / :func:`arun_program` run it on a store
under test (``batch`` / ``abatch``) and on a fresh ``InMemoryStore`` with the
same index, and compare every result with :func:`compare`. Where LangGraph
leaves the answer open the comparison allows what the rules allow:

- search without a query: ``InMemoryStore`` returns items in its dict order, we
  newest ``updated_at`` first (LangGraph documents recency). The harness checks
  that the page has the reference's length, holds only items the reference
  matches (values equal), is newest first, and is the slice
  ``[offset:offset + limit]`` of the store's own full answer (so offset and limit
  are counted after the filter);
- search with a query: the scores (rounded) are those of the reference, item by
  item and in order; items of equal score may come in any order, and items
  without vectors fill the page after the scored ones;
- namespace listings: ``InMemoryStore`` keeps listing a namespace after its last
  item was deleted (and one a get only read); the reference listing is the one of
  the namespaces that hold items, then offset and limit;
- item timestamps are not compared (each store stamps its own clock).

Two faults of ``InMemoryStore`` are worked around on the reference side: an item
put again without its indexed field keeps its old vectors there (the harness drops
them, as a put replaces the item), and a batch whose puts share a text fails there
(the harness applies a batch's puts to it one at a time, same final state).

The store under test comes from a factory, so any backend can use the harness:
``make(index=..., ttl=..., clock=...)`` returns a context manager (sync harness)
or an async context manager (async harness) yielding a store with no items.
:func:`check_ttl` / :func:`acheck_ttl` check TTL expiry and refresh with an
injected clock (``InMemoryStore`` has no TTL, so against a plain model).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
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
from langgraph.store.memory import InMemoryStore

__all__ = [
    "DIMS",
    "embed",
    "index_config",
    "programs",
    "run_program",
    "arun_program",
    "compare",
    "check_ttl",
    "acheck_ttl",
    "FakeClock",
    "COVERING_PROGRAM",
]

DIMS = 8
LABELS = ("a", "b", "c")
KEYS = ("k1", "k2", "k3", "k4")
WORDS = ("apple", "pear", "river", "stone", "cloud", "apple pie", "blue sky")
STRINGS = ("x", "y", "10", "9", "")
BIG = 10_000


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedding: each word hashed into one of DIMS dimensions."""
    out = []
    for text in texts:
        vector = [0.0] * DIMS
        for word in text.split():
            digest = hashlib.sha256(word.encode()).digest()
            vector[digest[0] % DIMS] += 1.0 + digest[1] / 255.0
        out.append(vector)
    return out


def index_config() -> dict[str, Any]:
    """The index every differential store uses (the same for the reference)."""
    return {"dims": DIMS, "embed": embed, "fields": ["text"]}


# ---- programs ---------------------------------------------------------------------

namespaces = st.lists(st.sampled_from(LABELS), min_size=1, max_size=3).map(tuple)
prefixes = st.lists(st.sampled_from(LABELS), min_size=0, max_size=2).map(tuple)
values = st.fixed_dictionaries(
    {
        "n": st.one_of(st.integers(-3, 12), st.sampled_from([0.5, 2.5, 10.0])),
        "s": st.sampled_from(STRINGS),
        "tag": st.fixed_dictionaries({"t": st.integers(0, 3)}),
    },
    optional={"text": st.sampled_from(WORDS), "list": st.lists(st.integers(0, 2), max_size=2)},
)
number_filters = st.dictionaries(
    st.sampled_from(["$gt", "$gte", "$lt", "$lte", "$eq", "$ne"]),
    st.one_of(st.integers(-2, 12), st.just(2.5)),
    min_size=1,
    max_size=2,
)
filters = st.one_of(
    st.none(),
    st.fixed_dictionaries({"n": number_filters}),
    st.fixed_dictionaries({"s": st.sampled_from(STRINGS)}),
    st.fixed_dictionaries({"s": st.fixed_dictionaries({"$ne": st.sampled_from(STRINGS)})}),
    st.fixed_dictionaries({"tag": st.fixed_dictionaries({"t": st.integers(0, 3)})}),
    st.fixed_dictionaries({"tag": st.fixed_dictionaries({"t": number_filters})}),
    st.fixed_dictionaries({"list": st.lists(st.integers(0, 2), max_size=2)}),
    st.fixed_dictionaries({"n": number_filters, "s": st.sampled_from(STRINGS)}),
)
puts = st.builds(
    PutOp,
    namespace=namespaces,
    key=st.sampled_from(KEYS),
    value=st.one_of(st.none(), values, values),
    index=st.sampled_from([None, None, False, ["s"]]),
    ttl=st.none(),
)
gets = st.builds(GetOp, namespace=namespaces, key=st.sampled_from(KEYS))
searches = st.builds(
    SearchOp,
    namespace_prefix=prefixes,
    filter=filters,
    limit=st.sampled_from([1, 2, 3, 10]),
    offset=st.sampled_from([0, 0, 1, 2]),
    query=st.one_of(st.none(), st.sampled_from(WORDS)),
)
paths = st.lists(st.sampled_from(LABELS + ("*",)), min_size=1, max_size=2).map(tuple)
conditions = st.lists(
    st.builds(MatchCondition, match_type=st.sampled_from(["prefix", "suffix"]), path=paths),
    max_size=2,
).map(tuple)
listings = st.builds(
    ListNamespacesOp,
    match_conditions=conditions,
    max_depth=st.sampled_from([None, 1, 2]),
    limit=st.sampled_from([1, 3, 100]),
    offset=st.sampled_from([0, 0, 1]),
)
ops = st.one_of(puts, puts, puts, gets, searches, searches, listings)
batches = st.lists(ops, min_size=1, max_size=4)


def programs(max_batches: int = 12) -> st.SearchStrategy[list[list[Op]]]:
    """Random programs: lists of batches."""
    return st.lists(batches, min_size=1, max_size=max_batches)


#: A fixed program that touches every op kind and rule, run before the drawn ones.
COVERING_PROGRAM: list[list[Op]] = [
    [
        PutOp(("a",), "k1", {"n": 1, "s": "x", "tag": {"t": 1}, "text": "apple"}),
        PutOp(("a", "b"), "k2", {"n": 10, "s": "10", "tag": {"t": 2}, "text": "river"}),
        PutOp(("a", "b"), "k3", {"n": 9, "s": "9", "tag": {"t": 3}}, index=False),
        PutOp(("b",), "k1", {"n": 2.5, "s": "y", "tag": {"t": 0}, "text": "apple pie"}),
        PutOp(("c", "a", "b"), "k4", {"n": -1, "s": "", "tag": {"t": 0}, "list": [1, 2]}),
    ],
    [
        GetOp(("a",), "k1"),
        GetOp(("a",), "missing"),
        SearchOp(("a",), filter={"n": {"$gt": 2}}),  # 10 > 9 as numbers
        SearchOp((), filter={"tag": {"t": {"$lte": 1}}}, limit=2, offset=1),
        SearchOp((), query="apple", limit=3),
        SearchOp(("a",), query="river stone", limit=2, offset=1),
        ListNamespacesOp(),
        ListNamespacesOp((MatchCondition("suffix", ("b",)),), max_depth=2),
        ListNamespacesOp((MatchCondition("prefix", ("*", "b")),)),
    ],
    [
        PutOp(("a",), "k1", {"n": 3, "s": "y", "tag": {"t": 1}}),
        PutOp(("a",), "k1", None),  # the last put of a batch wins
        GetOp(("a",), "k1"),  # reads see the store before the batch
        PutOp(("a", "b"), "k2", None),
        PutOp(("a", "b"), "k3", None),
        PutOp(("b",), "k1", {"n": 7, "s": "x", "tag": {"t": 2}, "text": "stone"}),  # update
    ],
    [
        GetOp(("a",), "k1"),
        GetOp(("b",), "k1"),
        SearchOp(("b",), query="stone"),
        ListNamespacesOp(),  # ("a",) and ("a", "b") hold nothing now
        SearchOp((), filter={"list": [1, 2]}),
        SearchOp(("c",), query="anything"),
    ],
]


# ---- comparison ---------------------------------------------------------------------


def _id(item: Item) -> tuple[tuple[str, ...], str]:
    return (tuple(item.namespace), item.key)


@dataclass
class Mismatch(AssertionError):
    """A result of the store under test that the reference does not allow."""

    op: Op
    ours: Any
    reference: Any
    why: str

    def __str__(self) -> str:
        return (
            f"{self.why}\n  op: {self.op!r}\n  ours: {self.ours!r}\n  reference: {self.reference!r}"
        )


def _expected_listing(op: ListNamespacesOp, reference: InMemoryStore) -> list[tuple[str, ...]]:
    """The reference's listing over the namespaces that hold items (see the module doc)."""
    matched = reference.batch([op._replace(max_depth=None, limit=BIG, offset=0)])[0]
    live = {ns for ns, items in reference._data.items() if items}
    kept = {ns if op.max_depth is None else ns[: op.max_depth] for ns in matched if ns in live}
    return sorted(kept)[op.offset : op.offset + op.limit]


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def compare(
    op: Op,
    ours: Any,
    reference_result: Any,
    reference: InMemoryStore,
    our_full: Callable[[SearchOp], list[SearchItem]],
) -> None:
    """Check one op's result against the reference's (raises :class:`Mismatch`).

    Args:
        op: The op.
        ours, reference_result: Its results from the store under test and the reference.
        reference: The reference store, in the state before the op's batch.
        our_full: Runs a search on the store under test (same state), for the
            full answer an offset/limit page must be a slice of.
    """
    if isinstance(op, PutOp):
        if ours is not None:
            raise Mismatch(op, ours, None, "a put returned a result")
        return
    if isinstance(op, GetOp):
        if (ours is None) != (reference_result is None):
            raise Mismatch(op, ours, reference_result, "get: found in one store only")
        if ours is not None and (
            ours.value != reference_result.value or _id(ours) != _id(reference_result)
        ):
            raise Mismatch(op, ours, reference_result, "get: another item")
        return
    if isinstance(op, ListNamespacesOp):
        expected = _expected_listing(op, reference)
        if [tuple(n) for n in ours] != expected:
            raise Mismatch(op, ours, expected, "list_namespaces differs")
        return
    assert isinstance(op, SearchOp)
    _compare_search(op, ours, reference_result, reference, our_full)


def _compare_search(
    op: SearchOp,
    ours: list[SearchItem],
    expected: list[SearchItem],
    reference: InMemoryStore,
    our_full: Callable[[SearchOp], list[SearchItem]],
) -> None:
    if len(ours) != len(expected):
        raise Mismatch(op, ours, expected, "search: another number of items")
    ids = [_id(i) for i in ours]
    if len(set(ids)) != len(ids):
        raise Mismatch(op, ours, expected, "search: an item twice")
    full_ref = {_id(i): i for i in reference.batch([op._replace(limit=BIG, offset=0)])[0]}
    for got in ours:
        want = full_ref.get(_id(got))
        if want is None or want.value != got.value:
            raise Mismatch(op, ours, expected, f"search: {_id(got)} is not a match")
    if op.query:
        scores = [i.score for i in ours]
        if not all(_close(a, b.score) for a, b in zip(scores, expected, strict=True)):
            raise Mismatch(op, ours, expected, "search: other scores")
        if not all(_close(got.score, full_ref[_id(got)].score) for got in ours):
            raise Mismatch(op, ours, expected, "search: an item's score differs")
        return
    stamps = [i.updated_at for i in ours]
    if stamps != sorted(stamps, reverse=True):
        raise Mismatch(op, ours, expected, "search: not newest first")
    whole = our_full(op._replace(limit=BIG, offset=0))
    if [_id(i) for i in whole[op.offset : op.offset + op.limit]] != ids:
        raise Mismatch(op, ours, whole, "search: the page is not a slice of the full answer")


# ---- running ------------------------------------------------------------------------


def _reference() -> InMemoryStore:
    return InMemoryStore(index=index_config())  # type: ignore[arg-type]


def _fulls(batch: list[Op]) -> tuple[list[Op], dict[int, int]]:
    """For each search without a query, the same search unpaged and not refreshing TTLs,
    run as a batch of its own just before the batch (so it sees the state the batch's
    reads see, and the store cannot serve the page from it): the page must be a slice
    of it. Returns those ops and the index of each one's result by the search's index."""
    full_ops: list[Op] = []
    fulls: dict[int, int] = {}
    for i, op in enumerate(batch):
        if isinstance(op, SearchOp) and not op.query:
            fulls[i] = len(full_ops)
            full_ops.append(op._replace(limit=BIG, offset=0, refresh_ttl=False))
    return full_ops, fulls


def _check_batch(
    batch: list[Op],
    results: list[Any],
    full_results: list[Any],
    fulls: dict[int, int],
    ref: InMemoryStore,
) -> None:
    """Compare a batch's results, then apply it to the reference."""
    for i, op in enumerate(batch):
        expected = ref.batch([op])[0] if not isinstance(op, PutOp) else None
        full = full_results[fulls[i]] if i in fulls else []
        compare(op, results[i], expected, ref, lambda _op, full=full: full)  # type: ignore[misc]
    for op in batch:
        if isinstance(op, PutOp):
            # InMemoryStore keeps an item's old vectors when it is put again unindexed
            # (or without the indexed field): drop them, as a put replaces the item.
            ref._vectors[op.namespace].pop(op.key, None)
            # One put at a time: InMemoryStore fails a batch whose puts share a text.
            ref.batch([op])


def run_program(store: Any, program: list[list[Op]]) -> None:
    """Run ``program`` on ``store`` (sync ``batch``) and on InMemoryStore; compare."""
    reference = _reference()
    for batch in program:
        full_ops, fulls = _fulls(batch)
        full_results = store.batch(full_ops) if full_ops else []
        _check_batch(batch, store.batch(batch), full_results, fulls, reference)


async def arun_program(store: Any, program: list[list[Op]]) -> None:
    """Run ``program`` on ``store`` (``abatch``) and on InMemoryStore; compare."""
    reference = _reference()
    for batch in program:
        full_ops, fulls = _fulls(batch)
        full_results = await store.abatch(full_ops) if full_ops else []
        _check_batch(batch, await store.abatch(batch), full_results, fulls, reference)


# ---- TTL ------------------------------------------------------------------------------


class FakeClock:
    """An injected clock (Unix seconds) a test moves by hand."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def tick(self) -> float:
        """The time, then one second later (each call a new time)."""
        self.now += 1
        return self.now


TTL = {"default_ttl": 1.0, "refresh_on_read": True}


def _ttl_steps(clock: FakeClock) -> Iterator[tuple[str, Any, Any]]:
    """The TTL scenario as (method, args, expected) steps; the clock moves between them.

    ``default_ttl`` is one minute with ``refresh_on_read``.
    """
    ns = ("ttl", "user")
    yield "put", (ns, "a", {"v": 1}), None  # expires at +60 s
    yield "put", (ns, "forever", {"v": 2}, None, None), None  # ttl=None: never
    yield "put", (ns, "two", {"v": 3}, None, 2.0), None  # expires at +120 s
    clock.advance(50)
    yield "get", (ns, "a"), {"v": 1}  # refresh: now +50 + 60 = 110
    clock.advance(40)  # 90
    yield "get_norefresh", (ns, "a"), {"v": 1}
    yield "search", (ns,), {"a", "forever", "two"}  # refreshes a (150) and two (210)
    clock.advance(100)  # 190
    yield "search_norefresh", (ns,), {"forever", "two"}
    yield "get", (ns, "a"), None  # expired at 150: never returned
    yield "list", (), [("ttl", "user")]
    clock.advance(30)  # 220: two expired at 210
    yield "get", (ns, "two"), None
    yield "get", (ns, "forever"), {"v": 2}
    yield "put", (("gone",), "x", {"v": 4}, None, 0.5), None
    yield "list", (), [("gone",), ("ttl", "user")]
    clock.advance(31)
    yield "list", (), [("ttl", "user")]


def _ttl_call(store: Any, method: str, args: Any) -> Any:
    if method == "put":
        return store.put(*args[:4], **({"ttl": args[4]} if len(args) > 4 else {}))
    if method == "get":
        return store.get(*args)
    if method == "get_norefresh":
        return store.get(*args, refresh_ttl=False)
    if method == "search":
        return store.search(*args)
    if method == "search_norefresh":
        return store.search(*args, refresh_ttl=False)
    return store.list_namespaces()


async def _attl_call(store: Any, method: str, args: Any) -> Any:
    if method == "put":
        return await store.aput(*args[:4], **({"ttl": args[4]} if len(args) > 4 else {}))
    if method == "get":
        return await store.aget(*args)
    if method == "get_norefresh":
        return await store.aget(*args, refresh_ttl=False)
    if method == "search":
        return await store.asearch(*args)
    if method == "search_norefresh":
        return await store.asearch(*args, refresh_ttl=False)
    return await store.alist_namespaces()


def _ttl_check(method: str, args: Any, got: Any, expected: Any) -> None:
    if method.startswith("get"):
        value = None if got is None else got.value
        assert value == expected, (method, args, got)
    elif method.startswith("search"):
        assert {i.key for i in got} == expected, (method, args, got)
    elif method == "list":
        assert [tuple(n) for n in got] == expected, (method, got)


def check_ttl(make: Callable[..., AbstractContextManager[Any]]) -> None:
    """TTL with an injected clock: expiry at read, refresh on read, listings."""
    clock = FakeClock()
    with make(ttl=TTL, clock=clock) as store:
        for method, args, expected in _ttl_steps(clock):
            _ttl_check(method, args, _ttl_call(store, method, args), expected)


async def acheck_ttl(make: Callable[..., AbstractAsyncContextManager[Any]]) -> None:
    """:func:`check_ttl` through the async methods."""
    clock = FakeClock()
    async with make(ttl=TTL, clock=clock) as store:
        for method, args, expected in _ttl_steps(clock):
            _ttl_check(method, args, await _attl_call(store, method, args), expected)
