"""The redaction bypass corpus: PII in every path of a value, never found in raw storage.

A real compiled graph writes a canary (a distinct e-mail address, card or phone
number per path, so a hit names its path) into each place a value can hide text:

- an exception a node raises (LangGraph stores it as the task's ``__error__``
  pending write): in its message, in a dict among its arguments, and in an
  attribute its ``repr()`` shows;
- the ``id``, ``type`` and key of a plain dict (not a message's);
- a message's ``name``;
- ``bytes``, a ``set`` and a ``frozenset``;
- a string nested 150 lists deep;
- full-width forms that NFKC maps to ASCII (``＠``, full-width digits and ``＋``);
- the metadata (a value, an ``id`` key, a key, a full-width value) and a
  ``configurable`` value LangGraph copies into it.

It runs with ``Redaction()`` defaults and encryption off on PostgreSQL, Redis
(single and cluster) and DynamoDB, sync and async, then scans every row, key
and item (every column, field and attribute) for every canary in raw, hex and
base64 forms (also without separators, digits only, NFKC-folded and
JSON-escaped): found 0 times. The same run with redaction off finds every
canary, so the scan can fail.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import pytest
from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from langgraph_durable.protect import Redaction
from tests.dynamodb.helpers import REGION, make_client, table_dump
from tests.encryption_helpers import canary_forms
from tests.postgres.test_encryption import dump_schema
from tests.redis.test_encryption import dump_prefix, raw_client

#: One canary per path (each detected by a built-in detector once NFKC-folded).
CANARIES: dict[str, str] = {
    "error_message": "err.message.k1@example.com",
    "error_args_dict": "err.args.k2@example.com",
    "error_attribute": "err.attr.k3@example.com",
    "dict_id": "dict.id.k4@example.com",
    "dict_type": "dict.type.k5@example.com",
    "dict_key": "dict.key.k6@example.com",
    "message_name": "msg.name.k7@example.com",
    "bytes": "bytes.k8@example.com",
    "set": "set.k9@example.com",
    "frozenset": "frozen.k10@example.com",
    "deep": "deep.k11@example.com",
    "fullwidth_at": "full.at.k12＠example.com",
    "fullwidth_card": "５５５５ ５５５５ ５５５５ ４４４４",
    "fullwidth_phone": "＋１ ２１２ ５５５ ０１９９",
    "metadata_value": "meta.value.k13@example.com",
    "metadata_id": "meta.id.k14@example.com",
    "metadata_key": "meta.key.k15@example.com",
    "metadata_fullwidth": "ｍｅｔａ．ｆｗ＠ｅｘａｍｐｌｅ．ｃｏｍ",
    "configurable": "conf.k16@example.com",
}
DEPTH = 150
C = CANARIES


class CorpusError(Exception):
    """A node's failure whose ``repr()`` shows an attribute that is not in its args."""

    def __init__(self, message: str, detail: dict[str, str], user: str) -> None:
        super().__init__(message, detail)
        self.user = user

    def __repr__(self) -> str:
        return f"CorpusError({self.args!r}, user={self.user!r})"


class CorpusState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    data: Any


def corpus_value() -> dict[str, Any]:
    deep: Any = C["deep"]
    for _ in range(DEPTH):
        deep = [deep]
    return {
        "record": {"id": C["dict_id"], "type": C["dict_type"], C["dict_key"]: 1},
        "raw": C["bytes"].encode(),
        "tags": {C["set"]},
        "frozen": frozenset({C["frozenset"]}),
        "deep": deep,
        "fullwidth": [C["fullwidth_at"], f"card {C['fullwidth_card']}"],
        "phone": f"call {C['fullwidth_phone']}",
    }


def build_graph(checkpointer: Any) -> Any:
    def fill(state: CorpusState) -> dict[str, Any]:
        message = HumanMessage("hello", name=C["message_name"], id="m-1")
        return {"messages": [message], "data": corpus_value()}

    def fail(state: CorpusState) -> dict[str, Any]:
        raise CorpusError(
            f"cannot mail {C['error_message']}",
            {"contact": C["error_args_dict"]},
            user=C["error_attribute"],
        )

    builder = StateGraph(CorpusState)
    builder.add_node("fill", fill)
    builder.add_node("fail", fail)
    builder.add_edge(START, "fill")
    builder.add_edge("fill", "fail")
    return builder.compile(checkpointer=checkpointer)


def config(thread: str) -> dict[str, Any]:
    return {
        "configurable": {"thread_id": thread, "contact": C["configurable"]},
        "metadata": {
            "note": f"from {C['metadata_value']}",
            "id": C["metadata_id"],
            C["metadata_key"]: "x",
            "wide": C["metadata_fullwidth"],
        },
    }


THREAD = "bypass"


def run_sync(saver: Any) -> Any:
    graph = build_graph(saver)
    with pytest.raises(CorpusError):
        graph.invoke({"messages": []}, config(THREAD))
    return graph.get_state({"configurable": {"thread_id": THREAD}})


async def run_async(saver: Any) -> Any:
    graph = build_graph(saver)
    with pytest.raises(CorpusError):
        await graph.ainvoke({"messages": []}, config(THREAD))
    return await graph.aget_state({"configurable": {"thread_id": THREAD}})


# ---- the scan ----------------------------------------------------------------------------


def forms(canary: str) -> list[bytes]:
    """Every byte string ``canary`` may show as in storage."""
    variants: set[str] = set()
    for text in (canary, unicodedata.normalize("NFKC", canary)):
        variants |= {text, text.replace(" ", ""), re.sub(r"[\s().+/-]", "", text)}
        digits = re.sub(r"\D", "", text)
        if len(digits) >= 8:
            variants.add(digits)
    variants |= {json.dumps(v)[1:-1] for v in list(variants)}  # \uXXXX escapes
    return [form for v in sorted(variants) for form in canary_forms(v)]


def hits(dump: bytes) -> list[str]:
    """The paths whose canary ``dump`` holds in any form."""
    return [path for path, canary in CANARIES.items() if any(f in dump for f in forms(canary))]


def check(dump: bytes, state: Any, redacted: bool) -> None:
    if not redacted:  # the scan finds every path's canary when nothing redacts it
        assert hits(dump) == list(CANARIES)
        return
    assert hits(dump) == []
    # what a read gives back: the redacted value, its types kept
    data = state.values["data"]
    assert data["record"] == {"id": "<EMAIL>", "type": "<EMAIL>", "<EMAIL>": 1}
    assert data["raw"] == b"<EMAIL>" and data["tags"] == {"<EMAIL>"}
    assert data["frozen"] == frozenset({"<EMAIL>"})
    assert data["fullwidth"] == ["<EMAIL>", "card <CARD>"] and data["phone"] == "call <PHONE>"
    assert state.values["messages"][0].name == "<EMAIL>"
    assert state.values["messages"][0].id == "m-1"
    (task,) = state.tasks
    assert isinstance(task.error, str) and task.error.startswith("CorpusError(")
    assert "<EMAIL>" in task.error
    assert state.metadata["note"] == "from <EMAIL>" and state.metadata["id"] == "<EMAIL>"


# ---- the backends ------------------------------------------------------------------------


def _redaction(redacted: bool) -> Redaction | None:
    return Redaction() if redacted else None


class Backend:
    """Opens the backend's savers on the test's namespace and dumps its raw storage."""

    def __init__(self, sync: Any, async_: Any, conn: str, kwargs: dict[str, Any], dump: Any):
        self.sync, self.async_, self.conn, self.kwargs, self.dump = sync, async_, conn, kwargs, dump

    def open(self, redacted: bool) -> Any:
        return self.sync.from_conn_string(self.conn, redaction=_redaction(redacted), **self.kwargs)

    def aopen(self, redacted: bool) -> Any:
        return self.async_.from_conn_string(
            self.conn, redaction=_redaction(redacted), **self.kwargs
        )


def _redis_dump(conn: str, prefix: str) -> Callable[[], bytes]:
    def dump() -> bytes:
        client = raw_client(conn)
        try:
            return dump_prefix(client, prefix)
        finally:
            client.close()

    return dump


@pytest.fixture(params=["postgres", "redis", "redis-cluster", "dynamodb"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    name = request.param
    if name == "postgres":
        from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver

        url, schema = request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
        yield Backend(
            PostgresSaver,
            AsyncPostgresSaver,
            url,
            {"schema": schema},
            lambda: dump_schema(url, schema),
        )
    elif name.startswith("redis"):
        from langgraph_durable.redis import AsyncRedisSaver, RedisSaver

        fixture = "redis_cluster_conn_string" if name == "redis-cluster" else "redis_url"
        conn, prefix = request.getfixturevalue(fixture), request.getfixturevalue("redis_prefix")
        yield Backend(
            RedisSaver, AsyncRedisSaver, conn, {"prefix": prefix}, _redis_dump(conn, prefix)
        )
    else:
        from langgraph_durable.dynamodb import AsyncDynamoDBSaver, DynamoDBSaver

        endpoint = request.getfixturevalue("dynamodb_endpoint")
        table = request.getfixturevalue("dynamodb_table")
        client = make_client(endpoint)
        conn = f"dynamodb://{table}?region={REGION}&endpoint={endpoint}"
        yield Backend(
            DynamoDBSaver, AsyncDynamoDBSaver, conn, {}, lambda: table_dump(client, table)
        )


@pytest.mark.parametrize("redacted", [True, False], ids=["redaction", "off"])
def test_no_canary_reaches_storage_sync(backend: Backend, redacted: bool) -> None:
    with backend.open(redacted) as saver:
        saver.setup()
        state = run_sync(saver)
    check(backend.dump(), state, redacted)


@pytest.mark.parametrize("redacted", [True, False], ids=["redaction", "off"])
async def test_no_canary_reaches_storage_async(backend: Backend, redacted: bool) -> None:
    async with backend.aopen(redacted) as saver:
        await saver.setup()
        state = await run_async(saver)
    check(backend.dump(), state, redacted)
