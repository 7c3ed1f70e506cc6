"""The pure store core: namespaces, filters, ordering, listings, TTL, batches, scoring."""

from __future__ import annotations

import math

import pytest
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp

from langgraph_durable._core import store as core
from langgraph_durable._core.store import StoredItem
from langgraph_durable.errors import InvalidInputError, InvalidNamespaceError


def item(
    ns: tuple[str, ...], key: str, value: dict, updated: float = 0.0, **kw: object
) -> StoredItem:
    return StoredItem(ns, key, value, created_at=updated, updated_at=updated, **kw)  # type: ignore[arg-type]


# ---- namespaces ---------------------------------------------------------------


@pytest.mark.parametrize(
    "ns",
    [(), ("",), ("a", ""), ("a.b",), ("langgraph",), ("langgraph", "x"), ("a", 1), ("a\x00",)],
)
def test_bad_namespaces_are_refused_with_our_error(ns: tuple) -> None:
    with pytest.raises(InvalidNamespaceError):
        core.check_namespace(ns)
    with pytest.raises(InvalidNamespaceError):
        core.plan_batch([PutOp(ns, "k", {"v": 1})])


def test_reserved_root_only_at_the_root_and_prefixes_may_be_empty() -> None:
    assert core.check_namespace(("users", "langgraph")) == ("users", "langgraph")
    assert core.check_labels(()) == ()
    core.plan_batch([SearchOp(()), GetOp(("langgraph",), "k")])  # reads check labels only
    with pytest.raises(InvalidNamespaceError):
        core.plan_batch([SearchOp(("a.b",))])
    with pytest.raises(InvalidNamespaceError):
        core.plan_batch([ListNamespacesOp((MatchCondition("prefix", ("x.y",)),))])


def test_namespace_text_and_prefix_bounds() -> None:
    ns = ("a", "b")
    assert core.ns_from_text(core.ns_text(ns)) == ns
    low, high = core.ns_prefix_bounds(("a",)) or ("", "")
    inside = [core.ns_text(n) for n in [("a", "b"), ("a", "z", "q"), ("a", "~")]]
    outside = [core.ns_text(n) for n in [("a",), ("ab",), ("a-",), ("b",), ("a0",)]]
    assert all(low <= t < high for t in inside)
    assert not any(low <= t < high for t in outside)
    assert core.ns_prefix_bounds(()) is None


# ---- filters --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "flt", "expected"),
    [
        ({"n": 10}, {"n": {"$gt": 9}}, True),  # numbers as numbers (text: "10" < "9")
        ({"n": 10}, {"n": {"$lt": 9}}, False),
        ({"n": 2.5}, {"n": {"$gte": 2.5, "$lte": 2.5}}, True),
        ({"s": "b"}, {"s": {"$gt": "a"}}, True),  # strings as strings
        ({"s": "10"}, {"s": {"$gt": "9"}}, False),
        ({"s": "10"}, {"s": {"$gt": 9}}, False),  # across types: false, no error
        ({}, {"n": {"$gt": 1}}, False),  # missing field
        ({"n": True}, {"n": {"$gt": 0}}, False),  # a bool is not a number here
        ({"n": 1}, {"n": {"$ne": 2}}, True),
        ({"n": 1}, {"n": {"$eq": 1}}, True),
        ({"n": 1}, {"n": 1}, True),
        ({"a": {"b": {"c": 3}}}, {"a": {"b": {"c": {"$gt": 2}}}}, True),  # nested path
        ({"a": {"b": 3}}, {"a": {"b": 4}}, False),
        ({"a": 3}, {"a": {"b": 3}}, False),
        ({"t": [1, 2]}, {"t": [1, 2]}, True),
        ({"t": [1, 2]}, {"t": [1]}, False),
        ({"x": None}, {"x": None}, True),
        ({"n": float("nan")}, {"n": {"$lt": 1}}, False),
    ],
)
def test_filters(value: dict, flt: dict, expected: bool) -> None:
    assert core.matches(value, flt) is expected


def test_unknown_operator_is_our_error() -> None:
    with pytest.raises(InvalidInputError, match=r"\$in"):
        core.matches({"n": 1}, {"n": {"$in": [1]}})


# ---- search ordering, offset, limit ---------------------------------------------


def test_search_newest_first_and_offset_limit_after_the_filter() -> None:
    items = [item(("d",), f"k{i}", {"n": i}, updated=float(i)) for i in range(10)]
    op = SearchOp(("d",), filter={"n": {"$gte": 3}}, limit=3, offset=2)
    got = core.search(op, items, now=100.0)
    assert [r.key for r in got] == ["k7", "k6", "k5"]
    ties = [item(("d",), k, {}, updated=1.0) for k in ("b", "a", "c")]
    assert [r.key for r in core.search(SearchOp(("d",)), ties, 5.0)] == ["a", "b", "c"]


def test_search_keeps_to_its_prefix_and_drops_expired() -> None:
    items = [
        item(("a",), "1", {}),
        item(("a", "b"), "2", {}),
        item(("ab",), "3", {}),
        item(("a",), "4", {}, expires_at=50.0),
    ]
    assert {r.key for r in core.search(SearchOp(("a",)), items, now=49.0)} == {"1", "2", "4"}
    assert {r.key for r in core.search(SearchOp(("a",)), items, now=50.0)} == {"1", "2"}


def test_search_by_score_then_scoreless() -> None:
    items = [
        item(("d",), "far", {}, vectors={"$": [0.0, 1.0]}),
        item(("d",), "near", {}, vectors={"$": [1.0, 0.1], "x": [0.0, 1.0]}),
        item(("d",), "none", {}, updated=9.0),
    ]
    op = SearchOp(("d",), query="q", limit=3)
    got = core.search(op, items, 0.0, query_vector=[1.0, 0.0])
    assert [r.key for r in got] == ["near", "far", "none"]
    assert got[0].score == pytest.approx(1 / math.sqrt(1.01))
    assert got[2].score is None
    paged = core.search(op._replace(offset=1, limit=1), items, 0.0, query_vector=[1.0, 0.0])
    assert [r.key for r in paged] == ["far"]
    # without a query vector (no index): by recency
    assert core.search(op, items, 0.0)[0].key == "none"


def test_cosine() -> None:
    assert core.cosine([1, 0], [2, 0]) == pytest.approx(1.0)
    assert core.cosine([1, 0], [0, 3]) == pytest.approx(0.0)
    assert core.cosine([0, 0], [1, 1]) == 0.0


# ---- namespace listings ---------------------------------------------------------


NSS = [("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("b", "c"), ("z",)]


@pytest.mark.parametrize(
    ("conditions", "max_depth", "limit", "offset", "expected"),
    [
        ((), None, 100, 0, sorted(NSS)),
        ((MatchCondition("prefix", ("a",)),), None, 100, 0, NSS[:3]),
        ((MatchCondition("prefix", ("*", "b")),), None, 100, 0, NSS[:2]),
        ((MatchCondition("suffix", ("c",)),), None, 100, 0, [("a", "b", "c"), ("b", "c")]),
        ((MatchCondition("suffix", ("*", "c")),), None, 100, 0, [("a", "b", "c"), ("b", "c")]),
        ((), 1, 100, 0, [("a",), ("b",), ("z",)]),
        ((), 2, 2, 1, [("a", "x"), ("b", "c")]),
        ((MatchCondition("prefix", ("a", "b", "c", "d")),), None, 100, 0, []),
    ],
)
def test_list_namespaces(
    conditions: tuple, max_depth: int | None, limit: int, offset: int, expected: list
) -> None:
    op = ListNamespacesOp(conditions, max_depth, limit, offset)
    assert core.list_namespaces(op, NSS) == expected


def test_listing_prefix_is_the_literal_head() -> None:
    op = ListNamespacesOp((MatchCondition("prefix", ("a", "*", "c")),))
    assert core.listing_prefix(op) == ("a",)
    assert core.listing_prefix(ListNamespacesOp((MatchCondition("suffix", ("a",)),))) == ()


# ---- TTL --------------------------------------------------------------------------


def test_ttl_expiry_and_refresh() -> None:
    assert core.expires_at(None, 10.0) is None
    assert core.expires_at(2, 10.0) == 130.0
    assert core.is_live(None, 1e12) and core.is_live(11.0, 10.0)
    assert not core.is_live(10.0, 10.0)
    it = item(("a",), "k", {}, expires_at=130.0, ttl_minutes=2.0)
    assert core.refreshed(it, 100.0) == 220.0
    assert core.refreshed(item(("a",), "k", {}), 100.0) is None


# ---- batches ----------------------------------------------------------------------


def test_plan_batch_last_put_wins_and_reads_are_collected() -> None:
    ops = [
        PutOp(("a",), "k", {"v": 1}),
        GetOp(("a",), "k"),
        PutOp(("a",), "j", {"v": 0}),
        PutOp(("a",), "k", None),
        SearchOp(("a", "b")),
        SearchOp(("a",)),
        GetOp(("a",), "k"),
        ListNamespacesOp(),
    ]
    plan = core.plan_batch(ops)
    assert plan.gets == [1, 6] and plan.searches == [4, 5] and plan.listings == [7]
    assert plan.get_keys == [(("a",), "k")]
    assert plan.search_prefixes == [("a",)]  # ("a", "b") is covered by ("a",)
    assert [(w.key, w.value) for w in plan.writes()] == [("j", {"v": 0}), ("k", None)]
    assert plan.reads


def test_plan_batch_refuses_bad_ops() -> None:
    for bad in [
        PutOp(("a",), 1, {}),  # type: ignore[arg-type]
        PutOp(("a",), "k", [1]),  # type: ignore[arg-type]
        PutOp(("a",), "k", {}, ttl=-1),
        SearchOp(("a",), limit=-1),
        ListNamespacesOp(max_depth=0),
        "not an op",
    ]:
        with pytest.raises(InvalidInputError):
            core.plan_batch([bad])  # type: ignore[list-item]


def test_queries_are_deduplicated() -> None:
    plan = core.plan_batch([SearchOp(("a",), query="x"), SearchOp(("b",), query="x"), SearchOp(())])
    assert plan.queries() == ["x"]


# ---- embeddings -----------------------------------------------------------------


def test_texts_to_embed_follow_fields_and_per_put_index() -> None:
    puts = [
        PutOp(("a",), "1", {"text": "hello", "tags": ["x", "y"]}),
        PutOp(("a",), "2", {"text": "no"}, index=False),
        PutOp(("a",), "3", {"other": "o"}, index=["other"]),
        PutOp(("a",), "4", None),
    ]
    tasks = core.texts_to_embed(puts, ["text", "tags[*]"])
    assert [(t.key, t.path, t.text) for t in tasks] == [
        ("1", "text", "hello"),
        ("1", "tags[*].0", "x"),
        ("1", "tags[*].1", "y"),
        ("3", "other", "o"),
    ]
    assert core.texts_to_embed(puts, []) == []
    vectors = core.vectors_by_item(tasks, [[1.0], [2.0], [3.0], [4.0]], dims=1)
    assert vectors[(("a",), "1")] == {"text": [1.0], "tags[*].0": [2.0], "tags[*].1": [3.0]}
    with pytest.raises(InvalidInputError):
        core.vectors_by_item(tasks, [[1.0]])
    with pytest.raises(InvalidInputError):
        core.vectors_by_item(tasks, [[1.0, 2.0]] * 4, dims=1)


# ---- purity -----------------------------------------------------------------------


def test_the_store_core_is_pure() -> None:
    """No driver, no I/O, no clock: the core's package imports none of them."""
    import ast
    import pathlib

    forbidden = {"psycopg", "psycopg_pool", "redis", "boto3", "botocore", "aiobotocore"}
    forbidden |= {"socket", "time", "os", "asyncio", "threading", "random"}
    folder = pathlib.Path(core.__file__).parent
    modules = sorted(folder.glob("*.py"))
    assert {p.name for p in modules} >= {"__init__.py", "batch.py", "filters.py", "search.py"}
    for path in modules:
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        assert not names & forbidden, (path.name, sorted(names & forbidden))
