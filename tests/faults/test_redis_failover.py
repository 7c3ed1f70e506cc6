"""A Redis Cluster primary fails over in the middle of a graph run (tests/faults/
redis_replicas.py: three primaries, a replica behind each, started once for the module).

Two kinds of failover of the primary that owns the thread's slot, each started inside a
node of the run:

* ``graceful``: ``CLUSTER FAILOVER`` sent to the replica (the primary hands over without
  losing a write; the saver's next call is answered MOVED by the old primary);
* ``kill``: the primary SIGKILLed; the cluster promotes its replica once the others have
  seen it gone (about 1.5-3 s here), and the saver's calls meanwhile find nobody at the
  slot's address and are retried (redis-py's cluster retry, ``_driver.CLUSTER_RETRIES``).
  The killed node is started again once its replica has taken over, and rejoins as a
  replica. The kill happens inside an ``@idempotent`` effect: its completion is written
  through the failover, and a replay of the run returns its recorded result.

Either way the run finishes with no error reaching the caller, its history equals
InMemorySaver's, and the slot's owner has changed (the failover really happened).

Redis replicates asynchronously: a primary acknowledges a write before its replica has
it. On loopback the replica gets it within the same event-loop turn, so a kill right
after a put lost nothing in 20 trials; with the replica cut off (a partition), a kill
loses the acknowledged write (``test_an_acknowledged_write_is_lost...``). The saver's
``wait_replicas`` option closes that window (a ``WAIT`` in the write's round trip; a write
no replica confirmed raises ``StorageUnavailableError``): the kill runs use it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from redis.crc import key_slot

from langgraph_durable.effects import EffectJournal, idempotent
from langgraph_durable.errors import ConfigurationError, StorageUnavailableError
from langgraph_durable.redis import AsyncRedisSaver, RedisSaver
from tests.dynamodb.helpers import history_signature, loop_graph
from tests.faults.proxy import step_args
from tests.faults.redis_replicas import ReplicaCluster
from tests.helpers import cfg
from tests.servers import RedisServer, delete_redis_keys, new_redis_prefix

STEPS = 30
FAULT_AT = 10  # the node of this step moves the slot's primary role
SETTLED_AT = 15  # the node of this step waits until the new owner is agreed on
THREAD = "run"
#: Runs with ``wait_replicas``: one replica per write, for long enough for a killed node
#: to be back (as the new primary's replica) and in sync.
WAITED = {"wait_replicas": 1, "wait_timeout": 10.0}
#: ``make soak`` sets it: every run below, not only the cheap ones (a kill costs ~3 s).
FULL = os.environ.get("LGD_FAILOVER_FULL", "") not in ("", "0")


def _runs(*default: tuple[str, bool]) -> list[Any]:
    """(how, waited) pairs: those named in ``make test``, every one in soak (the others
    are not collected at all, rather than skipped)."""
    return [
        pytest.param(how, waited, id=f"{how}-{'wait' if waited else 'nowait'}")
        for how in ("graceful", "kill")
        for waited in (True, False)
        if FULL or (how, waited) in default
    ]


@pytest.fixture(scope="module")
def cluster() -> Iterator[ReplicaCluster]:
    with ReplicaCluster() as running:
        yield running


@pytest.fixture
def prefix(cluster: ReplicaCluster) -> Iterator[str]:
    cluster.heal()  # every primary has a replica in sync before the test
    value = new_redis_prefix()
    yield value
    cluster.heal()
    delete_redis_keys(cluster.url, value)


@pytest.fixture(scope="module")
def reference() -> list[tuple[Any, ...]]:
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": THREAD}}
    loop_graph(STEPS).compile(checkpointer=saver).invoke({"count": 0, "log": []}, config)
    return history_signature(saver, config)


class Fault:
    """What the run's nodes do to the cluster, and what they saw."""

    def __init__(self, cluster: ReplicaCluster, slot: int, how: str) -> None:
        self.cluster, self.slot, self.how = cluster, slot, how
        self.old: RedisServer | None = None
        self.new: RedisServer | None = None
        self.moves = 0
        self.healer: threading.Thread | None = None
        # the move runs as a journaled effect: claimed before, completed after it
        self.move = idempotent(name="move", wait=2.0)(self._move)

    def _move(self, n: int) -> str:
        self.moves += 1
        if self.how == "graceful":
            self.old, self.new = self.cluster.failover(self.slot)
        else:
            self.old, self.new = self.cluster.kill_owner(self.slot)
            # once the replica has taken over, the killed node comes back as its
            # replica (as an operator or a supervisor would bring it back)
            self.healer = threading.Thread(target=self._heal, daemon=True)
            self.healer.start()
        return f"moved-{n}"

    def _heal(self) -> None:
        assert self.new is not None
        self.cluster.wait_owner(self.slot, self.new)
        self.cluster.heal()

    def payload(self, n: int) -> str:
        if n == FAULT_AT:
            assert self.move(n) == f"moved-{n}"
        elif n == SETTLED_AT:
            assert self.new is not None
            self.cluster.wait_owner(self.slot, self.new)
        return str(n)

    def check(self) -> None:
        """The failover happened once: another node owns the slot now."""
        if self.healer is not None:
            self.healer.join(60)
        assert self.moves == 1
        assert self.old is not None and self.new is not None and self.old is not self.new
        assert self.cluster.owner(self.slot) is self.new


def _slot(saver: Any) -> int:
    return int(key_slot(saver.keys.thread(saver.options.default_tenant, THREAD)[0].encode()))


def _options(waited: bool) -> dict[str, Any]:
    return WAITED if waited else {}


def _before_fault(history: list[Any]) -> dict[str, Any]:
    """The config of the checkpoint the fault's step started from."""
    return next(s.config for s in history if s.values.get("count") == FAULT_AT - 1)


@pytest.mark.parametrize(("how", "waited"), _runs(("graceful", True), ("kill", True)))
def test_failover_mid_run_reaches_no_caller(
    cluster: ReplicaCluster, prefix: str, reference: list, how: str, waited: bool
) -> None:
    config = {"configurable": {"thread_id": THREAD}}
    url = cluster.conn_string
    with RedisSaver.from_conn_string(url, prefix=prefix, **_options(waited)) as s:
        fault = Fault(cluster, _slot(s), how)
        graph = loop_graph(STEPS, fault.payload).compile(checkpointer=s)
        result = graph.invoke({"count": 0, "log": []}, config, durability="sync")
        assert result["count"] == STEPS
        fault.check()
        assert history_signature(s, config) == reference
        entries = EffectJournal(s).entries(THREAD)
        assert [(e.state, e.result) for e in entries] == [("done", f"moved-{FAULT_AT}")]
        # a replay from before the fault returns the effect's recorded result
        replay = _before_fault(list(graph.get_state_history(config)))
        assert graph.invoke(None, replay, durability="sync")["count"] == STEPS
        assert fault.moves == 1


@pytest.mark.parametrize(("how", "waited"), _runs(("graceful", True)))
async def test_async_failover_mid_run_reaches_no_caller(
    cluster: ReplicaCluster, prefix: str, reference: list, how: str, waited: bool
) -> None:
    config = {"configurable": {"thread_id": THREAD}}
    url = cluster.conn_string
    async with AsyncRedisSaver.from_conn_string(url, prefix=prefix, **_options(waited)) as s:
        fault = Fault(cluster, _slot(s), how)
        graph = loop_graph(STEPS, fault.payload).compile(checkpointer=s)
        result = await graph.ainvoke({"count": 0, "log": []}, config, durability="sync")
        assert result["count"] == STEPS
        await asyncio.to_thread(fault.check)
        entries = await EffectJournal(s).aentries(THREAD)
        assert [(e.state, e.result) for e in entries] == [("done", f"moved-{FAULT_AT}")]
    with RedisSaver.from_conn_string(url, prefix=prefix) as direct:
        assert history_signature(direct, config) == reference


@pytest.mark.parametrize("wait", [0, 1])
def test_an_acknowledged_write_is_lost_without_wait_replicas(
    cluster: ReplicaCluster, prefix: str, wait: int
) -> None:
    """The primary acknowledges a put while its replica is cut off, then dies and the
    replica takes over. Without ``wait_replicas`` the put returned and its checkpoint
    is gone; with it the put raised, and the same put made again is stored."""
    # The first put must be confirmed while the machine is busy with other tests: a
    # timeout of 0.2 s was once too short for it.
    with RedisSaver.from_conn_string(
        cluster.conn_string, prefix=prefix, wait_replicas=wait, wait_timeout=1.0
    ) as s:
        slot = int(key_slot(s.keys.thread("default", "t")[0].encode()))
        first = s.put(*step_args(1, cfg("t")))
        primary, replica = cluster.cut_replication(slot)
        if wait:
            with pytest.raises(StorageUnavailableError, match="0 of the 1 replicas"):
                s.put(*step_args(2, first))
        else:
            s.put(*step_args(2, first))  # acknowledged
        primary.kill()
        cluster.takeover(replica)
        cluster.wait_owner(slot, replica)
    # a client of its own: this one's slot map is not waited for (the runs above are)
    with RedisSaver.from_conn_string(
        cluster.conn_string, prefix=prefix, wait_replicas=wait, wait_timeout=5.0
    ) as s:
        latest = s.get_tuple(cfg("t"))
        assert latest is not None and latest.metadata["step"] == 1  # the second put is gone
        if wait:  # the caller was told: it puts again once a replica is back
            cluster.heal()
            again = s.put(*step_args(2, first))
            got = s.get_tuple(cfg("t"))
            assert got is not None and got.config == again and got.metadata["step"] == 2


@pytest.mark.parametrize(
    "bad",
    [{"wait_replicas": -1}, {"wait_replicas": 17}, {"wait_timeout": 0}, {"wait_timeout": True}],
)
def test_wait_options_are_validated(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="wait_"):
        RedisSaver("redis://127.0.0.1:1/0", **bad)


async def test_async_a_waited_write_as_first_call(cluster: ReplicaCluster, prefix: str) -> None:
    """The async cluster client learns the slot map on its first command; a write with
    ``wait_replicas`` needs it before (to send ``WAIT`` to the slot's node)."""
    async with AsyncRedisSaver.from_conn_string(cluster.conn_string, prefix=prefix, **WAITED) as s:
        stored = await s.aput(*step_args(1, cfg("t")))
        got = await s.aget_tuple(cfg("t"))
        assert got is not None and got.config == stored


def test_wait_replicas_on_a_single_server() -> None:
    """Without a cluster the script and ``WAIT`` share a plain pipeline: a server with no
    replica reports every write, one with a replica in sync takes them."""
    with RedisServer(config={"repl-diskless-sync-delay": "0"}) as primary:
        url = primary.url
        with RedisSaver.from_conn_string(url, wait_replicas=1, wait_timeout=0.05) as s:
            with pytest.raises(StorageUnavailableError, match="0 of the 1 replicas"):
                s.put(*step_args(1, cfg("t")))
        with RedisServer(config={"replicaof": f"127.0.0.1 {primary.port}"}) as replica:
            ReplicaCluster.wait_in_sync(replica)
            with RedisSaver.from_conn_string(url, wait_replicas=1, wait_timeout=5.0) as s:
                stored = s.put(*step_args(2, cfg("t")))
                got = s.get_tuple(cfg("t"))
                assert got is not None and got.config == stored

            async def write() -> Any:
                async with AsyncRedisSaver.from_conn_string(
                    url, wait_replicas=1, wait_timeout=5.0
                ) as s:
                    return await s.aput(*step_args(3, stored))

            assert asyncio.run(write())["configurable"]["checkpoint_id"]
