"""Faults injected into a real client with botocore event hooks: throttling, partial
batches and cancelled transactions."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_durable._core.versions import next_version
from langgraph_durable.dynamodb import DynamoDBSaver, TransactionCanceledError
from langgraph_durable.errors import StorageError, StorageUnavailableError
from tests.dynamodb.helpers import (
    Faults,
    error_response,
    history_signature,
    loop_graph,
    make_client,
    raw_items,
)
from tests.helpers import cfg, make_cp, put_chain

FAST_RETRIES = {"retry_base_delay": 0.001, "retry_max_delay": 0.01, "max_attempts": 12}


@pytest.fixture
def client(dynamodb_endpoint: str) -> Any:
    return make_client(dynamodb_endpoint)


@pytest.mark.parametrize("code", ["ProvisionedThroughputExceededException", "ThrottlingException"])
def test_a_20_step_graph_completes_under_throttling_and_partial_batches(
    client: Any, dynamodb_table: str, code: str
) -> None:
    saver = DynamoDBSaver(client, table=dynamodb_table, get_page_items=2, **FAST_RETRIES)
    saver.setup()
    faults = Faults(client, dynamodb_table, throttle=0.3, partial=True, code=code)
    graph = loop_graph(20).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "faulty"}}
    result = graph.invoke({"count": 0, "log": []}, config)
    assert result == {"count": 20, "log": [str(n) for n in range(1, 21)]}
    # what survived equals what LangGraph's in-memory saver holds for the same run
    reference = loop_graph(20).compile(checkpointer=InMemorySaver())
    reference.invoke({"count": 0, "log": []}, config)
    ours = history_signature(saver, config)
    assert len(ours) == 22  # the input, 20 steps, the end
    assert ours == history_signature(reference.checkpointer, config)
    assert sum(1 for entry in ours if entry[3]) == 21  # every step's writes are there
    assert faults.throttled["TransactWriteItems"] >= 5
    assert faults.throttled["Query"] + faults.throttled["BatchGetItem"] >= 1
    assert faults.unprocessed["BatchGetItem"] >= 5  # history pages fetched in halves

    # batch writes (copy, delete) resend their unprocessed half until done
    saver.copy_thread("faulty", "copy")
    assert history_signature(saver, cfg("copy")) == ours
    saver.delete_thread("faulty")
    saver.delete_thread("copy")
    faults.active = False
    assert raw_items(client, dynamodb_table) == []
    assert faults.unprocessed["BatchWriteItem"] >= 20


def test_throttling_that_never_ends_is_reported(client: Any, dynamodb_table: str) -> None:
    saver = DynamoDBSaver(client, table=dynamodb_table, **{**FAST_RETRIES, "max_attempts": 3})
    saver.setup()
    Faults(client, dynamodb_table, throttle=1.0)
    with pytest.raises(StorageUnavailableError, match="3 times .*ProvisionedThroughput"):
        saver.get_tuple(cfg("t"))


def test_a_transaction_cancelled_mid_put_leaves_no_partial_checkpoint(
    client: Any, dynamodb_table: str
) -> None:
    saver = DynamoDBSaver(client, table=dynamodb_table, **FAST_RETRIES)
    saver.setup()
    (first,) = put_chain(saver, "t", 1)
    before = raw_items(client, dynamodb_table)

    # The server cancels the transaction: its last action (the checkpoint pointer) is
    # turned into a condition that fails, after the blobs and chunks ahead of it.
    def sabotage(params: dict[str, Any], **_: Any) -> None:
        actions = list(params["TransactItems"])
        pointer = actions[-1]["Put"]
        actions[-1] = {
            "ConditionCheck": {
                "TableName": pointer["TableName"],
                "Key": {"pk": pointer["Item"]["pk"], "sk": pointer["Item"]["sk"]},
                "ConditionExpression": "attribute_exists(pk)",
            }
        }
        params["TransactItems"] = actions

    client.meta.events.register("before-parameter-build.dynamodb.TransactWriteItems", sabotage)
    cp = make_cp(big=["x" * 500_000], small={"k": 1})  # a chunked blob and a plain one
    cp["channel_versions"] = {"big": next_version(None), "small": next_version(None)}
    with pytest.raises(TransactionCanceledError, match="ConditionalCheckFailed") as err:
        saver.put(
            cfg("t", checkpoint_id=first["configurable"]["checkpoint_id"]),
            cp,
            {},
            cp["channel_versions"],
        )
    assert isinstance(err.value, StorageError)
    assert "nothing of it was written" in str(err.value)
    client.meta.events.unregister("before-parameter-build.dynamodb.TransactWriteItems", sabotage)
    assert raw_items(client, dynamodb_table) == before  # no blob, chunk or pointer
    latest = saver.get_tuple(cfg("t"))
    assert latest is not None and latest.config == first
    assert [t.config for t in saver.list(cfg("t"))] == [first]


def test_an_injected_cancellation_is_retried_only_when_transient(
    client: Any, dynamodb_table: str
) -> None:
    saver = DynamoDBSaver(client, table=dynamodb_table, **FAST_RETRIES)
    saver.setup()
    answers = [
        ["TransactionConflict", "None"],
        ["None", "ThrottlingError"],
        ["ValidationError", "None"],
    ]

    def cancel(**_: Any) -> Any:
        if not answers:
            return None
        reasons = answers.pop(0)
        return error_response(
            "TransactionCanceledException",
            f"Transaction cancelled [{', '.join(reasons)}]",
            CancellationReasons=[{"Code": r} for r in reasons],
        )

    client.meta.events.register("before-call.dynamodb.TransactWriteItems", cancel)
    with pytest.raises(TransactionCanceledError, match="ValidationError"):
        put_chain(saver, "t", 1)  # two transient cancellations retried, the third is not
    assert saver.get_tuple(cfg("t")) is None
    put_chain(saver, "t", 1)  # no more faults
    assert saver.get_tuple(cfg("t")) is not None


def test_partial_batch_gets_on_a_wide_checkpoint(client: Any, dynamodb_table: str) -> None:
    saver = DynamoDBSaver(client, table=dynamodb_table, **FAST_RETRIES)
    saver.setup()
    values = {f"ch{i}": [i] for i in range(150)}  # 150 blobs: two BatchGetItem pages
    cp = make_cp(**values)
    cp["channel_versions"] = {k: next_version(None) for k in values}
    saver.put(cfg("wide"), cp, {}, cp["channel_versions"])
    faults = Faults(client, dynamodb_table, partial=True)
    tup = saver.get_tuple(cfg("wide"))
    assert tup is not None and tup.checkpoint["channel_values"] == values
    assert faults.unprocessed["BatchGetItem"] >= 75
