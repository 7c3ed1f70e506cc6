"""The agent-like graph that ``langgraph-durable demo`` crashes and resumes.

It needs no LLM: an ``agent`` node asks a ``tools`` node for the square of 1, 2, ... N, one
tool call per step, then answers with their sum. Every message is deterministic (ids included),
so the final state of a crashed-and-resumed run can be compared with the expected one exactly.

Each node run is recorded in a :class:`WorkLog`, a file outside the database, so the demo can
prove which node runs happened in which process, and that none happened twice.

This module imports LangGraph at import time; the CLI imports it only when the demo runs.
It deliberately does not use ``from __future__ import annotations``: LangGraph reads the
state's type hints at runtime.
"""

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

__all__ = [
    "DemoState",
    "NodeRun",
    "WorkLog",
    "build_graph",
    "describe",
    "expected_messages",
    "expected_runs",
    "final_answer",
    "question",
    "summarize",
]

#: Upper bound on how long the child's interrupted tool call waits to be killed, in seconds.
HANG_SECONDS = 120.0


class DemoState(TypedDict):
    """The graph state: a message list merged with LangGraph's ``add_messages`` reducer."""

    messages: Annotated[list[AnyMessage], add_messages]


@dataclass(frozen=True)
class NodeRun:
    """One line of the work log: a node run starting or ending in some process.

    Attributes:
        event: ``"start"`` or ``"end"``.
        node: ``"agent"`` or ``"tools"``.
        step: The demo step (1-based); the final answer is step ``N + 1``.
        pid: The process that ran the node.
    """

    event: str
    node: str
    step: int
    pid: int


class WorkLog:
    """An append-only file of node runs, shared by the demo's parent and child processes.

    Args:
        path: The file to append to and read from.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, event: str, node: str, step: int) -> None:
        """Append one run event for the current process and flush it to the OS.

        Args:
            event: ``"start"`` or ``"end"``.
            node: The node's name.
            step: The demo step.
        """
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(f"{event} {node} {step} {os.getpid()}\n")
            fh.flush()

    def read(self) -> list[NodeRun]:
        """Return every complete line recorded so far, oldest first."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        runs = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 4:
                runs.append(NodeRun(parts[0], parts[1], int(parts[2]), int(parts[3])))
        return runs


def question(steps: int) -> HumanMessage:
    """Return the user's message that starts a demo run of ``steps`` tool calls."""
    return HumanMessage(
        id="human-0",
        content=(
            f"What is the sum of the squares of 1..{steps}? Use the square tool once per number."
        ),
    )


def final_answer(steps: int) -> str:
    """Return the answer the agent must give after ``steps`` tool calls."""
    return _final_text(steps, steps * (steps + 1) * (2 * steps + 1) // 6)


def _final_text(steps: int, total: int) -> str:
    return f"The sum of the squares of 1..{steps} is {total}."


def _ask(step: int) -> AIMessage:
    return AIMessage(
        id=f"ai-{step}",
        content=f"I need the square of {step}.",
        tool_calls=[{"name": "square", "args": {"x": step}, "id": f"call-{step}"}],
    )


def _answer(step: int, value: int) -> ToolMessage:
    return ToolMessage(
        id=f"tool-{step}", content=str(value), name="square", tool_call_id=f"call-{step}"
    )


def expected_messages(steps: int) -> list[AnyMessage]:
    """Return the exact message list a correct run of ``steps`` tool calls ends with."""
    messages: list[AnyMessage] = [question(steps)]
    for step in range(1, steps + 1):
        messages += [_ask(step), _answer(step, step * step)]
    messages.append(AIMessage(id="ai-final", content=final_answer(steps)))
    return messages


def expected_runs(steps: int) -> list[tuple[str, int]]:
    """Return the node runs of a correct run, in order, as ``(node, step)`` pairs."""
    runs = [(node, step) for step in range(1, steps + 1) for node in ("agent", "tools")]
    runs.append(("agent", steps + 1))
    return runs


def summarize(message: AnyMessage) -> tuple[Any, ...]:
    """Reduce a message to the fields the demo compares (type, id, content, tool calls)."""
    calls = tuple(
        (call["name"], call["id"], tuple(sorted(call["args"].items())))
        for call in getattr(message, "tool_calls", None) or ()
    )
    return (
        message.type,
        message.id,
        message.content,
        calls,
        getattr(message, "tool_call_id", None),
    )


def describe(message: AnyMessage) -> str:
    """Render a message as one short line for the demo's output."""
    calls = getattr(message, "tool_calls", None) or ()
    if calls:
        text = ", ".join(f"{c['name']}({', '.join(map(str, c['args'].values()))})" for c in calls)
        return f"{message.type:<6} {message.content} -> calls {text}"
    return f"{message.type:<6} {message.content}"


def build_graph(
    checkpointer: BaseCheckpointSaver[Any],
    *,
    steps: int,
    work_log: WorkLog,
    say: Callable[[str], None],
    hang_at: int | None = None,
) -> Any:
    """Compile the demo graph on ``checkpointer``.

    Args:
        checkpointer: The saver that stores the graph's checkpoints.
        steps: How many tool calls the agent makes before it answers.
        work_log: Where every node run is recorded.
        say: Prints one line of progress (the caller adds its process label).
        hang_at: If set, the ``tools`` node of this step records its start and then blocks
            (a slow tool call) until the process is killed. Only the child process sets it.

    Returns:
        The compiled graph.
    """

    def agent(state: DemoState) -> dict[str, list[AnyMessage]]:
        results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        step = len(results) + 1
        work_log.record("start", "agent", step)
        if step <= steps:
            reply = _ask(step)
            say(f"step {step}  agent: asks the tool for square({step})")
        else:
            total = sum(int(str(m.content)) for m in results)
            reply = AIMessage(id="ai-final", content=_final_text(steps, total))
            say(f"final   agent: answers {total}")
        work_log.record("end", "agent", step)
        return {"messages": [reply]}

    def tools(state: DemoState) -> dict[str, list[AnyMessage]]:
        last = state["messages"][-1]
        replies: list[AnyMessage] = []
        for call in getattr(last, "tool_calls", None) or ():
            x = int(call["args"]["x"])
            work_log.record("start", "tools", x)
            if hang_at == x:
                say(f"step {x}  tools: square({x}) is running (a slow call) ...")
                _wait_to_be_killed()
            replies.append(_answer(x, x * x))
            say(f"step {x}  tools: square({x}) = {x * x}")
            work_log.record("end", "tools", x)
        return {"messages": replies}

    def route(state: DemoState) -> str:
        last = state["messages"][-1]
        return "tools" if getattr(last, "tool_calls", None) else END

    builder = StateGraph(DemoState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


def _wait_to_be_killed() -> None:
    """Block like a slow tool call until killed; give up if the parent process goes away."""
    parent = os.getppid()
    deadline = time.monotonic() + HANG_SECONDS
    while time.monotonic() < deadline:
        if os.getppid() != parent:
            break
        time.sleep(0.1)
    raise RuntimeError("the demo's child process was not killed in time")
