"""DynamoDB calls whose connection is lost after the server applied them (botocore event
hooks on a real client, moto's server): the saver sends again only what may be applied
twice, and the caller sees no error and nothing twice."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError

from langgraph_durable.dynamodb import AsyncDynamoDBSaver, DynamoDBSaver
from langgraph_durable.errors import StorageUnavailableError
from tests.dynamodb.helpers import REGION, make_client
from tests.faults.proxy import step_args
from tests.helpers import cfg, checkpoint_ids

FAST = {"retry_base_delay": 0.001, "retry_max_delay": 0.01}


class LoseReplies:
    """Send the next ``lose(n)`` calls of the given operations for real, then fail them with
    ``ConnectionClosedError``: applied by the server, the reply never arrives."""

    def __init__(self, client: Any, *operations: str) -> None:
        self.session = client._endpoint.http_session
        self.left = 0
        self.lost = 0
        for operation in operations:
            client.meta.events.register(f"before-send.dynamodb.{operation}", self._send)

    def lose(self, n: int = 1) -> None:
        self.left = n

    def _send(self, request: Any, **_: Any) -> None:
        if self.left <= 0:
            return
        self.left -= 1
        self.session.send(request)
        self.lost += 1
        raise ConnectionClosedError(endpoint_url=request.url)


@pytest.fixture
def client(dynamodb_endpoint: str) -> Any:
    return make_client(dynamodb_endpoint)


def test_lost_replies_of_writes_and_reads_reach_no_caller(client: Any, dynamodb_table: str) -> None:
    lost = LoseReplies(client, "TransactWriteItems", "Query", "BatchGetItem", "GetItem")
    s = DynamoDBSaver(client, table=dynamodb_table, **FAST)
    s.setup()
    config: Any = cfg("t")
    written: list[str] = []
    for step in range(6):
        lost.lose()
        config = s.put(*step_args(step, config))
        written.append(config["configurable"]["checkpoint_id"])
        lost.lose()
        s.put_writes(config, [("ch", step)], f"task{step}")
        lost.lose()
        got = s.get_tuple(cfg("t"))
        assert got is not None and [(c, v) for _, c, v in got.pending_writes] == [("ch", step)]
    assert lost.lost == 18
    assert checkpoint_ids(s.list(cfg("t"))) == written[::-1]


async def test_async_lost_replies_reach_no_caller(client: Any, dynamodb_table: str) -> None:
    lost = LoseReplies(client, "TransactWriteItems", "Query", "BatchGetItem", "GetItem")
    s = AsyncDynamoDBSaver(client, table=dynamodb_table, **FAST)
    await s.setup()
    config: Any = cfg("t")
    written: list[str] = []
    for step in range(4):
        lost.lose()
        config = await s.aput(*step_args(step, config))
        written.append(config["configurable"]["checkpoint_id"])
        lost.lose()
        await s.aput_writes(config, [("ch", step)], f"task{step}")
    assert lost.lost == 8
    assert [t.checkpoint["id"] async for t in s.alist(cfg("t"))] == written[::-1]


def test_a_connection_lost_past_the_retry_budget_is_reported(
    client: Any, dynamodb_table: str
) -> None:
    lost = LoseReplies(client, "Query", "BatchGetItem", "GetItem")
    s = DynamoDBSaver(client, table=dynamodb_table, max_attempts=3, **FAST)
    s.setup()
    config = s.put(*step_args(0, cfg("t")))
    lost.lose(100)
    with pytest.raises(StorageUnavailableError):
        s.get_tuple(cfg("t"))
    assert lost.lost == 3  # the budget: three attempts
    lost.lose(0)
    got = s.get_tuple(cfg("t"))
    assert got is not None and got.checkpoint["id"] == config["configurable"]["checkpoint_id"]


def test_botocore_retries_would_fail_a_conditional_write_whose_reply_was_lost(
    dynamodb_endpoint: str, dynamodb_table: str
) -> None:
    """Why the saver turns botocore's retries off: they send any call again after a lost
    connection, and a conditional write (an effect's claim) sent twice fails its own
    condition, so an applied claim would read as someone else's."""
    DynamoDBSaver(make_client(dynamodb_endpoint), table=dynamodb_table).setup()
    retrying = boto3.client(
        "dynamodb",
        endpoint_url=dynamodb_endpoint,
        region_name=REGION,
        config=Config(retries={"total_max_attempts": 3, "mode": "standard"}),
    )
    lost = LoseReplies(retrying, "PutItem")
    lost.lose()
    item = {"pk": {"S": "claim"}, "sk": {"S": "effect"}}
    with pytest.raises(ClientError) as raised:
        retrying.put_item(
            TableName=dynamodb_table, Item=item, ConditionExpression="attribute_not_exists(pk)"
        )
    assert raised.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert lost.lost == 1  # the first sending was applied, its reply lost, then sent again
    stored = retrying.get_item(TableName=dynamodb_table, Key=item, ConsistentRead=True)
    assert stored["Item"] == item
