"""KmsKeyring against moto's KMS: call counts, encryption context, a key per tenant."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from langgraph_durable.errors import DecryptionError
from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver
from langgraph_durable.protect import Encryption, KmsKeyring
from tests.helpers import cfg, make_cp


class Counter:
    """Counts KMS API calls with a botocore event hook (the client is not patched)."""

    def __init__(self, client: Any) -> None:
        self.calls: list[str] = []
        client.meta.events.register("before-call.kms", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        self.calls.append(model.name)


class Steps(TypedDict):
    n: int
    log: list[str]


def _ten_step_graph(checkpointer: Any) -> Any:
    def step(state: Steps) -> dict[str, Any]:
        return {"n": state["n"] + 1, "log": [*state["log"], f"step {state['n']}"]}

    def again(state: Steps) -> str:
        return "step" if state["n"] < 10 else "__end__"

    builder = StateGraph(Steps)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", again)
    return builder.compile(checkpointer=checkpointer)


@pytest.fixture
def kms_key(kms_client: Any) -> str:
    return kms_client.create_key(Description="lgd test")["KeyMetadata"]["KeyId"]


@contextmanager
def _sync_saver(request: pytest.FixtureRequest, backend: str, enc: Encryption) -> Iterator[Any]:
    """A sync saver of ``backend`` on a fresh schema / prefix / table, set up."""
    if backend == "postgres":
        url, schema = request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
        opened: Any = PostgresSaver.from_conn_string(url, schema=schema, encryption=enc)
    elif backend == "redis":
        from langgraph_durable.redis import RedisSaver

        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        opened = RedisSaver.from_conn_string(url, prefix=prefix, encryption=enc)
    else:
        from langgraph_durable.dynamodb import DynamoDBSaver

        endpoint = request.getfixturevalue("dynamodb_endpoint")
        table = request.getfixturevalue("dynamodb_table")
        conn = f"dynamodb://{table}?region=us-east-1&endpoint={endpoint}"
        opened = DynamoDBSaver.from_conn_string(conn, encryption=enc)
    with opened as saver:
        saver.setup()
        yield saver


@pytest.mark.parametrize("backend", ["postgres", "redis", "dynamodb"])
def test_two_hundred_steps_over_twenty_threads_cost_at_most_two_kms_calls(
    request: pytest.FixtureRequest, backend: str, kms_client: Any, kms_key: str
) -> None:
    counter = Counter(kms_client)
    enc = Encryption(KmsKeyring(kms_key, client=kms_client))
    with _sync_saver(request, backend, enc) as saver:
        graph = _ten_step_graph(saver)
        steps = 0
        for i in range(20):
            out = graph.invoke({"n": 0, "log": []}, cfg(f"thread-{i}", tenant_id="acme"))
            steps += out["n"]
            assert graph.get_state(cfg(f"thread-{i}", tenant_id="acme")).values["n"] == 10
        assert steps == 200
        assert 1 <= len(counter.calls) <= 2, counter.calls
        assert counter.calls[0] == "GenerateDataKey"
        # as in a new process (an empty key cache), the stored data key is unwrapped once
        counter.calls.clear()
        saver._keys.cache.drop()
        for i in range(20):
            assert saver.get_tuple(cfg(f"thread-{i}", tenant_id="acme")) is not None
        assert counter.calls == ["Decrypt"]


async def test_async_saver_unwraps_in_a_worker_and_context_binds_the_tenant(
    pg_url: str, pg_schema: str, kms_client: Any, kms_key: str
) -> None:
    enc = Encryption(KmsKeyring(kms_key, client=kms_client))
    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=enc) as s:
        await s.setup()
        for tenant in ("t1", "t2"):
            await s.aput(cfg("x", tenant_id=tenant), make_cp(n=tenant), {"source": "input"}, {})
    # move t1's wrapped data key onto t2: KMS refuses it (the context names the tenant)
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{pg_schema}".data_keys d SET wrapped = o.wrapped FROM '
            f'"{pg_schema}".data_keys o WHERE d.tenant_id = %s AND o.tenant_id = %s',
            ("t2", "t1"),
        )
    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=enc) as s:
        t1 = await s.aget_tuple(cfg("x", tenant_id="t1"))
        assert t1.checkpoint["channel_values"]["n"] == "t1"
        with pytest.raises(DecryptionError, match="KMS refused"):
            await s.aget_tuple(cfg("x", tenant_id="t2"))


def test_a_kms_key_per_tenant(pg_url: str, pg_schema: str, kms_client: Any) -> None:
    keys = {t: kms_client.create_key()["KeyMetadata"]["KeyId"] for t in ("t1", "t2")}
    enc = Encryption(KmsKeyring(lambda tenant: keys[tenant], client=kms_client))
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=enc) as s:
        s.setup()
        for tenant in keys:
            s.put(cfg("x", tenant_id=tenant), make_cp(n=tenant), {"source": "input"}, {})
        assert s.rotate_keys() == {"tenants": 2, "rewrapped": 0, "current": 2}
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        stored = dict(
            conn.execute(f'SELECT tenant_id, key_id FROM "{pg_schema}".data_keys').fetchall()
        )
    assert stored == keys
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=enc) as s:
        for tenant in keys:
            got = s.get_tuple(cfg("x", tenant_id=tenant))
            assert got.checkpoint["channel_values"]["n"] == tenant
