"""Graphs and checks shared by the retention tests of every backend.

* ``delta_graph()``: a graph whose ``items`` channel is a LangGraph
  ``DeltaChannel`` (its value is rebuilt from ancestors' writes), snapshotted
  every 4 updates, so a trimmed thread must keep the ancestors back to a snapshot.
* ``interrupt_graph()``: a graph that pauses on ``interrupt()`` until resumed.
* ``run_turns`` / ``arun_turns``: drive a graph for n turns on one thread.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt


def _extend(state: list[Any] | None, writes: Sequence[Any]) -> list[Any]:
    out = list(state or [])
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


class DeltaState(TypedDict):
    items: Annotated[list, DeltaChannel(_extend, snapshot_frequency=4)]
    turns: Annotated[int, operator.add]


def delta_graph(checkpointer: Any) -> Any:
    """``items`` grows by two entries per turn (two nodes, two steps)."""

    def first(state: DeltaState) -> dict[str, Any]:
        return {"items": [f"a{state.get('turns', 0)}"], "turns": 1}

    def second(state: DeltaState) -> dict[str, Any]:
        return {"items": [f"b{len(state['items'])}"]}

    builder = StateGraph(DeltaState)
    builder.add_node("first", first)
    builder.add_node("second", second)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    return builder.compile(checkpointer=checkpointer)


class ApprovalState(TypedDict):
    log: Annotated[list, operator.add]


def interrupt_graph(checkpointer: Any) -> Any:
    """``draft`` then ``approve`` (pauses on ``interrupt``) then ``send``."""

    def draft(state: ApprovalState) -> dict[str, Any]:
        return {"log": ["draft"]}

    def approve(state: ApprovalState) -> dict[str, Any]:
        answer = interrupt({"question": "send?"})
        return {"log": [f"approved:{answer}"]}

    def send(state: ApprovalState) -> dict[str, Any]:
        return {"log": ["sent"]}

    builder = StateGraph(ApprovalState)
    builder.add_node("draft", draft)
    builder.add_node("approve", approve)
    builder.add_node("send", send)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "approve")
    builder.add_edge("approve", "send")
    builder.add_edge("send", END)
    return builder.compile(checkpointer=checkpointer)


def config(thread: str, tenant: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread}
    if tenant is not None:
        conf["tenant_id"] = tenant
    return {"configurable": conf}


def run_turns(graph: Any, thread: str, turns: int, tenant: str | None = None) -> dict[str, Any]:
    for _ in range(turns):
        graph.invoke({"turns": 0}, config(thread, tenant))
    return dict(graph.get_state(config(thread, tenant)).values)


async def arun_turns(
    graph: Any, thread: str, turns: int, tenant: str | None = None
) -> dict[str, Any]:
    for _ in range(turns):
        await graph.ainvoke({"turns": 0}, config(thread, tenant))
    return dict((await graph.aget_state(config(thread, tenant))).values)


def pause(graph: Any, thread: str, tenant: str | None = None) -> None:
    """Run the approval graph until it pauses; check that it did."""
    graph.invoke({"log": []}, config(thread, tenant))
    state = graph.get_state(config(thread, tenant))
    assert state.next == ("approve",), state.next


def resume(graph: Any, thread: str, tenant: str | None = None) -> list[str]:
    """Resume the paused approval graph; its final log."""
    result = graph.invoke(Command(resume="yes"), config(thread, tenant))
    return list(result["log"])


async def apause(graph: Any, thread: str, tenant: str | None = None) -> None:
    await graph.ainvoke({"log": []}, config(thread, tenant))
    state = await graph.aget_state(config(thread, tenant))
    assert state.next == ("approve",), state.next


async def aresume(graph: Any, thread: str, tenant: str | None = None) -> list[str]:
    result = await graph.ainvoke(Command(resume="yes"), config(thread, tenant))
    return list(result["log"])


EXPECTED_APPROVAL_LOG = ["draft", "approved:yes", "sent"]
