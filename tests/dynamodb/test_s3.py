"""S3 offload of checkpoints larger than one DynamoDB transaction, on moto's S3.

moto's server serves S3 on the DynamoDB endpoint; each test creates its own bucket.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_durable import Retention
from langgraph_durable.dynamodb import AsyncDynamoDBSaver, DynamoDBOptions, DynamoDBSaver
from langgraph_durable.dynamodb._objects import object_key, parse_object_key, retarget
from langgraph_durable.dynamodb.saver import parse_conn_string
from langgraph_durable.errors import ConfigurationError, CorruptRecordError, InvalidInputError
from langgraph_durable.protect import Encryption, LocalKeyring
from tests.dynamodb.helpers import (
    REGION,
    CallCounter,
    error_response,
    loop_graph,
    make_client,
    raw_items,
)
from tests.helpers import cfg, make_cp

MB = 1024 * 1024


def _text(size: int) -> str:
    """Incompressible text of ``size`` characters."""
    return os.urandom(size // 2).hex()


@pytest.fixture
def client(dynamodb_endpoint: str) -> Any:
    return make_client(dynamodb_endpoint)


@pytest.fixture
def s3(dynamodb_endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=dynamodb_endpoint,
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}),
    )


@pytest.fixture
def bucket(s3: Any, dynamodb_table: str) -> Iterator[str]:
    """A fresh bucket (named like the test's table), emptied and deleted afterwards."""
    name = dynamodb_table.lower()
    s3.create_bucket(Bucket=name)
    yield name
    for key in objects(s3, name):
        s3.delete_object(Bucket=name, Key=key)
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def saver(client: Any, dynamodb_table: str, bucket: str) -> Iterator[DynamoDBSaver]:
    s = DynamoDBSaver(client, table=dynamodb_table, s3_bucket=bucket)
    s.setup()
    yield s
    s.close()


def objects(s3: Any, bucket: str, prefix: str = "") -> list[str]:
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(o["Key"] for o in page.get("Contents") or [])
    return keys


def big_checkpoint(saver: DynamoDBSaver, size: int = 5 * MB, **values: Any) -> dict[str, Any]:
    """A checkpoint with one list channel of ``size`` characters (past the 4 MB limit)."""
    cp = make_cp(big=[_text(size)], n=1, **values)
    cp["v"] = 4
    cp["channel_versions"] = {"big": saver.get_next_version(None)}
    return cp


def put_big(saver: DynamoDBSaver, thread: str, **values: Any) -> tuple[dict[str, Any], Any]:
    cp = big_checkpoint(saver, **values)
    stored = saver.put(
        cfg(thread), cp, {"source": "input", "step": 0}, {"big": cp["channel_versions"]["big"]}
    )
    return cp, stored


def test_a_checkpoint_past_the_limit_round_trips(saver: DynamoDBSaver, s3: Any) -> None:
    dynamodb = CallCounter(saver.client)
    s3_calls = CallCounter(saver.s3_client, "s3")
    cp, stored = put_big(saver, "t")
    # the payload first (one PutObject), then the transaction that references it
    assert s3_calls.reset() == {"PutObject": 1}
    assert dynamodb.reset() == {"TransactWriteItems": 1}
    tup = saver.get_tuple(cfg("t"))
    assert tup is not None and tup.checkpoint["channel_values"] == cp["channel_values"]
    # reading it: the usual two calls, plus one GetObject per offloaded payload
    assert dynamodb.reset() == {"Query": 1, "BatchGetItem": 1}
    assert s3_calls.reset() == {"GetObject": 1}
    assert saver.get_tuple(stored) is not None
    listed = list(saver.list(cfg("t")))
    assert [t.checkpoint["channel_values"] for t in listed] == [cp["channel_values"]]
    # the item holds the object's key, length and hash instead of the payload
    blob = next(i for i in raw_items(saver.client, saver.table) if i["sk"]["S"].startswith("b#"))
    assert "d" not in blob and "d_n" not in blob
    assert int(blob["d_len"]["N"]) > 5 * MB and len(blob["d_h"]["S"]) == 64
    (key,) = objects(s3, saver.options.s3_bucket or "")
    assert blob["d_s3"]["S"] == key
    assert key.startswith("langgraph-durable/tenant=default/thread=t/ns=/checkpoint=")


def test_a_graph_state_past_the_limit_round_trips(saver: DynamoDBSaver, s3: Any) -> None:
    pieces = [_text(100), _text(int(4.5 * MB)), _text(100)]
    graph = loop_graph(3, payload=lambda n: pieces[n - 1]).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "g"}}
    graph.invoke({"count": 0, "log": []}, config, durability="sync")
    assert graph.get_state(config).values == {"count": 3, "log": pieces}
    reference = loop_graph(3, payload=lambda n: pieces[n - 1]).compile(checkpointer=InMemorySaver())
    reference.invoke({"count": 0, "log": []}, config)
    ours = [s.values for s in graph.get_state_history(config)]
    assert ours == [s.values for s in reference.get_state_history(config)]
    # only the step that passed the limit went to S3: its task's write (the node's
    # output, written before the checkpoint), then the checkpoint's value (a delta)
    stored = objects(s3, saver.options.s3_bucket or "")
    assert len(stored) == 2
    assert sum("/task=" in k and "/v/" in k for k in stored) == 1
    assert sum("/channel=log/" in k for k in stored) == 1


def test_without_a_bucket_the_early_error_stays(client: Any, dynamodb_table: str) -> None:
    s = DynamoDBSaver(client, table=dynamodb_table)
    s.setup()
    counter = CallCounter(client)
    with pytest.raises(InvalidInputError, match=r"at most 4\.0 MB.*s3_bucket"):
        put_big(s, "t")
    assert counter.reset() == {}


def test_delete_thread_removes_its_objects(saver: DynamoDBSaver, s3: Any) -> None:
    put_big(saver, "a")
    put_big(saver, "b")
    bucket = saver.options.s3_bucket or ""
    assert len(objects(s3, bucket)) == 2
    saver.delete_thread("a")
    assert saver.get_tuple(cfg("a")) is None
    assert objects(s3, bucket, "langgraph-durable/tenant=default/thread=a/") == []
    assert len(objects(s3, bucket)) == 1
    saver.prune(["b"], strategy="delete")
    assert objects(s3, bucket) == []


def test_prune_keep_latest_removes_the_objects_of_pruned_checkpoints(
    saver: DynamoDBSaver, s3: Any
) -> None:
    bucket = saver.options.s3_bucket or ""
    cp, stored = put_big(saver, "t")
    second = {**big_checkpoint(saver), "channel_versions": {"big": "2"}}
    latest = saver.put(stored, second, {"source": "loop", "step": 1}, {"big": "2"})
    assert len(objects(s3, bucket)) == 2
    saver.prune(["t"], strategy="keep_latest")
    tup = saver.get_tuple(cfg("t"))
    assert tup is not None and tup.config == latest
    assert tup.checkpoint["channel_values"] == second["channel_values"]
    (key,) = objects(s3, bucket)
    assert "version=2/" in key


def test_delete_for_runs_removes_offloaded_bodies(saver: DynamoDBSaver, s3: Any) -> None:
    """A body past the limit (an inline string) goes to S3 too, and with its checkpoint."""
    bucket = saver.options.s3_bucket or ""
    cp = make_cp(note=_text(5 * MB))
    cp["v"] = 4
    config = cfg("r", run_id="run-1")
    saver.put(config, cp, {"source": "input", "step": 0, "run_id": "run-1"}, {})
    (key,) = objects(s3, bucket)
    assert "/b/" in key  # the checkpoint body
    tup = saver.get_tuple(cfg("r"))
    assert tup is not None and tup.checkpoint["channel_values"] == cp["channel_values"]
    saver.delete_for_runs(["run-1"])
    assert saver.get_tuple(cfg("r")) is None
    assert objects(s3, bucket) == []


def test_copy_thread_copies_objects(saver: DynamoDBSaver, s3: Any) -> None:
    bucket = saver.options.s3_bucket or ""
    cp, _ = put_big(saver, "src")
    counter = CallCounter(saver.s3_client, "s3")
    saver.copy_thread("src", "dst")
    assert counter.reset() == {"CopyObject": 1}
    saver.delete_thread("src")
    assert objects(s3, bucket, "langgraph-durable/tenant=default/thread=src/") == []
    tup = saver.get_tuple(cfg("dst"))
    assert tup is not None and tup.checkpoint["channel_values"] == cp["channel_values"]


def test_the_pruner_deletes_orphan_objects_after_the_grace_period(
    saver: DynamoDBSaver, s3: Any
) -> None:
    bucket = saver.options.s3_bucket or ""
    cp, _ = put_big(saver, "live")
    # a write that failed after its objects: the transaction never happened
    failing = saver.client.meta.events.register(
        "before-call.dynamodb.TransactWriteItems",
        lambda **_: error_response("ValidationException", "injected"),
    )
    with pytest.raises(Exception, match="injected"):
        put_big(saver, "crashed")
    saver.client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", failing)
    orphan = objects(s3, bucket, "langgraph-durable/tenant=default/thread=crashed/")
    assert len(orphan) == 1 and saver.get_tuple(cfg("crashed")) is None
    # and one whose item is gone (DynamoDB's TTL, or a crash before its objects went)
    stray = object_key(
        "langgraph-durable/", "default", "gone", "", "1f000000-0000-6000-8000-0000000000aa",
        "b", "00" * 32,
    )  # fmt: skip
    s3.put_object(Bucket=bucket, Key=stray, Body=b"x" * 10)
    # not ours: left alone whatever its age
    s3.put_object(Bucket=bucket, Key="langgraph-durable/README", Body=b"hands off")
    now = time.time()
    report = saver.prune_expired(now=now)  # within the grace period: kept
    assert report.bytes == 0 and len(objects(s3, bucket)) == 4
    dry = saver.prune_expired(now=now + 7200, dry_run=True)
    assert dry.bytes > 5 * MB and len(objects(s3, bucket)) == 4
    report = saver.prune_expired(now=now + 7200)
    assert report.bytes == dry.bytes
    assert sorted(objects(s3, bucket)) == sorted(
        [*objects(s3, bucket, "langgraph-durable/tenant=default/thread=live/"),
         "langgraph-durable/README"]
    )  # fmt: skip
    tup = saver.get_tuple(cfg("live"))
    assert tup is not None and tup.checkpoint["channel_values"] == cp["channel_values"]


def test_a_missing_object_is_a_clear_error(saver: DynamoDBSaver, s3: Any) -> None:
    put_big(saver, "t")
    bucket = saver.options.s3_bucket or ""
    (key,) = objects(s3, bucket)
    s3.delete_object(Bucket=bucket, Key=key)
    with pytest.raises(CorruptRecordError, match="S3 object .* is missing"):
        saver.get_tuple(cfg("t"))


def test_retention_trims_and_purges_remove_objects(
    client: Any, dynamodb_table: str, bucket: str, s3: Any
) -> None:
    s = DynamoDBSaver(client, table=dynamodb_table, s3_bucket=bucket)
    s.setup()
    put_big(s, "old")
    report = s.prune_expired(Retention(idle=60), now=time.time() + 600)
    assert report.threads == 1
    assert objects(s3, bucket) == []


def test_encrypted_offloaded_payloads_are_sealed(
    client: Any, dynamodb_table: str, bucket: str, s3: Any
) -> None:
    encryption = Encryption(LocalKeyring({"k": os.urandom(32)}, "k"))
    s = DynamoDBSaver(client, table=dynamodb_table, s3_bucket=bucket, encryption=encryption)
    s.setup()
    marker = "canary-" + "z" * 64
    cp = big_checkpoint(s, secret=marker)
    cp["channel_values"]["big"] = [marker + _text(5 * MB)]
    s.put(cfg("t"), cp, {"source": "input", "step": 0}, {"big": cp["channel_versions"]["big"]})
    (key,) = objects(s3, bucket)
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert marker.encode() not in body and len(body) > 5 * MB
    tup = s.get_tuple(cfg("t"))
    assert tup is not None and tup.checkpoint["channel_values"] == cp["channel_values"]


async def test_async_saver_offloads_lists_and_deletes(
    client: Any, dynamodb_table: str, bucket: str, s3: Any
) -> None:
    async with AsyncDynamoDBSaver.from_conn_string(
        f"dynamodb://{dynamodb_table}?s3_bucket={bucket}&s3_prefix=ckpt/", client=client
    ) as saver:
        await saver.setup()
        assert saver.s3_client is not None
        cp = big_checkpoint(saver)  # type: ignore[arg-type]
        await saver.aput(
            cfg("a"), cp, {"source": "input", "step": 0}, {"big": cp["channel_versions"]["big"]}
        )
        (key,) = objects(s3, bucket)
        assert key.startswith("ckpt/tenant=default/thread=a/")
        tup = await saver.aget_tuple(cfg("a"))
        assert tup is not None and tup.checkpoint["channel_values"] == cp["channel_values"]
        listed = [t async for t in saver.alist(cfg("a"))]
        assert [t.checkpoint["channel_values"] for t in listed] == [cp["channel_values"]]
        s3.put_object(Bucket=bucket, Key=key.replace("thread=a", "thread=z"), Body=b"orphan")
        await saver.adelete_thread("a")
        assert objects(s3, bucket, "ckpt/tenant=default/thread=a/") == []
        report = await saver.aprune_expired(now=time.time() + 7200)
        assert report.bytes == len(b"orphan") and objects(s3, bucket) == []


def test_object_keys_name_their_item() -> None:
    for tenant, thread, ns, cid in [
        ("default", "t", "", "1f0"),
        ("a/b=c%d", "thread/with spaces", "parent:child|x", "id#1"),
        ("ünï", "é", "ns", "x"),
    ]:
        key = object_key("p/", tenant, thread, ns, cid, "b", "ab" * 32)
        ref = parse_object_key("p/", key)
        assert ref is not None and (ref.tenant, ref.thread, ref.ns, ref.checkpoint_id) == (
            tenant,
            thread,
            ns,
            cid,
        )
        assert ref.name == "b" and ref.channel is None and ref.attribute == "b_s3"
        blob = object_key("p/", tenant, thread, ns, cid, "d", "cd" * 32, "ch/1", "v.2")
        ref = parse_object_key("p/", blob)
        assert ref is not None and (ref.channel, ref.version, ref.name) == ("ch/1", "v.2", "d")
        moved = parse_object_key("p/", retarget("p/", blob, "other"))
        assert moved is not None and moved.thread == "other" and moved.channel == "ch/1"
        write = object_key("p/", tenant, thread, ns, cid, "v", "ef" * 32, task_id="t/1", idx=-3)
        ref = parse_object_key("p/", write)
        assert ref is not None and (ref.task_id, ref.idx, ref.attribute) == ("t/1", -3, "v_s3")
        assert ref.item_key()[1].startswith("c#") and "#w#" in ref.item_key()[1]
    assert parse_object_key("p/", "p/README") is None
    assert parse_object_key("p/", "q/tenant=a/thread=b/ns=/checkpoint=c/b/d") is None
    with pytest.raises(InvalidInputError, match="S3 allows"):
        object_key("p/", "t", "x" * 1100, "", "c", "b", "00")


def test_s3_options_are_validated() -> None:
    settings = parse_conn_string(
        "dynamodb://tbl?s3_bucket=my-bucket&s3_prefix=a/b/&s3_orphan_grace=60"
    )
    assert settings == {
        "table": "tbl",
        "s3_bucket": "my-bucket",
        "s3_prefix": "a/b/",
        "s3_orphan_grace": 60.0,
    }
    options = DynamoDBOptions(table="tbl")
    assert (options.s3_bucket, options.s3_prefix) == (None, "langgraph-durable/")
    for bad in ({"s3_bucket": "a"}, {"s3_bucket": "no spaces"}, {"s3_prefix": "/abs"}):
        with pytest.raises(ConfigurationError, match="s3_"):
            DynamoDBOptions(table="tbl", **bad)
    with pytest.raises(ConfigurationError, match="s3_orphan_grace"):
        DynamoDBOptions(table="tbl", s3_orphan_grace=0)
    with pytest.raises(ConfigurationError, match="s3_orphan_grace must be seconds"):
        parse_conn_string("dynamodb://tbl?s3_orphan_grace=soon")
