"""Redis connections cut under the saver (tests/faults/redis_proxy.py): the saver's client
retries through redis-py's own Retry, and a write applied whose reply was lost is
written again without a conflict."""

from __future__ import annotations

from typing import Any

from langgraph_durable.redis import AsyncRedisSaver, RedisSaver
from tests.faults.proxy import FaultProxy, step_args
from tests.helpers import cfg, checkpoint_ids


def test_cuts_and_lost_replies_reach_no_caller(
    redis_url: str, redis_prefix: str, redis_proxy: FaultProxy
) -> None:
    with RedisSaver.from_conn_string(redis_proxy.url(redis_url), prefix=redis_prefix) as s:
        config: Any = cfg("t")
        written: list[str] = []
        for step in range(8):
            redis_proxy.reset_all()
            config = s.put(*step_args(step, config))
            written.append(config["configurable"]["checkpoint_id"])
            redis_proxy.lose_next_reply()
            s.put_writes(config, [("ch", step)], f"task{step}")
            redis_proxy.lose_next_reply()
            assert s.get_tuple(cfg("t")) is not None
            if step % 2:
                redis_proxy.lose_next_reply()
                config = s.put(*step_args(100 + step, config))
                written.append(config["configurable"]["checkpoint_id"])
        assert redis_proxy.lost_replies == 20
        assert checkpoint_ids(s.list(cfg("t"))) == written[::-1]


async def test_async_cuts_and_lost_replies_reach_no_caller(
    redis_url: str, redis_prefix: str, redis_proxy: FaultProxy
) -> None:
    url = redis_proxy.url(redis_url)
    async with AsyncRedisSaver.from_conn_string(url, prefix=redis_prefix) as s:
        config: Any = cfg("t")
        written: list[str] = []
        for step in range(8):
            redis_proxy.reset_all()
            config = await s.aput(*step_args(step, config))
            written.append(config["configurable"]["checkpoint_id"])
            redis_proxy.lose_next_reply()
            config = await s.aput(*step_args(100 + step, config))
            written.append(config["configurable"]["checkpoint_id"])
            redis_proxy.lose_next_reply()
            await s.aput_writes(config, [("ch", step)], f"task{step}")
        assert redis_proxy.lost_replies == 16
        assert [t.checkpoint["id"] async for t in s.alist(cfg("t"))] == written[::-1]
