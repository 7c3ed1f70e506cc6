"""One worker process of the effect-journal tests: run (or resume) one graph on one thread.

A job (JSON) names the saver (``SaverSpec`` fields), sync or async, the graph,
and what to do; the worker exits 0 when its invocation returned (finished or
paused on an interrupt) and writes ``finished <pid>`` to the effect log when
the graph reached its end.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from langgraph.types import Command

from langgraph_durable.effects import IdempotentToolNode
from tests.effects.graphs import (
    EffectLog,
    Effects,
    build_line_graph,
    build_plain_tool_graph,
    build_tool_graph,
)
from tests.redaction_helpers import SaverSpec, aopen_saver, open_saver


def _graph(job: dict[str, Any], saver: Any) -> Any:
    log = EffectLog(job["log"])
    kind = job["graph"]
    if kind == "line":
        effects = Effects(
            log,
            wrapped=job.get("wrapped", True),
            transactional=job.get("transactional", False),
            pause=job.get("pause", 0.0),
            lease=job.get("lease", 300.0),
            ledger=job.get("ledger", ""),
            use_async=bool(job.get("async")),
        )
        return build_line_graph(
            effects, checkpointer=saver, interrupt_before=job.get("interrupt_before")
        )
    node_cls = IdempotentToolNode if job.get("node") == "idempotent" else None
    if kind == "tools":
        from langgraph.prebuilt import ToolNode

        return build_tool_graph(log, saver, node_cls or ToolNode)
    if kind == "plain_tools":
        from langgraph.prebuilt import ToolNode

        return build_plain_tool_graph(log, saver, node_cls or ToolNode)
    raise ValueError(f"unknown graph {kind!r}")


def _input(job: dict[str, Any], started: bool) -> Any:
    if job.get("resume") is not None:
        return Command(resume=job["resume"])
    if started:
        return None
    return {"receipts": []} if job["graph"] == "line" else {"messages": []}


def _spec(job: dict[str, Any]) -> SaverSpec:
    return SaverSpec(**job["spec"])


def _run_sync(job: dict[str, Any]) -> bool:
    config = {"configurable": {"thread_id": job["thread"]}}
    with open_saver(_spec(job)) as saver:
        graph = _graph(job, saver)
        state = graph.get_state(config)
        graph.invoke(_input(job, bool(state.values)), config)
        return not graph.get_state(config).next


async def _run_async(job: dict[str, Any]) -> bool:
    config = {"configurable": {"thread_id": job["thread"]}}
    async with aopen_saver(_spec(job)) as saver:
        graph = _graph(job, saver)
        state = await graph.aget_state(config)
        await graph.ainvoke(_input(job, bool(state.values)), config)
        return not (await graph.aget_state(config)).next


def run(job: dict[str, Any]) -> int:
    done = asyncio.run(_run_async(job)) if job.get("async") else _run_sync(job)
    if done:
        EffectLog(job["log"]).write(f"finished {os.getpid()}")
    return 0
