"""Helpers of the DynamoDB tests: clients, call counting, fault injection, graphs.

Faults are injected with botocore event hooks on the real client (nothing is
patched): a ``before-call`` handler that returns a response short-circuits the
HTTP call; ``before-parameter-build`` may replace the request's top-level
parameters; ``after-call`` may edit the parsed response.
"""

from __future__ import annotations

import operator
import random
import threading
from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any

import boto3
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from typing_extensions import TypedDict

REGION = "us-east-1"


def make_client(endpoint: str) -> Any:
    """A low-level client with botocore's own retries off (the saver retries)."""
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name=REGION,
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )


def raw_items(client: Any, table: str) -> list[dict[str, Any]]:
    """Every item of a table (a test's own table: small)."""
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        resp = client.scan(**params)
        items.extend(resp["Items"])
        if "LastEvaluatedKey" not in resp:
            return items
        params["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def attribute_bytes(value: dict[str, Any]) -> bytes:
    """Every byte of one attribute value, whatever its type (maps and lists included)."""
    ((kind, data),) = value.items()
    if kind == "B":
        return bytes(data)
    if kind in ("S", "N"):
        return str(data).encode()
    if kind in ("BOOL", "NULL"):
        return str(data).encode()
    if kind in ("SS", "NS"):
        return b"\x00".join(str(v).encode() for v in data)
    if kind == "BS":
        return b"\x00".join(bytes(v) for v in data)
    if kind == "L":
        return b"\x00".join(attribute_bytes(v) for v in data)
    if kind == "M":
        return b"\x00".join(k.encode() + b"\x00" + attribute_bytes(v) for k, v in data.items())
    raise TypeError(f"unexpected DynamoDB attribute type {kind!r}")


def table_dump(client: Any, table: str) -> bytes:
    """Every item of a table (paginated Scan) as one blob: attribute names and values."""
    parts = []
    for item in raw_items(client, table):
        for name, value in item.items():
            parts.append(name.encode() + b"\x00" + attribute_bytes(value))
    return b"\x01".join(parts)


class CallCounter:
    """Counts the API calls a client completes (``after-call`` hook; DynamoDB or S3).

    A failed attempt (throttled, or an HTTP 500 from moto, whose transactions are
    not safe under concurrent requests) is counted in ``failed`` instead, so the
    counts measure the calls an operation needs, independent of retries.
    """

    def __init__(self, client: Any, service: str = "dynamodb") -> None:
        self.calls: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self._lock = threading.Lock()
        client.meta.events.register(f"after-call.{service}", self._count)

    def _count(self, model: Any, http_response: Any, **_: Any) -> None:
        with self._lock:
            if http_response.status_code < 300:
                self.calls[model.name] += 1
            else:
                self.failed[model.name] += 1

    def total(self) -> int:
        return sum(self.calls.values())

    def reset(self) -> Counter[str]:
        """The counts so far; starts again from zero."""
        with self._lock:
            seen, self.calls, self.failed = self.calls, Counter(), Counter()
        return seen


def error_response(code: str, message: str = "injected", **extra: Any) -> tuple[Any, dict]:
    """A botocore (http, parsed) pair for an error response."""
    http = AWSResponse("http://injected", 400, {}, None)
    parsed = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": 400},
        **extra,
    }
    return http, parsed


class Faults:
    """Throttling and partial batches injected into a real client.

    Args:
        client: The client to hook.
        table: Its table (the key of ``RequestItems``).
        throttle: Fraction of calls answered ``ProvisionedThroughputExceededException``.
        partial: Whether batch calls process only half of their items or keys
            (the rest reported as ``UnprocessedItems`` / ``UnprocessedKeys``).
        seed: Seed of the random choice of throttled calls (runs repeat exactly).
    """

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        throttle: float = 0.0,
        partial: bool = False,
        seed: int = 7,
        code: str = "ProvisionedThroughputExceededException",
    ) -> None:
        self.table = table
        self.throttle = throttle
        self.partial = partial
        self.code = code
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.throttled: Counter[str] = Counter()
        self.unprocessed: Counter[str] = Counter()
        self.active = True
        events = client.meta.events
        events.register("before-parameter-build.dynamodb.BatchWriteItem", self._split_writes)
        events.register("before-parameter-build.dynamodb.BatchGetItem", self._split_gets)
        events.register("before-call.dynamodb", self._maybe_throttle)
        events.register("after-call.dynamodb.BatchWriteItem", self._report_writes)
        events.register("after-call.dynamodb.BatchGetItem", self._report_gets)

    def _maybe_throttle(self, model: Any, **_: Any) -> tuple[Any, dict] | None:
        if not self.active or not self.throttle:
            return None
        with self.lock:
            hit = self.rng.random() < self.throttle
            if hit:
                self.throttled[model.name] += 1
        return error_response(self.code) if hit else None

    def _split_writes(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        requests = params["RequestItems"].get(self.table, [])
        if self.active and self.partial and len(requests) > 1:
            keep = len(requests) // 2
            # replace, never mutate: the saver still holds the request it built
            params["RequestItems"] = {self.table: requests[:keep]}
            context["lgd_unprocessed"] = requests[keep:]

    def _report_writes(self, http_response: Any, parsed: dict, context: dict, **_: Any) -> None:
        left = context.get("lgd_unprocessed")
        if left and http_response.status_code < 300:
            parsed.setdefault("UnprocessedItems", {}).setdefault(self.table, []).extend(left)
            with self.lock:
                self.unprocessed["BatchWriteItem"] += len(left)

    def _split_gets(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        request = params["RequestItems"].get(self.table)
        if self.active and self.partial and request and len(request["Keys"]) > 1:
            keep = len(request["Keys"]) // 2
            params["RequestItems"] = {self.table: {**request, "Keys": request["Keys"][:keep]}}
            context["lgd_unprocessed"] = {**request, "Keys": request["Keys"][keep:]}

    def _report_gets(self, http_response: Any, parsed: dict, context: dict, **_: Any) -> None:
        left = context.get("lgd_unprocessed")
        if left and http_response.status_code < 300:
            parsed.setdefault("UnprocessedKeys", {})[self.table] = left
            with self.lock:
                self.unprocessed["BatchGetItem"] += len(left["Keys"])


# ---- graphs ------------------------------------------------------------------------


class LoopState(TypedDict):
    count: int
    log: Annotated[list[str], operator.add]


def loop_graph(steps: int, payload: Callable[[int], str] = str) -> Any:
    """A graph that runs one node ``steps`` times, appending to ``log`` each time."""

    def step(state: LoopState) -> dict[str, Any]:
        n = state["count"] + 1
        return {"count": n, "log": [payload(n)]}

    def again(state: LoopState) -> str:
        return "step" if state["count"] < steps else END

    builder = StateGraph(LoopState)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", again, ["step", END])
    return builder


def agent_graph(tool_calls: int) -> Any:
    """An agent-like graph: ``agent`` asks for a tool ``tool_calls`` times, ``tools`` answers."""

    def agent(state: MessagesState) -> dict[str, Any]:
        asked = sum(1 for m in state["messages"] if isinstance(m, ToolMessage))
        if asked >= tool_calls:
            return {"messages": [AIMessage(content="done")]}
        call = {"name": "lookup", "args": {"q": asked}, "id": f"call-{asked}", "type": "tool_call"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    def tools(state: MessagesState) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]  # type: ignore[attr-defined]
        return {
            "messages": [
                ToolMessage(content=f"result {call['args']['q']}", tool_call_id=call["id"])
            ]
        }

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if getattr(last, "tool_calls", None) else END

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder


def history_signature(saver: Any, config: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a thread's history holds, comparable across savers (ids differ)."""
    out = []
    for t in saver.list(config):
        out.append(
            (
                t.metadata.get("step"),
                t.metadata.get("source"),
                repr(sorted(t.checkpoint["channel_values"].items())),
                sorted((c, repr(v)) for _task, c, v in t.pending_writes),
            )
        )
    return out
