"""langgraph-checkpoint-conformance against both Redis savers, on one server and on a cluster.

The suite calls only async methods, so the sync saver runs through
:class:`tests.sync_adapter.SyncSaverAdapter`. Each capability group gets a fresh
saver on a key prefix of its own, whose keys are deleted afterwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest
import redis.asyncio.cluster
import redis.cluster
from langgraph.checkpoint.base import BaseCheckpointSaver

from tests.conformance import run_conformance
from tests.servers import delete_redis_keys, new_redis_prefix
from tests.sync_adapter import SyncSaverAdapter

TOPOLOGIES = ("single", "cluster")
_CLUSTER_CLIENTS = (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)


def _check_topology(saver: BaseCheckpointSaver, name: str) -> None:
    """The saver really talks to the kind of server the run is named after."""
    clustered = isinstance(saver.client, _CLUSTER_CLIENTS)  # type: ignore[attr-defined]
    assert clustered == (name == "cluster"), (name, type(saver.client))  # type: ignore[attr-defined]


@pytest.fixture(params=TOPOLOGIES)
def topology(request: pytest.FixtureRequest) -> tuple[str, str, str]:
    """``(name, connection string for the saver, plain URL for cleanup)``."""
    if request.param == "single":
        url = request.getfixturevalue("redis_url")
        return "single", url, url
    url = request.getfixturevalue("redis_cluster_url")
    return "cluster", request.getfixturevalue("redis_cluster_conn_string"), url


@pytest.mark.parametrize("encrypted", [False, True])
async def test_async_redis_saver_conformance(
    topology: tuple[str, str, str], encrypted: bool
) -> None:
    """The async saver; a second time with envelope encryption on."""
    from langgraph_durable.redis import AsyncRedisSaver
    from tests.encryption_helpers import local_encryption

    name, conn_string, cleanup_url = topology
    encryption = local_encryption() if encrypted else None

    async def factory() -> AsyncGenerator[BaseCheckpointSaver, None]:
        prefix = new_redis_prefix()
        try:
            async with AsyncRedisSaver.from_conn_string(
                conn_string, prefix=prefix, encryption=encryption
            ) as saver:
                await saver.setup()
                _check_topology(saver, name)
                yield saver
        finally:
            await asyncio.to_thread(delete_redis_keys, cleanup_url, prefix)

    label = f"encrypted, {name}" if encrypted else name
    run = await run_conformance(f"AsyncRedisSaver ({label})", factory)
    run.assert_full()
    assert run.passed() == 81 and run.failed() == 0, run.summary()


async def test_sync_redis_saver_conformance(topology: tuple[str, str, str]) -> None:
    from langgraph_durable.redis import RedisSaver

    name, conn_string, cleanup_url = topology

    async def factory() -> AsyncGenerator[BaseCheckpointSaver, None]:
        prefix = new_redis_prefix()
        managed = RedisSaver.from_conn_string(conn_string, prefix=prefix)
        try:
            saver = await asyncio.to_thread(managed.__enter__)
            try:
                await asyncio.to_thread(saver.setup)
                _check_topology(saver, name)
                yield SyncSaverAdapter(saver)
            finally:
                await asyncio.to_thread(managed.__exit__, None, None, None)
        finally:
            await asyncio.to_thread(delete_redis_keys, cleanup_url, prefix)

    run = await run_conformance(f"RedisSaver ({name}, sync, via SyncSaverAdapter)", factory)
    run.assert_full()
    assert run.passed() == 81 and run.failed() == 0, run.summary()
