"""The chat graph the delta-encoding tests of every backend run.

``chat_graph`` appends one AI message per step (``edit_first`` also edits the
first message in place, so the value is no longer an extension); ``run_turns``
sends one human message per turn, with ``durability="sync"``.
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    steps: int


def chat_graph(checkpointer: Any, *, edit_first: bool = False) -> Any:
    """One message per step; with ``edit_first`` the node also edits message 0 in place."""

    def speak(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        out: list[AnyMessage] = [AIMessage(content=f"reply {n} " + "x" * 200, id=f"m{n}")]
        if edit_first:
            first = state["messages"][0]
            first.content = f"edited at {n}"  # in place: same object, new content
            out.insert(0, first)
        return {"messages": out, "steps": state.get("steps", 0) + 1}

    g = StateGraph(State)
    g.add_node("speak", speak)
    g.add_edge(START, "speak")
    return g.compile(checkpointer=checkpointer)


def run_turns(graph: Any, thread: str, turns: int, start: int = 0, tag: str = "") -> None:
    # durability="sync": each put runs before the next node, which may edit items
    # in place (with "async" the put races that edit, for every saver).
    for i in range(start, start + turns):
        graph.invoke(
            {"messages": [HumanMessage(content=f"q{i}", id=f"h{tag or thread}-{i}")]},
            {"configurable": {"thread_id": thread}},
            durability="sync",
        )
