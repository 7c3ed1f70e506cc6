"""``@idempotent`` on LangChain tools, and ``IdempotentToolNode``.

A tool is journaled at the function it runs (``StructuredTool.func`` /
``.coroutine``, or ``_run`` / ``_arun`` of another ``BaseTool``), so the tool
still builds its ``ToolMessage`` itself: a replayed result gets the current
``tool_call_id``, and injected arguments (``ToolRuntime``, state, store,
config) stay out of the key.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.tools import BaseTool
from langchain_core.tools import tool as create_tool
from langgraph.prebuilt import ToolNode

from ._wrap import wrap_function

__all__ = ["is_tool", "is_idempotent", "wrap_tool", "IdempotentToolNode"]


_MARK = "langgraph_durable_idempotent"


def is_tool(value: Any) -> bool:
    return isinstance(value, BaseTool)


def _journaled(fn: Any) -> bool:
    return fn is not None and hasattr(fn, "__lgd_effect__")


def _runs(tool: BaseTool) -> list[Any]:
    """The functions a tool built from functions runs (``func`` / ``coroutine``)."""
    return [f for f in (getattr(tool, "func", None), getattr(tool, "coroutine", None)) if f]


def is_idempotent(value: Any) -> bool:
    """Whether a function or tool is already journaled.

    A tool is when ``@idempotent`` made it (above ``@tool``), or when every
    function it runs is journaled (``@idempotent`` below ``@tool``).
    """
    if _journaled(value):
        return True
    if not isinstance(value, BaseTool):
        return False
    if (value.metadata or {}).get(_MARK):
        return True
    runs = _runs(value)
    return bool(runs) and all(_journaled(f) for f in runs)


def _as_tuple(response_format: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """A replayed ``(content, artifact)`` pair comes back as a list: make it a tuple again."""
    if response_format != "content_and_artifact":
        return fn
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def afix(*args: Any, **kwargs: Any) -> Any:
            value = await fn(*args, **kwargs)
            return tuple(value) if isinstance(value, list) and len(value) == 2 else value

        return afix

    @functools.wraps(fn)
    def fix(*args: Any, **kwargs: Any) -> Any:
        value = fn(*args, **kwargs)
        return tuple(value) if isinstance(value, list) and len(value) == 2 else value

    return fix


def wrap_tool(tool: Any, **options: Any) -> Any:
    """A copy of ``tool`` whose executions are journaled (options of ``idempotent``).

    A tool that is already journaled is returned as it is (its functions are
    journaled once), except that a ``content_and_artifact`` tool built over a
    journaled function gets a copy that turns a replayed pair back into a tuple.
    """
    if is_idempotent(tool):
        return _pairs_replay(tool)
    if options.get("name") is None:
        options["name"] = tool.name
    metadata = {**(tool.metadata or {}), _MARK: True}
    fmt = getattr(tool, "response_format", "content")
    func = getattr(tool, "func", None)
    coroutine = getattr(tool, "coroutine", None)
    if func is not None or coroutine is not None:
        update: dict[str, Any] = {"metadata": metadata}
        for attr, fn in (("func", func), ("coroutine", coroutine)):
            if fn is not None:
                # a function journaled already (@idempotent below @tool) stays as it is
                journaled = fn if _journaled(fn) else wrap_function(fn, **options)
                update[attr] = _as_tuple(fmt, journaled)
        return tool.model_copy(update=update)
    # Another BaseTool subclass: journal its _run / _arun on a copy.
    copy = tool.model_copy(update={"metadata": metadata})
    run = type(tool)._run
    if run is not None:
        object.__setattr__(
            copy, "_run", _as_tuple(fmt, wrap_function(run.__get__(copy), **options))
        )
    arun = type(tool).__dict__.get("_arun") or getattr(type(tool), "_arun", None)
    if arun is not None and _overrides_arun(type(tool)):
        object.__setattr__(
            copy, "_arun", _as_tuple(fmt, wrap_function(arun.__get__(copy), **options))
        )
    return copy


def _pairs_replay(tool: Any) -> Any:
    """A journaled ``content_and_artifact`` tool whose replayed pair comes back as a tuple."""
    if getattr(tool, "response_format", "content") != "content_and_artifact":
        return tool
    if not isinstance(tool, BaseTool) or (tool.metadata or {}).get(_MARK):
        return tool  # made by wrap_tool: its functions already return tuples
    update: dict[str, Any] = {"metadata": {**(tool.metadata or {}), _MARK: True}}
    for attr in ("func", "coroutine"):
        fn = getattr(tool, attr, None)
        if fn is not None:
            update[attr] = _as_tuple("content_and_artifact", fn)
    return tool.model_copy(update=update)


def _overrides_arun(cls: type) -> bool:
    return any("_arun" in klass.__dict__ for klass in cls.__mro__ if klass is not BaseTool)


class IdempotentToolNode(ToolNode):
    """A drop-in ``ToolNode`` that journals every tool call separately.

    Same constructor and behaviour as ``langgraph.prebuilt.ToolNode`` (parallel
    calls, error handling, ``Command`` returns, ``interrupt()`` inside tools);
    every tool is wrapped with ``@idempotent`` (tools already wrapped are kept
    as they are), so a re-run of the node (a resume after one tool
    interrupted, a crash, a replay) returns the recorded results of the calls
    that finished instead of running them again.

    Args:
        tools: As ``ToolNode``'s.
        effect_options: Options for ``@idempotent`` on every tool (e.g.
            ``{"on_ambiguous": "fail", "lease": timedelta(minutes=1)}``).
        *args, **kwargs: As ``ToolNode``'s.
    """

    def __init__(
        self,
        tools: Sequence[Any],
        *args: Any,
        effect_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        options = dict(effect_options or {})
        wrapped = []
        for item in tools:
            tool = item if isinstance(item, BaseTool) else create_tool(item)
            wrapped.append(wrap_tool(tool, **options))
        super().__init__(wrapped, *args, **kwargs)
