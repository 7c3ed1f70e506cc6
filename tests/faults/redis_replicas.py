"""A throwaway Redis Cluster with a replica behind every primary, for failover tests.

Built from the test rig's pieces (tests/servers.py): :class:`RedisClusterServers` forms
the primaries, and one more :class:`RedisServer` per primary joins the cluster
(``CLUSTER MEET``) and follows it (``CLUSTER REPLICATE``). A small
``cluster-node-timeout`` makes an automatic failover take a second or two instead of
the default fifteen, and diskless replication with no delay lets a new replica catch up
at once.

:class:`ReplicaCluster` then moves a slot's primary role on command:
:meth:`~ReplicaCluster.failover` asks the replica to take over (``CLUSTER FAILOVER``: the
primary stops writes until the replica has every one of them, so nothing is lost),
:meth:`~ReplicaCluster.kill_owner` SIGKILLs the primary and lets the cluster promote its
replica; :meth:`~ReplicaCluster.heal` brings a killed node back (it rejoins as a
replica of the node that replaced it) and waits until every slot again has a primary
with a replica in sync. :meth:`~ReplicaCluster.cut_replication` and
:meth:`~ReplicaCluster.takeover` make the case asynchronous replication loses a write in:
the primary acknowledges it while its replica is cut off, then dies.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis

from tests.servers import RedisBinary, RedisClusterServers, RedisServer

__all__ = ["ReplicaCluster", "NodeView"]

_WAIT_S = 30.0
_LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class NodeView:
    """One line of ``CLUSTER NODES`` as a node sees it."""

    node_id: str
    port: int
    flags: frozenset[str]
    primary_id: str
    link: str
    slots: tuple[tuple[int, int], ...]

    @property
    def is_primary(self) -> bool:
        return "master" in self.flags

    @property
    def failing(self) -> bool:
        return bool({"fail", "fail?"} & self.flags)

    def owns(self, slot: int) -> bool:
        return any(first <= slot <= last for first, last in self.slots)


def _parse_nodes(text: str) -> list[NodeView]:
    views = []
    for line in text.strip().splitlines():
        parts = line.split()
        address = parts[1].split("@", 1)[0]
        slots: list[tuple[int, int]] = []
        for item in parts[8:]:
            if item.startswith("["):  # a slot being migrated
                continue
            first, _, last = item.partition("-")
            slots.append((int(first), int(last or first)))
        views.append(
            NodeView(
                node_id=parts[0],
                port=int(address.rsplit(":", 1)[1]),
                flags=frozenset(parts[2].split(",")),
                primary_id=parts[3],
                link=parts[7],
                slots=tuple(slots),
            )
        )
    return views


class ReplicaCluster:
    """``primaries`` primaries with one replica each, on loopback ports.

    Args:
        binary: The ``redis-server`` executable (the rig's choice by default).
        primaries: Number of primaries (at least 3, so that a majority of them is left to
            vote when one dies).
        node_timeout_ms: ``cluster-node-timeout``: how long a node is unreachable before
            the others call it failed.
    """

    def __init__(
        self, binary: RedisBinary | None = None, *, primaries: int = 3, node_timeout_ms: int = 500
    ) -> None:
        self._formed = RedisClusterServers(binary, primaries=primaries)
        self.binary = self._formed.binary
        settings = {
            "cluster-node-timeout": str(node_timeout_ms),
            # a replica that lost its primary a while ago still stands for election
            "cluster-replica-validity-factor": "0",
            # a node that comes back (or a new replica) syncs over the socket, at once
            "repl-diskless-sync": "yes",
            "repl-diskless-sync-delay": "0",
        }
        for node in self._formed.nodes:
            node.config.update(settings)
        template = dict(self._formed.nodes[0].config)
        self._replicas = [RedisServer(self.binary, config=template) for _ in range(primaries)]

    @property
    def servers(self) -> list[RedisServer]:
        """Every node, primaries as formed first."""
        return [*self._formed.nodes, *self._replicas]

    @property
    def url(self) -> str:
        """``redis://`` of a node that is running: a seed for cluster clients."""
        node = next(n for n in self.servers if n.running())
        return f"redis://{_LOOPBACK}:{node.port}"

    @property
    def conn_string(self) -> str:
        """The cluster as a saver connection string (``redis+cluster://``), seeded with
        every node so that a client still finds one when another is down."""
        return self.url.replace("redis://", "redis+cluster://", 1)

    def start(self) -> ReplicaCluster:
        try:
            self._formed.start()
            for node in self._replicas:
                node.start()
            with self._client(self._formed.nodes[0]) as first:
                for node in self._replicas:
                    first.execute_command("CLUSTER MEET", _LOOPBACK, node.port)
            self._wait(lambda: all(len(self.view(n)) == len(self.servers) for n in self.servers))
            for primary, replica in zip(self._formed.nodes, self._replicas, strict=True):
                with self._client(primary) as client:
                    primary_id = _text(client.execute_command("CLUSTER", "MYID"))
                # the replica must know the primary as one before it can follow it
                self._wait(lambda r=replica, p=primary_id: _knows_primary(self.view(r), p))
                with self._client(replica) as client:
                    client.execute_command("CLUSTER REPLICATE", primary_id)
            self.wait_healthy()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for node in self._replicas:
            node.close()
        self._formed.close()

    def __enter__(self) -> ReplicaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ views

    def view(self, server: RedisServer) -> list[NodeView]:
        """``CLUSTER NODES`` as ``server`` sees it."""
        with self._client(server) as client:
            return _parse_nodes(_text(client.execute_command("CLUSTER", "NODES")))

    def owner(self, slot: int) -> RedisServer:
        """The node every running node agrees is the primary of ``slot`` (waits for it)."""
        found: list[RedisServer] = []

        def agreed() -> bool:
            ports = set()
            for server in self.servers:
                if not server.running():
                    continue
                views = [v for v in self.view(server) if v.is_primary and v.owns(slot)]
                if len(views) != 1 or views[0].failing:
                    return False
                ports.add(views[0].port)
            if len(ports) != 1:
                return False
            found[:] = [self._by_port(ports.pop())]
            return True

        self._wait(agreed, f"the nodes to agree on the primary of slot {slot}")
        return found[0]

    def replica_of(self, primary: RedisServer) -> RedisServer:
        """The running replica that follows ``primary``."""
        views = self.view(primary)
        primary_id = next(v.node_id for v in views if v.port == primary.port)
        for v in views:
            if v.primary_id == primary_id and not v.failing:
                server = self._by_port(v.port)
                if server.running():
                    return server
        raise AssertionError(f"no replica follows the node on port {primary.port}")

    # ------------------------------------------------------------------ faults

    def failover(self, slot: int) -> tuple[RedisServer, RedisServer]:
        """Ask the replica of ``slot``'s primary to take over (``CLUSTER FAILOVER``).

        Returns at once (the switch completes in the background); returns the old
        primary and the replica taking over.
        """
        primary = self.owner(slot)
        replica = self.replica_of(primary)
        with self._client(replica) as client:
            client.execute_command("CLUSTER FAILOVER")
        return primary, replica

    def kill_owner(self, slot: int) -> tuple[RedisServer, RedisServer]:
        """SIGKILL ``slot``'s primary; its replica is promoted by the cluster (not waited
        for). Returns the killed node and its replica."""
        primary = self.owner(slot)
        replica = self.replica_of(primary)
        primary.kill()
        return primary, replica

    def wait_owner(self, slot: int, server: RedisServer) -> None:
        """Wait until every running node agrees ``server`` is the primary of ``slot``."""
        self._wait(lambda: self.owner(slot) is server, f"port {server.port} to own slot {slot}")

    def heal(self) -> None:
        """Start every node that is down (it rejoins as a replica), resume any stopped
        one, and wait until healthy."""
        for server in self.servers:
            if not server.running():
                server.restart(crash=True)
            elif server.process is not None:
                server.process.send_signal(signal.SIGCONT)
        self.wait_healthy()

    def wait_healthy(self) -> None:
        """Wait until the cluster is ``ok`` everywhere and every primary has a replica
        whose link is up and that acknowledges writes (so a failover finds one in sync,
        and a write with ``wait_replicas=1`` is confirmed at once).

        A replica says its link is up as soon as its sync is loaded; its primary counts
        it for ``WAIT`` only once it has acknowledged an offset. Until then a ``WAIT``
        times out: hence the ``WAIT 1`` on every primary that holds slots.
        """

        def healthy() -> bool:
            for server in self.servers:
                with self._client(server) as client:
                    info = _info(_text(client.execute_command("CLUSTER", "INFO")))
                    if info.get("cluster_state") != "ok":
                        return False
                    replication = client.info("replication")
                if replication.get("role") == "slave" and not _synced(replication):
                    return False
            views = self.view(self.servers[0])
            primaries = [v for v in views if v.is_primary and v.slots]
            if not (
                all(
                    not p.failing
                    and any(v.primary_id == p.node_id and not v.failing for v in views)
                    for p in primaries
                )
                and len(primaries) == len(self._formed.nodes)
            ):
                return False
            ids = {p.node_id for p in primaries}
            for server in self.servers:
                with self._client(server) as client:
                    mine = _text(client.execute_command("CLUSTER", "MYID"))
                    if mine in ids and int(client.execute_command("WAIT", 1, 50)) < 1:
                        return False
            return True

        self._wait(healthy, "every primary to have a replica in sync")

    @staticmethod
    def wait_in_sync(replica: RedisServer) -> None:
        """Wait until a replica (of any primary) has its link up and its first sync done."""
        with redis.Redis(host=_LOOPBACK, port=replica.port, decode_responses=True) as client:
            ReplicaCluster._wait_for(
                lambda: _synced(client.info("replication")), f"port {replica.port} to sync"
            )

    def cut_replication(self, slot: int) -> tuple[RedisServer, RedisServer]:
        """Stop ``slot``'s replica from receiving writes: its process is stopped
        (SIGSTOP, so it cannot reconnect) and the primary drops its link, so a write
        from now on reaches the primary only (a replica lagging behind a partition).
        Returns the primary and the replica; :meth:`takeover` resumes the replica."""
        primary = self.owner(slot)
        replica = self.replica_of(primary)
        assert replica.process is not None
        replica.process.send_signal(signal.SIGSTOP)
        with self._client(primary) as client:
            dropped = int(client.execute_command("CLIENT", "KILL", "TYPE", "replica"))
        assert dropped == 1, f"the primary had {dropped} replica links, expected 1"
        return primary, replica

    def takeover(self, replica: RedisServer) -> None:
        """Resume ``replica`` (if stopped) and make it take its primary's slots now
        (``CLUSTER FAILOVER TAKEOVER``: no vote, no wait for the node timeout)."""
        assert replica.process is not None
        replica.process.send_signal(signal.SIGCONT)
        with self._client(replica) as client:
            client.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")

    # ------------------------------------------------------------------ internals

    @contextlib.contextmanager
    def _client(self, server: RedisServer) -> Iterator[redis.Redis]:
        client = redis.Redis(
            host=_LOOPBACK, port=server.port, decode_responses=True, socket_timeout=5
        )
        try:
            yield client
        finally:
            client.close()

    def _by_port(self, port: int) -> RedisServer:
        return next(server for server in self.servers if server.port == port)

    def _wait(self, check: Any, what: str = "the cluster to form") -> None:
        self._wait_for(check, what)

    @staticmethod
    def _wait_for(check: Any, what: str) -> None:
        deadline = time.monotonic() + _WAIT_S
        last: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except (redis.RedisError, OSError) as exc:  # a node still starting
                last = exc
            time.sleep(0.02)
        raise RuntimeError(f"timed out after {_WAIT_S:.0f}s waiting for {what} ({last!r})")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _info(text: str) -> dict[str, str]:
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _synced(replication: dict[str, Any]) -> bool:
    return replication.get("master_link_status") == "up" and not int(
        replication.get("master_sync_in_progress") or 0
    )


def _knows_primary(views: list[NodeView], node_id: str) -> bool:
    return any(v.node_id == node_id and v.is_primary for v in views)
