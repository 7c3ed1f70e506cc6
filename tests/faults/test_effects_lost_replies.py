"""The effect journal when the reply of its claim or of its completion is lost (the call
applied by the server, the connection cut before the answer): the effect never runs twice.

PostgreSQL and Redis send the journal's calls again (a claim sent twice reads as
another's and waits out its lease; a completion sent twice finds itself recorded).
DynamoDB does not (the caller sees ``StorageUnavailableError``, or ``EffectError`` caused
by it when the completion's reply was lost, and resumes the thread). Either way the run
ends with the effect run exactly once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from botocore.exceptions import ConnectionClosedError
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_durable.dynamodb import DynamoDBSaver
from langgraph_durable.effects import idempotent
from langgraph_durable.errors import EffectError, StorageUnavailableError
from langgraph_durable.postgres import PostgresSaver
from langgraph_durable.redis import RedisSaver
from tests.dynamodb.helpers import make_client
from tests.effects.graphs import EffectLog
from tests.faults.proxy import FaultProxy

LEASE = 0.3  # seconds: a claim whose reply was lost is taken over after it


class PayState(TypedDict, total=False):
    amount: int
    receipt: str


class LoseNextDynamoDBReply:
    """Send the next DynamoDB call after :meth:`lose_next_reply` for real, then fail it with
    ``ConnectionClosedError``: applied by the server, the reply never arrives."""

    def __init__(self, client: Any) -> None:
        self.session = client._endpoint.http_session
        self.armed = threading.Event()
        self.lost_replies = 0
        client.meta.events.register("before-send.dynamodb", self._send)

    def lose_next_reply(self) -> None:
        self.armed.set()

    def _send(self, request: Any, **_: Any) -> None:
        if not self.armed.is_set():
            return
        self.armed.clear()
        self.session.send(request)
        self.lost_replies += 1
        raise ConnectionClosedError(endpoint_url=request.url)


def pay_graph(saver: Any, log: EffectLog, fault: Any, lose: str) -> Any:
    """START -> prepare -> pay -> END; ``pay`` charges through an idempotent effect.

    ``lose="claim"`` loses the reply of the next call after ``prepare`` (with
    ``durability="exit"`` nothing is stored between the two nodes, so that call is the
    effect's claim); ``lose="complete"`` loses the reply of the call after the effect ran
    (its completion)."""

    @idempotent(name="pay", lease=LEASE)
    def charge(amount: int) -> str:
        log.write(f"effect pay {amount} {os.getpid()}")
        if lose == "complete":
            fault.lose_next_reply()
            lose_once.clear()
        return f"receipt-{amount}"

    lose_once = threading.Event()
    lose_once.set()

    def prepare(state: PayState) -> dict[str, Any]:
        if lose == "claim" and lose_once.is_set():
            lose_once.clear()
            fault.lose_next_reply()
        return {"amount": 5}

    builder = StateGraph(PayState)
    builder.add_node("prepare", prepare)
    builder.add_node("pay", lambda state: {"receipt": charge(state["amount"])})
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "pay")
    builder.add_edge("pay", END)
    return builder.compile(checkpointer=saver)


def _run_until_done(graph: Any, thread: str) -> tuple[dict[str, Any], int]:
    """Invoke, and resume after each error the lost reply caused; the result and the errors."""
    config = {"configurable": {"thread_id": thread}}
    errors = 0
    inputs: Any = {}
    for _ in range(5):
        try:
            return graph.invoke(inputs, config, durability="exit"), errors
        except (StorageUnavailableError, EffectError) as exc:
            # a lost completion is reported as the effect's result not recorded
            assert isinstance(exc, StorageUnavailableError) or isinstance(
                exc.__cause__, StorageUnavailableError
            )
            errors += 1
            state = graph.get_state(config)
            inputs = None if state.next else {}
    raise AssertionError("the run did not finish in 5 attempts")


@contextmanager
def _postgres(pg_url: str, pg_schema: str, pg_proxy: FaultProxy) -> Iterator[Any]:
    with PostgresSaver.from_conn_string(pg_proxy.url(pg_url), schema=pg_schema) as saver:
        saver.setup()
        yield saver, pg_proxy


@contextmanager
def _redis(redis_url: str, redis_prefix: str, redis_proxy: FaultProxy) -> Iterator[Any]:
    with RedisSaver.from_conn_string(redis_proxy.url(redis_url), prefix=redis_prefix) as saver:
        yield saver, redis_proxy


@contextmanager
def _dynamodb(dynamodb_endpoint: str, dynamodb_table: str) -> Iterator[Any]:
    client = make_client(dynamodb_endpoint)
    saver = DynamoDBSaver(client, table=dynamodb_table, retry_base_delay=0.001)
    saver.setup()
    yield saver, LoseNextDynamoDBReply(client)


@pytest.fixture(params=["postgres", "redis", "dynamodb"])
def backend(request: pytest.FixtureRequest) -> Callable[[], Any]:
    name = request.param
    if name == "postgres":
        args = [request.getfixturevalue(f) for f in ("pg_url", "pg_schema", "pg_proxy")]
        return lambda: _postgres(*args)
    if name == "redis":
        args = [request.getfixturevalue(f) for f in ("redis_url", "redis_prefix", "redis_proxy")]
        return lambda: _redis(*args)
    args = [request.getfixturevalue(f) for f in ("dynamodb_endpoint", "dynamodb_table")]
    return lambda: _dynamodb(*args)


@pytest.mark.parametrize("lose", ["claim", "complete"])
def test_a_lost_journal_reply_never_runs_the_effect_twice(
    backend: Callable[[], Any], lose: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    log = EffectLog(str(tmp_path / "effects.log"))
    with backend() as (saver, fault):
        graph = pay_graph(saver, log, fault, lose)
        result, errors = _run_until_done(graph, f"lost-{lose}")
        assert result["receipt"] == "receipt-5"
        assert fault.lost_replies == 1  # the fault really happened
        assert log.effects() == {"pay:5": 1}
        if "dynamodb" in request.node.name:
            assert errors == 1  # reported, not guessed; the resume finished the run
        else:
            assert errors == 0  # PostgreSQL and Redis send the journal's calls again
