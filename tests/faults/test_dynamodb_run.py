"""A long graph run on DynamoDB while 30% of calls are throttled, batches come back half
processed and replies of applied calls are lost (botocore event hooks on a real client,
moto's server): no error reaches the caller and the history equals what LangGraph's
InMemorySaver holds for the same run."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from botocore.exceptions import ConnectionClosedError
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_durable.dynamodb import AsyncDynamoDBSaver, DynamoDBSaver
from tests.dynamodb.helpers import Faults, history_signature, loop_graph, make_client

STEPS = 100
RETRIES = {"retry_base_delay": 0.001, "retry_max_delay": 0.01, "max_attempts": 12}
# Calls the saver may send twice (reads, transactions with a ClientRequestToken).
RESENDABLE = ("TransactWriteItems", "Query", "BatchGetItem", "GetItem")


class LoseSomeReplies:
    """Send a fraction of calls for real, then fail them with ``ConnectionClosedError``."""

    def __init__(self, client: Any, rate: float, seed: int = 11) -> None:
        self.session = client._endpoint.http_session
        self.rate = rate
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.lost = 0
        for operation in RESENDABLE:
            client.meta.events.register(f"before-send.dynamodb.{operation}", self._send)

    def _send(self, request: Any, **_: Any) -> None:
        with self.lock:
            if self.rng.random() >= self.rate:
                return
            self.lost += 1
        self.session.send(request)
        raise ConnectionClosedError(endpoint_url=request.url)


@pytest.fixture
def client(dynamodb_endpoint: str) -> Any:
    return make_client(dynamodb_endpoint)


@pytest.fixture
def reference() -> list[tuple[Any, ...]]:
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "run"}}
    loop_graph(STEPS).compile(checkpointer=saver).invoke({"count": 0, "log": []}, config)
    return history_signature(saver, config)


def _faults(client: Any, table: str) -> tuple[Faults, LoseSomeReplies]:
    return Faults(client, table, throttle=0.3, partial=True), LoseSomeReplies(client, 0.1)


def _check(faults: Faults, lost: LoseSomeReplies) -> None:
    # the faults really happened, on writes and on reads
    assert faults.throttled["TransactWriteItems"] >= 10
    assert faults.throttled["Query"] + faults.throttled["BatchGetItem"] >= 1
    assert lost.lost >= 10


def test_a_run_under_throttling_and_lost_replies(
    client: Any, dynamodb_table: str, reference: list
) -> None:
    saver = DynamoDBSaver(client, table=dynamodb_table, get_page_items=2, **RETRIES)
    saver.setup()
    faults, lost = _faults(client, dynamodb_table)
    config = {"configurable": {"thread_id": "run"}}
    result = (
        loop_graph(STEPS)
        .compile(checkpointer=saver)
        .invoke({"count": 0, "log": []}, config, durability="sync")
    )
    assert result["count"] == STEPS
    assert history_signature(saver, config) == reference  # read under the same faults
    _check(faults, lost)


async def test_async_a_run_under_throttling_and_lost_replies(
    client: Any, dynamodb_table: str, reference: list
) -> None:
    saver = AsyncDynamoDBSaver(client, table=dynamodb_table, get_page_items=2, **RETRIES)
    await saver.setup()
    faults, lost = _faults(client, dynamodb_table)
    config = {"configurable": {"thread_id": "run"}}
    result = (
        await loop_graph(STEPS)
        .compile(checkpointer=saver)
        .ainvoke({"count": 0, "log": []}, config, durability="sync")
    )
    assert result["count"] == STEPS
    got = [t async for t in saver.alist(config)]  # read under the same faults
    assert len(got) == len(reference)
    _check(faults, lost)
    faults.active = False
    lost.rate = 0.0
    # the sync saver reads what the async one wrote
    sync = DynamoDBSaver(client, table=dynamodb_table)
    assert history_signature(sync, config) == reference
