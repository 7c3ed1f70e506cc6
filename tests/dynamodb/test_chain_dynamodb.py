"""DynamoDB and the hash chain: thread enumeration for ``verify``, trim tombstones.

Runs against moto's server through boto3, with the savers' injected clock.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from langgraph_durable import Retention
from langgraph_durable._core.chain import ChainBlock, split_block
from langgraph_durable._core.records import Sealed
from langgraph_durable.dynamodb import AsyncDynamoDBSaver, DynamoDBSaver
from langgraph_durable.dynamodb._items import (
    parse_checkpoint_sk,
    pointer_sk,
    read_payload,
    thread_pk,
)
from langgraph_durable.errors import InvalidInputError
from tests.dynamodb.helpers import CallCounter, loop_graph, make_client, raw_items
from tests.helpers import cfg, make_cp, put_chain

KEY = b"k" * 32
T0 = 1_000_000.0
TRIM = Retention(idle=datetime.timedelta(seconds=100), strategy="keep_latest", keep=1)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def client(dynamodb_endpoint: str) -> Any:
    return make_client(dynamodb_endpoint)


def _saver(client: Any, table: str, **settings: Any) -> DynamoDBSaver:
    saver = DynamoDBSaver(client, table=table, **settings)
    saver.setup()
    return saver


def _walk(saver: Any, tenant: str | None, limit: int) -> list[list[tuple[str, str]]]:
    """Every page of a whole walk."""
    pages, cursor = [], None
    while True:
        threads, cursor = saver._run(saver._ops.thread_page(tenant, cursor, limit))
        assert len(threads) <= limit
        pages.append(threads)
        if cursor is None:
            return pages


def _bodies(
    client: Any, table: str, thread: str, tenant: str = "default", ns: str = ""
) -> dict[str, tuple[str | None, Sealed]]:
    """checkpoint id -> (parent id, stored body) of one namespace of a thread, read raw."""
    pk = thread_pk(tenant, thread)
    items = [i for i in raw_items(client, table) if i["pk"]["S"] == pk]
    chunks: dict[str, dict[int, bytes]] = {}
    for item in items:
        sk = item["sk"]["S"]
        if sk.startswith("c#") and parse_checkpoint_sk(sk).kind == "chunk":
            ik = parse_checkpoint_sk(sk)
            if ik.name == "b":
                chunks.setdefault(pointer_sk(ik.ns, ik.checkpoint_id), {})[ik.index] = bytes(
                    item["d"]["B"]
                )
    out = {}
    for item in items:
        sk = item["sk"]["S"]
        if not sk.startswith("c#"):
            continue
        ik = parse_checkpoint_sk(sk)
        if ik.kind != "pointer" or ik.ns != ns:
            continue
        data = read_payload(item, "b", chunks.get(sk, {}), sk)
        assert data is not None
        parent = item.get("p", {}).get("S")
        out[ik.checkpoint_id] = (parent, Sealed(item["bt"]["S"], data))
    return out


def _block(body: Sealed) -> ChainBlock:
    _inner, block = split_block(body)
    assert block is not None
    return block


# ---- thread_page ---------------------------------------------------------------------


def _fill(saver: DynamoDBSaver) -> set[tuple[str, str]]:
    """25 threads over two tenants (one long enough to span several Scan pages)."""
    want = set()
    for i in range(25):
        tenant = "t1" if i % 2 else "t2"
        put_chain(saver, f"th-{i:02d}", 40 if i == 12 else 2, tenant_id=tenant)
        want.add((tenant, f"th-{i:02d}"))
    return want


def test_thread_page_walks_every_thread_once(client: Any, dynamodb_table: str) -> None:
    saver = _saver(client, dynamodb_table)
    assert saver._run(saver._ops.thread_page(None, None, 7)) == ([], None)
    want = _fill(saver)
    # partitions with no checkpoint are no threads to verify
    for pk, sk in (("t1#lonely", "e#x"), ("t1#headless", "h"), ("t1##keys", "0000000001")):
        client.put_item(TableName=dynamodb_table, Item={"pk": {"S": pk}, "sk": {"S": sk}})
    pages = _walk(saver, None, 7)
    seen = [t for page in pages for t in page]
    assert len(seen) == len(set(seen)) == 25 and set(seen) == want
    assert [len(p) for p in pages[:-1]] == [7] * (len(pages) - 1)
    only = [t for page in _walk(saver, "t1", 7) for t in page]
    assert sorted(only) == sorted(t for t in want if t[0] == "t1") and len(only) == 12
    assert [t for page in _walk(saver, "nobody", 7) for t in page] == []
    # a page of 1 and a page larger than the store
    assert sorted(t for page in _walk(saver, None, 1) for t in page) == sorted(want)
    threads, cursor = saver._run(saver._ops.thread_page(None, None, 100))
    assert sorted(threads) == sorted(want) and cursor is None
    with pytest.raises(InvalidInputError):
        saver._run(saver._ops.thread_page(None, None, 0))


def test_thread_page_skips_threads_readers_do_not_see(client: Any, dynamodb_table: str) -> None:
    clock = Clock()
    saver = _saver(
        client,
        dynamodb_table,
        clock=clock,
        retention=lambda t: (
            Retention(idle=datetime.timedelta(seconds=100)) if t == "short" else None
        ),
    )
    put_chain(saver, "a", 2, tenant_id="short")
    put_chain(saver, "b", 2, tenant_id="long")
    assert sorted(saver._run(saver._ops.thread_page(None, None, 10))[0]) == [
        ("long", "b"),
        ("short", "a"),
    ]
    clock.now += 1000  # "short" expired (its head says so; DynamoDB deletes lazily)
    assert saver._run(saver._ops.thread_page(None, None, 10)) == ([("long", "b")], None)


async def test_thread_page_through_the_async_saver(client: Any, dynamodb_table: str) -> None:
    asaver = AsyncDynamoDBSaver(client, table=dynamodb_table)
    await asaver.setup()
    try:
        assert await asaver._arun(asaver._ops.thread_page(None, None, 7)) == ([], None)
        for i in range(25):
            tenant = "t1" if i % 2 else "t2"
            await asaver.aput(cfg(f"th-{i:02d}", tenant_id=tenant), make_cp(), {}, {})
        seen: list[tuple[str, str]] = []
        cursor = None
        while True:
            threads, cursor = await asaver._arun(asaver._ops.thread_page(None, cursor, 7))
            assert len(threads) <= 7
            seen.extend(threads)
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) == 25
        threads, cursor = await asaver._arun(asaver._ops.thread_page("t1", None, 100))
        assert len(threads) == 12 and {t for t, _ in threads} == {"t1"} and cursor is None
    finally:
        await asaver.close()


# ---- tombstones ------------------------------------------------------------------------


def _run_graph(saver: Any, config: dict[str, Any]) -> Any:
    graph = loop_graph(3).compile(checkpointer=saver)
    graph.invoke({"count": 0, "log": []}, config)
    return graph


@pytest.mark.parametrize("how", ["prune", "prune_expired"])
def test_keep_latest_leaves_a_tombstone_naming_the_removed_parent(
    client: Any, dynamodb_table: str, how: str
) -> None:
    clock = Clock()
    saver = _saver(client, dynamodb_table, clock=clock, integrity=KEY, retention=TRIM)
    chain = saver._ops.codec.chain
    assert chain is not None
    config = cfg("t")
    graph = _run_graph(saver, config)
    before = _bodies(client, dynamodb_table, "t")
    assert len(before) == 5
    latest = max(before)
    parent = before[latest][0]
    assert parent is not None and _block(before[latest][1]).tombstone is None
    parent_digest = _block(before[parent][1]).digest
    state = graph.get_state(config).values

    counter = CallCounter(client)
    if how == "prune":
        saver.prune(["t"], strategy="keep_latest")
    else:
        clock.now += 1000
        report = saver.prune_expired(now=clock.now)
        assert report.trimmed == 1 and report.checkpoints == 4
    calls = counter.reset()
    assert calls["TransactWriteItems"] == 1  # the survivor's new body
    if how == "prune":
        # the check of what goes (the thread's values, read as verify reads them), then
        # the survivor's and its parent's bodies
        assert calls["BatchGetItem"] == 2

    after = _bodies(client, dynamodb_table, "t")
    assert list(after) == [latest]
    survivor = after[latest][1]
    block = _block(survivor)
    tomb = block.tombstone
    assert tomb is not None
    assert tomb.parent == parent and tomb.digest == parent_digest
    assert tomb.count == 4 and (tomb.first, tomb.last) == (min(before), parent)
    assert chain.tombstone_holds("default", "t", "", latest, tomb)
    assert not chain.tombstone_holds("default", "t", "", parent, tomb)
    # the payload, its tag and the survivor's own digest are unchanged
    assert split_block(survivor)[0] == split_block(before[latest][1])[0]
    assert block.digest == _block(before[latest][1]).digest

    # the thread still reads and resumes, in a fresh saver too (nothing cached)
    fresh = _saver(client, dynamodb_table, clock=clock, integrity=KEY, retention=TRIM)
    for s in (saver, fresh):
        tup = s.get_tuple(config)
        assert tup is not None and tup.config["configurable"]["checkpoint_id"] == latest
    assert graph.get_state(config).values == state
    again = loop_graph(3).compile(checkpointer=fresh)
    out = again.invoke({"count": 0, "log": ["more"]}, config)
    assert out["count"] == 3 and out["log"][-4:] == ["more", "1", "2", "3"]
    assert len(list(fresh.list(config))) == 1 + 5
    report = fresh.verify()
    assert report.ok and report.threads == 1, report


def test_a_trim_without_integrity_writes_no_tombstone(client: Any, dynamodb_table: str) -> None:
    clock = Clock()
    saver = _saver(client, dynamodb_table, clock=clock, retention=TRIM)
    assert saver._ops.codec.chain is None
    config = cfg("t")
    _run_graph(saver, config)
    put_chain(saver, "u", 5)
    before = _bodies(client, dynamodb_table, "t")
    latest = max(before)
    counter = CallCounter(client)
    saver.prune(["t"], strategy="keep_latest")
    calls = counter.reset()
    # the survivor's body is read (the check for a chain block), nothing is rewritten
    assert "TransactWriteItems" not in calls and calls["BatchGetItem"] <= 1
    assert "UpdateItem" not in calls
    clock.now += 1000
    saver.prune_expired(now=clock.now)
    calls = counter.reset()  # UpdateItem: the pruner renews its lock
    assert "TransactWriteItems" not in calls and "BatchGetItem" not in calls
    after = _bodies(client, dynamodb_table, "t")
    assert after == {latest: before[latest]}  # byte for byte
    assert split_block(after[latest][1])[1] is None
    assert len(_bodies(client, dynamodb_table, "u")) == 1
    assert saver.get_tuple(config) is not None


def test_every_survivor_whose_parent_goes_gets_one(client: Any, dynamodb_table: str) -> None:
    """keep=2 in two namespaces: only the oldest kept of each loses its parent."""
    clock = Clock()
    keep2 = Retention(idle=datetime.timedelta(seconds=100), strategy="keep_latest", keep=2)
    saver = _saver(client, dynamodb_table, clock=clock, integrity=KEY, retention=keep2)
    chain = saver._ops.codec.chain
    assert chain is not None
    put_chain(saver, "t", 6)
    put_chain(saver, "t", 4, ns="child")
    digests = {
        ns: {
            cid: _block(b).digest
            for cid, (_p, b) in _bodies(client, dynamodb_table, "t", ns=ns).items()
        }
        for ns in ("", "child")
    }
    clock.now += 1000
    report = saver.prune_expired(now=clock.now)
    assert report.trimmed == 1 and report.checkpoints == 4 + 2
    for ns in ("", "child"):
        after = _bodies(client, dynamodb_table, "t", ns=ns)
        assert len(after) == 2
        oldest, newest = sorted(after)
        assert _block(after[newest][1]).tombstone is None  # its parent stays
        tomb = _block(after[oldest][1]).tombstone
        assert tomb is not None and tomb.parent == after[oldest][0]
        assert tomb.digest == digests[ns][tomb.parent]
        assert chain.tombstone_holds("default", "t", ns, oldest, tomb)
    assert saver.verify().ok


def test_a_chunked_body_gets_its_tombstone(client: Any, dynamodb_table: str) -> None:
    """A body too large for its item is stored in chunks: they are rewritten with it."""
    saver = _saver(client, dynamodb_table, integrity=KEY)
    big = "x" * 500_000
    parent = None
    for i in range(3):
        cp = make_cp(step=i, note=big + str(i))  # inline values live in the body
        cp["channel_versions"] = {}
        parent = saver.put(cfg("c", checkpoint_id=parent), cp, {"step": i}, {})["configurable"][
            "checkpoint_id"
        ]
    before = _bodies(client, dynamodb_table, "c")
    assert any(
        k.endswith("#k#b#00001") for k in (i["sk"]["S"] for i in raw_items(client, dynamodb_table))
    )
    saver.prune(["c"], strategy="keep_latest")
    after = _bodies(client, dynamodb_table, "c")
    assert list(after) == [parent]
    tomb = _block(after[parent][1]).tombstone
    assert tomb is not None and tomb.parent == before[parent][0]
    assert split_block(after[parent][1])[0] == split_block(before[parent][1])[0]
    tup = saver.get_tuple(cfg("c"))
    assert tup is not None and tup.checkpoint["channel_values"]["note"] == big + "2"


def test_a_body_in_s3_gets_its_tombstone(
    client: Any, dynamodb_table: str, dynamodb_endpoint: str
) -> None:
    """A body past a transaction is an S3 object: a new object, the old one deleted."""
    import os

    import boto3
    from botocore.config import Config

    s3 = boto3.client(
        "s3",
        endpoint_url=dynamodb_endpoint,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )
    bucket = dynamodb_table.lower()
    s3.create_bucket(Bucket=bucket)
    try:
        saver = _saver(client, dynamodb_table, integrity=KEY, s3_bucket=bucket)
        chain = saver._ops.codec.chain
        assert chain is not None
        big = os.urandom(2_300_000).hex()  # 4.6 MB, inline in the body
        parent = None
        for i in range(3):
            cp = make_cp(step=i, note=big[i:])
            parent = saver.put(cfg("s", checkpoint_id=parent), cp, {"step": i}, {})["configurable"][
                "checkpoint_id"
            ]

        def pointers() -> dict[str, dict[str, Any]]:
            pk = thread_pk("default", "s")
            return {
                parse_checkpoint_sk(i["sk"]["S"]).checkpoint_id: i
                for i in raw_items(client, dynamodb_table)
                if i["pk"]["S"] == pk and parse_checkpoint_sk(i["sk"]["S"]).kind == "pointer"
            }

        def body(item: dict[str, Any]) -> Sealed:
            obj = s3.get_object(Bucket=bucket, Key=item["b_s3"]["S"])["Body"].read()
            return Sealed(item["bt"]["S"], obj)

        before = pointers()
        assert all("b_s3" in i for i in before.values())
        grand = before[parent]["p"]["S"]
        parent_digest = _block(body(before[grand])).digest
        saver.prune(["s"], strategy="keep_latest")
        after = pointers()
        assert list(after) == [parent]
        old_key, new_key = before[parent]["b_s3"]["S"], after[parent]["b_s3"]["S"]
        assert old_key != new_key
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents") or []}
        assert old_key not in keys and new_key in keys
        tomb = _block(body(after[parent])).tombstone
        assert tomb is not None and tomb.parent == grand and tomb.digest == parent_digest
        assert chain.tombstone_holds("default", "s", "", parent, tomb)
        tup = saver.get_tuple(cfg("s"))
        assert tup is not None and tup.checkpoint["channel_values"]["note"] == big[2:]
        assert saver.verify().ok
    finally:
        for o in s3.list_objects_v2(Bucket=bucket).get("Contents") or []:
            s3.delete_object(Bucket=bucket, Key=o["Key"])
        s3.delete_bucket(Bucket=bucket)
