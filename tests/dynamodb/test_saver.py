"""DynamoDBSaver / AsyncDynamoDBSaver behaviour on a real DynamoDB API (moto's server)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from langgraph_durable.dynamodb import AsyncDynamoDBSaver, DynamoDBOptions, DynamoDBSaver
from langgraph_durable.errors import (
    ConfigurationError,
    InvalidInputError,
    SchemaError,
    StorageUnavailableError,
)
from tests.dynamodb.helpers import CallCounter, make_client, raw_items
from tests.helpers import (
    aput_message_with_write,
    cfg,
    checkpoint_ids,
    config_ids,
    make_cp,
    put_chain,
    put_shared_blob_chain,
    tenant_from_org,
    versioned_cp,
    write_concurrently,
)


@pytest.fixture
def client(dynamodb_endpoint: str) -> Any:
    return make_client(dynamodb_endpoint)


@pytest.fixture
def saver(client: Any, dynamodb_table: str) -> Iterator[DynamoDBSaver]:
    s = DynamoDBSaver(client, table=dynamodb_table)
    assert s.setup() == ["created table"]
    yield s


def test_setup_creates_then_checks_the_table(saver: DynamoDBSaver, client: Any) -> None:
    assert saver.setup() == []
    desc = client.describe_table(TableName=saver.table)["Table"]
    assert desc["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert {k["AttributeName"]: k["KeyType"] for k in desc["KeySchema"]} == {
        "pk": "HASH",
        "sk": "RANGE",
    }


def test_setup_says_what_is_wrong_with_a_table(client: Any, dynamodb_table: str) -> None:
    strict = DynamoDBSaver(client, table=dynamodb_table, create_table=False)
    with pytest.raises(SchemaError, match="does not exist.*create_table=True"):
        strict.setup()
    with pytest.raises(SchemaError, match="setup"):
        strict.get_tuple(cfg("t"))  # use before setup
    client.create_table(
        TableName=dynamodb_table,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    with pytest.raises(SchemaError, match="partition key must be 'pk'.*it has id"):
        strict.setup()


def test_setup_with_ttl_enables_or_demands_it(client: Any, dynamodb_table: str) -> None:
    plain = DynamoDBSaver(client, table=dynamodb_table)
    plain.setup()
    strict = DynamoDBSaver(client, table=dynamodb_table, ttl=3600, create_table=False)
    with pytest.raises(SchemaError, match="TTL DISABLED.*expires_at"):
        strict.setup()
    assert DynamoDBSaver(client, table=dynamodb_table, ttl=3600).setup() == ["enabled TTL"]
    assert strict.setup() == []
    ttl = client.describe_time_to_live(TableName=dynamodb_table)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}


def test_setup_from_many_threads_at_once(dynamodb_endpoint: str, dynamodb_table: str) -> None:
    results: list[Any] = []

    def setup() -> None:
        try:
            s = DynamoDBSaver(make_client(dynamodb_endpoint), table=dynamodb_table, ttl=60)
            results.append(s.setup())
        except BaseException as exc:  # noqa: BLE001
            results.append(exc)

    threads = [threading.Thread(target=setup) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(r, list) for r in results), results
    assert sum("created table" in r for r in results) >= 1


def test_from_conn_string_and_options(dynamodb_endpoint: str, dynamodb_table: str) -> None:
    url = f"dynamodb://{dynamodb_table}?region=us-east-1&endpoint={dynamodb_endpoint}&ttl=600"
    with DynamoDBSaver.from_conn_string(url, max_attempts=3) as s:
        assert s.options.ttl == 600 and s.options.max_attempts == 3
        assert s.options.endpoint_url == dynamodb_endpoint
        assert s.setup() == ["created table", "enabled TTL"]
        put_chain(s, "t", 2)
        assert len(list(s.list(cfg("t")))) == 2
    with pytest.raises(ConfigurationError, match="not a DynamoDB URL"):
        DynamoDBSaver.from_conn_string("postgresql://x").__enter__()
    with pytest.raises(ConfigurationError, match="unknown parameter 'regoin'"):
        DynamoDBSaver.from_conn_string("dynamodb://tbl?regoin=x").__enter__()
    with pytest.raises(ConfigurationError, match="table name"):
        DynamoDBOptions(table="no spaces allowed")
    with pytest.raises(ConfigurationError, match="ttl"):
        DynamoDBOptions(table="tbl", ttl=0)
    with pytest.raises(ConfigurationError, match="unknown DynamoDB saver setting"):
        DynamoDBSaver(object(), table="tbl", tll=5)
    with pytest.raises(ConfigurationError, match="low-level client"):
        DynamoDBSaver(object(), table="tbl")


def test_tenants_never_mix(saver: DynamoDBSaver) -> None:
    put_chain(saver, "same", 2, tenant_id="a")
    put_chain(saver, "same", 3, tenant_id="b")
    put_chain(saver, "b#same", 1, tenant_id="a")  # would collide with a naive "a#b#same"
    assert len(list(saver.list(cfg("same", tenant_id="a")))) == 2
    assert len(list(saver.list(cfg("same", tenant_id="b")))) == 3
    assert saver.get_tuple(cfg("same")) is None  # the default tenant has nothing
    tup = saver.get_tuple(cfg("same", tenant_id="a"))
    assert tup is not None and tup.config["configurable"]["tenant_id"] == "a"
    assert len(list(saver.list({"configurable": {"tenant_id": "a"}}))) == 3
    saver.delete_thread("same", tenant_id="a")
    assert saver.get_tuple(cfg("same", tenant_id="a")) is None
    assert len(list(saver.list(cfg("same", tenant_id="b")))) == 3
    assert len(list(saver.list(cfg("b#same", tenant_id="a")))) == 1


def test_fixed_and_callable_tenants(client: Any, dynamodb_table: str) -> None:
    fixed = DynamoDBSaver(client, table=dynamodb_table, tenant="fixed")
    fixed.setup()
    put_chain(fixed, "t", 1)
    by_org = DynamoDBSaver(
        client,
        table=dynamodb_table,
        tenant=tenant_from_org,
    )
    assert by_org.get_tuple(cfg("t")) is None
    put_chain(by_org, "t", 2, org="fixed")
    assert len(list(by_org.list(cfg("t", org="fixed")))) == 3


def test_list_pages_filters_and_limits(client: Any, dynamodb_table: str) -> None:
    saver = DynamoDBSaver(client, table=dynamodb_table, list_page_items=25)
    saver.setup()
    configs = put_chain(saver, "long", 90)
    ids = config_ids(configs)
    saver.put_writes(configs[5], [("a", 1), ("b", [2])], "task")
    counter = CallCounter(client)
    listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("long"))]
    assert listed == ids[::-1]
    # 92 items in pages of 25; these are format-2 checkpoints, which also read their
    # parent's pending sends: found in the same page, except at the 3 page ends
    assert counter.reset()["Query"] == 4 + 3
    assert len(list(saver.list(cfg("long"), limit=70))) == 70
    before = checkpoint_ids(saver.list(cfg("long"), before=configs[10], limit=3))
    assert before == ids[9:6:-1]
    assert [t.metadata["step"] for t in saver.list(cfg("long"), filter={"step": 7})] == [7]
    (five,) = saver.list(cfg("long"), filter={"step": 5})
    assert five.pending_writes == [("task", "a", 1), ("task", "b", [2])]
    assert (
        list(saver.list(None, filter={"step": 7, "source": "loop"}))[0].checkpoint["id"] == (ids[7])
    )
    # across namespaces (thread without checkpoint_ns) the order is the same
    across = checkpoint_ids(saver.list({"configurable": {"thread_id": "long"}}))
    assert across == ids[::-1]
    # a streaming listing can be abandoned, and the saver still works
    it = saver.list(cfg("long"))
    next(it)
    it.close()
    assert saver.get_tuple(cfg("long")) is not None


def test_unchanged_blob_survives_keep_latest(saver: DynamoDBSaver) -> None:
    parent = put_shared_blob_chain(saver, "t")
    saver.put_writes(cfg("t", checkpoint_id=parent), [("counter", [9])], "task")
    saver.prune(["t"], strategy="keep_latest")
    (only,) = list(saver.list(cfg("t")))
    assert only.metadata == {}
    assert only.checkpoint["channel_values"] == {"big": ["kept"] * 10, "counter": [3]}
    assert only.pending_writes == [("task", "counter", [9])]
    blobs = [i for i in raw_items(saver.client, saver.table) if i["sk"]["S"].startswith("b#")]
    assert len(blobs) == 2  # big (shared) and the kept counter version


def test_prune_keeps_what_delta_channel_threads_need(saver: DynamoDBSaver) -> None:
    put_chain(saver, "plain", 3)
    first = saver.put(cfg("d"), make_cp(), {}, {})
    second = saver.put(first, make_cp(), {"counters_since_delta_snapshot": {"m": [1, 1]}}, {})
    saver.put(second, make_cp(), {"counters_since_delta_snapshot": {"m": [2, 2]}}, {})
    saver.prune(["plain", "d"])
    assert len(list(saver.list(cfg("plain")))) == 1
    assert len(list(saver.list(cfg("d")))) == 3  # the chain back to a snapshot
    with pytest.raises(InvalidInputError, match="strategy"):
        saver.prune(["d"], strategy="everything")
    saver.prune(["d"], strategy="delete")
    assert saver.get_tuple(cfg("d")) is None


def test_special_writes_replace_and_regular_writes_keep_the_first(saver: DynamoDBSaver) -> None:
    (config,) = put_chain(saver, "t", 1)
    saver.put_writes(config, [("a", "first"), ("b", "first")], "task")
    saver.put_writes(config, [("a", "second"), ("b", "second"), ("c", "new")], "task")
    saver.put_writes(config, [("__error__", "boom")], "task")
    saver.put_writes(config, [("__error__", "boom again")], "task")
    tup = saver.get_tuple(config)
    assert tup is not None
    assert sorted((c, v) for _t, c, v in tup.pending_writes) == [
        ("__error__", "boom again"),
        ("a", "first"),
        ("b", "first"),
        ("c", "new"),
    ]


def test_many_writes_of_one_task_span_transactions(saver: DynamoDBSaver) -> None:
    (config,) = put_chain(saver, "t", 1)
    counter = CallCounter(saver.client)
    sends = [("fanout", {"i": i}) for i in range(250)]
    saver.put_writes(config, sends, "task")
    assert counter.reset() == {"TransactWriteItems": 3}  # 100 actions per transaction
    tup = saver.get_tuple(config)
    assert tup is not None and [v["i"] for _t, _c, v in tup.pending_writes] == list(range(250))


def test_bad_input_gets_our_errors_and_loses_nothing(saver: DynamoDBSaver) -> None:
    configs = put_chain(saver, "t", 2)
    with pytest.raises(InvalidInputError, match="thread_id"):
        saver.put({"configurable": {}}, make_cp(), {}, {})
    with pytest.raises(InvalidInputError, match="checkpoint_id"):
        saver.put_writes(cfg("t"), [("a", 1)], "task")
    with pytest.raises(InvalidInputError, match="too long"):
        saver.put(cfg("t" * 3000), make_cp(), {}, {})
    with pytest.raises(InvalidInputError):
        list(saver.list(cfg("t"), limit=-1))
    with pytest.raises(InvalidInputError, match="filter"):
        list(saver.list(cfg("t"), filter="step"))  # type: ignore[arg-type]
    assert checkpoint_ids(saver.list(cfg("t"))) == config_ids(configs[::-1])


def test_unreachable_endpoint_is_unavailable() -> None:
    # a lost connection is retried within the retry budget (max_attempts), then reported
    with DynamoDBSaver.from_conn_string(
        "dynamodb://tbl?region=us-east-1&endpoint=http://127.0.0.1:1",
        connect_timeout=1.0,
        read_timeout=1.0,
        max_attempts=3,
        retry_base_delay=0.01,
    ) as s:
        with pytest.raises(StorageUnavailableError, match="unreachable"):
            s.get_tuple(cfg("t"))


def test_delete_for_runs_and_copy_thread_with_writes(saver: DynamoDBSaver) -> None:
    configs = put_chain(saver, "src", 2, run_id="r1")
    keep = put_chain(saver, "other", 1, run_id="r2")
    saver.put_writes(configs[-1], [("a", {"v": 1})], "task-1", "path")
    saver.copy_thread("src", "dst")
    dst = saver.get_tuple(cfg("dst"))
    assert dst is not None and dst.pending_writes == [("task-1", "a", {"v": 1})]
    assert dst.checkpoint["channel_values"]["payload"] == {"i": 1}
    assert dst.parent_config is not None
    saver.delete_for_runs(["r1"])
    assert list(saver.list(cfg("src"))) == []
    assert list(saver.list(cfg("dst"))) == []
    assert checkpoint_ids(saver.list(cfg("other"))) == config_ids(keep)
    leftovers = [
        i["sk"]["S"] for i in raw_items(saver.client, saver.table) if i["sk"]["S"].startswith("c#")
    ]
    assert all("other" not in sk for sk in leftovers)
    assert len(leftovers) == 1  # other's checkpoint; src/dst writes went with their checkpoints


def test_odd_names_round_trip(saver: DynamoDBSaver) -> None:
    names = ['quo"te', "hash#tag", "per%cent", "c#x#y#", "sp ace", "ünï", "\x01ctl", "~"]
    cp = versioned_cp(**{n: [n] for n in names})
    for ns in ("", "a#b", "sub:1|x"):
        stored = saver.put(cfg("odd#thread", ns=ns), cp, {}, cp["channel_versions"])
        saver.put_writes(stored, [(n, n) for n in names], "task#1")
        tup = saver.get_tuple(cfg("odd#thread", ns=ns))
        assert tup is not None
        assert tup.checkpoint["channel_values"] == {n: [n] for n in names}
        assert [(t, c, v) for t, c, v in tup.pending_writes] == [("task#1", n, n) for n in names]
        assert len(list(saver.list(cfg("odd#thread", ns=ns)))) == 1
    assert len(list(saver.list({"configurable": {"thread_id": "odd#thread"}}))) == 3


def test_concurrent_writers_on_one_thread(saver: DynamoDBSaver) -> None:
    errors = write_concurrently(saver, "shared", writers=4, puts=10)
    assert errors == []
    assert len(list(saver.list({"configurable": {"thread_id": "shared"}}))) == 40


def test_get_tuple_by_id_and_latest_skip_orphan_writes(saver: DynamoDBSaver) -> None:
    configs = put_chain(saver, "t", 3)
    # writes whose checkpoint was never stored sort above the latest one
    saver.put_writes(cfg("t", checkpoint_id="ffffffff"), [("a", 1)], "task")
    latest = saver.get_tuple(cfg("t"))
    assert latest is not None and latest.config == configs[-1]
    assert latest.pending_writes == []
    middle = saver.get_tuple(configs[1])
    assert middle is not None and middle.checkpoint["channel_values"]["payload"] == {"i": 1}
    assert middle.parent_config == configs[0]
    assert saver.get_tuple(cfg("t", checkpoint_id="nope")) is None
    assert [t.config for t in saver.list(cfg("t"))] == configs[::-1]


# ---- TTL ---------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _expiries(client: Any, table: str) -> dict[str, int]:
    return {
        i["sk"]["S"]: int(i["expires_at"]["N"])
        for i in raw_items(client, table)
        if "expires_at" in i
    }


def test_ttl_stamps_every_item_and_an_idle_thread_expires_whole(
    client: Any, dynamodb_table: str
) -> None:
    clock = Clock()
    s = DynamoDBSaver(client, table=dynamodb_table, ttl=100, ttl_refresh=50, clock=clock)
    s.setup()
    configs = put_chain(s, "t", 3)
    s.put_writes(configs[-1], [("a", "x" * 10)], "task")
    items = raw_items(client, dynamodb_table)
    assert all("expires_at" in i for i in items)
    head = next(i for i in items if i["sk"]["S"] == "h")
    assert int(head["live_until"]["N"]) == 1_000_100
    assert max(_expiries(client, dynamodb_table).values()) == 1_000_150

    clock.now += 99  # a read does not keep a thread alive, a write does
    assert s.get_tuple(cfg("t")) is not None
    s.put_writes(configs[-1], [("b", 1)], "task2")
    clock.now += 99
    assert s.get_tuple(cfg("t")) is not None
    clock.now += 2  # 101 s after the last write: expired, though DynamoDB has not deleted it
    assert s.get_tuple(cfg("t")) is None
    assert s.get_tuple(configs[0]) is None
    assert list(s.list(cfg("t"))) == []
    assert list(s.list(None)) == []
    s.copy_thread("t", "copy")
    assert s.get_tuple(cfg("copy")) is None

    # writing to the expired thread starts it afresh: the old items are purged
    fresh = put_chain(s, "t", 1)
    assert [t.config for t in s.list(cfg("t"))] == fresh
    assert len([i for i in raw_items(client, dynamodb_table) if i["sk"]["S"] != "h"]) == 2


def test_ttl_sweep_extends_an_active_threads_items(client: Any, dynamodb_table: str) -> None:
    clock = Clock()
    s = DynamoDBSaver(client, table=dynamodb_table, ttl=100, ttl_refresh=50, clock=clock)
    s.setup()
    first = put_chain(s, "t", 2)
    old = _expiries(client, dynamodb_table)
    assert set(old.values()) == {1_000_150}
    clock.now += 60  # past the refresh interval, within the TTL: the next write sweeps
    counter = CallCounter(client)
    put_chain(s, "t", 1)
    assert counter.failed == {"TransactWriteItems": 1}  # the head refused the first try
    calls = counter.reset()
    assert calls["TransactWriteItems"] == 2  # the sweep, then the put
    new = _expiries(client, dynamodb_table)
    assert all(new[sk] == 1_000_210 for sk in old)  # every older item was extended
    clock.now += 30  # within the refresh interval again: no sweep
    put_chain(s, "t", 1)
    assert counter.reset()["TransactWriteItems"] == 1
    clock.now += 90  # the thread lives 100 s after its last write, whatever its age
    assert s.get_tuple(first[0]) is not None


def test_expired_items_left_by_dynamodb_are_not_read(client: Any, dynamodb_table: str) -> None:
    clock = Clock()
    s = DynamoDBSaver(client, table=dynamodb_table, ttl=100, clock=clock)
    s.setup()
    (config,) = put_chain(s, "t", 1)
    s.put_writes(config, [("a", 1), ("b", 2)], "task")
    # DynamoDB deletes expired items up to days late: a stale write must stay invisible
    (stale,) = [i for i in raw_items(client, dynamodb_table) if i["sk"]["S"].endswith("#w#task#1")]
    client.update_item(
        TableName=dynamodb_table,
        Key={"pk": stale["pk"], "sk": stale["sk"]},
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues={":past": {"N": str(int(clock.now) - 1)}},
    )
    tup = s.get_tuple(config)
    assert tup is not None and tup.pending_writes == [("task", "a", 1)]


# ---- async -------------------------------------------------------------------------


async def test_async_saver_round_trip_and_sync_bridge(
    dynamodb_endpoint: str, dynamodb_table: str
) -> None:
    url = f"dynamodb://{dynamodb_table}?region=us-east-1&endpoint={dynamodb_endpoint}"
    async with AsyncDynamoDBSaver.from_conn_string(url) as s:
        assert await s.setup() == ["created table"]
        cp, tup = await aput_message_with_write(s, "t")
        assert tup is not None and tup.checkpoint["channel_values"] == {"messages": ["hi"]}
        assert tup.pending_writes == [("task", "messages", ["there"])]
        other = await asyncio.to_thread(s.get_tuple, cfg("t"))
        assert other is not None and other.checkpoint["id"] == cp["id"]
        with pytest.raises(InvalidInputError, match="event loop"):
            s.get_tuple(cfg("t"))
        assert [t.checkpoint["id"] async for t in s.alist(None, limit=1)] == [cp["id"]]
        await s.acopy_thread("t", "t2")
        await s.adelete_thread("t")
        assert await s.aget_tuple(cfg("t")) is None
        assert await s.aget_tuple(cfg("t2")) is not None


async def test_async_saver_under_throttling(client: Any, dynamodb_table: str) -> None:
    from tests.dynamodb.helpers import Faults, loop_graph

    s = AsyncDynamoDBSaver(
        client, table=dynamodb_table, retry_base_delay=0.001, retry_max_delay=0.01
    )
    await s.setup()
    faults = Faults(client, dynamodb_table, throttle=0.3, partial=True)
    graph = loop_graph(10).compile(checkpointer=s)
    config = {"configurable": {"thread_id": "t"}}
    assert (await graph.ainvoke({"count": 0, "log": []}, config))["count"] == 10
    history = [t async for t in s.alist(cfg("t"))]
    assert len(history) == 12 and sum(1 for t in history if t.pending_writes) == 11
    assert faults.throttled["TransactWriteItems"] >= 1
    await s.close()


async def test_async_calls_leave_the_event_loop_running(client: Any, dynamodb_table: str) -> None:
    # Every call takes 0.2 s in its worker thread; a ticker on the loop must keep ticking.
    s = AsyncDynamoDBSaver(client, table=dynamodb_table, max_workers=4)
    await s.setup()
    (config,) = await asyncio.to_thread(put_chain, _SyncView(s), "t", 1)

    def slow(**_: Any) -> None:
        time.sleep(0.2)

    client.meta.events.register("before-call.dynamodb", slow)
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    started = time.monotonic()
    results = await asyncio.gather(*(s.aget_tuple(config) for _ in range(4)))
    elapsed = time.monotonic() - started
    stop.set()
    await task
    assert all(r is not None for r in results)
    # 4 reads x 2 calls x 0.2 s = 1.6 s if serial; the pool of 4 runs them side by side
    assert elapsed < 1.2
    assert ticks >= 20  # about 40 expected: the loop was never blocked
    await s.close()


class _SyncView:
    """Sync put() of an async saver, for put_chain from a worker thread."""

    def __init__(self, saver: AsyncDynamoDBSaver) -> None:
        self.saver = saver

    def put(self, *args: Any) -> Any:
        return self.saver.put(*args)
