"""The pure DynamoDB module, driven by hand (no server): keys, chunks, limits, retries."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoRegionError

from langgraph_durable._core.codec import CheckpointCodec
from langgraph_durable._core.sansio import Emit
from langgraph_durable.dynamodb._driver import translate
from langgraph_durable.dynamodb._ops import (
    ITEM_LIMIT,
    Call,
    DynamoDBOps,
    RetryableError,
    RetryPolicy,
    Sleep,
    TableNotFoundError,
    TransactionCanceledError,
    blob_sk,
    chunk_sk,
    dec,
    enc,
    item_size,
    parse_checkpoint_sk,
    pointer_sk,
    read_payload,
    refuse_transaction,
    thread_pk,
    with_payloads,
    write_sk,
)
from langgraph_durable.dynamodb.saver import DynamoDBOptions, parse_conn_string
from langgraph_durable.errors import (
    ConfigurationError,
    CorruptRecordError,
    InvalidInputError,
    SchemaError,
    StorageError,
    StorageUnavailableError,
)
from langgraph_durable.protect.pipeline import IdentityPipeline

ODD = ["", "plain", "a#b", "%", "%23", '"', " ", "\x00", "ünï", "~", "c#x#", "a|b:c"]


def _ops(**kwargs: Any) -> DynamoDBOps:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    codec = CheckpointCodec(IdentityPipeline(JsonPlusSerializer()))
    return DynamoDBOps("tbl", codec, now=lambda: 1000.0, **kwargs)


def test_key_components_escape_round_trip_and_keep_order() -> None:
    for value in ODD:
        escaped = enc(value)
        assert dec(escaped) == value
        assert "#" not in escaped and all(ch > "#" for ch in escaped)
    ids = sorted(["1f0a-1", "1f0a-10", "1f0a-2", "1f0b", "1f0a"])
    assert sorted(pointer_sk("", i) for i in ids) == [pointer_sk("", i) for i in ids]
    # distinct (tenant, thread) pairs never share a partition key
    pairs = [(a, b) for a in ODD if a for b in ODD if b]
    assert len({thread_pk(a, b) for a, b in pairs}) == len(pairs)


def test_sort_keys_parse_back() -> None:
    for ns in ODD:
        for cid in ("1f0a", "c#1"):
            p = parse_checkpoint_sk(pointer_sk(ns, cid))
            assert (p.kind, p.ns, p.checkpoint_id) == ("pointer", ns, cid)
            w = parse_checkpoint_sk(write_sk(ns, cid, "task#1", -3))
            assert (w.kind, w.task_id, w.idx) == ("write", "task#1", -3)
            k = parse_checkpoint_sk(chunk_sk(pointer_sk(ns, cid), "b", 7))
            assert (k.kind, k.name, k.index) == ("chunk", "b", 7)
            wk = parse_checkpoint_sk(chunk_sk(write_sk(ns, cid, "t", 2), "v", 1))
            assert (wk.kind, wk.task_id, wk.idx, wk.index) == ("write_chunk", "t", 2, 1)
            # a checkpoint's items all sort under its pointer's key, not another's
            assert write_sk(ns, cid, "t", 0).startswith(pointer_sk(ns, cid))
    assert not pointer_sk("a", "1").startswith(pointer_sk("", "a"))
    assert blob_sk("ns", "ch#1", "v1") == "b#ns#ch%231#v1"


def test_payloads_stay_inline_or_go_to_checked_chunks() -> None:
    base = {"pk": {"S": "p"}, "sk": {"S": "c##1#"}}
    item, chunks = with_payloads(base, {"b": b"small"}, {})
    assert item["b"] == {"B": b"small"} and chunks == []
    big = bytes(range(256)) * 4000  # 1 MB
    item, chunks = with_payloads(base, {"b": big, "m": b"meta"}, {"expires_at": {"N": "5"}})
    assert "b" not in item and item["m"] == {"B": b"meta"} and int(item["b_n"]["N"]) == 3
    assert item["b_h"]["S"] == hashlib.sha256(big).hexdigest()
    assert all(item_size(c) < ITEM_LIMIT and c["expires_at"] == {"N": "5"} for c in chunks)
    assert [c["sk"]["S"] for c in chunks] == [f"c##1#k#b#{i:05d}" for i in range(3)]
    parts = {i: c["d"]["B"] for i, c in enumerate(chunks)}
    assert read_payload(item, "b", parts, "x") == big
    with pytest.raises(CorruptRecordError, match="chunk 1 of 3 is missing"):
        read_payload(item, "b", {0: parts[0], 2: parts[2]}, "x")
    with pytest.raises(CorruptRecordError, match="hash"):
        read_payload(item, "b", {**parts, 1: b"x" * len(parts[1])}, "x")


def test_a_transaction_too_large_is_refused_with_its_size_and_the_limits() -> None:
    with pytest.raises(InvalidInputError, match=r"needs 20\.0 MB in 55 items.*4\.0 MB and 100"):
        refuse_transaction(20 * 1024 * 1024, 55, "checkpoint x")


def _drive(gen: Any, answers: list[Any]) -> tuple[list[Any], Any]:
    """Run a generator: each answer is sent (or thrown, if an exception)."""
    seen = [gen.send(None)]
    try:
        for answer in answers:
            if isinstance(answer, BaseException):
                seen.append(gen.throw(answer))
            else:
                seen.append(gen.send(answer))
    except StopIteration as stop:
        return seen, stop.value
    return seen, None


def test_throttled_calls_back_off_then_give_up() -> None:
    ops = _ops(retry=RetryPolicy(max_attempts=4, base_delay=0.1, max_delay=0.3, rand=lambda: 1))
    throttled = RetryableError("slow down", "ProvisionedThroughputExceededException")
    gen = ops._call("query", {"TableName": "tbl"})
    seen, result = _drive(gen, [throttled, None, throttled, None, {"Items": []}])
    assert [type(s).__name__ for s in seen] == ["Call", "Sleep", "Call", "Sleep", "Call"]
    assert [s.seconds for s in seen if isinstance(s, Sleep)] == [0.1, 0.2]
    assert result == {"Items": []}
    gen = ops._call("query", {})
    with pytest.raises(StorageUnavailableError, match="4 times"):
        _drive(gen, [throttled, None] * 4)


def test_cancelled_transactions_retry_only_transient_reasons_with_a_new_token() -> None:
    ops = _ops(retry=RetryPolicy(base_delay=0.001, rand=lambda: 0))
    conflict = TransactionCanceledError("x", ["None", "TransactionConflict"])
    gen = ops._call("transact_write_items", {"TransactItems": [], "ClientRequestToken": "a"})
    seen, _ = _drive(gen, [conflict, None, {}])
    first, again = seen[0], seen[2]
    assert isinstance(again, Call) and again.params["ClientRequestToken"] != "a"
    assert first.params["ClientRequestToken"] == "a"
    gen = ops._call("transact_write_items", {"TransactItems": []})
    with pytest.raises(TransactionCanceledError):
        _drive(gen, [TransactionCanceledError("x", ["ConditionalCheckFailed"])])


def test_unprocessed_batch_items_are_resent_until_done() -> None:
    ops = _ops(retry=RetryPolicy(base_delay=0.001, rand=lambda: 0))
    requests = [
        {"DeleteRequest": {"Key": {"pk": {"S": "p"}, "sk": {"S": str(i)}}}} for i in range(30)
    ]
    gen = ops._batch_write(requests)
    seen, _ = _drive(
        gen,
        [
            {"UnprocessedItems": {"tbl": requests[10:25]}},
            None,
            {"UnprocessedItems": {}},
            {},
        ],
    )
    calls = [s for s in seen if isinstance(s, Call)]
    assert [len(c.params["RequestItems"]["tbl"]) for c in calls] == [25, 15, 5]
    assert calls[1].params["RequestItems"]["tbl"] == requests[10:25]


def test_put_writes_never_makes_one_call_per_write() -> None:
    from langgraph_durable._core.codec import ThreadKey

    ops = _ops()
    key = ThreadKey("t", "thread", "", False)
    op = ops.put_writes(key, "cp1", [("a", 1), ("b", 2), ("a", 3)], "task", "")
    call = op.steps.send(None)
    assert isinstance(call, Call) and call.operation == "transact_write_items"
    puts = [a["Put"] for a in call.params["TransactItems"]]
    assert len(puts) == 3 and all("attribute_not_exists" in p["ConditionExpression"] for p in puts)
    # special writes replace: plain puts, duplicates of one index keep the last
    op = ops.put_writes(key, "cp1", [("__interrupt__", 1), ("__interrupt__", 2)], "task", "")
    call = op.steps.send(None)
    (only,) = call.params["TransactItems"]
    assert "ConditionExpression" not in only["Put"]


def test_list_rejects_a_bad_limit_before_any_call() -> None:
    # The saver checks limit before building the operation; a client on a closed port
    # proves no call is attempted (one would fail with a connection error instead).
    from langgraph_durable.dynamodb import DynamoDBSaver

    saver = DynamoDBSaver(
        table="lgd_t", region="us-east-1", endpoint_url="http://127.0.0.1:1", max_attempts=1
    )
    try:
        with pytest.raises(InvalidInputError, match="limit"):
            list(saver.list({"configurable": {"thread_id": "thread"}}, limit=-1))
    finally:
        saver.close()
    op = _ops().list("t", "thread", "", None, None, None, 0, False)
    with pytest.raises(StopIteration):
        op.steps.send(None)
    assert Emit  # streaming operations emit Emit items (exercised against the server)


def _client_error(code: str, status: int = 400, **extra: Any) -> ClientError:
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": "msg"},
        "ResponseMetadata": {"HTTPStatusCode": status},
        **extra,
    }
    return ClientError(response, "Query")  # type: ignore[arg-type]


def test_botocore_errors_become_ours() -> None:
    for code in (
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
    ):
        err = translate(_client_error(code), "tbl")
        assert isinstance(err, RetryableError) and err.code == code
    assert isinstance(translate(_client_error("InternalFailure", 500)), RetryableError)
    cancelled = translate(
        _client_error(
            "TransactionCanceledException",
            CancellationReasons=[{"Code": "None"}, {"Code": "ConditionalCheckFailed"}],
        )
    )
    assert isinstance(cancelled, TransactionCanceledError) and isinstance(cancelled, StorageError)
    assert cancelled.reasons == ("None", "ConditionalCheckFailed")
    missing = translate(_client_error("ResourceNotFoundException"), "tbl")
    assert isinstance(missing, TableNotFoundError) and isinstance(missing, SchemaError)
    assert "setup()" in str(missing)
    denied = translate(_client_error("AccessDeniedException"))
    assert isinstance(denied, StorageError) and "IAM" in str(denied)
    assert isinstance(
        translate(EndpointConnectionError(endpoint_url="http://x")), StorageUnavailableError
    )
    assert isinstance(translate(NoRegionError()), ConfigurationError)


def test_options_and_urls_are_validated() -> None:
    assert parse_conn_string(
        "dynamodb://my-table?region=eu-west-1&endpoint=http://127.0.0.1:8000&ttl=60"
        "&create_table=false"
    ) == {
        "table": "my-table",
        "region": "eu-west-1",
        "endpoint_url": "http://127.0.0.1:8000",
        "ttl": 60,
        "create_table": False,
    }
    with pytest.raises(ConfigurationError, match="whole seconds"):
        parse_conn_string("dynamodb://t1x?ttl=soon")
    with pytest.raises(ConfigurationError, match="endpoint_url"):
        DynamoDBOptions(table="tbl", endpoint_url="localhost:8000")
    with pytest.raises(ConfigurationError, match="ttl_refresh needs ttl"):
        DynamoDBOptions(table="tbl", ttl_refresh=10)
    with pytest.raises(ConfigurationError, match="get_page_items"):
        DynamoDBOptions(table="tbl", get_page_items=0)
    assert DynamoDBOptions(table="tbl", ttl=100).ttl_refresh is None  # half the TTL: 50
    assert _ops(ttl=100).refresh == 50
