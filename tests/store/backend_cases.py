"""What the three backends' store tests share, written once.

* :func:`property_settings`, :data:`MODES` and :func:`mode_options`: the hypothesis
  settings of the differential tests and the store options of a mode (clear or
  encrypted, always with an index);
* :func:`check_ttl_sync_and_async`: the harness's TTL check through a sync and an
  async store;
* :func:`write_canaries` and :func:`assert_canaries`: values and embeddings holding
  canaries, then a raw dump of the backend's storage searched for them;
* :func:`check_graph_remembers`: a graph that remembers in one thread and recalls in
  another, through two store objects (as two processes would open), tenants apart;
* :func:`check_redaction`: a redacted value never reaches storage.
"""

from __future__ import annotations

import asyncio
import os
import struct
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, TypedDict

import pytest
from hypothesis import HealthCheck, Phase, settings
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from langgraph.store.base import BaseStore

from tests.encryption_helpers import canary_forms, local_encryption
from tests.store.differential import acheck_ttl, check_ttl, embed, index_config

__all__ = [
    "MODES",
    "property_settings",
    "mode_options",
    "check_ttl_sync_and_async",
    "write_canaries",
    "assert_canaries",
    "check_graph_remembers",
    "check_redaction",
]

MODES = ["clear", "encrypted"]


def property_settings(default_examples: int) -> Any:
    """The differential tests' settings: ``LGD_PROPERTY_EXAMPLES`` programs (else
    ``default_examples``), shrinking only with ``LGD_STORE_SHRINK``."""
    shrink = os.environ.get("LGD_STORE_SHRINK")
    return settings(
        max_examples=int(os.environ.get("LGD_PROPERTY_EXAMPLES", str(default_examples))),
        deadline=None,
        database=None,
        derandomize=os.environ.get("CI", "").lower() == "true",
        phases=tuple(Phase) if shrink else tuple(set(Phase) - {Phase.shrink}),
        # a loaded machine may draw programs slowly: not a failure of the store
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def mode_options(mode: str, **extra: Any) -> dict[str, Any]:
    """A store's options in ``mode`` (``clear`` or ``encrypted``), with an index."""
    options: dict[str, Any] = {"index": index_config()}
    if mode == "encrypted":
        options["encryption"] = local_encryption()
    options.update(extra)
    return options


def check_ttl_sync_and_async(
    make: Callable[..., AbstractContextManager[Any]],
    amake: Callable[..., AbstractAsyncContextManager[Any]],
) -> None:
    """The harness's TTL check through a sync store (``make(**options)``) and an async
    one (``amake(**options)``), each of a tenant of its own."""
    check_ttl(make)
    asyncio.run(acheck_ttl(amake))


def write_canaries(store: Any) -> list[str]:
    """Put values and a text embedded that hold canaries; check they read back."""
    tag = uuid.uuid4().hex[:12]
    canaries = [f"canary-value-{tag}", f"canary.{tag}@example.com", f"canary-text-{tag}"]
    store.put(("users", "u1"), "profile", {"note": canaries[0], "nested": {"mail": canaries[1]}})
    store.put(("users", "u1"), "memory", {"text": canaries[2]})
    assert store.get(("users", "u1"), "profile").value["note"] == canaries[0]
    found = store.search(("users",), query=canaries[2])
    assert found[0].key == "memory" and found[0].score == pytest.approx(1.0)
    return canaries


def assert_canaries(dump: bytes, canaries: list[str], mode: str) -> None:
    """Encrypted: no canary, no float of the canary text's embedding (as msgpack stores
    it, big-endian double) in ``dump``; clear: the scan finds them all."""
    hits = [c for c in canaries if any(form in dump for form in canary_forms(c))]
    vector = [x for x in embed([canaries[2]])[0] if x]
    vector_hits = [x for x in vector if struct.pack(">d", x) in dump]
    if mode == "encrypted":
        assert hits == [] and vector_hits == []
    else:
        assert hits == canaries and vector_hits == vector


class _State(TypedDict, total=False):
    text: str
    recalled: list[str]


def _memory_graph(store: Any) -> Any:
    """``remember`` puts the text under the run's user; ``recall`` searches it by meaning."""

    def remember(state: _State, config: RunnableConfig, *, store: BaseStore) -> _State:
        store.put(("memories", config["configurable"]["user"]), uuid.uuid4().hex, state)
        return {}

    def recall(state: _State, config: RunnableConfig, *, store: BaseStore) -> _State:
        ns = ("memories", config["configurable"]["user"])
        return {"recalled": [h.value["text"] for h in store.search(ns, query=state["text"])][:1]}

    builder = StateGraph(_State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_conditional_edges(
        START, lambda s: "recall" if s.get("recalled") == [] else "remember"
    )
    return builder.compile(store=store)


def check_graph_remembers(open_store: Callable[[int], AbstractContextManager[Any]]) -> None:
    """A graph remembers in one thread and recalls in another: ``open_store(0)`` and
    ``open_store(1)`` open two store objects (the same storage and keys, with an
    index, no fixed tenant); the graph run's ``tenant_id`` keeps tenants apart."""
    tenant, other = uuid.uuid4().hex, uuid.uuid4().hex

    def config(thread: str, tenant_id: str) -> Any:
        return {"configurable": {"thread_id": thread, "user": "u1", "tenant_id": tenant_id}}

    with open_store(0) as store:
        graph = _memory_graph(store)
        graph.invoke({"text": "blue sky"}, config("t1", tenant))
        graph.invoke({"text": "river"}, config("t1", tenant))
    with open_store(1) as store:
        graph = _memory_graph(store)
        out = graph.invoke({"text": "sky", "recalled": []}, config("t2", tenant))
        assert out["recalled"] == ["blue sky"]
        out = graph.invoke({"text": "sky", "recalled": []}, config("t3", other))
        assert out["recalled"] == []  # the graph run's tenant_id keeps tenants apart
        assert store.search(("memories",)) == []  # outside a run: the default tenant


def check_redaction(store: Any, dump: Callable[[], bytes]) -> None:
    """A store with ``redaction=Redaction()`` stores a mail address redacted."""
    mail = f"canary.{uuid.uuid4().hex[:10]}@example.com"
    store.put(("users",), "u1", {"note": f"write to {mail} please"})
    value = store.get(("users",), "u1").value
    assert mail not in value["note"] and value["note"].startswith("write to ")
    stored = dump()
    assert b"write to " in stored  # the dump holds the stored value (in clear)
    assert not any(form in stored for form in canary_forms(mail))


def pg_statements(store: Any) -> list[str]:
    """The SQL of every statement a PostgreSQL store sends from now on (appended as they
    go), counted at its connector."""
    sent: list[str] = []
    connector = store._saver._conn
    run_one = connector.run_one

    def counting(q: Any) -> Any:
        sent.append(q.sql)
        return run_one(q)

    connector.run_one = counting
    return sent
