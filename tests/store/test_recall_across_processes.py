"""A memory written in one thread is recalled by meaning in another thread, in a new process.

On each backend, encryption on (``LGD_KEYRING``), with ``tests/store/recall_graph.py``:

* process A opens the backend's sync saver and store (``from_conn_string``) and runs
  thread 1 of a ``StateGraph`` node (``get_store().put``) and of a ``create_agent`` tool
  (``runtime.store.put``): each remembers a fact about the user and an unrelated decoy;
* process B, started after A exited, opens the Agent Server factories
  (``langgraph_durable.<backend>.server.checkpointer`` and ``.store``, from the
  environment alone, as ``langgraph.json`` would) and runs new threads whose node and tool
  search with paraphrased queries (no content word in common with the memory): the
  memory comes first, the decoy after it with a lower score, and the other query ranks
  the other way; B also reads thread 1's checkpoint.

The raw storage holds the items under the run's tenant, and a store without the keyring
cannot open them.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from langgraph_durable.errors import DurableError
from tests.cli.store_helpers import open_spec_store, raw_items
from tests.effects.conftest import BACKENDS, make_spec
from tests.redaction_helpers import SaverSpec
from tests.store.recall_graph import (
    AGENT_NAMESPACE,
    GRAPH_NAMESPACE,
    INDEX_ENV,
    MEMORIES,
    QUERIES,
    TENANT,
    agent_available,
)
from tests.store.test_store_server_factories import _CLEARED


def server_env(spec: SaverSpec, keyring: str) -> dict[str, str]:
    """The factories' variables for ``spec``: the backend's, the keyring, the index."""
    env = {name: "" for name in _CLEARED}  # unset in effect: the factories strip values
    if spec.backend == "postgres":
        env["LGD_POSTGRES_URL"] = spec.conn
        env["LGD_POSTGRES_SCHEMA"] = spec.kwargs["schema"]
        env["LGD_POSTGRES_POOL_SIZE"] = "1"
    elif spec.backend == "redis":
        env["LGD_REDIS_URL"] = spec.conn
        env["LGD_REDIS_PREFIX"] = spec.kwargs["prefix"]
    else:
        env["LGD_DYNAMODB_URL"] = spec.conn
    env["LGD_KEYRING"] = keyring
    env.update(INDEX_ENV)
    return env


def run_child(phase: str, specs: list[SaverSpec], keyring: str, agent: bool) -> dict[str, Any]:
    """``python -m tests.store.recall_graph PHASE`` in a new process: its report per backend."""
    backends = [
        {
            "backend": spec.backend,
            "conn": spec.conn,
            "kwargs": spec.kwargs,
            "env": server_env(spec, keyring),
            "agent": agent,
        }
        for spec in specs
    ]
    argv = [sys.executable, "-m", "tests.store.recall_graph", phase]
    done = subprocess.run(
        argv, input=json.dumps(backends), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def check_ranking(backend: str, found_by_query: dict[str, list[list[Any]]]) -> None:
    """Each paraphrase finds its memory first, the other one after it, scored lower."""
    assert list(found_by_query) == list(QUERIES), backend
    for query, expected in QUERIES.items():
        found = found_by_query[query]
        keys = [key for key, _ in found]
        assert keys[0] == expected, (backend, query, found)
        assert sorted(keys) == sorted(MEMORIES), (backend, query, found)
        scores = [score for _, score in found]
        assert scores[0] is not None and scores[0] > 0, (backend, query, found)
        assert all(score < scores[0] for score in scores[1:]), (backend, query, found)


def test_a_memory_is_recalled_by_meaning_in_a_new_process(
    request: pytest.FixtureRequest,
) -> None:
    # One child per phase for the three backends: a child's imports cost a second or two.
    specs = [make_spec(request, backend) for backend in BACKENDS]
    agent = agent_available()
    keyring = "k1=" + base64.b64encode(os.urandom(32)).decode()
    namespaces = [GRAPH_NAMESPACE, AGENT_NAMESPACE] if agent else [GRAPH_NAMESPACE]
    stored = {(TENANT, namespace, key) for namespace in namespaces for key in MEMORIES}

    wrote = run_child("write", specs, keyring, agent)
    for spec in specs:
        report = wrote[spec.backend]
        assert report["agent_ran"] is agent, spec.backend
        if agent:
            assert report["agent"] == "saved", spec.backend
        assert raw_items(spec) == stored, spec.backend

    recalled = run_child("recall", specs, keyring, agent)
    for spec in specs:
        report = recalled[spec.backend]
        assert report["thread_1_op"] == "remember", spec.backend  # thread 1's checkpoint
        check_ranking(spec.backend, report["graph"])
        if agent:
            check_ranking(spec.backend, report["agent"])
        with open_spec_store(spec, TENANT) as plain, pytest.raises(DurableError):
            plain.get(GRAPH_NAMESPACE, "coffee")  # encrypted: unreadable without the keyring


def test_the_agent_half_runs_here() -> None:
    """``make setup`` installs ``langchain``: the agent half above is not silently left out."""
    assert agent_available(), "langchain is not importable: run make setup"
