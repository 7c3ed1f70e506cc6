"""asyncio tasks cancelled in the middle of saver calls: the pool keeps serving, the
thread stays readable, and what a cancelled write left is either whole or absent."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from langgraph_durable.dynamodb import AsyncDynamoDBSaver
from langgraph_durable.postgres import AsyncPostgresSaver
from langgraph_durable.redis import AsyncRedisSaver
from tests.faults.proxy import step_args
from tests.helpers import cfg

CANCELS = 1000


async def _cancel_calls(saver: Any, trials: int) -> None:
    rng = random.Random(11)
    base = await saver.aput(*step_args(0, cfg("t")))
    await saver.aput_writes(base, [("ch", 0)], "task0")
    calls = [
        lambda i: saver.aput(*step_args(i, base)),
        lambda i: saver.aput_writes(base, [("ch", i)], f"task{i}"),
        lambda i: saver.aget_tuple(cfg("t")),
        lambda i: saver.aget_tuple(base),
        lambda i: _drain(saver.alist(cfg("t"), limit=5)),
    ]
    cancelled = 0
    for i in range(1, trials + 1):
        task = asyncio.ensure_future(calls[i % len(calls)](i))
        for _ in range(rng.randrange(5)):  # a few turns of the loop: inside the call
            await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            cancelled += 1
        # after each cancellation the pool serves the next call, and the thread reads whole
        got = await asyncio.wait_for(saver.aget_tuple(base), 10)
        assert got is not None and got.checkpoint["id"] == base["configurable"]["checkpoint_id"]
    assert cancelled >= trials // 10  # many cancellations landed (58-97% on a quiet machine)
    # every checkpoint a cancelled put may have left is whole
    async for t in saver.alist(cfg("t")):
        assert t.checkpoint["channel_values"]["payload"] == {"step": t.metadata["step"]}


async def _drain(it: Any) -> list[Any]:
    return [x async for x in it]


async def test_postgres_calls_cancelled_midway(pg_url: str, pg_schema: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema, pool_size=2) as s:
        await s.setup()
        await _cancel_calls(s, CANCELS)


async def test_redis_calls_cancelled_midway(redis_url: str, redis_prefix: str) -> None:
    async with AsyncRedisSaver.from_conn_string(redis_url, prefix=redis_prefix) as s:
        await _cancel_calls(s, CANCELS)


async def test_dynamodb_calls_cancelled_midway(dynamodb_endpoint: str, dynamodb_table: str) -> None:
    # boto3 calls run in the saver's worker threads: a cancelled await leaves its call to
    # finish there, and the next calls queue behind it (moto is slow: a fifth of the trials)
    from tests.dynamodb.helpers import make_client

    s = AsyncDynamoDBSaver(make_client(dynamodb_endpoint), table=dynamodb_table)
    await s.setup()
    await _cancel_calls(s, CANCELS // 5)
