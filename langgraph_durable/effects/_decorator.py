"""``@idempotent``: a function goes to ``_wrap``, a LangChain tool to ``_tools``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ._tools import is_tool, wrap_tool
from ._wrap import wrap_function

__all__ = ["idempotent"]


def idempotent(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    on_ambiguous: Any = "retry",
    transactional: bool = False,
    lease: timedelta | float = timedelta(minutes=5),
    key: str | Callable[..., str] | None = None,
    wait: timedelta | float | None = None,
    transient: Any = None,
    journal: Any = None,
    replay_errors: Any = (),
) -> Any:
    """Journal a function's (or a LangChain tool's) side effect so replays never repeat it.

    Use as ``@idempotent`` or ``@idempotent(...)`` on a sync or async function
    called inside a graph node or ``@task``, or on a LangChain tool (above or
    below ``@tool``). Inside a graph run on a langgraph-durable saver, each call
    is claimed in the thread's effect journal before it runs and its result is
    recorded right after; a call that reaches the same place with the same
    arguments again (a resume after an interrupt or a crash, a replay from an
    older checkpoint) returns the recorded result without running. Outside a
    graph run, or on another checkpointer, the function runs as is.

    Args:
        name: The effect's name in its key (default: the function's qualified name).
        on_ambiguous: What to do when an earlier execution claimed the effect and
            died without a result: ``"retry"`` (run again, same key,
            ``attempt`` > 1), ``"fail"`` (raise ``EffectAmbiguousError``), or a
            callable ``reconcile(effect) -> result`` (return :data:`RETRY` to run it).
        transactional: Postgres savers: run the function inside a transaction
            (``current_effect().connection``) that also records the result, so
            its database writes happen exactly once.
        lease: How long a claim is presumed alive; longer than the effect takes.
        key: A key of your own (a string, or a callable of the call's
            arguments) instead of the derived one.
        wait: How long a second execution waits for another's claim (default: until
            the holder's lease ends, at most twice ``lease``).
        transient: Errors that are not recorded (the claim is released and the
            next execution runs again; a claim taken over from an execution that
            never recorded a result is kept, so the next one runs once its lease
            ends, as attempt + 1): exception types or a predicate; default
            :func:`default_transient`.
        journal: A saver (or ``EffectJournal``) to journal in, instead of the
            running graph's checkpointer.
        replay_errors: Exception classes of your own that a recorded error of
            this function replays as (built again from its recorded arguments).
            Builtin exception types and ``langgraph_durable.errors`` always do;
            any other recorded error replays as ``EffectFailedError`` carrying
            the original type's name (a stored name is never imported or built).
    """
    options = dict(
        name=name,
        on_ambiguous=on_ambiguous,
        transactional=transactional,
        lease=lease,
        key=key,
        wait=wait,
        transient=transient,
        journal=journal,
        replay_errors=replay_errors,
    )

    def apply(target: Any) -> Any:
        if is_tool(target):
            return wrap_tool(target, **options)
        return wrap_function(target, **options)

    return apply if fn is None else apply(fn)
