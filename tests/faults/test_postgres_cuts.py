"""PostgreSQL connections cut under the saver (tests/faults/pg_proxy.py): a saver on a pool
absorbs the cut of every pooled connection, and nothing is lost."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from langgraph_durable.errors import StorageUnavailableError
from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver
from langgraph_durable.postgres._driver import RESENDS
from tests.faults.proxy import FaultProxy, step_args
from tests.helpers import cfg, checkpoint_ids, put_chain

CUTS = 5


def test_a_pooled_saver_absorbs_cuts_of_every_connection(
    pg_url: str, pg_schema: str, pg_proxy: FaultProxy
) -> None:
    with PostgresSaver.from_conn_string(pg_proxy.url(pg_url), schema=pg_schema, pool_size=3) as s:
        s.setup()
        written: list[str] = []
        config: Any = cfg("t")
        for step in range(CUTS * 4):
            if step % 4 == 0:
                assert pg_proxy.reset_all() >= 1  # every pooled connection dies at once
            config = s.put(*step_args(step, config))
            written.append(config["configurable"]["checkpoint_id"])
            if step % 4 == 1:
                pg_proxy.reset_all()
            s.put_writes(config, [("ch", step)], f"task{step}")
            if step % 4 == 2:
                pg_proxy.reset_all()
            got = s.get_tuple(cfg("t"))
            assert got is not None and got.checkpoint["id"] == written[-1]
            if step % 4 == 3:
                pg_proxy.reset_all()
                assert checkpoint_ids(s.list(cfg("t"))) == written[::-1]
        assert pg_proxy.resets >= CUTS * 4
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as direct:
        assert checkpoint_ids(direct.list(cfg("t"))) == written[::-1]
        newest = direct.get_tuple(cfg("t"))
        assert newest is not None and [(c, v) for _, c, v in newest.pending_writes] == [
            ("ch", CUTS * 4 - 1)
        ]


async def test_an_async_pooled_saver_absorbs_cuts_of_every_connection(
    pg_url: str, pg_schema: str, pg_proxy: FaultProxy
) -> None:
    url = pg_proxy.url(pg_url)
    async with AsyncPostgresSaver.from_conn_string(url, schema=pg_schema, pool_size=3) as s:
        await s.setup()
        written: list[str] = []
        config: Any = cfg("t")
        for step in range(CUTS * 3):
            pg_proxy.reset_all()
            config = await s.aput(*step_args(step, config))
            written.append(config["configurable"]["checkpoint_id"])
            pg_proxy.reset_all()
            await s.aput_writes(config, [("ch", step)], f"task{step}")
            pg_proxy.reset_all()
            got = await s.aget_tuple(cfg("t"))
            assert got is not None and got.checkpoint["id"] == written[-1]
        pg_proxy.reset_all()
        assert [t.checkpoint["id"] async for t in s.alist(cfg("t"))] == written[::-1]


def test_a_saver_on_one_connection_reports_the_cut(
    pg_url: str, pg_schema: str, pg_proxy: FaultProxy
) -> None:
    # One connection, no pool to take another from: the cut reaches the caller as our
    # error, and what was stored before it stays.
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as owner:
        owner.setup()
    with psycopg.connect(pg_proxy.url(pg_url), autocommit=True) as conn:
        s = PostgresSaver(conn, schema=pg_schema)
        stored = put_chain(s, "t", 2)
        pg_proxy.reset_all()
        with pytest.raises(StorageUnavailableError):
            s.get_tuple(cfg("t"))
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as direct:
        assert checkpoint_ids(direct.list(cfg("t"))) == [
            c["configurable"]["checkpoint_id"] for c in stored[::-1]
        ]


def test_a_write_applied_whose_reply_was_lost_is_retried_and_succeeds(
    pg_url: str, pg_schema: str, pg_proxy: FaultProxy
) -> None:
    with PostgresSaver.from_conn_string(pg_proxy.url(pg_url), schema=pg_schema, pool_size=2) as s:
        s.setup()
        config: Any = cfg("t")
        written: list[str] = []
        for step in range(6):
            pg_proxy.lose_next_reply()  # the put is applied, its answer never arrives
            config = s.put(*step_args(step, config))
            written.append(config["configurable"]["checkpoint_id"])
            pg_proxy.lose_next_reply()
            s.put_writes(config, [("ch", step)], f"task{step}")
        assert pg_proxy.lost_replies == 12
        assert checkpoint_ids(s.list(cfg("t"))) == written[::-1]
        newest = s.get_tuple(cfg("t"))
        assert newest is not None and [(c, v) for _, c, v in newest.pending_writes] == [("ch", 5)]


async def test_async_a_write_whose_reply_was_lost_is_retried_and_succeeds(
    pg_url: str, pg_schema: str, pg_proxy: FaultProxy
) -> None:
    url = pg_proxy.url(pg_url)
    async with AsyncPostgresSaver.from_conn_string(url, schema=pg_schema, pool_size=2) as s:
        await s.setup()
        config: Any = cfg("t")
        written: list[str] = []
        for step in range(6):
            pg_proxy.lose_next_reply()
            config = await s.aput(*step_args(step, config))
            written.append(config["configurable"]["checkpoint_id"])
            pg_proxy.lose_next_reply()
            await s.aput_writes(config, [("ch", step)], f"task{step}")
        assert pg_proxy.lost_replies == 12
        assert [t.checkpoint["id"] async for t in s.alist(cfg("t"))] == written[::-1]


def test_a_statement_not_marked_for_retry_reports_a_lost_reply(
    pg_url: str, pg_schema: str, pg_proxy: FaultProxy
) -> None:
    # delete_thread is not sent again: its lost reply reaches the caller as our error,
    # never a second, guessed attempt; the caller's own retry then finishes the delete
    with PostgresSaver.from_conn_string(pg_proxy.url(pg_url), schema=pg_schema, pool_size=2) as s:
        s.setup()
        put_chain(s, "t", 2)
        pg_proxy.lose_next_reply()
        with pytest.raises(StorageUnavailableError):
            s.delete_thread("t")
        assert pg_proxy.lost_replies == 1
        s.delete_thread("t")
        assert s.get_tuple(cfg("t")) is None


def test_a_statement_that_always_breaks_its_connection_is_sent_a_bounded_number_of_times(
    pg_url: str, pg_schema: str, pg_proxy: FaultProxy
) -> None:
    # Every sending of the read of thread "poisoned" cuts its connection before the server
    # sees it: the saver sends it 1 + RESENDS times, then reports our error; the rest of
    # the pool goes on serving
    with PostgresSaver.from_conn_string(pg_proxy.url(pg_url), schema=pg_schema, pool_size=2) as s:
        s.setup()
        stored = put_chain(s, "t", 2)
        pg_proxy.poison = b"poisoned"
        with pytest.raises(StorageUnavailableError):
            s.get_tuple(cfg("poisoned"))
        assert pg_proxy.poisoned == 1 + RESENDS
        got = s.get_tuple(cfg("t"))
        assert (
            got is not None and got.checkpoint["id"] == stored[-1]["configurable"]["checkpoint_id"]
        )


async def test_async_a_statement_always_breaking_its_connection_is_sent_a_bounded_number_of_times(
    pg_url: str, pg_schema: str, pg_proxy: FaultProxy
) -> None:
    url = pg_proxy.url(pg_url)
    async with AsyncPostgresSaver.from_conn_string(url, schema=pg_schema, pool_size=2) as s:
        await s.setup()
        config = await s.aput(*step_args(0, cfg("t")))
        pg_proxy.poison = b"poisoned"
        with pytest.raises(StorageUnavailableError):
            await s.aget_tuple(cfg("poisoned"))
        assert pg_proxy.poisoned == 1 + RESENDS
        got = await s.aget_tuple(cfg("t"))
        assert got is not None and got.checkpoint["id"] == config["configurable"]["checkpoint_id"]
