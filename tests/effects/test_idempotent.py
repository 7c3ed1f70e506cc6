"""``@idempotent`` inside graphs, on every backend, sync and async.

Each side effect appends a line to a log file, so the tests count what really
happened: replays, forks, policies, errors, tools and the journal's life with
its thread.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command
from typing_extensions import TypedDict

from langgraph_durable.effects import (
    RETRY,
    Effect,
    IdempotentToolNode,
    current_effect,
    idempotent,
)
from langgraph_durable.errors import (
    DurableError,
    EffectAmbiguousError,
    EffectBusyError,
    EffectConflictError,
    InvalidInputError,
)
from tests.effects.graphs import (
    EffectLog,
    Effects,
    build_line_graph,
    build_plain_tool_graph,
    build_tool_graph,
    line_effects,
    line_expected,
)
from tests.effects.runner import Runner
from tests.helpers import cfg
from tests.redaction_helpers import SaverSpec


class PayState(TypedDict, total=False):
    amount: int
    receipt: str


def pay_graph(effect: Any, checkpointer: Any, use_async: bool = False) -> Any:
    """START -> prepare -> pay (calls ``effect(amount)``) -> END."""
    builder = StateGraph(PayState)
    builder.add_node("prepare", lambda state: {"amount": state.get("amount", 5)})

    def pay(state: PayState) -> dict[str, Any]:
        return {"receipt": effect(state["amount"])}

    async def apay(state: PayState) -> dict[str, Any]:
        return {"receipt": await effect(state["amount"])}

    builder.add_node("pay", apay if use_async else pay)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "pay")
    builder.add_edge("pay", END)
    return builder.compile(checkpointer=checkpointer)


def counted(log: EffectLog, name: str = "pay", **options: Any) -> Any:
    """A wrapped effect that logs ``effect <name> <amount> <attempt> <pid> <key>``."""

    def pay(amount: int) -> str:
        effect = current_effect()
        log.write(f"effect {name} {amount} {effect.attempt} {os.getpid()} {effect.key}")
        return f"receipt-{amount}"

    pay.__name__ = pay.__qualname__ = name
    return idempotent(**options)(pay)


# ---- replay, forks, repeated calls ------------------------------------------------------


def test_effects_run_once_and_replay_from_older_checkpoints(
    spec: SaverSpec, flavour: str, log: EffectLog
) -> None:
    with Runner(flavour, spec) as runner:
        effects = Effects(log, use_async=runner.is_async)
        graph = build_line_graph(effects, checkpointer=runner.saver)
        assert runner.invoke(graph, {"receipts": []}, cfg("t1")) == line_expected()
        # node n2 charges 10 twice on purpose: two effects, not one replayed
        assert log.effects() == line_effects()
        assert len(runner.entries("t1")) == 7
        # time travel: run again from the checkpoint before n1; every effect replays
        history = runner.history(graph, cfg("t1"))
        before_n1 = next(s for s in history if s.next == ("n1",))
        assert runner.invoke(graph, None, before_n1.config) == line_expected()
        assert log.effects() == line_effects()
        # LangGraph runs a replay one step after the original (it adds a fork
        # checkpoint): the six replayed calls of n1..n5 are recorded at their new step
        assert len(runner.entries("t1")) == 13


def test_fork_with_changed_arguments_executes_anew(
    spec: SaverSpec, flavour: str, log: EffectLog
) -> None:
    with Runner(flavour, spec) as runner:
        effect = idempotent(name="pay")(_async_logger(log)) if runner.is_async else counted(log)
        graph = pay_graph(effect, runner.saver, runner.is_async)
        assert runner.invoke(graph, {}, cfg("f1"))["receipt"] == "receipt-5"
        before_pay = next(s for s in runner.history(graph, cfg("f1")) if s.next == ("pay",))
        # the same state again: replayed
        assert runner.invoke(graph, None, before_pay.config)["receipt"] == "receipt-5"
        assert log.effects() == Counter({"pay:5": 1})
        # a fork whose state changes the argument: a new effect
        forked = runner.update(graph, before_pay.config, {"amount": 7}, "prepare")
        assert runner.invoke(graph, None, forked)["receipt"] == "receipt-7"
        assert log.effects() == Counter({"pay:5": 1, "pay:7": 1})
        keys = {line[5] for line in log.lines()}
        assert len(keys) == 2 and all(k.startswith("lgd-") for k in keys)


def _async_logger(log: EffectLog) -> Any:
    async def pay(amount: int) -> str:
        effect = current_effect()
        log.write(f"effect pay {amount} {effect.attempt} {os.getpid()} {effect.key}")
        return f"receipt-{amount}"

    return pay


def test_outside_a_graph_or_on_another_checkpointer_the_function_runs_as_is(
    log: EffectLog,
) -> None:
    calls: list[int] = []

    @idempotent
    def charge(amount: int) -> int:
        calls.append(amount)
        with pytest.raises(InvalidInputError):
            current_effect()
        return amount

    assert charge(1) == 1 and charge(1) == 1
    assert calls == [1, 1]
    graph = pay_graph(charge, InMemorySaver())
    graph.invoke({}, cfg("mem"))
    before_pay = next(s for s in graph.get_state_history(cfg("mem")) if s.next == ("pay",))
    graph.invoke(None, before_pay.config)
    assert calls == [1, 1, 5, 5]  # not journaled: the replay ran it again


# ---- policies ----------------------------------------------------------------------------


class Died(BaseException):
    """Stands for the process dying inside the effect: not an Exception, nothing recorded."""


def dying(log: EffectLog, die: dict[str, bool], **options: Any) -> Any:
    def pay(amount: int) -> str:
        effect = current_effect()
        log.write(f"effect pay {amount} {effect.attempt} {os.getpid()} {effect.key}")
        if die.pop("now", False):
            raise Died()
        return f"receipt-{amount}-attempt-{effect.attempt}"

    pay.__name__ = pay.__qualname__ = "pay"
    return idempotent(**options)(pay)


def _run_until_death(runner: Runner, graph: Any, thread: str) -> None:
    with pytest.raises(Died):
        runner.invoke(graph, {}, cfg(thread))


@pytest.mark.parametrize("backend_flavour", ["sync", "async"])
def test_ambiguous_retry_runs_again_with_the_same_key(
    spec: SaverSpec, backend_flavour: str, log: EffectLog
) -> None:
    die = {"now": True}
    with Runner(backend_flavour, spec) as runner:
        effect = dying(log, die, lease=timedelta(seconds=0.3), wait=timedelta(seconds=10))
        graph = pay_graph(effect, runner.saver)
        _run_until_death(runner, graph, "a1")
        (entry,) = runner.entries("a1")
        assert entry.state == "claimed" and entry.attempt == 1
        out = runner.invoke(graph, None, cfg("a1"))
        assert out["receipt"] == "receipt-5-attempt-2"
        first, second = log.lines()
        assert (first[3], second[3]) == ("1", "2")
        assert first[5] == second[5]  # the downstream key did not change
        (entry,) = runner.entries("a1")
        assert entry.state == "done" and entry.attempt == 2


def test_ambiguous_fail_raises_and_leaves_the_entry(spec: SaverSpec, log: EffectLog) -> None:
    die = {"now": True}
    with Runner("sync", spec) as runner:
        effect = dying(log, die, lease=0.2, on_ambiguous="fail", wait=10)
        graph = pay_graph(effect, runner.saver)
        _run_until_death(runner, graph, "a2")
        with pytest.raises(EffectAmbiguousError, match="may\\s+have happened"):
            runner.invoke(graph, None, cfg("a2"))
        assert len(log.lines()) == 1
        (entry,) = runner.entries("a2")
        assert entry.state == "claimed"
        # an operator decides it did not happen: forget it, and the next run executes
        assert runner.journal().forget("a2", entry.effect_id)
        assert runner.invoke(graph, None, cfg("a2"))["receipt"] == "receipt-5-attempt-1"
        assert len(log.lines()) == 2


def test_ambiguous_reconcile_decides(spec: SaverSpec, log: EffectLog) -> None:
    seen: list[Effect] = []

    def reconcile(effect: Effect) -> Any:
        seen.append(effect)
        return "found-upstream" if effect.thread_id == "r1" else RETRY

    with Runner("sync", spec) as runner:
        for thread, expected in (("r1", "found-upstream"), ("r2", "receipt-5-attempt-2")):
            die = {"now": True}
            effect = dying(log, die, lease=0.2, on_ambiguous=reconcile, wait=10)
            graph = pay_graph(effect, runner.saver)
            _run_until_death(runner, graph, thread)
            assert runner.invoke(graph, None, cfg(thread))["receipt"] == expected
            # recorded: a later replay returns the same without asking again
            before = next(s for s in runner.history(graph, cfg(thread)) if s.next == ("pay",))
            assert runner.invoke(graph, None, before.config)["receipt"] == expected
    assert [(e.thread_id, e.attempt, e.args) for e in seen] == [("r1", 2, (5,)), ("r2", 2, (5,))]
    assert log.effects() == Counter({"pay:5": 3})  # r1 once, r2 twice (RETRY ran it)


def test_a_live_claim_makes_others_wait_then_busy(spec: SaverSpec, log: EffectLog) -> None:
    die = {"now": True}
    with Runner("sync", spec) as runner:
        effect = dying(log, die, lease=60, wait=0.2)
        graph = pay_graph(effect, runner.saver)
        _run_until_death(runner, graph, "b1")
        with pytest.raises(EffectBusyError, match="held by another execution"):
            runner.invoke(graph, None, cfg("b1"))
        assert len(log.lines()) == 1


# ---- errors ---------------------------------------------------------------------------


def test_terminal_errors_are_recorded_and_replayed_transient_ones_are_not(
    spec: SaverSpec, flavour: str
) -> None:
    calls: Counter[str] = Counter()

    @idempotent
    def declined(amount: int) -> str:
        calls["declined"] += 1
        raise ValueError(f"card declined for {amount}")

    @idempotent
    def flaky(amount: int) -> str:
        calls["flaky"] += 1
        raise ConnectionError("payment API unreachable")

    with Runner(flavour, spec) as runner:
        graph = pay_graph(declined, runner.saver)
        for _ in range(2):
            with pytest.raises(ValueError, match="card declined for 5"):
                runner.invoke(graph, {} if not calls else None, cfg("e1"))
        assert calls["declined"] == 1
        (entry,) = runner.entries("e1")
        assert entry.failed and entry.result["type"] == "builtins.ValueError"

        graph = pay_graph(flaky, runner.saver)
        for _ in range(2):
            with pytest.raises(ConnectionError):
                runner.invoke(graph, {}, cfg("e2"))
        assert calls["flaky"] == 2
        assert runner.entries("e2") == []


def test_a_user_key_with_other_arguments_conflicts(spec: SaverSpec, log: EffectLog) -> None:
    with Runner("sync", spec) as runner:
        effect = counted(log, key=lambda amount: "order-1")
        graph = pay_graph(effect, runner.saver)
        runner.invoke(graph, {}, cfg("k1"))
        assert log.lines()[0][5] == "order-1"  # the key handed downstream is the user's
        before = next(s for s in runner.history(graph, cfg("k1")) if s.next == ("pay",))
        forked = runner.update(graph, before.config, {"amount": 9}, "prepare")
        with pytest.raises(EffectConflictError, match="order-1"):
            runner.invoke(graph, None, forked)
        assert isinstance(EffectConflictError("x"), DurableError)


# ---- tools -----------------------------------------------------------------------------


def test_tool_effect_then_interrupt_happens_once_in_legacy_tool_node(
    spec: SaverSpec, flavour: str, log: EffectLog
) -> None:
    with Runner(flavour, spec) as runner:
        graph = build_tool_graph(log, runner.saver, ToolNode)
        runner.invoke(graph, {"messages": []}, cfg("tool1"))
        assert runner.state(graph, cfg("tool1")).next == ("tools",)
        out = runner.invoke(graph, Command(resume="yes"), cfg("tool1"))
        tool_messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        assert sorted((m.tool_call_id, m.content) for m in tool_messages) == [
            ("call-0", "refunded o1"),
            ("call-1", "o1: yes"),
        ]
        # the refund ran in parallel with the interrupting tool, the email before the
        # interrupt: both re-ran with the node and were replayed
        assert log.effects() == Counter({"refund:o1": 1, "email:ops-o1": 1})


@pytest.mark.parametrize("node", ["ToolNode", "IdempotentToolNode"])
def test_idempotent_tool_node_journals_plain_tools(
    spec: SaverSpec, flavour: str, log: EffectLog, node: str
) -> None:
    node_cls = IdempotentToolNode if node == "IdempotentToolNode" else ToolNode
    with Runner(flavour, spec) as runner:
        graph = build_plain_tool_graph(log, runner.saver, node_cls)
        runner.invoke(graph, {"messages": []}, cfg("tool2"))
        out = runner.invoke(graph, Command(resume="ok"), cfg("tool2"))
        contents = sorted(m.content for m in out["messages"] if isinstance(m, ToolMessage))
        assert contents == ["o2: ok", "shipped o2"]
    shipped = log.effects()["ship:o2"]
    # the gap this package closes: the plain ToolNode re-runs the finished sibling
    assert shipped == (1 if node == "IdempotentToolNode" else 2)


# ---- the journal lives and dies with its thread -----------------------------------------


def test_journal_is_copied_and_deleted_with_the_thread(
    spec: SaverSpec, flavour: str, log: EffectLog
) -> None:
    with Runner(flavour, spec) as runner:
        graph = build_line_graph(Effects(log), checkpointer=runner.saver)
        runner.invoke(graph, {"receipts": []}, cfg("src"))
        runner.saver_call("copy_thread", "src", "dst")
        assert len(runner.entries("dst")) == 7
        # a replay in the copy reuses the recorded results
        before_n1 = next(s for s in runner.history(graph, cfg("dst")) if s.next == ("n1",))
        assert runner.invoke(graph, None, before_n1.config) == line_expected()
        assert log.effects() == line_effects()
        runner.saver_call("delete_thread", "src")
        assert runner.entries("src") == []
        assert len(runner.entries("dst")) == 13  # 7, and the replay's 6 at their new step
        runner.saver_call("prune", ["dst"], strategy="delete")
        assert runner.entries("dst") == []


def test_a_retried_node_replays_the_effects_that_finished(spec: SaverSpec, log: EffectLog) -> None:
    from langgraph.types import RetryPolicy

    effect = counted(log)
    failures = {"left": 1}

    def pay(state: PayState) -> dict[str, Any]:
        receipt = effect(state["amount"])
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("the node fails after its effect")
        return {"receipt": receipt}

    with Runner("sync", spec) as runner:
        builder = StateGraph(PayState)
        builder.add_node("prepare", lambda state: {"amount": 3})
        builder.add_node(
            "pay",
            pay,
            retry_policy=RetryPolicy(
                max_attempts=2, retry_on=RuntimeError, initial_interval=0.01, jitter=False
            ),
        )
        builder.add_edge(START, "prepare")
        builder.add_edge("prepare", "pay")
        builder.add_edge("pay", END)
        graph = builder.compile(checkpointer=runner.saver)
        assert runner.invoke(graph, {}, cfg("retry"))["receipt"] == "receipt-3"
    assert log.effects() == Counter({"pay:3": 1})
