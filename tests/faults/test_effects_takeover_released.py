"""A takeover whose run then fails before the effect executes keeps the journal's memory of
the earlier execution (the soak's unexplained duplicates on PostgreSQL, issue 27).

An execution of an ``@idempotent`` effect claims it, runs it and dies before recording
its result (its process was killed). The next run takes the expired claim over
(``attempt`` 2), then loses the reply of the journal's next call (the lookup of the
original a time-travel replay would repeat, sent before the effect runs) and fails with
``StorageUnavailableError``. Nothing ran under the takeover, but something did under the
claim before it: the entry must stay, so the run after that knows the effect may have
happened (``attempt`` > 1, what ``on_ambiguous`` acts on). Releasing it as if it were a
fresh claim deleted the entry, and the run after that executed the effect again as a first
attempt: what the soak found after a SIGKILL and a connection cut.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_durable.effects import EffectJournal, current_effect, idempotent
from langgraph_durable.errors import StorageUnavailableError
from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver
from tests.effects.graphs import EffectLog
from tests.faults.proxy import FaultProxy

LEASE = 0.2


class Died(BaseException):
    """The first execution's process dying after the effect ran (nothing is recorded)."""


class PayState(TypedDict, total=False):
    receipt: str


def pay_graph(saver: Any, log: EffectLog, die: list[bool]) -> Any:
    @idempotent(name="pay", lease=LEASE)
    def charge(amount: int) -> str:
        log.write(f"effect pay {amount} {current_effect().attempt} {os.getpid()}")
        if die:
            die.pop()
            raise Died
        return f"receipt-{amount}"

    builder = StateGraph(PayState)
    builder.add_node("pay", lambda state: {"receipt": charge(5)})
    builder.add_edge(START, "pay")
    builder.add_edge("pay", END)
    return builder.compile(checkpointer=saver)


def lose_lookup_reply(saver: Any, proxy: FaultProxy) -> None:
    """Lose the reply of the journal's next lookup (the statement sent right after the
    takeover, before the effect runs)."""
    lookup = saver._effect_lookup_op

    def armed(*args: Any) -> Any:
        saver._effect_lookup_op = lookup  # once
        proxy.lose_next_reply()
        return lookup(*args)

    saver._effect_lookup_op = armed


def test_a_failed_takeover_keeps_the_earlier_execution(
    pg_url: str, pg_schema: str, pg_proxy: FaultProxy, tmp_path: Any
) -> None:
    log = EffectLog(str(tmp_path / "effects.log"))
    config = {"configurable": {"thread_id": "taken-over"}}
    with PostgresSaver.from_conn_string(pg_proxy.url(pg_url), schema=pg_schema) as saver:
        saver.setup()
        graph = pay_graph(saver, log, [True])
        with pytest.raises(Died):
            graph.invoke({}, config, durability="sync")
        time.sleep(LEASE + 0.05)  # the dead execution's lease runs out
        lose_lookup_reply(saver, pg_proxy)
        with pytest.raises(StorageUnavailableError):
            graph.invoke(None, config, durability="sync")
        assert pg_proxy.lost_replies == 1  # the fault really happened
        # the journal still says the effect was claimed, by two executions so far
        (entry,) = EffectJournal(saver).entries("taken-over")
        assert (entry.state, entry.attempt) == ("claimed", 2)
        assert graph.invoke(None, config, durability="sync")["receipt"] == "receipt-5"
    attempts = log.attempts("pay:5")
    assert len(attempts) == 2
    assert attempts[0] == 1 and attempts[1] > 1, attempts  # the second knew of the first


def test_a_failed_takeover_keeps_the_earlier_execution_async(
    pg_url: str, pg_schema: str, pg_proxy: FaultProxy, tmp_path: Any
) -> None:
    log = EffectLog(str(tmp_path / "effects.log"))
    config = {"configurable": {"thread_id": "taken-over"}}

    async def main() -> list[int]:
        url = pg_proxy.url(pg_url)
        async with AsyncPostgresSaver.from_conn_string(url, schema=pg_schema) as saver:
            await saver.setup()
            graph = pay_graph(saver, log, [True])
            with pytest.raises(Died):
                await graph.ainvoke({}, config, durability="sync")
            await asyncio.sleep(LEASE + 0.05)
            lose_lookup_reply(saver, pg_proxy)
            with pytest.raises(StorageUnavailableError):
                await graph.ainvoke(None, config, durability="sync")
            assert pg_proxy.lost_replies == 1
            (entry,) = await EffectJournal(saver).aentries("taken-over")
            assert (entry.state, entry.attempt) == ("claimed", 2)
            result = await graph.ainvoke(None, config, durability="sync")
            assert result["receipt"] == "receipt-5"
        return log.attempts("pay:5")

    attempts = asyncio.run(main())
    assert len(attempts) == 2
    assert attempts[0] == 1 and attempts[1] > 1, attempts


def test_a_transient_error_after_a_takeover_keeps_the_earlier_execution(
    pg_url: str, pg_schema: str, tmp_path: Any
) -> None:
    """The same when the execution under the takeover raises a transient error (not
    recorded: a first claim is released, so the effect runs again as attempt 1; a claim
    taken over stays, so the next execution is attempt 3)."""
    log = EffectLog(str(tmp_path / "effects.log"))
    config = {"configurable": {"thread_id": "taken-over-transient"}}
    failures = [ConnectionError("the payment API is down")]

    @idempotent(name="pay", lease=LEASE)
    def charge(amount: int) -> str:
        attempt = current_effect().attempt
        log.write(f"effect pay {amount} {attempt} {os.getpid()}")
        if attempt == 1:
            raise Died
        if failures:
            raise failures.pop()
        return f"receipt-{amount}"

    builder = StateGraph(PayState)
    builder.add_node("pay", lambda state: {"receipt": charge(5)})
    builder.add_edge(START, "pay")
    builder.add_edge("pay", END)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
        saver.setup()
        graph = builder.compile(checkpointer=saver)
        with pytest.raises(Died):
            graph.invoke({}, config, durability="sync")
        time.sleep(LEASE + 0.05)
        with pytest.raises(ConnectionError):
            graph.invoke(None, config, durability="sync")
        (entry,) = EffectJournal(saver).entries("taken-over-transient")
        assert (entry.state, entry.attempt) == ("claimed", 2)
        assert graph.invoke(None, config, durability="sync")["receipt"] == "receipt-5"
    assert log.attempts("pay:5") == [1, 2, 3]
