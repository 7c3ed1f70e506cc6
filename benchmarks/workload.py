"""The benchmark workload: a tool-calling agent loop as a LangGraph StateGraph.

State is ``messages`` with the ``add_messages`` reducer. ``agent`` appends a ~1.5 KB
AIMessage carrying one tool call; ``tools`` answers with a ~2 KB ToolMessage. After K
tool round trips ("turns") the agent answers without a tool call and the graph ends.

One invocation of K turns runs 2K+1 node super-steps; with the input step and the
``__start__`` step it writes 2K+3 checkpoints (one ``put`` each).

Every thread's agent and tool messages are the same text unless ``pii`` is set (the
``--pii`` variant): then each thread's text is its own (seeded with the thread id), the
input holds an e-mail address and each tool result a contact line with an e-mail address
and a phone number, so that redaction scans new text and replaces something in it.
"""

from __future__ import annotations

import random
import zlib
from typing import Annotated, Any

from instrument import install_recorder
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

AI_BYTES = 1500
TOOL_BYTES = 2000


def _vocabulary(n: int = 2000) -> list[str]:
    rng = random.Random(1234)
    letters = "eeeeeeeeeeeettttttttaaaaaaaoooooooiiiiiinnnnnnssssssrrrrrhhhhhlllldddcccuummfpgwybvk"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(n)]


_WORDS = _vocabulary()


def filler(seed: int, size: int) -> str:
    """Deterministic text-like filler of exactly ``size`` characters (varies with ``seed``).

    Words come from a 2,000-word made-up vocabulary, skewed towards the first ones, so
    the text compresses roughly like prose (zlib ~2x per message, ~2.8x over many)
    rather than like a repeated string.
    """
    rng = random.Random(seed)
    parts: list[str] = []
    n = 0
    while n < size:
        w = _WORDS[int(len(_WORDS) * rng.random() ** 3)]
        parts.append(w)
        n += len(w) + 1
    return " ".join(parts)[:size]


def with_pii(text: str, pii: str) -> str:
    """``text`` with ``pii`` put between two words near its middle, cut to the same length."""
    cut = text.rfind(" ", 0, len(text) // 2) + 1
    return (text[:cut] + pii + " " + text[cut:])[: len(text)]


def _salt(config: RunnableConfig) -> int:
    """A number of the thread's own, from its id (the same in every process)."""
    return zlib.crc32(str(config["configurable"]["thread_id"]).encode())


class State(TypedDict):
    messages: Annotated[list, add_messages]


def build_graph(turns: int, checkpointer: Any, pii: bool = False) -> Any:
    """Compile the agent/tools loop with ``turns`` tool calls, using ``checkpointer``
    (``pii``: the variant described at the top of this module)."""

    def agent(state: State, config: RunnableConfig) -> dict:
        msgs = state["messages"]
        n_ai = sum(1 for m in msgs if isinstance(m, AIMessage))
        seed = (hash((len(msgs), n_ai)) & 0xFFFF) + (_salt(config) << 16 if pii else 0)
        if n_ai < turns:
            call_id = f"call_{n_ai:04d}"
            query = filler(seed + 7, 120)
            content = filler(seed, AI_BYTES - 200)
            msg = AIMessage(
                content=content,
                tool_calls=[{"name": "search", "args": {"query": query}, "id": call_id}],
            )
        else:
            msg = AIMessage(content=filler(seed, AI_BYTES))
        return {"messages": [msg]}

    def tools(state: State, config: RunnableConfig) -> dict:
        last = state["messages"][-1]
        call = last.tool_calls[0]
        n = len(state["messages"])
        if pii:
            salt = _salt(config)
            k = salt % 10000 + n
            phone = f"+1 415 555 {k % 10000:04d}" if n % 4 else f"(415) 555-{k % 10000:04d}"
            content = filler(n * 31 + 3 + (salt << 16), TOOL_BYTES)
            content = with_pii(content, f"Contact: j.doe{k}@example.org, {phone}.")
        else:
            content = filler(n * 31 + 3, TOOL_BYTES)
        return {"messages": [ToolMessage(content=content, tool_call_id=call["id"], name="search")]}

    def route(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if getattr(last, "tool_calls", None) else END

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("tools", tools)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tools", END])
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=checkpointer)


def graph_input(thread_no: int, pii: bool = False) -> dict:
    text = f"Thread {thread_no}: " + filler(thread_no, 300)
    if pii:
        text = with_pii(text, f"Reach me at user{thread_no}@example.com.")
    return {"messages": [HumanMessage(content=text)]}


def thread_config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def record_calls(turns: int, durability: str = "sync", pii: bool = False) -> list[tuple]:
    """Run one graph thread on an InMemorySaver and return its put/put_writes calls in order."""
    saver = InMemorySaver()
    calls: list[tuple] = []
    install_recorder(saver, calls)
    graph = build_graph(turns, saver, pii)
    graph.invoke(graph_input(0, pii), thread_config("recorded"), durability=durability)
    return calls


def retarget(calls: list[tuple], thread_id: str) -> list[tuple]:
    """The recorded calls with the thread id replaced; payload objects are shared, not copied."""
    out = []
    for call in calls:
        cfg = call[1]
        conf = dict(cfg["configurable"])
        conf["thread_id"] = thread_id
        new_cfg = {**cfg, "configurable": conf}
        out.append((call[0], new_cfg, *call[2:]))
    return out
