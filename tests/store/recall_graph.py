"""A graph and an agent that remember in one thread and recall by meaning in another.

Used by ``test_recall_across_processes.py`` (run as ``python -m tests.store.recall_graph``
in child processes) and ``test_dev_server.py`` (the LangGraph dev server loads
:data:`graph` from here).

* :func:`embed` is a deterministic local embedding: the words of a text mapped to
  concepts (:data:`CONCEPTS`: "drink", "coffee" and "espresso" are one), each concept
  hashed into one of :data:`DIMS` dimensions. A paraphrase that shares no content word
  with a memory but speaks of the same concepts lands near it.
* :func:`build_graph` is a one-node ``StateGraph``: ``{"op": "remember", "user": U,
  "memories": {key: text}}`` puts each memory in the store under ``("memories", U)``
  (through ``get_store()``), ``{"op": "recall", "user": U, "query": Q}`` searches there
  by meaning and returns ``found``: ``[key, score]`` best first.
* :func:`build_agent` is ``langchain.agents.create_agent`` with a scripted chat model and
  two tools that reach the store through ``ToolRuntime``: ``remember: key=text; ...``
  makes it call ``save_memory`` per memory, ``recall: Q`` makes it call
  ``search_memories``; its last message is the tool's answer (JSON).

The child (:func:`main`) runs one phase on one backend: ``write`` opens the backend's
*sync* saver and store (``from_conn_string``, encryption from ``LGD_KEYRING``) and runs
thread 1 of the graph and of the agent; ``recall`` opens the *async* Agent Server
factories (``langgraph_durable.<backend>.server.checkpointer`` and ``.store``, from the
environment alone) and runs thread 2 of each; it prints one JSON line.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, TypedDict

__all__ = [
    "DIMS",
    "MEMORIES",
    "QUERIES",
    "embed",
    "build_graph",
    "build_agent",
    "graph",
    "agent_available",
]

DIMS = 64

#: Words of one meaning; any other word stands for itself (stop words for nothing).
CONCEPTS: dict[str, tuple[str, ...]] = {
    "coffee": ("coffee", "espresso", "drink", "drinks", "brew", "cup", "caffeine"),
    "morning": ("morning", "breakfast", "dawn", "wakes", "early"),
    "plain": ("black", "plain", "sugar", "unsweetened", "milk", "take", "takes"),
    "travel": ("flight", "flies", "fly", "trip", "travel", "travelling", "traveling"),
    "lisbon": ("lisbon", "portugal"),
    "when": ("friday", "when", "date", "leaves", "leaving", "day"),
}
_STOP = frozenset(
    "a an and the her his is are does do what how with no to in on of for at she he".split()
)
_CANONICAL = {word: concept for concept, words in CONCEPTS.items() for word in words}

#: What thread 1 remembers: the memory and an unrelated decoy, for user "alice".
MEMORIES = {
    "coffee": "Alice takes her espresso black, no sugar, every morning",
    "flight": "Alice booked a flight to Lisbon that leaves on Friday",
}
#: Paraphrased queries (no content word in common with their memory) and what must rank first.
QUERIES = {
    "What does she drink at breakfast?": "coffee",
    "When is her trip to Portugal?": "flight",
}
USER = "alice"
#: The graph's namespace, and the agent's (apart, so that one's writes cannot stand in
#: for the other's).
GRAPH_NAMESPACE = ("memories", USER)
AGENT_NAMESPACE = ("agent_memories", USER)


def _concepts(text: str) -> list[str]:
    words = re.findall(r"[a-z]+", text.lower())
    return [_CANONICAL.get(word, word) for word in words if word not in _STOP]


def embed(texts: list[str]) -> list[list[float]]:
    """Deterministic, local: each text's concepts hashed into :data:`DIMS` dimensions."""
    out = []
    for text in texts:
        vector = [0.0] * DIMS
        for concept in _concepts(text):
            digest = hashlib.sha256(concept.encode()).digest()
            vector[int.from_bytes(digest[:4], "big") % DIMS] += 1.0
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        out.append([x / norm for x in vector])
    return out


def index_config() -> dict[str, Any]:
    return {"dims": DIMS, "embed": embed, "fields": ["text"]}


#: The ``LGD_STORE_INDEX_*`` variables giving the factories :func:`index_config`.
INDEX_ENV = {
    "LGD_STORE_INDEX_DIMS": str(DIMS),
    "LGD_STORE_INDEX_EMBED": "tests.store.recall_graph:embed",
    "LGD_STORE_INDEX_FIELDS": "text",
}


# ---- the StateGraph ------------------------------------------------------------------


class Memo(TypedDict, total=False):
    op: str
    user: str
    memories: dict[str, str]
    query: str
    found: list[list[Any]]


def _namespace(state: Memo) -> tuple[str, ...]:
    return (GRAPH_NAMESPACE[0], state.get("user") or USER)


def _found(items: list[Any]) -> list[list[Any]]:
    return [[item.key, item.score] for item in items]


def _remember(state: Memo) -> dict[str, Any]:
    from langgraph.config import get_store

    store = get_store()
    for key, text in (state.get("memories") or {}).items():
        store.put(_namespace(state), key, {"text": text})
    return {"found": []}


def _recall(state: Memo) -> dict[str, Any]:
    from langgraph.config import get_store

    items = get_store().search(_namespace(state), query=state["query"], limit=5)
    return {"found": _found(items)}


async def _aremember(state: Memo) -> dict[str, Any]:
    from langgraph.config import get_store

    store = get_store()
    for key, text in (state.get("memories") or {}).items():
        await store.aput(_namespace(state), key, {"text": text})
    return {"found": []}


async def _arecall(state: Memo) -> dict[str, Any]:
    from langgraph.config import get_store

    items = await get_store().asearch(_namespace(state), query=state["query"], limit=5)
    return {"found": _found(items)}


def build_graph(checkpointer: Any = None, store: Any = None, *, is_async: bool = False) -> Any:
    """The remember/recall graph (async nodes when ``is_async``)."""
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(Memo)
    builder.add_node("remember", _aremember if is_async else _remember)
    builder.add_node("recall", _arecall if is_async else _recall)
    builder.add_conditional_edges(
        START, lambda state: "recall" if state["op"] == "recall" else "remember"
    )
    builder.add_edge("remember", END)
    builder.add_edge("recall", END)
    return builder.compile(checkpointer=checkpointer, store=store)


#: What the LangGraph dev server loads (``langgraph.json``: ``"recall": "<this file>:graph"``);
#: the server gives it its checkpointer and store.
graph = build_graph(is_async=True)


# ---- the agent -----------------------------------------------------------------------

AGENT_DEPS = Path(__file__).resolve().parents[2] / ".lgd" / "agent-deps"


def agent_available() -> bool:
    """Whether ``langchain`` (installed by ``make setup`` in ``.lgd/agent-deps``) imports."""
    if AGENT_DEPS.is_dir() and str(AGENT_DEPS) not in sys.path:
        sys.path.append(str(AGENT_DEPS))
    try:
        importlib.import_module("langchain.agents")
    except ImportError:
        return False
    return True


def build_agent(checkpointer: Any, store: Any) -> Any:
    """``create_agent`` with a scripted model and the store tools (see the module doc)."""
    if not agent_available():
        raise RuntimeError("langchain is not importable (make setup installs it)")
    from langchain.agents import create_agent
    from langchain.tools import ToolRuntime
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import StructuredTool

    def save_memory(key: str, text: str, runtime: ToolRuntime) -> str:
        """Remember a fact about the user."""
        runtime.store.put(AGENT_NAMESPACE, key, {"text": text})
        return "saved"

    async def asave_memory(key: str, text: str, runtime: ToolRuntime) -> str:
        await runtime.store.aput(AGENT_NAMESPACE, key, {"text": text})
        return "saved"

    def search_memories(query: str, runtime: ToolRuntime) -> str:
        """Search what is remembered about the user, by meaning."""
        return json.dumps(_found(runtime.store.search(AGENT_NAMESPACE, query=query)))

    async def asearch_memories(query: str, runtime: ToolRuntime) -> str:
        found = await runtime.store.asearch(AGENT_NAMESPACE, query=query)
        return json.dumps(_found(found))

    for function in (save_memory, asave_memory, search_memories, asearch_memories):
        function.__annotations__["runtime"] = ToolRuntime  # not a string: see the __future__ import
    tools = [
        StructuredTool.from_function(func=save_memory, coroutine=asave_memory),
        StructuredTool.from_function(func=search_memories, coroutine=asearch_memories),
    ]

    class ScriptedModel(GenericFakeChatModel):
        messages: Any = iter(())

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(
            self,
            messages: list[BaseMessage],
            stop: list[str] | None = None,
            run_manager: Any = None,
            **kwargs: Any,
        ) -> ChatResult:
            last = messages[-1]
            if isinstance(last, ToolMessage):
                message = AIMessage(content=str(last.content))
            else:
                op, _, rest = str(last.content).partition(":")
                if op == "remember":
                    calls = []
                    for n, pair in enumerate(rest.split(";")):
                        key, _, text = pair.strip().partition("=")
                        args = {"key": key, "text": text}
                        calls.append({"name": "save_memory", "args": args, "id": f"c{n}"})
                else:
                    args = {"query": rest.strip()}
                    calls = [{"name": "search_memories", "args": args, "id": "c0"}]
                message = AIMessage(content="", tool_calls=calls)
            return ChatResult(generations=[ChatGeneration(message=message)])

    return create_agent(ScriptedModel(), tools=tools, checkpointer=checkpointer, store=store)


def remember_message() -> str:
    return "remember: " + "; ".join(f"{key}={text}" for key, text in MEMORIES.items())


# ---- the child processes -------------------------------------------------------------

TENANT = "acme"


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "tenant_id": TENANT}}


def _sync_classes(backend: str) -> tuple[Any, Any]:
    module = importlib.import_module(f"langgraph_durable.{backend}")
    names = {
        "postgres": ("PostgresSaver", "PostgresStore"),
        "redis": ("RedisSaver", "RedisStore"),
        "dynamodb": ("DynamoDBSaver", "DynamoDBStore"),
    }[backend]
    return getattr(module, names[0]), getattr(module, names[1])


def write(backend: str, conn: str, kwargs: dict[str, Any], agent: bool) -> dict[str, Any]:
    """Thread 1 (sync saver and store, encryption from ``LGD_KEYRING``): remember."""
    from langchain_core.messages import HumanMessage

    from langgraph_durable._server import encryption_from_env

    encryption = encryption_from_env(os.environ)
    assert encryption is not None, "the test runs with encryption on (LGD_KEYRING)"
    saver_cls, store_cls = _sync_classes(backend)
    store_kwargs = dict(kwargs, encryption=encryption, index=index_config())
    with (
        saver_cls.from_conn_string(conn, encryption=encryption, **kwargs) as saver,
        store_cls.from_conn_string(conn, **store_kwargs) as store,
    ):
        saver.setup()
        store.setup()
        out = build_graph(saver, store).invoke(
            {"op": "remember", "user": USER, "memories": MEMORIES}, _config("graph-1")
        )
        report: dict[str, Any] = {"graph": out["found"]}
        if agent:
            result = build_agent(saver, store).invoke(
                {"messages": [HumanMessage(remember_message())]}, _config("agent-1")
            )
            report["agent"] = result["messages"][-1].content
    return report


async def recall(backend: str, agent: bool) -> dict[str, Any]:
    """Threads 2 (the Agent Server factories, from the environment): recall by meaning."""
    from langchain_core.messages import HumanMessage

    server = importlib.import_module(f"langgraph_durable.{backend}.server")
    report: dict[str, Any] = {"graph": {}, "agent": {}}
    async with server.checkpointer() as saver, server.store() as store:
        compiled = build_graph(saver, store, is_async=True)
        earlier = await compiled.aget_state(_config("graph-1"))
        report["thread_1_op"] = earlier.values.get("op")
        for n, query in enumerate(QUERIES):
            out = await compiled.ainvoke(
                {"op": "recall", "user": USER, "query": query}, _config(f"graph-2-{n}")
            )
            report["graph"][query] = out["found"]
            if agent:
                result = await build_agent(saver, store).ainvoke(
                    {"messages": [HumanMessage(f"recall: {query}")]}, _config(f"agent-2-{n}")
                )
                report["agent"][query] = json.loads(result["messages"][-1].content)
    return report


def main(phase: str) -> None:
    """``python -m tests.store.recall_graph write|recall``, the backends as JSON on stdin.

    Each backend is ``{"backend", "conn", "kwargs", "env", "agent"}``: ``env`` is set in
    ``os.environ`` before its run (the factories read it). Prints ``{backend: report}``.
    """
    reports: dict[str, Any] = {}
    for spec in json.load(sys.stdin):
        os.environ.update(spec["env"])
        agent = bool(spec["agent"]) and agent_available()
        if phase == "write":
            report = write(spec["backend"], spec["conn"], spec["kwargs"], agent)
        else:
            report = asyncio.run(recall(spec["backend"], agent))
        report["agent_ran"] = agent
        reports[spec["backend"]] = report
    print(json.dumps(reports))


if __name__ == "__main__":
    main(sys.argv[1])
