"""Backend-neutral pieces of the encryption tests: canaries, a graph that stores them, scans.

Each backend's ``test_encryption.py`` runs :func:`run_canary_graph` (or the async
twin) on its saver, dumps every byte of its raw storage (every table row, Redis
key, DynamoDB item), and checks the dump with :func:`canary_hits`: with
encryption on no canary may appear in any form, with encryption off every one
must (which shows the scan works).
"""

from __future__ import annotations

import base64
import os
import uuid
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_durable.protect import Encryption, LocalKeyring

__all__ = [
    "Canaries",
    "canary_forms",
    "canary_hits",
    "build_canary_graph",
    "run_canary_graph",
    "arun_canary_graph",
    "local_encryption",
    "meta_identity",
    "flip_bit",
    "state_has_canaries",
]


def meta_identity(tenant: str) -> Any:
    """A metadata record identity of ``tenant`` (what ``metadata_index`` is computed for)."""
    from langgraph_durable._core.records import RecordIdentity, RecordKind

    return RecordIdentity(tenant, "", "", RecordKind.METADATA)


def local_encryption(**kwargs: Any) -> Encryption:
    """Encryption with a fresh local keyring of one key (``k1``)."""
    return Encryption(LocalKeyring({"k1": os.urandom(32)}, "k1"), **kwargs)


class Canaries:
    """Unique strings for one test run: a message, a tool result, an email, a metadata note."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:12]
        self.message = f"canary-message-{tag}"
        self.tool = f"canary-tool-result-{tag}"
        self.email = f"canary.{tag}@example.com"
        self.note = f"canary-metadata-{tag}"

    def all(self) -> list[str]:
        return [self.message, self.tool, self.email, self.note]


def canary_forms(canary: str) -> list[bytes]:
    """The byte strings a canary shows as: raw, hex, and base64 at each alignment."""
    raw = canary.encode()
    forms = [raw, raw.hex().encode(), raw.hex().upper().encode()]
    for codec in (base64.b64encode, base64.urlsafe_b64encode):
        for shift in range(3):
            encoded = codec(b"\x00" * shift + raw)
            start = -(-shift * 8 // 6)  # first character made of canary bits only
            end = (shift + len(raw)) * 8 // 6
            forms.append(encoded[start:end])
    return forms


def canary_hits(dump: bytes, canaries: Canaries) -> list[str]:
    """Which canaries appear in ``dump`` in any form."""
    return [c for c in canaries.all() if any(form in dump for form in canary_forms(c))]


def build_canary_graph(canaries: Canaries, checkpointer: Any) -> Any:
    """A two-node graph: an "agent" that calls a tool, and the tool whose result is a canary."""

    def agent(state: MessagesState) -> dict[str, Any]:
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {"messages": [AIMessage(content="done")]}
        call = {"name": "lookup", "args": {"q": canaries.message}, "id": "call-1"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    def tool(state: MessagesState) -> dict[str, Any]:
        return {"messages": [ToolMessage(content=canaries.tool, tool_call_id="call-1")]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tool" if getattr(last, "tool_calls", None) else "__end__"

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tool", tool)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route)
    builder.add_edge("tool", "agent")
    return builder.compile(checkpointer=checkpointer)


def _config(canaries: Canaries, thread: str) -> dict[str, Any]:
    return {
        "configurable": {"thread_id": thread, "user_email": canaries.email},
        "metadata": {"note": canaries.note},
    }


def run_canary_graph(saver: Any, canaries: Canaries, thread: str = "canary") -> Any:
    """Run the graph on ``saver``; return ``get_state`` of the thread."""
    graph = build_canary_graph(canaries, saver)
    config = _config(canaries, thread)
    graph.invoke({"messages": [("user", f"hello {canaries.message}")]}, config)
    return graph.get_state(config)


async def arun_canary_graph(saver: Any, canaries: Canaries, thread: str = "canary") -> Any:
    """Async :func:`run_canary_graph`."""
    graph = build_canary_graph(canaries, saver)
    config = _config(canaries, thread)
    await graph.ainvoke({"messages": [("user", f"hello {canaries.message}")]}, config)
    return await graph.aget_state(config)


def state_has_canaries(state: Any, canaries: Canaries) -> bool:
    """Whether ``get_state`` gave back every canary intact."""
    text = repr(state.values) + repr(state.metadata)
    return all(c in text for c in canaries.all())


def flip_bit(data: bytes, index: int = -1) -> bytes:
    """``data`` with the lowest bit of one byte flipped."""
    out = bytearray(data)
    out[index] ^= 1
    return bytes(out)
