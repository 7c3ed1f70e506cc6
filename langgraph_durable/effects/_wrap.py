"""``current_effect()`` and the journaled function: where a call happens, and carrying out its flow.

``@idempotent`` itself lives in ``_decorator``, which hands functions to this
module and LangChain tools to ``_tools`` (which builds on this module).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
import typing
from collections import OrderedDict
from collections.abc import Callable, Hashable
from datetime import timedelta
from typing import Any

from .. import _drive
from .._core.effects import (
    EffectSite,
    args_digest,
    effect_material,
    user_key_material,
)
from .._core.sansio import Operation
from .._saver import DurableSaverBase
from ..errors import ConfigurationError, InvalidInputError, StorageUnavailableError
from ._flow import (
    CallPlan,
    Effect,
    Execute,
    ExecuteInTransaction,
    Outcome,
    Policy,
    Reconcile,
    RunOp,
    effect_flow,
)
from .journal import EffectJournal

__all__ = ["current_effect", "wrap_function", "default_transient"]

_CURRENT: contextvars.ContextVar[Effect | None] = contextvars.ContextVar(
    "langgraph_durable_effect", default=None
)

# Parameters that carry the runtime, not the call (never part of the argument digest).
_RUNTIME_NAMES = frozenset({"config", "run_manager", "callbacks"})


def current_effect() -> Effect:
    """The effect being executed, inside a call of an ``@idempotent`` function.

    Raises:
        InvalidInputError: Called outside a journaled execution (outside a
            wrapped function, or one running outside a graph, which is not
            journaled).
    """
    effect = _CURRENT.get()
    if effect is None:
        raise InvalidInputError(
            "current_effect() is only available inside a journaled call of an "
            "@idempotent function (inside a graph run on a langgraph-durable saver)"
        )
    return effect


def default_transient(exc: BaseException) -> bool:
    """Errors worth trying again rather than recording: connection failures and timeouts.

    Such an error is not recorded: the claim is released and the next
    execution runs the effect again with the same key (a claim taken over is
    kept until its lease ends: see ``_core.effects.releasable``).
    """
    if isinstance(exc, (ConnectionError, TimeoutError, asyncio.TimeoutError)):
        return True
    if isinstance(exc, StorageUnavailableError):
        return True
    try:
        import httpx
    except ImportError:  # pragma: no cover - httpx comes with langgraph
        return False
    if isinstance(exc, httpx.TransportError):
        return True
    if isinstance(exc, httpx.HTTPStatusError):
        return 500 <= exc.response.status_code < 600 or exc.response.status_code == 429
    return False


def _transient(value: Any) -> Callable[[BaseException], bool]:
    if value is None:
        return default_transient
    if isinstance(value, type) and issubclass(value, BaseException):
        value = (value,)
    if isinstance(value, tuple) and all(
        isinstance(t, type) and issubclass(t, BaseException) for t in value
    ):
        types = value
        return lambda exc: isinstance(exc, types)
    if callable(value):
        return value  # type: ignore[no-any-return]
    raise ConfigurationError(
        f"transient must be None, an exception type, a tuple of them or a callable, got {value!r}"
    )


def _seconds(value: Any, name: str) -> float:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ConfigurationError(f"{name} must be a timedelta or seconds, got {value!r}")
    if seconds <= 0:
        raise ConfigurationError(f"{name} must be positive, got {value!r}")
    return seconds


# ---- where a call happens ---------------------------------------------------------


class _Counters:
    """Calls per (function, arguments) in one task execution, keyed by its runtime object.

    LangGraph makes a new runtime object for every attempt of a task (a retry
    or a re-run after an interrupt), so counting restarts with each attempt. The
    runtime cannot be weakly referenced, so the registry keeps the most recent
    ``size`` of them alive (a task evicted while still running, behind that many
    newer ones, would count its identical calls from zero again).
    """

    def __init__(self, size: int = 1024) -> None:
        self._lock = threading.Lock()
        self._scopes: OrderedDict[int, tuple[Any, dict[Hashable, int]]] = OrderedDict()
        self._size = size

    def next(self, scope: Any, what: Hashable) -> int:
        with self._lock:
            held = self._scopes.get(id(scope))
            if held is None or held[0] is not scope:
                held = (scope, {})
                self._scopes[id(scope)] = held
                while len(self._scopes) > self._size:
                    self._scopes.popitem(last=False)
            else:
                self._scopes.move_to_end(id(scope))
            counts = held[1]
            index = counts.get(what, 0)
            counts[what] = index + 1
            return index


_COUNTERS = _Counters()


def _task_ns(ns: str) -> str:
    """The checkpoint namespace without task ids (which change on a replay)."""
    parts = [part.split(":")[0] for part in ns.split("|") if part and not part.isdigit()]
    return "|".join(parts)


def _path(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_path(v) for v in value) + ")"
    return repr(value)


def _graph_call() -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(configurable, metadata) of the running graph task, or None outside one."""
    try:
        from langgraph.config import get_config

        config = get_config()
    except (RuntimeError, ImportError):
        return None
    configurable = config.get("configurable") or {}
    metadata = config.get("metadata") or {}
    if configurable.get("thread_id") is None or metadata.get("langgraph_step") is None:
        return None
    return configurable, metadata


def _base_checkpoint(configurable: dict[str, Any]) -> dict[str, Any] | None:
    """The config of the checkpoint the running task was planned from, or None."""
    ns = str(configurable.get("checkpoint_ns") or "")
    graph_ns = ns.rpartition("|")[0]  # the task's namespace less its own segment
    checkpoint_id = (configurable.get("checkpoint_map") or {}).get(graph_ns)
    if not checkpoint_id:
        return None
    plain = {k: v for k, v in configurable.items() if not str(k).startswith("__")}
    return {"configurable": {**plain, "checkpoint_ns": graph_ns, "checkpoint_id": checkpoint_id}}


def _saver_for(configurable: dict[str, Any], journal: EffectJournal | None) -> Any:
    if journal is not None:
        return journal.saver
    saver = configurable.get("__pregel_checkpointer")
    return saver if isinstance(saver, DurableSaverBase) else None


# ---- the argument digest ----------------------------------------------------------


def _injected(fn: Callable[..., Any]) -> frozenset[str]:
    """Parameters LangChain or LangGraph inject (runtime, state, store, config, callbacks)."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to names
        hints = {}
    try:
        from langchain_core.runnables import RunnableConfig
        from langchain_core.tools.base import _is_injected_arg_type
    except ImportError:  # pragma: no cover
        return _RUNTIME_NAMES
    names = set(_RUNTIME_NAMES)
    for name, hint in hints.items():
        if name == "return":
            continue
        try:
            if hint is RunnableConfig or _is_injected_arg_type(hint):
                names.add(name)
        except Exception:  # noqa: BLE001 - exotic annotations are plain arguments
            continue
    return frozenset(names)


class _Arguments:
    """Normalizes a call's arguments to a name -> value mapping (defaults applied)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        try:
            self.signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            self.signature = None
        self.injected = _injected(fn)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.signature is not None:
            try:
                bound = self.signature.bind(*args, **kwargs)
            except TypeError:
                pass
            else:
                bound.apply_defaults()
                out: dict[str, Any] = {}
                for name, value in bound.arguments.items():
                    if name in self.injected:
                        continue
                    kind = self.signature.parameters[name].kind
                    if kind is inspect.Parameter.VAR_KEYWORD:
                        out.update({k: v for k, v in value.items() if k not in self.injected})
                    else:
                        out[name] = value
                return out
        return {
            "*": list(args),
            **{k: v for k, v in kwargs.items() if k not in self.injected},
        }


# ---- the decorator ------------------------------------------------------------------


class _Wrapped:
    """What ``@idempotent`` knows about one function."""

    def __init__(
        self,
        fn: Callable[..., Any],
        policy: Policy,
        key: str | Callable[..., str] | None,
        journal: EffectJournal | None,
    ) -> None:
        self.fn = fn
        self.policy = policy
        self.key = key
        self.journal = journal
        self.arguments = _Arguments(fn)

    def plan(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CallPlan | None:
        """The call's plan, or None when it runs as is (outside a graph on our saver)."""
        found = _graph_call()
        if found is None:
            return None
        configurable, metadata = found
        saver = _saver_for(configurable, self.journal)
        if saver is None:
            return None
        named = self.arguments.bind(args, kwargs)
        user_key = None
        replayed_from: bytes | None = None
        base = _base_checkpoint(configurable)
        branch: dict[str, Any] | None = None
        if self.key is not None:
            user_key = self.key(*args, **kwargs) if callable(self.key) else self.key
            if not isinstance(user_key, str) or not user_key:
                raise InvalidInputError(
                    f"the key of effect {self.policy.name!r} must be a non-empty string, "
                    f"got {user_key!r}"
                )
            try:
                digest: str | None = args_digest((), named)
            except InvalidInputError:
                digest = None
            material = user_key_material(user_key)
        else:
            digest = args_digest((), named)
            site = EffectSite(
                _task_ns(str(configurable.get("checkpoint_ns") or "")),
                int(metadata["langgraph_step"]),
                _path(metadata.get("langgraph_path", ())),
                self.policy.name,
            )
            scope = (
                configurable.get("__pregel_runtime")
                or configurable.get("__pregel_scratchpad")
                or configurable
            )
            index = _COUNTERS.next(scope, (self.policy.name, digest))
            material = effect_material(site, index, digest)
            # A time-travel branch (a replay, or a fork made with update_state) runs its
            # tasks one step after the originals. A fresh call looks for the same call
            # one step earlier: in a run LangGraph marks as a replay (invoked with a
            # checkpoint's config) it is the original; in any other run (invoked with
            # the thread's config: a fork at the thread's head, a resume or a crash
            # recovery inside such a branch) it is the original only when it was
            # recorded on another branch, not earlier in this one (see docs/effects.md).
            replaying = configurable.get("__pregel_replay_state") is not None
            if replaying or base is not None:
                earlier = EffectSite(site.ns, site.step - 1, site.path, site.name)
                replayed_from = effect_material(earlier, index, digest)
                if not replaying:
                    branch = base
        request = {
            "name": self.policy.name,
            "args_digest": digest,
            "args": named,
            "checkpoint_id": None if base is None else base["configurable"]["checkpoint_id"],
        }
        return CallPlan(
            saver,
            saver._tenant_of({"configurable": configurable}),
            str(configurable["thread_id"]),
            material,
            digest,
            request,
            user_key,
            args,
            kwargs,
            replayed_from,
            branch,
        )

    # ---- carrying out the flow (sync) ----------------------------------------

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        plan = self.plan(args, kwargs)
        if plan is None:
            return self.fn(*args, **kwargs)
        journal = self.journal or EffectJournal(plan.saver)
        fn = self.fn

        def execute(request: Any) -> Any:
            if isinstance(request, RunOp):
                return journal.run(request.op)
            if isinstance(request, Execute):
                return _outcome(request.effect, fn, args, kwargs)
            if isinstance(request, Reconcile):
                return _outcome(request.effect, request.reconcile, (request.effect,), {})
            if isinstance(request, ExecuteInTransaction):
                if journal.is_async:
                    raise ConfigurationError(
                        f"transactional effect {self.policy.name!r} is sync but the saver is "
                        "async: make the function async (its connection is an AsyncConnection)"
                    )
                return _in_transaction(journal, request, fn, args, kwargs)
            raise TypeError(f"unexpected effect request {request!r}")

        return _drive.run(Operation(effect_flow(plan, self.policy)), execute, _same)

    # ---- carrying out the flow (async) ---------------------------------------

    async def acall(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        plan = self.plan(args, kwargs)
        if plan is None:
            return await self.fn(*args, **kwargs)
        journal = self.journal or EffectJournal(plan.saver)
        fn = self.fn

        async def execute(request: Any) -> Any:
            if isinstance(request, RunOp):
                return await journal.arun(request.op)
            if isinstance(request, Execute):
                return await _aoutcome(request.effect, fn, args, kwargs)
            if isinstance(request, Reconcile):
                return await _aoutcome(request.effect, request.reconcile, (request.effect,), {})
            if isinstance(request, ExecuteInTransaction):
                if not journal.is_async:
                    raise ConfigurationError(
                        f"transactional effect {self.policy.name!r} is async but the saver is "
                        "sync: make the function sync (its connection is a Connection)"
                    )
                return await _ain_transaction(journal, request, fn, args, kwargs)
            raise TypeError(f"unexpected effect request {request!r}")

        return await _drive.arun(Operation(effect_flow(plan, self.policy)), execute, _same)


def _same(exc: BaseException) -> BaseException:
    return exc


def _outcome(effect: Effect, fn: Callable[..., Any], args: Any, kwargs: Any) -> Outcome:
    token = _CURRENT.set(effect)
    try:
        return Outcome(True, fn(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001 - the flow decides (record, release, re-raise)
        return Outcome(False, error=exc)
    finally:
        _CURRENT.reset(token)


async def _aoutcome(effect: Effect, fn: Callable[..., Any], args: Any, kwargs: Any) -> Outcome:
    token = _CURRENT.set(effect)
    try:
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        return Outcome(True, value)
    except BaseException as exc:  # noqa: BLE001 - the flow decides
        return Outcome(False, error=exc)
    finally:
        _CURRENT.reset(token)


class _Fenced(Exception):
    """Rolls a transaction back: the claim was taken over while the effect ran."""


def _in_transaction(
    journal: EffectJournal,
    request: ExecuteInTransaction,
    fn: Callable[..., Any],
    args: Any,
    kwargs: Any,
) -> Outcome:
    effect = request.effect
    try:
        with journal.saver._effect_transaction() as tx:
            effect.connection = tx.connection
            outcome = _outcome(effect, fn, args, kwargs)
            if not outcome.ok:
                assert outcome.error is not None
                raise outcome.error
            if not tx.run(request.complete(outcome.value)):
                raise _Fenced
    except _Fenced:
        return Outcome(False, fenced=True)
    except BaseException as exc:  # noqa: BLE001 - rolled back; the flow decides
        return Outcome(False, error=exc)
    finally:
        effect.connection = None
    return Outcome(True, outcome.value, recorded=True)


async def _ain_transaction(
    journal: EffectJournal,
    request: ExecuteInTransaction,
    fn: Callable[..., Any],
    args: Any,
    kwargs: Any,
) -> Outcome:
    effect = request.effect
    try:
        async with journal.saver._aeffect_transaction() as tx:
            effect.connection = tx.connection
            outcome = await _aoutcome(effect, fn, args, kwargs)
            if not outcome.ok:
                assert outcome.error is not None
                raise outcome.error
            if not await tx.arun(request.complete(outcome.value)):
                raise _Fenced
    except _Fenced:
        return Outcome(False, fenced=True)
    except BaseException as exc:  # noqa: BLE001 - rolled back; the flow decides
        return Outcome(False, error=exc)
    finally:
        effect.connection = None
    return Outcome(True, outcome.value, recorded=True)


def _returns_tuple(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is annotated to return a tuple (a replayed result comes back as a list)."""
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:  # noqa: BLE001 - unresolvable annotations: take the result as stored
        return False
    return hint is tuple or typing.get_origin(hint) is tuple


def wrap_function(
    fn: Callable[..., Any],
    name: str | None = None,
    on_ambiguous: Any = "retry",
    transactional: bool = False,
    lease: timedelta | float = timedelta(minutes=5),
    key: str | Callable[..., str] | None = None,
    *,
    wait: timedelta | float | None = None,
    transient: Any = None,
    journal: Any = None,
    replay_errors: Any = (),
) -> Callable[..., Any]:
    """``@idempotent`` applied to a plain function (see :func:`idempotent`)."""
    if not callable(fn):
        raise ConfigurationError(f"@idempotent wraps a function or a tool, got {fn!r}")
    if on_ambiguous not in ("retry", "fail") and not callable(on_ambiguous):
        raise ConfigurationError(
            f"on_ambiguous must be 'retry', 'fail' or a callable(effect) -> result, "
            f"got {on_ambiguous!r}"
        )
    if not isinstance(transactional, bool):
        raise ConfigurationError(f"transactional must be a bool, got {transactional!r}")
    if key is not None and not (isinstance(key, str) and key) and not callable(key):
        raise ConfigurationError(
            f"key must be None, a non-empty string or a callable(*args, **kwargs) -> str, "
            f"got {key!r}"
        )
    if journal is not None and not isinstance(journal, EffectJournal):
        journal = EffectJournal(journal)
    if isinstance(replay_errors, type):
        replay_errors = (replay_errors,)
    if not isinstance(replay_errors, (tuple, list)) or not all(
        isinstance(t, type) and issubclass(t, Exception) for t in replay_errors
    ):
        raise ConfigurationError(
            f"replay_errors must be an exception class or a tuple of them, got {replay_errors!r}"
        )
    lease_s = _seconds(lease, "lease")
    label = name or getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "effect")
    policy = Policy(
        str(label),
        on_ambiguous,
        transactional,
        lease_s,
        None if wait is None else _seconds(wait, "wait"),
        _transient(transient),
        tuple(replay_errors),
    )
    wrapped = _Wrapped(fn, policy, key, journal)
    tuples = _returns_tuple(fn)
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def acall(*args: Any, **kwargs: Any) -> Any:
            value = await wrapped.acall(args, kwargs)
            return tuple(value) if tuples and isinstance(value, list) else value

        acall.__lgd_effect__ = wrapped  # type: ignore[attr-defined]
        return acall

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        value = wrapped.call(args, kwargs)
        return tuple(value) if tuples and isinstance(value, list) else value

    call.__lgd_effect__ = wrapped  # type: ignore[attr-defined]
    return call
