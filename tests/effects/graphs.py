"""Graphs whose nodes and tools perform counted side effects, for the effect-journal tests.

A side effect is a line appended to a log file (one ``os.write`` on an
``O_APPEND`` descriptor, so lines from concurrent processes never interleave):
``effect <name> <args> <attempt> <pid>``. The tests count lines, across the
processes that ran the graph, to find duplicated and lost effects.
"""

from __future__ import annotations

import operator
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, ToolCall
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import interrupt
from typing_extensions import TypedDict

from langgraph_durable.effects import current_effect, idempotent


class EffectLog:
    """Appends effect lines to a file and reads them back."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, line: str) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def lines(self) -> list[list[str]]:
        if not os.path.exists(self.path):
            return []
        with open(self.path) as handle:
            return [line.split() for line in handle.read().splitlines() if line.strip()]

    def effects(self) -> Counter[str]:
        """How many times each effect (``name:args``) happened."""
        return Counter(f"{p[1]}:{p[2]}" for p in self.lines() if p and p[0] == "effect")

    def attempts(self, effect: str) -> list[int]:
        return [
            int(p[3]) for p in self.lines() if p and p[0] == "effect" and f"{p[1]}:{p[2]}" == effect
        ]


def _key() -> str:
    try:
        return current_effect().key
    except Exception:  # noqa: BLE001 - unwrapped effects have no key
        return "-"


def _attempt() -> int:
    try:
        return current_effect().attempt
    except Exception:  # noqa: BLE001 - unwrapped effects have no journal entry
        return 0


@dataclass
class Effects:
    """The side effects one graph uses, wrapped (journaled) or not."""

    log: EffectLog
    wrapped: bool = True
    transactional: bool = False
    pause: float = 0.0
    lease: float = 300.0
    ledger: str = ""
    use_async: bool = False

    def charge(self) -> Callable[..., str]:
        log, pause, ledger = self.log, self.pause, self.ledger

        def charge(node: str, amount: int) -> str:
            log.write(f"effect charge {node}-{amount} {_attempt()} {os.getpid()} {_key()}")
            if pause:
                time.sleep(pause)
            return f"receipt-{node}-{amount}"

        options: dict[str, Any] = {"lease": self.lease, "name": "charge"}
        if self.use_async and not self.transactional:

            async def acharge(node: str, amount: int) -> str:
                return charge(node, amount)

            return idempotent(**options)(acharge) if self.wrapped else acharge
        if self.use_async:

            async def acharge_tx(node: str, amount: int) -> str:
                effect = current_effect()
                async with effect.connection.cursor() as cur:
                    await cur.execute(
                        f"INSERT INTO {ledger} (effect_key, what, pid) VALUES (%s, %s, %s)",
                        (effect.key, f"{node}-{amount}", os.getpid()),
                    )
                return charge(node, amount)

            return idempotent(transactional=True, **options)(acharge_tx)  # type: ignore[no-any-return]
        if self.transactional:

            def charge_tx(node: str, amount: int) -> str:
                effect = current_effect()
                with effect.connection.cursor() as cur:
                    cur.execute(
                        f"INSERT INTO {ledger} (effect_key, what, pid) VALUES (%s, %s, %s)",
                        (effect.key, f"{node}-{amount}", os.getpid()),
                    )
                return charge(node, amount)

            return idempotent(transactional=True, **options)(charge_tx)  # type: ignore[no-any-return]
        return idempotent(**options)(charge) if self.wrapped else charge


class LineState(TypedDict):
    receipts: Annotated[list[str], operator.add]


def build_line_graph(
    effects: Effects,
    nodes: int = 6,
    checkpointer: Any = None,
    interrupt_before: list[str] | None = None,
) -> Any:
    """``nodes`` nodes in a line; node i charges ``i + 1`` (and node 2 twice, 10 each)."""
    charge = effects.charge()
    builder = StateGraph(LineState)

    def make(i: int) -> Callable[[LineState], Any]:
        name = f"n{i}"

        def node(state: LineState) -> dict[str, Any]:
            if i == 2:
                return {"receipts": [charge(name, 10), charge(name, 10)]}
            return {"receipts": [charge(name, i + 1)]}

        async def anode(state: LineState) -> dict[str, Any]:
            if i == 2:
                return {"receipts": [await charge(name, 10), await charge(name, 10)]}
            return {"receipts": [await charge(name, i + 1)]}

        return anode if effects.use_async else node

    previous = START
    for i in range(nodes):
        builder.add_node(f"n{i}", make(i))
        builder.add_edge(previous, f"n{i}")
        previous = f"n{i}"
    builder.add_edge(previous, END)
    return builder.compile(checkpointer=checkpointer, interrupt_before=interrupt_before)


def line_expected(nodes: int = 6) -> dict[str, Any]:
    receipts: list[str] = []
    for i in range(nodes):
        if i == 2:
            receipts += [f"receipt-n{i}-10", f"receipt-n{i}-10"]
        else:
            receipts.append(f"receipt-n{i}-{i + 1}")
    return {"receipts": receipts}


def line_effects(nodes: int = 6) -> Counter[str]:
    out: Counter[str] = Counter()
    for i in range(nodes):
        out[f"charge:n{i}-10" if i == 2 else f"charge:n{i}-{i + 1}"] += 2 if i == 2 else 1
    return out


# ---- a tool that performs its effect, then asks a human --------------------------------


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _tool_calls(*calls: tuple[str, dict[str, Any]]) -> AIMessage:
    return AIMessage(
        "",
        tool_calls=[
            ToolCall(name=name, args=args, id=f"call-{i}") for i, (name, args) in enumerate(calls)
        ],
    )


def build_tool_graph(log: EffectLog, checkpointer: Any, node_cls: type = ToolNode) -> Any:
    """A legacy ToolNode with two parallel calls: ``refund`` (an effect) and ``approve``
    (an effect of its own, then ``interrupt()`` for a human's answer)."""
    from langchain_core.tools import tool

    @idempotent
    def send_email(to: str, body: str) -> str:
        log.write(f"effect email {to} {_attempt()} {os.getpid()}")
        return f"sent to {to}"

    @idempotent  # above @tool: the tool's function is journaled
    @tool
    def refund(order: str) -> str:
        """Refund an order."""
        log.write(f"effect refund {order} {_attempt()} {os.getpid()}")
        return f"refunded {order}"

    @tool
    def approve(order: str) -> str:
        """Ask a human to approve, after telling them by email."""
        send_email(f"ops-{order}", "please approve")
        answer = interrupt({"approve": order})
        return f"{order}: {answer}"

    builder = StateGraph(ChatState)
    builder.add_node(
        "agent",
        lambda state: {
            "messages": [_tool_calls(("refund", {"order": "o1"}), ("approve", {"order": "o1"}))]
        },
    )
    builder.add_node("tools", node_cls([refund, approve]))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=checkpointer)


def build_plain_tool_graph(log: EffectLog, checkpointer: Any, node_cls: type) -> Any:
    """Two parallel plain tools in one node: ``ship`` (an effect) and ``ask`` (interrupts)."""

    def ship(order: str) -> str:
        """Ship an order."""
        log.write(f"effect ship {order} 0 {os.getpid()}")
        return f"shipped {order}"

    def ask(order: str) -> str:
        """Ask a human."""
        return f"{order}: {interrupt({'ask': order})}"

    builder = StateGraph(ChatState)
    builder.add_node(
        "agent",
        lambda state: {
            "messages": [_tool_calls(("ship", {"order": "o2"}), ("ask", {"order": "o2"}))]
        },
    )
    builder.add_node("tools", node_cls([ship, ask]))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=checkpointer)
