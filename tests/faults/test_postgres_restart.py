"""A PostgreSQL server restarted in the middle of a graph run (a throwaway server of its
own, behind tests/faults/proxy.py so that it comes back at the same address): the run
finishes with no error reaching the caller, and its history equals InMemorySaver's."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver
from langgraph_durable.postgres.embedded import EmbeddedPostgres, start_embedded_postgres
from tests.dynamodb.helpers import history_signature, loop_graph
from tests.faults.proxy import FaultProxy

STEPS = 20
RESTART_AT = 10


class Restartable:
    """A throwaway server on a kept data directory, reached through a proxy."""

    def __init__(self, directory: Path) -> None:
        os.chmod(directory, 0o777)  # the server may run as another account (root runs it so)
        self.data_dir = str(directory / "pg")
        self.server: EmbeddedPostgres = start_embedded_postgres(self.data_dir)
        self.proxy = FaultProxy(self.server.host, self.server.port)
        self.restarts = 0

    @property
    def url(self) -> str:
        return self.proxy.url(self.server.url)

    def restart(self) -> None:
        """Stop the server (fast shutdown: every connection dies) and start it again."""
        self.server.stop()
        self.server = start_embedded_postgres(self.data_dir)
        self.proxy.target = (self.server.host, self.server.port)
        self.proxy.reset_all()
        self.restarts += 1

    def close(self) -> None:
        self.proxy.close()
        self.server.stop()


@pytest.fixture
def pg() -> Iterator[Restartable]:
    # not pytest's tmp_path: its parents are private to this account, and the server may
    # run as another one
    directory = Path(tempfile.mkdtemp(prefix="lgd-restart-"))
    server = Restartable(directory)
    yield server
    server.close()
    shutil.rmtree(directory, ignore_errors=True)


def _graph(pg: Restartable, saver: Any) -> Any:
    def payload(n: int) -> str:
        if n == RESTART_AT:
            pg.restart()  # inside the node: the checkpoint before is stored, the next is not
        return str(n)

    return loop_graph(STEPS, payload).compile(checkpointer=saver)


def _reference() -> list[tuple[Any, ...]]:
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "run"}}
    loop_graph(STEPS).compile(checkpointer=saver).invoke({"count": 0, "log": []}, config)
    return history_signature(saver, config)


def test_a_restart_mid_run_reaches_no_caller(pg: Restartable) -> None:
    config = {"configurable": {"thread_id": "run"}}
    with PostgresSaver.from_conn_string(pg.url, pool_size=2) as s:
        s.setup()
        result = _graph(pg, s).invoke({"count": 0, "log": []}, config, durability="sync")
        assert pg.restarts == 1 and result["count"] == STEPS
        assert history_signature(s, config) == _reference()


async def test_async_a_restart_mid_run_reaches_no_caller(pg: Restartable) -> None:
    config = {"configurable": {"thread_id": "run"}}
    async with AsyncPostgresSaver.from_conn_string(pg.url, pool_size=2) as s:
        await s.setup()
        result = await _graph(pg, s).ainvoke({"count": 0, "log": []}, config, durability="sync")
        assert pg.restarts == 1 and result["count"] == STEPS
    with PostgresSaver.from_conn_string(pg.url) as direct:
        assert history_signature(direct, config) == _reference()


def test_an_outage_within_pool_timeout_is_waited_out_and_a_longer_one_reported(
    pg: Restartable,
) -> None:
    import threading
    import time

    from langgraph_durable.errors import StorageUnavailableError
    from tests.helpers import cfg, checkpoint_ids, put_chain

    with PostgresSaver.from_conn_string(pg.url, pool_size=2, pool_timeout=8.0) as s:
        s.setup()
        stored = put_chain(s, "t", 2)
        # down for a second while a call is made: the call waits (psycopg_pool reconnects
        # with its own backoff) and succeeds once the server is back
        pg.server.stop()
        pg.proxy.reset_all()
        back = threading.Timer(1.0, pg.restart)
        back.start()
        started = time.monotonic()
        got = s.get_tuple(cfg("t"))
        back.join()
        assert got is not None and time.monotonic() - started >= 0.9
    with PostgresSaver.from_conn_string(pg.url, pool_size=2, pool_timeout=1.0) as s:
        s.get_tuple(cfg("t"))
        # down for longer than pool_timeout: reported as ours, and nothing stored is lost
        pg.server.stop()
        pg.proxy.reset_all()
        with pytest.raises(StorageUnavailableError):
            s.get_tuple(cfg("t"))
        pg.restart()
    with PostgresSaver.from_conn_string(pg.url) as again:
        assert checkpoint_ids(again.list(cfg("t"))) == [
            c["configurable"]["checkpoint_id"] for c in stored[::-1]
        ]
