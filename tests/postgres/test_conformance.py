"""langgraph-checkpoint-conformance against both Postgres savers.

The suite calls only async methods, so the sync saver runs through
:class:`tests.sync_adapter.SyncSaverAdapter`. Each capability group gets a
fresh saver on a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator

import psycopg
import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from psycopg import sql

from tests.conformance import run_conformance
from tests.sync_adapter import SyncSaverAdapter


def _new_schema() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


async def _drop_schema(url: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


async def test_async_postgres_saver_conformance(pg_url: str) -> None:
    from langgraph_durable.postgres import AsyncPostgresSaver

    async def factory() -> AsyncGenerator[BaseCheckpointSaver, None]:
        schema = _new_schema()
        try:
            async with AsyncPostgresSaver.from_conn_string(pg_url, schema=schema) as saver:
                await saver.setup()
                yield saver
        finally:
            await _drop_schema(pg_url, schema)

    run = await run_conformance("AsyncPostgresSaver", factory)
    run.assert_full()
    assert run.passed() == 81 and run.failed() == 0, run.summary()


@pytest.mark.parametrize("encrypted", [False, True])
async def test_sync_postgres_saver_conformance(pg_url: str, encrypted: bool) -> None:
    """The sync saver through the adapter; a second time with envelope encryption on."""
    from langgraph_durable.postgres import PostgresSaver
    from tests.encryption_helpers import local_encryption

    encryption = local_encryption() if encrypted else None

    async def factory() -> AsyncGenerator[BaseCheckpointSaver, None]:
        schema = _new_schema()
        managed = PostgresSaver.from_conn_string(pg_url, schema=schema, encryption=encryption)
        try:
            saver = await asyncio.to_thread(managed.__enter__)
            try:
                await asyncio.to_thread(saver.setup)
                yield SyncSaverAdapter(saver)
            finally:
                await asyncio.to_thread(managed.__exit__, None, None, None)
        finally:
            await _drop_schema(pg_url, schema)

    label = "encrypted, sync" if encrypted else "sync"
    run = await run_conformance(f"PostgresSaver ({label}, via SyncSaverAdapter)", factory)
    run.assert_full()
    assert run.passed() == 81 and run.failed() == 0, run.summary()
