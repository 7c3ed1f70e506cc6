"""``@idempotent`` with LangChain tools: both stacking orders, injected arguments,
``Command`` returns, ``create_agent``, and ``IdempotentToolNode``'s ToolNode behaviour."""

from __future__ import annotations

import os
from collections import Counter
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode, ToolRuntime
from langgraph.types import Command

from langgraph_durable.effects import IdempotentToolNode, current_effect, idempotent
from tests.effects.graphs import ChatState, EffectLog
from tests.effects.runner import Runner
from tests.helpers import cfg
from tests.redaction_helpers import SaverSpec, _langchain_path


def make_tools(log: EffectLog) -> list[Any]:
    """One tool per stacking order, each with an injected argument and a Command return."""

    @tool
    @idempotent  # below @tool: the function is journaled, the tool built from its signature
    def book(city: str, runtime: ToolRuntime) -> str:
        """Book a hotel."""
        log.write(f"effect book {city} {current_effect().attempt} {os.getpid()}")
        assert runtime.tool_call_id  # injected, and left out of the effect's key
        return f"booked {city}"

    @idempotent  # above @tool: the tool's function is journaled
    @tool
    def notify(who: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Notify someone; answers with a state update."""
        log.write(f"effect notify {who} {current_effect().attempt} {os.getpid()}")
        return Command(
            update={"messages": [ToolMessage(f"notified {who}", tool_call_id=tool_call_id)]}
        )

    @tool(response_format="content_and_artifact")
    @idempotent
    def quote(item: str) -> tuple[str, dict[str, Any]]:
        """Quote a price, with the quote as an artifact."""
        log.write(f"effect quote {item} {current_effect().attempt} {os.getpid()}")
        return f"quoted {item}", {"item": item, "price": 12}

    return [book, notify, quote]


def tool_graph(log: EffectLog, checkpointer: Any, node_cls: type = IdempotentToolNode) -> Any:
    calls = [
        ToolCall(name="book", args={"city": "Lisbon"}, id="c-book"),
        ToolCall(name="notify", args={"who": "ana"}, id="c-notify"),
        ToolCall(name="missing", args={}, id="c-missing"),
        ToolCall(name="quote", args={"item": "tea"}, id="c-quote"),
    ]
    builder = StateGraph(ChatState)
    builder.add_node("model", lambda state: {"messages": [AIMessage("", tool_calls=calls)]})
    builder.add_node("tools", node_cls(make_tools(log)))
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_both_stacking_orders_commands_and_errors_replay(
    spec: SaverSpec, flavour: str, log: EffectLog
) -> None:
    with Runner(flavour, spec) as runner:
        graph = tool_graph(log, runner.saver)
        first = runner.invoke(graph, {"messages": [HumanMessage("go")]}, cfg("tt"))
        answers = {
            m.tool_call_id: m.content for m in first["messages"] if isinstance(m, ToolMessage)
        }
        assert answers["c-book"] == "booked Lisbon"
        assert answers["c-notify"] == "notified ana"
        assert "missing is not a valid tool" in answers["c-missing"]  # ToolNode's own error
        # one journal entry per call: IdempotentToolNode keeps the journaled tools as they
        # are (below @tool the entry is named after the function, above it after the tool)
        assert journal_names(runner, "tt") == {"book": 1, "notify": 1, "quote": 1}
        before = next(s for s in runner.history(graph, cfg("tt")) if s.next == ("tools",))
        again = runner.invoke(graph, None, before.config)
        replayed = {
            m.tool_call_id: m.content for m in again["messages"] if isinstance(m, ToolMessage)
        }
        assert replayed == answers
        artifacts = [
            m.artifact for m in again["messages"] if isinstance(m, ToolMessage) and m.artifact
        ]
        assert artifacts[-1] == {"item": "tea", "price": 12}  # the pair replays as a pair
        assert log.effects() == Counter({"book:Lisbon": 1, "notify:ana": 1, "quote:tea": 1})
        # the replay recorded each result again at its own step, once
        assert journal_names(runner, "tt") == {"book": 2, "notify": 2, "quote": 2}


def journal_names(runner: Runner, thread: str) -> Counter[str]:
    """Journal entries per effect, by the last part of the journaled name."""
    return Counter(e.name.rpartition(".")[2] for e in runner.entries(thread))


@pytest.mark.parametrize("node", ["ToolNode", "IdempotentToolNode"])
def test_journaled_tools_are_kept_as_they_are(spec: SaverSpec, log: EffectLog, node: str) -> None:
    """A tool journaled below or above ``@tool`` is journaled once, in a ToolNode or an
    IdempotentToolNode: one entry per call, and the node holds the tool it was given
    (a ``content_and_artifact`` tool gets a copy that only rebuilds replayed pairs)."""
    book, notify, quote = make_tools(log)
    node_cls = IdempotentToolNode if node == "IdempotentToolNode" else ToolNode
    built = node_cls([book, notify, quote])
    assert built.tools_by_name["book"] is book
    assert built.tools_by_name["notify"] is notify
    with Runner("sync", spec) as runner:
        graph = tool_graph(log, runner.saver, node_cls)
        runner.invoke(graph, {"messages": [HumanMessage("go")]}, cfg("kept"))
        assert journal_names(runner, "kept") == {"book": 1, "notify": 1, "quote": 1}
        before = next(s for s in runner.history(graph, cfg("kept")) if s.next == ("tools",))
        again = runner.invoke(graph, None, before.config)
        pairs = [m.artifact for m in again["messages"] if isinstance(m, ToolMessage) and m.artifact]
        assert pairs[-1] == {"item": "tea", "price": 12}
        assert journal_names(runner, "kept") == {"book": 2, "notify": 2, "quote": 2}
    assert log.effects() == Counter({"book:Lisbon": 1, "notify:ana": 1, "quote:tea": 1})


def test_create_agent_with_an_idempotent_tool(spec: SaverSpec, log: EffectLog) -> None:
    _langchain_path()
    from langchain.agents import create_agent

    from tests.redaction_helpers import ScriptedChatModel

    received: list[str] = []

    @idempotent
    @tool("send_payment")
    def send_payment(email: str, card: str, iban: str, phone: str, aws_key: str) -> str:
        """Send a payment."""
        received.append(current_effect().key)
        return f"paid {email}"

    with Runner("sync", spec) as runner:
        agent = create_agent(ScriptedChatModel(), tools=[send_payment], checkpointer=runner.saver)
        result = agent.invoke({"messages": [HumanMessage("pay")]}, cfg("agent"))
        assert any(isinstance(m, ToolMessage) for m in result["messages"])
        tools_step = next(
            s for s in runner.history(agent, cfg("agent")) if s.next and s.next[0] == "tools"
        )
        again = runner.invoke(agent, None, tools_step.config)
        assert [m.content for m in again["messages"] if isinstance(m, ToolMessage)] == [
            m.content for m in result["messages"] if isinstance(m, ToolMessage)
        ]
    assert len(received) == 1  # the time-travel replay reused the payment's result
