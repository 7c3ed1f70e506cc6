"""DynamoDBStore and AsyncDynamoDBStore: the differential harness, encryption on and off,
raw scans for canaries, tenant separation, calls per batch (no Scan), deleting a namespace.

Against the test rig's moto server through boto3 (nothing patched: calls are counted
with botocore's ``after-call`` hook). ``LGD_PROPERTY_EXAMPLES`` sets the drawn
programs per differential test (default 2 here: moto is slow).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp

from langgraph_durable._core import store as core
from langgraph_durable.dynamodb import AsyncDynamoDBStore, DynamoDBStore
from langgraph_durable.dynamodb._store import StoreOps
from langgraph_durable.errors import (
    ConfigurationError,
    DecryptionError,
    InvalidInputError,
    InvalidNamespaceError,
    SchemaError,
)
from langgraph_durable.protect import Redaction
from tests.dynamodb.helpers import CallCounter, Faults, make_client, raw_items, table_dump
from tests.encryption_helpers import local_encryption
from tests.servers import delete_dynamodb_table, new_dynamodb_table_name
from tests.store import backend_cases as cases
from tests.store.differential import (
    COVERING_PROGRAM,
    FakeClock,
    arun_program,
    index_config,
    programs,
    run_program,
)

PROPERTY = cases.property_settings(2)  # moto is slow


@pytest.fixture(scope="module")
def table(dynamodb_endpoint: str) -> Iterator[str]:
    """One table for the module's stores (each test and example has its own tenant)."""
    name = new_dynamodb_table_name()
    with DynamoDBStore(make_client(dynamodb_endpoint), table=name, ttl={"default_ttl": 5}) as s:
        assert s.setup() == ["created table", "enabled TTL"]
        assert s.setup() == []
    yield name
    delete_dynamodb_table(dynamodb_endpoint, name)


@pytest.fixture(scope="module")
def client(dynamodb_endpoint: str) -> Any:
    return make_client(dynamodb_endpoint)


_options = cases.mode_options


def _url(endpoint: str, table: str) -> str:
    return f"dynamodb://{table}?region=us-east-1&endpoint={endpoint}"


# ---- the differential harness ---------------------------------------------------------


@pytest.mark.parametrize("mode", cases.MODES)
def test_differential_sync(client: Any, table: str, mode: str) -> None:
    tenant = {"now": uuid.uuid4().hex}
    with DynamoDBStore(
        client, table=table, tenant=lambda: tenant["now"], **_options(mode)
    ) as store:
        run_program(store, COVERING_PROGRAM)

        @PROPERTY
        @given(programs(8))
        def check(program: list) -> None:
            tenant["now"] = uuid.uuid4().hex  # every example starts with no items
            run_program(store, program)

        check()


@pytest.mark.parametrize("mode", cases.MODES)
def test_differential_async(client: Any, dynamodb_endpoint: str, table: str, mode: str) -> None:
    async def run(program: list) -> None:
        async with AsyncDynamoDBStore(
            client, table=table, tenant=uuid.uuid4().hex, **_options(mode)
        ) as store:
            await arun_program(store, program)

    async def run_from_url(program: list) -> None:
        async with AsyncDynamoDBStore.from_conn_string(
            _url(dynamodb_endpoint, table), tenant=uuid.uuid4().hex, **_options(mode)
        ) as store:
            await arun_program(store, program)

    asyncio.run(run_from_url(COVERING_PROGRAM))

    @PROPERTY
    @given(programs(6))
    def check(program: list) -> None:
        asyncio.run(run(program))

    check()


@pytest.mark.parametrize("mode", cases.MODES)
def test_ttl_with_an_injected_clock(
    client: Any, dynamodb_endpoint: str, table: str, mode: str
) -> None:
    cases.check_ttl_sync_and_async(
        lambda **kw: DynamoDBStore(
            client, table=table, tenant=uuid.uuid4().hex, **_options(mode, **kw)
        ),
        lambda **kw: AsyncDynamoDBStore.from_conn_string(
            _url(dynamodb_endpoint, table), tenant=uuid.uuid4().hex, **_options(mode, **kw)
        ),
    )


# ---- raw storage and tenants ------------------------------------------------------------


@pytest.fixture
def own_table(dynamodb_endpoint: str, client: Any) -> Iterator[str]:
    """A table for one test: a scan of it sees that test's items only (the module's
    table holds other tests' clear embeddings, whose floats a canary's may equal)."""
    name = new_dynamodb_table_name()
    with DynamoDBStore(client, table=name) as store:
        store.setup()
    yield name
    delete_dynamodb_table(dynamodb_endpoint, name)


@pytest.mark.parametrize("mode", cases.MODES)
def test_canaries_in_values_and_embeddings_never_reach_storage(
    client: Any, own_table: str, mode: str
) -> None:
    with DynamoDBStore(client, table=own_table, tenant=uuid.uuid4().hex, **_options(mode)) as store:
        canaries = cases.write_canaries(store)
    cases.assert_canaries(table_dump(client, own_table), canaries, mode)


@pytest.mark.parametrize("mode", cases.MODES)
def test_crafted_namespaces_never_reach_another_tenant(client: Any, table: str, mode: str) -> None:
    base = uuid.uuid4().hex[:8]
    alice = base
    mallories = [f"{base}##s#users", f"{base}##n"]
    with DynamoDBStore(client, table=table, tenant=alice, **_options(mode)) as a:
        a.put(("users", "u1"), "k", {"text": "apple", "secret": 1})
        # crafted labels of alice's own never reach ("users", "u1") either
        for ns in [("users#u1",), ("users%23u1",), ("users", "u1#"), ("users!0",)]:
            assert a.get(ns, "k") is None and a.search(ns) == []
        for mallory in mallories:
            with DynamoDBStore(client, table=table, tenant=mallory, **_options(mode)) as m:
                for ns in [("users", "u1"), (alice, "users", "u1"), ("u1",)]:
                    assert m.get(ns, "k") is None
                    assert m.search(ns[:1]) == []
                assert m.search(()) == [] and m.search((), query="apple") == []
                assert m.list_namespaces() == []
                assert m.delete_namespace(("users",)) == 0
        with pytest.raises(InvalidNamespaceError):  # ours, from batch
            a.batch([GetOp(("users.u1",), "k")])
        assert a.get(("users", "u1"), "k") is not None
        assert a.list_namespaces() == [("users", "u1")]
    if mode == "encrypted":
        # An item copied into another tenant's partition does not open there.
        items = [i for i in raw_items(client, table) if i["pk"]["S"].startswith(f"{alice}##s#")]
        assert len(items) == 1
        moved = {**items[0], "pk": {"S": items[0]["pk"]["S"].replace(alice, f"{base}x", 1)}}
        client.put_item(TableName=table, Item=moved)
        with DynamoDBStore(
            client, table=table, tenant=f"{base}x", encryption=a._saver.encryption
        ) as m2:
            with pytest.raises(DecryptionError):
                m2.get(("users", "u1"), "k")


# ---- calls per batch, limits, errors ---------------------------------------------------


def test_calls_per_batch_and_never_a_scan(client: Any, table: str) -> None:
    counter = CallCounter(client)
    with DynamoDBStore(client, table=table, tenant=uuid.uuid4().hex, **_options("clear")) as store:
        puts = [
            PutOp(("a", str(i)), f"k{j}", {"text": "apple", "n": j})
            for i in range(5)
            for j in range(4)
        ]
        counter.reset()
        store.batch(puts)
        assert counter.reset() == {"TransactWriteItems": 1}  # 20 items, their index entries
        reads = [
            GetOp(("a", "1"), "k1", refresh_ttl=False),
            GetOp(("a", "2"), "k2", refresh_ttl=False),
            SearchOp(("a",), filter={"n": {"$gt": 1}}, limit=3, refresh_ttl=False),
            SearchOp(("a", "3"), query="apple", refresh_ttl=False),
            ListNamespacesOp(max_depth=1),
        ]
        got = store.batch(reads)
        # one BatchGetItem; one Query of the namespace index; one per namespace searched
        assert counter.reset() == {"BatchGetItem": 1, "Query": 1 + 5}
        assert got[0].value["n"] == 1 and len(got[2]) == 3 and got[4] == [("a",)]
        assert [n for n in got[2] if n.value["n"] <= 1] == []  # the limit counts after the filter
        listed = store.list_namespaces(prefix=("a",), max_depth=2)
        assert listed == [("a", str(i)) for i in range(5)]
        assert store.list_namespaces(suffix=("3",)) == [("a", "3")]
        assert counter.reset() == {"Query": 2}  # a listing is one Query, never a Scan
        store.batch([GetOp(("a", str(i % 5)), f"k{i}", refresh_ttl=False) for i in range(150)])
        assert counter.reset() == {"BatchGetItem": 2}  # 100 keys per call
        store.batch([*reads, PutOp(("a", "1"), "k1", None), PutOp(("b",), "x", {"n": 1})])
        assert counter.reset() == {"BatchGetItem": 1, "Query": 6, "TransactWriteItems": 1}
        assert store.get(("a", "1"), "k1") is None
    assert counter.failed == {}


def test_transactions_hold_at_most_100_actions_an_item_beside_its_index_entry() -> None:
    ops = StoreOps(cast(Any, SimpleNamespace(table="t")))
    writes = [core.ItemWrite(("c", str(i % 3)), f"k{i}", None) for i in range(500)]
    units = ops._units("t1", 0.0, writes, [], {}, cast(Any, None))
    chunks = ops._transactions("t1", units)
    groups = {u.group for u in units}  # index items: 3 namespaces x up to 64 shards
    assert len(chunks) == -(-(len(units) + len(groups)) // 100)  # as few as the actions allow
    assert sorted(u.key for c in chunks for u in c) == sorted(w.key for w in writes)
    for chunk in chunks:
        assert len(chunk) + len({u.group for u in chunk}) <= 100
        assert all(u.entry is None for u in chunk)


def test_search_limit_and_errors_raised(client: Any, table: str) -> None:
    with DynamoDBStore(client, table=table, tenant=uuid.uuid4().hex, max_search_items=3) as store:
        for i in range(4):
            store.put(("a", str(i % 2)), f"k{i}", {"n": i})
        assert len(store.search(("a", "0"))) == 2
        with pytest.raises(InvalidInputError, match="max_search_items"):
            store.search(("a",))  # 4 items: refused, not answered from part of them
    with DynamoDBStore(client, table=f"{table}-missing") as missing:
        with pytest.raises(SchemaError, match="does not exist"):
            missing.search(("a",))  # an error, never an empty result
        with pytest.raises(SchemaError):
            missing.list_namespaces()
    with pytest.raises(ConfigurationError, match="TTLConfig"):
        DynamoDBStore.from_conn_string(f"dynamodb://{table}?ttl=60").__enter__()


def test_delete_namespace_sync_and_async(client: Any, dynamodb_endpoint: str, table: str) -> None:
    tenant = uuid.uuid4().hex
    with DynamoDBStore.from_conn_string(_url(dynamodb_endpoint, table), tenant=tenant) as store:
        for ns in [("a",), ("a", "b"), ("a", "b", "c"), ("ab",), ("a-b",), ("b", "a")]:
            store.put(ns, "k", {"v": 1})
        store.put(("a", "b"), "k2", {"v": 2})
        assert store.delete_namespace(("a", "b")) == 3
        assert sorted(store.list_namespaces()) == [("a",), ("a-b",), ("ab",), ("b", "a")]
        with pytest.raises(InvalidNamespaceError):
            store.delete_namespace(())
        # the index items of the deleted namespaces went too (no label left behind)
        labels = [i["sk"]["S"] for i in raw_items(client, table) if tenant in i["pk"]["S"]]
        assert not [sk for sk in labels if sk.startswith("n#a#b#")]

    async def run() -> None:
        async with AsyncDynamoDBStore(client, table=table, tenant=tenant) as astore:
            assert await astore.adelete_namespace(("a",)) == 1
            assert sorted(await astore.alist_namespaces()) == [("a-b",), ("ab",), ("b", "a")]
            await asyncio.to_thread(astore.put, ("z",), "k", {"v": 1})  # from another thread
            assert await asyncio.to_thread(astore.delete_namespace, ("z",)) == 1
            with pytest.raises(ConfigurationError):
                astore.get(("a",), "k")  # on the loop's own thread: refused, not a deadlock

    asyncio.run(run())


def test_redaction_applies_to_stored_values(client: Any, table: str) -> None:
    with DynamoDBStore(
        client, table=table, tenant=uuid.uuid4().hex, redaction=Redaction()
    ) as store:
        cases.check_redaction(store, lambda: table_dump(client, table))


def test_a_refresh_never_overwrites_a_put_made_meanwhile(
    client: Any, dynamodb_endpoint: str, table: str
) -> None:
    tenant = uuid.uuid4().hex
    clock = FakeClock()
    ttl = {"default_ttl": 1.0, "refresh_on_read": True}
    other = make_client(dynamodb_endpoint)
    with (
        DynamoDBStore(client, table=table, tenant=tenant, ttl=ttl, clock=clock) as store,
        DynamoDBStore(other, table=table, tenant=tenant, ttl=ttl, clock=clock) as writer,
    ):
        store.put(("a",), "k", {"v": 1})
        store.put(("a",), "j", {"v": 1})
        clock.advance(30)
        fired = []

        def put_meanwhile(**_: Any) -> None:
            if not fired:  # between the read and the refresh of the batch below
                fired.append(1)
                writer.put(("a",), "k", {"v": 2}, ttl=10.0)  # expires at +30 +600 s

        client.meta.events.register("before-call.dynamodb.TransactWriteItems", put_meanwhile)
        try:
            found = store.search(("a",))  # reads both, refreshes both: k's refresh is dropped
        finally:
            client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", put_meanwhile)
        assert fired and sorted(i.key for i in found) == ["j", "k"]
        clock.advance(45)  # past the first expiry (+60), before j's refreshed one (+90)
        assert store.get(("a",), "j", refresh_ttl=False) is not None  # j's refresh applied
        clock.advance(25)  # past j's refreshed expiry, before k's (+630)
        assert store.get(("a",), "j", refresh_ttl=False) is None
        item = store.get(("a",), "k", refresh_ttl=False)
        assert item is not None and item.value == {"v": 2}
        assert store.list_namespaces() == [("a",)]


def test_throttled_calls_unprocessed_keys_and_short_pages(
    dynamodb_endpoint: str, table: str
) -> None:
    faulty = make_client(dynamodb_endpoint)
    faults = Faults(faulty, table, throttle=0.3, partial=True, seed=11)
    pages: list[int] = []

    def small_pages(params: dict[str, Any], **_: Any) -> None:
        params["Limit"] = 1  # DynamoDB may end a page anywhere: every Query must go on

    def count_pages(parsed: dict[str, Any], **_: Any) -> None:
        pages.append("LastEvaluatedKey" in parsed)

    faulty.meta.events.register("before-parameter-build.dynamodb.Query", small_pages)
    faulty.meta.events.register("after-call.dynamodb.Query", count_pages)
    with DynamoDBStore(
        faulty,
        table=table,
        tenant=uuid.uuid4().hex,
        retry_base_delay=0.001,
        max_attempts=30,
        **_options("encrypted"),
    ) as store:
        run_program(store, COVERING_PROGRAM)
        store.batch([GetOp(("a",), f"k{i}") for i in range(8)])  # half of each call unprocessed
    assert faults.throttled["Query"] >= 3 and sum(faults.throttled.values()) >= 5
    assert faults.unprocessed["BatchGetItem"] >= 4
    assert sum(pages) >= 10  # pages that ended early, read on


# ---- inside a graph ----------------------------------------------------------------------


def test_a_graph_remembers_in_one_thread_and_recalls_in_another(client: Any, table: str) -> None:
    keys = local_encryption()  # another store object shares the keyring only
    cases.check_graph_remembers(
        lambda _: DynamoDBStore(client, table=table, index=index_config(), encryption=keys)
    )


def test_entries_of_expired_items_go_when_read_unless_put_again_meanwhile(
    client: Any, dynamodb_endpoint: str, table: str
) -> None:
    tenant, clock, ttl = uuid.uuid4().hex, FakeClock(), {"default_ttl": 1.0}
    other = make_client(dynamodb_endpoint)

    def entries() -> list[str]:
        index = [i for i in raw_items(client, table) if i["pk"]["S"] == f"{tenant}##n"]
        return sorted(name for i in index for name in i if name.startswith("k"))

    with (
        DynamoDBStore(client, table=table, tenant=tenant, ttl=ttl, clock=clock) as store,
        DynamoDBStore(other, table=table, tenant=tenant, ttl=ttl, clock=clock) as writer,
    ):
        store.put(("a",), "k", {"v": 1})
        store.put(("b",), "j", {"v": 1})
        assert entries() == ["kj", "kk"]
        (stored,) = [i for i in raw_items(client, table) if i["pk"]["S"] == f"{tenant}##s#a#"]
        assert stored["expires_at"] == {"N": str(int(clock.now) + 60)}  # DynamoDB's own TTL
        clock.advance(61)
        assert store.list_namespaces() == []  # expired: never listed; their entries dropped
        assert entries() == []
        store.put(("a",), "k", {"v": 1})
        clock.advance(61)
        fired = []

        def put_meanwhile(**_: Any) -> None:
            if not fired:  # after the listing's read, before its entries are dropped
                fired.append(1)
                writer.put(("a",), "k", {"v": 2})

        client.meta.events.register("before-call.dynamodb.TransactWriteItems", put_meanwhile)
        try:
            assert store.list_namespaces() == []
        finally:
            client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", put_meanwhile)
        assert fired and store.list_namespaces() == [("a",)]  # the new put's entry stayed
        assert entries() == ["kk"]


def test_altered_stripped_or_replayed_clear_attributes_do_not_open(client: Any, table: str) -> None:
    tenant = uuid.uuid4().hex
    with DynamoDBStore(client, table=table, tenant=tenant, **_options("encrypted")) as store:
        store.put(("a",), "k", {"text": "apple"}, ttl=None)
        (old,) = [i for i in raw_items(client, table) if i["pk"]["S"] == f"{tenant}##s#a#"]
        store.put(("a",), "k", {"text": "river"}, ttl=None)
        (new,) = [i for i in raw_items(client, table) if i["pk"]["S"] == f"{tenant}##s#a#"]
        later = {"N": str(float(new["ua"]["N"]) + 1000)}
        altered = [
            {**new, "ua": later},  # moved up in a search's order
            {k: v for k, v in new.items() if k not in ("wt", "w")},  # embeddings stripped
            {**new, "w": old["w"]},  # an older write's embeddings beside the newer value
            {**new, "tm": {"N": "5"}, "xp": later},  # a TTL of another write
        ]
        for item in altered:
            client.put_item(TableName=table, Item=item)
            with pytest.raises(DecryptionError):
                store.search(("a",), query="river")
        client.put_item(TableName=table, Item=new)
        assert store.search(("a",), query="river")[0].value == {"text": "river"}


@contextmanager
def _put_before_next_write(client: Any, put: Callable[[], None]) -> Iterator[list[int]]:
    """Run ``put`` (another client's) before ``client``'s next TransactWriteItems;
    yields a list that holds an item once it ran."""
    fired: list[int] = []

    def hook(**_: Any) -> None:
        if not fired:
            fired.append(1)
            put()

    client.meta.events.register("before-call.dynamodb.TransactWriteItems", hook)
    try:
        yield fired
    finally:
        client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", hook)


def test_a_sweep_keeps_an_item_put_again_meanwhile(
    client: Any, dynamodb_endpoint: str, table: str
) -> None:
    clock = FakeClock()
    opts = {"table": table, "tenant": uuid.uuid4().hex, "ttl": {"default_ttl": 1.0}}
    store = DynamoDBStore(client, clock=clock, **opts)
    writer = DynamoDBStore(make_client(dynamodb_endpoint), clock=clock, **opts)
    store.batch([PutOp(("a",), key, {"v": 1}, ttl=1.0) for key in "kj"])
    clock.advance(61)
    # after the sweep's Query of the index, before its deletes: k is put again
    with _put_before_next_write(client, lambda: writer.put(("a",), "k", {"v": 2})) as fired:
        assert store.sweep_expired() == 1  # j; k's delete was dropped
    assert fired and store.get(("a",), "k").value == {"v": 2}  # type: ignore[union-attr]
    assert store.list_namespaces() == [("a",)]
    clock.advance(61)
    assert store.sweep_expired() == 1 and store.list_namespaces() == []
    store.close()
    writer.close()
