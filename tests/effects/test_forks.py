"""Time-travel forks made with ``update_state`` never repeat a side effect, whichever
config runs them, on every backend, sync and async.

A fork runs its tasks one step after the originals; a call with the same
arguments returns the original's recorded result, one with other arguments is a
new effect. Invoking with the config ``update_state`` returns (LangGraph marks
the run as a replay) and invoking with the thread's config (the fork is the
thread's latest checkpoint: a resumed run) behave the same, and so does a fork
resumed after an interrupt. The same call made again in a later step of the
same branch (a loop) is a new effect in a resumed run too.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_durable.effects import current_effect, idempotent
from tests.effects.graphs import EffectLog
from tests.effects.runner import Runner
from tests.helpers import cfg
from tests.redaction_helpers import SaverSpec


class OrderState(TypedDict, total=False):
    amount: int
    receipt: str
    approved: str
    notice: str


def effect(log: EffectLog, name: str, use_async: bool) -> Any:
    """A journaled effect that logs ``effect <name> <arg> <attempt> <pid>``."""

    def run(arg: Any) -> str:
        log.write(f"effect {name} {arg} {current_effect().attempt} {os.getpid()}")
        return f"{name}-{arg}"

    if use_async:

        async def arun(arg: Any) -> str:
            return run(arg)

        return idempotent(name=name)(arun)
    return idempotent(name=name)(run)


def order_graph(log: EffectLog, checkpointer: Any, use_async: bool, ask: bool = False) -> Any:
    """prepare -> pay (an effect) -> [approve (interrupts)] -> notify (an effect) -> END."""
    pay = effect(log, "pay", use_async)
    notify = effect(log, "notify", use_async)
    builder = StateGraph(OrderState)
    builder.add_node("prepare", lambda state: {"amount": state.get("amount", 5)})
    if use_async:

        async def apay(state: OrderState) -> dict[str, Any]:
            return {"receipt": await pay(state["amount"])}

        async def anotify(state: OrderState) -> dict[str, Any]:
            return {"notice": await notify(state["receipt"])}

        builder.add_node("pay", apay)
        builder.add_node("notify", anotify)
    else:
        builder.add_node("pay", lambda state: {"receipt": pay(state["amount"])})
        builder.add_node("notify", lambda state: {"notice": notify(state["receipt"])})
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "pay")
    if ask:
        builder.add_node("approve", lambda state: {"approved": interrupt("approve?")})
        builder.add_edge("pay", "approve")
        builder.add_edge("approve", "notify")
    else:
        builder.add_edge("pay", "notify")
    builder.add_edge("notify", END)
    return builder.compile(checkpointer=checkpointer)


def fork_before_pay(runner: Runner, graph: Any, thread: str, amount: int) -> dict[str, Any]:
    before = next(s for s in runner.history(graph, cfg(thread)) if s.next == ("pay",))
    return runner.update(graph, before.config, {"amount": amount}, "prepare")  # type: ignore[no-any-return]


@pytest.mark.parametrize("invoke_with", ["returned config", "thread config"])
def test_a_fork_reuses_recorded_results_whichever_config_runs_it(
    spec: SaverSpec, flavour: str, log: EffectLog, invoke_with: str
) -> None:
    with Runner(flavour, spec) as runner:
        graph = order_graph(log, runner.saver, runner.is_async)
        first = runner.invoke(graph, {}, cfg("f"))
        assert first["notice"] == "notify-pay-5"
        # a fork with the same state: pay (its first step) and notify (the step after)
        # return the recorded results
        forked = fork_before_pay(runner, graph, "f", 5)
        run_with = forked if invoke_with == "returned config" else cfg("f")
        assert runner.invoke(graph, None, run_with) == first
        assert log.effects() == Counter({"pay:5": 1, "notify:pay-5": 1})
        # each reused result is recorded again at the fork's own step
        assert Counter(e.name for e in runner.entries("f")) == {"pay": 2, "notify": 2}
        # a fork whose state changes the arguments: new effects
        forked = fork_before_pay(runner, graph, "f", 7)
        run_with = forked if invoke_with == "returned config" else cfg("f")
        assert runner.invoke(graph, None, run_with)["notice"] == "notify-pay-7"
        assert log.effects() == Counter(
            {"pay:5": 1, "notify:pay-5": 1, "pay:7": 1, "notify:pay-7": 1}
        )


def test_a_fork_resumed_after_an_interrupt_still_reuses_results(
    spec: SaverSpec, flavour: str, log: EffectLog
) -> None:
    with Runner(flavour, spec) as runner:
        graph = order_graph(log, runner.saver, runner.is_async, ask=True)
        runner.invoke(graph, {}, cfg("i"))
        first = runner.invoke(graph, Command(resume="yes"), cfg("i"))
        assert first["notice"] == "notify-pay-5"
        forked = fork_before_pay(runner, graph, "i", 5)
        runner.invoke(graph, None, forked)  # pay replays, approve interrupts again
        assert runner.state(graph, cfg("i")).next == ("approve",)
        # the resume is a run LangGraph does not mark as time travel: notify is
        # still the original's call, one step later, on another branch
        assert runner.invoke(graph, Command(resume="yes"), cfg("i")) == first
    assert log.effects() == Counter({"pay:5": 1, "notify:pay-5": 1})


class LoopState(TypedDict, total=False):
    rounds: int


def test_the_same_call_again_later_in_one_branch_is_a_new_effect(
    spec: SaverSpec, flavour: str, log: EffectLog
) -> None:
    """A node that loops onto itself sends the same reminder in consecutive steps: in one
    run, and in runs that resume the thread (after ``interrupt_before``), each round is
    its own effect: the entry one step earlier is in this branch's past, not a fork's
    original."""
    with Runner(flavour, spec) as runner:
        remind = effect(log, "remind", runner.is_async)
        builder = StateGraph(LoopState)
        if runner.is_async:

            async def around(state: LoopState) -> dict[str, Any]:
                await remind("ana")
                return {"rounds": state.get("rounds", 0) + 1}

            builder.add_node("round", around)
        else:

            def round_(state: LoopState) -> dict[str, Any]:
                remind("ana")
                return {"rounds": state.get("rounds", 0) + 1}

            builder.add_node("round", round_)
        builder.add_edge(START, "round")
        builder.add_conditional_edges(
            "round", lambda state: "round" if state["rounds"] < 3 else END
        )
        # in one run: each round reads the checkpoint LangGraph may still be writing
        graph = builder.compile(checkpointer=runner.saver)
        assert runner.invoke(graph, {"rounds": 0}, cfg("run")) == {"rounds": 3}
        assert log.effects() == Counter({"remind:ana": 3})
        graph = builder.compile(checkpointer=runner.saver, interrupt_before=["round"])
        runner.invoke(graph, {"rounds": 0}, cfg("loop"))
        assert runner.state(graph, cfg("loop")).next == ("round",)
        # resumed: three rounds run in three consecutive steps, the reminder each time
        # (interrupt_before stops before each round)
        for _ in range(3):
            runner.invoke(graph, None, cfg("loop"))
        assert runner.state(graph, cfg("loop")).values["rounds"] == 3
        assert log.effects() == Counter({"remind:ana": 6})
        assert len(runner.entries("loop")) == 3
