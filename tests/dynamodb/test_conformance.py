"""langgraph-checkpoint-conformance against both DynamoDB savers (moto's server by default).

The suite calls only async methods, so the sync saver runs through
:class:`tests.sync_adapter.SyncSaverAdapter`. Each capability group gets a fresh
saver on a table of its own (created by ``setup()``), deleted afterwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver

from tests.conformance import run_conformance
from tests.servers import delete_dynamodb_table, new_dynamodb_table_name
from tests.sync_adapter import SyncSaverAdapter

REGION = "us-east-1"


def _conn_string(endpoint: str, table: str) -> str:
    return f"dynamodb://{table}?region={REGION}&endpoint={endpoint}"


@pytest.mark.parametrize("encrypted", [False, True])
async def test_async_dynamodb_saver_conformance(dynamodb_endpoint: str, encrypted: bool) -> None:
    """The async saver; a second time with envelope encryption on."""
    from langgraph_durable.dynamodb import AsyncDynamoDBSaver
    from tests.encryption_helpers import local_encryption

    encryption = local_encryption() if encrypted else None

    async def factory() -> AsyncGenerator[BaseCheckpointSaver, None]:
        table = new_dynamodb_table_name()
        try:
            conn = _conn_string(dynamodb_endpoint, table)
            async with AsyncDynamoDBSaver.from_conn_string(conn, encryption=encryption) as saver:
                await saver.setup()
                yield saver
        finally:
            await asyncio.to_thread(delete_dynamodb_table, dynamodb_endpoint, table)

    run = await run_conformance(f"AsyncDynamoDBSaver{' (encrypted)' if encrypted else ''}", factory)
    run.assert_full()
    assert run.passed() == 81 and run.failed() == 0, run.summary()


async def test_sync_dynamodb_saver_conformance(dynamodb_endpoint: str) -> None:
    from langgraph_durable.dynamodb import DynamoDBSaver

    async def factory() -> AsyncGenerator[BaseCheckpointSaver, None]:
        table = new_dynamodb_table_name()
        managed = DynamoDBSaver.from_conn_string(_conn_string(dynamodb_endpoint, table))
        try:
            saver = await asyncio.to_thread(managed.__enter__)
            try:
                await asyncio.to_thread(saver.setup)
                yield SyncSaverAdapter(saver)
            finally:
                await asyncio.to_thread(managed.__exit__, None, None, None)
        finally:
            await asyncio.to_thread(delete_dynamodb_table, dynamodb_endpoint, table)

    run = await run_conformance("DynamoDBSaver (sync, via SyncSaverAdapter)", factory)
    run.assert_full()
    assert run.passed() == 81 and run.failed() == 0, run.summary()
