"""Memory through the LangGraph dev server (``langgraph dev``) with our factories, across a restart.

The dev server (``langgraph-cli[inmem]``) is a test dependency; it runs in this
interpreter, or in the Python ``LGD_DEV_SERVER_PYTHON`` names. On each backend,
encryption on (``LGD_KEYRING``):

* a ``langgraph.json`` in a temporary folder names our checkpointer and store factories
  and the remember/recall graph of ``tests/store/recall_graph.py``; the server reads the
  ``LGD_*`` variables (with ``LGD_STORE_INDEX_*`` naming that module's local embedding);
* over HTTP (``langgraph_sdk``) a run on thread 1 remembers a fact and a decoy: the
  backend's raw storage then holds them (our store, not the server's own);
* the server is stopped and started again; a run on a new thread recalls by meaning with
  a paraphrase (the fact first, the decoy scored lower), thread 1's state is read back
  (our checkpointer), and the server's store API (``/store/items/search``) finds the fact
  too.

The factories are named in the dotted form ``langgraph_durable.<backend>.server.store``:
the server's loaders split a non-file path at its last ``.``, so the colon form
(``...server:store``) is not found by them
(``test_the_server_loads_the_dotted_form_not_the_colon_form``).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable.errors import DurableError
from tests.cli.store_helpers import open_spec_store, raw_items
from tests.effects.conftest import BACKENDS, make_spec
from tests.redaction_helpers import SaverSpec
from tests.store.recall_graph import GRAPH_NAMESPACE, MEMORIES, QUERIES, USER
from tests.store.test_recall_across_processes import server_env

ROOT = Path(__file__).resolve().parents[2]
GRAPH_FILE = ROOT / "tests" / "store" / "recall_graph.py"
TENANT = "acme"
START_TIMEOUT = 90.0


def server_python() -> str:
    """The Python that runs ``langgraph dev``: ``LGD_DEV_SERVER_PYTHON``, else this
    interpreter (the test dependencies include ``langgraph-cli[inmem]``)."""
    return os.environ.get("LGD_DEV_SERVER_PYTHON", "").strip() or sys.executable


SERVER_PYTHON = server_python()


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(folder: Path, backend: str, separator: str = ".") -> Path:
    """``langgraph.json``: our factories (``module<separator>attribute``), the graph."""
    factories = f"langgraph_durable.{backend}.server"
    config = {
        "dependencies": ["."],
        "graphs": {"recall": f"{GRAPH_FILE}:graph"},
        "checkpointer": {"path": f"{factories}{separator}checkpointer"},
        "store": {"path": f"{factories}{separator}store"},
    }
    path = folder / "langgraph.json"
    path.write_text(json.dumps(config))
    return path


def server_environ(spec: SaverSpec, keyring: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(server_env(spec, keyring))
    env["LGD_STORE_TENANT"] = TENANT  # runs and the store API alike
    pythonpath = [str(ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(part for part in pythonpath if part)
    env["LANGGRAPH_CLI_NO_ANALYTICS"] = "1"
    env["LANGSMITH_TRACING"] = "false"
    env["LOG_COLOR"] = "false"  # a readable log on failure
    env.pop("LANGSMITH_API_KEY", None)
    return env


@contextmanager
def dev_server(folder: Path, env: dict[str, str], log: Path) -> Iterator[str]:
    """``langgraph dev`` in ``folder`` until the block ends (SIGINT, then wait): its URL."""
    port = _free_port()
    assert SERVER_PYTHON is not None
    argv = [
        SERVER_PYTHON,
        "-m",
        "langgraph_cli",
        "dev",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-browser",
        "--no-reload",
        "--config",
        str(folder / "langgraph.json"),
    ]
    with log.open("ab") as out:
        process = subprocess.Popen(argv, cwd=folder, env=env, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(process, url, log)
        yield url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    import httpx

    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the dev server exited ({process.returncode}):\n{_tail(log)}")
        try:
            if httpx.get(f"{url}/ok", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the dev server did not answer in {START_TIMEOUT}s:\n{_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-6000:]


def _run(client: Any, thread: str, payload: dict[str, Any]) -> dict[str, Any]:
    result = client.runs.wait(thread, "recall", input=payload)
    assert isinstance(result, dict) and "found" in result, result
    return result


def test_memory_survives_a_dev_server_restart(spec: SaverSpec, tmp_path: Path) -> None:
    from langgraph_sdk import get_sync_client

    keyring = "k1=" + base64.b64encode(os.urandom(32)).decode()
    env = server_environ(spec, keyring)
    write_config(tmp_path, spec.backend)
    log = tmp_path / "server.log"

    with dev_server(tmp_path, env, log) as url:
        client = get_sync_client(url=url)
        first = client.threads.create()["thread_id"]
        _run(client, first, {"op": "remember", "user": USER, "memories": MEMORIES})
    stored = {(TENANT, GRAPH_NAMESPACE, key) for key in MEMORIES}
    assert raw_items(spec) == stored, _tail(log)  # in our store, not the server's own

    with dev_server(tmp_path, env, log) as url:  # a restart: new process, same settings
        client = get_sync_client(url=url)
        for query, expected in QUERIES.items():
            second = client.threads.create()["thread_id"]
            found = _run(client, second, {"op": "recall", "user": USER, "query": query})
            keys = [key for key, _ in found["found"]]
            scores = [score for _, score in found["found"]]
            assert keys[0] == expected and sorted(keys) == sorted(MEMORIES), found
            assert scores[0] > 0 and all(score < scores[0] for score in scores[1:]), found
        state = client.threads.get_state(first)  # thread 1's checkpoint, from our saver
        assert state["values"]["op"] == "remember", state
        query = next(iter(QUERIES))
        items = client.store.search_items(list(GRAPH_NAMESPACE), query=query, limit=2)["items"]
        assert [item["key"] for item in items][0] == QUERIES[query], items
        assert items[0]["value"] == {"text": MEMORIES[QUERIES[query]]}, items

    with open_spec_store(spec, TENANT) as plain, pytest.raises(DurableError):
        plain.get(GRAPH_NAMESPACE, "coffee")  # encrypted: unreadable without the keyring


_LOADERS = """
import json, sys
from langgraph_api import store
from langgraph_api._checkpointer import _adapter
found = {}
for backend in ("postgres", "redis", "dynamodb"):
    for kind, load in (("checkpointer", _adapter._load_checkpointer), ("store", store._load_store)):
        for separator in (".", ":"):
            path = f"langgraph_durable.{backend}.server{separator}{kind}"
            try:
                found[path] = getattr(load(path), "__qualname__", "?")
            except Exception as exc:
                found[path] = f"{type(exc).__name__}: {exc}"
print(json.dumps(found))
"""


def test_the_server_loads_the_dotted_form_not_the_colon_form() -> None:
    """The server's loaders split ``module.attribute`` at the last ``.``: the colon form
    (``...server:store``, the one the graph loader takes) is not found."""
    env = dict(os.environ, REDIS_URI="fake", DATABASE_URI=":memory:", MIGRATIONS_PATH="__inmem")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    assert SERVER_PYTHON is not None
    done = subprocess.run(
        [SERVER_PYTHON, "-c", _LOADERS], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for backend in BACKENDS:
        for kind in ("checkpointer", "store"):
            assert found[f"langgraph_durable.{backend}.server.{kind}"] == kind, found
            colon = found[f"langgraph_durable.{backend}.server:{kind}"]
            assert colon.startswith(f"ValueError: Could not find {kind}"), colon
