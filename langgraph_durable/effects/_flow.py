"""What one call of an ``@idempotent`` function does, written once for sync and async.

:func:`effect_flow` is a sans-IO generator like the savers' operations: it
yields journal operations (:class:`RunOp`), pauses (``Sleep``) and the
execution of the user's function (:class:`Execute`, :class:`Reconcile`,
:class:`ExecuteInTransaction`), and decides everything: claim, replay, wait,
the ambiguous case, what is recorded and what is released. The sync and async
wrappers only carry the requests out (``_wrap``).
"""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from .._core.effects import (
    DONE,
    ERROR,
    OK,
    StoredEffect,
    decide,
    downstream_key,
    releasable,
)
from .._core.sansio import Operation, Sleep
from .._saver import DurableSaverBase, OpenedEffect
from ..errors import (
    EffectAmbiguousError,
    EffectBusyError,
    EffectConflictError,
    EffectError,
    EffectFailedError,
)

__all__ = [
    "Effect",
    "Policy",
    "CallPlan",
    "RunOp",
    "Execute",
    "Reconcile",
    "ExecuteInTransaction",
    "Outcome",
    "RETRY",
    "effect_flow",
]

logger = logging.getLogger("langgraph_durable.effects")

_FIRST_WAIT = 0.01
_MAX_WAIT = 0.5
_BRANCH_WAIT = 1.0  # how long a checkpoint LangGraph is still writing is waited for


class _Retry:
    __slots__ = ()

    def __repr__(self) -> str:
        return "langgraph_durable.effects.RETRY"


#: What a ``reconcile`` callable returns to say "the effect did not happen: run it".
RETRY: Any = _Retry()


@dataclass(slots=True)
class Effect:
    """The effect being executed, as ``current_effect()`` returns it.

    Attributes:
        key: A stable idempotency key for this effect: pass it downstream
            (e.g. as a payment API's ``Idempotency-Key``). The same on every
            execution of the same effect, different for every other effect.
        attempt: 1 on the first execution; more when an earlier execution
            claimed the effect and never recorded a result (its process died).
        name: The wrapped function's or tool's name.
        effect_id: The journal entry's id within the thread.
        thread_id: The thread.
        tenant: The tenant.
        args: Positional arguments of the call.
        kwargs: Keyword arguments of the call.
        connection: With ``transactional=True`` on a Postgres saver: a psycopg
            connection inside the transaction that also records the journal
            entry (an ``AsyncConnection`` for async savers); None otherwise.
    """

    key: str
    attempt: int
    name: str
    effect_id: str
    thread_id: str
    tenant: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    connection: Any = None


@dataclass(frozen=True, slots=True)
class Policy:
    """The settings of one ``@idempotent`` function (validated by the decorator)."""

    name: str
    on_ambiguous: Any  # "retry", "fail" or a callable(effect) -> result
    transactional: bool
    lease: float
    wait: float | None  # None: until the holder's lease ends (at most twice the lease)
    transient: Callable[[BaseException], bool]
    replay_errors: tuple[type[Exception], ...] = ()
    """Exception classes of the caller's own that a recorded error may replay as."""


@dataclass(frozen=True, slots=True)
class CallPlan:
    """One call: where it happens and what identifies it."""

    saver: DurableSaverBase
    tenant: str
    thread: str
    material: bytes
    digest: str | None
    request: dict[str, Any]
    user_key: str | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    replayed_from: bytes | None = None
    """In a time-travel replay: the material of the same call one step earlier (see
    ``docs/effects.md``: LangGraph runs replayed tasks one step after the originals)."""
    branch: dict[str, Any] | None = None
    """With ``replayed_from`` in a run LangGraph does not mark as a replay (a resumed
    thread): the config of the checkpoint the task runs from, to tell an original on
    another branch (reused) from the same call earlier in this branch (not reused)."""


@dataclass(frozen=True, slots=True)
class RunOp:
    """Run a journal operation; its result is sent back."""

    op: Operation[Any]


@dataclass(frozen=True, slots=True)
class Execute:
    """Call the wrapped function with ``effect`` current; an :class:`Outcome` is sent back."""

    effect: Effect


@dataclass(frozen=True, slots=True)
class Reconcile:
    """Call the policy's ``reconcile(effect)``; an :class:`Outcome` is sent back."""

    effect: Effect
    reconcile: Callable[[Effect], Any]


@dataclass(frozen=True, slots=True)
class ExecuteInTransaction:
    """Open a saver transaction, call the function with ``effect.connection`` set, then
    run ``complete(result)`` in the same transaction and commit; an :class:`Outcome`."""

    effect: Effect
    complete: Callable[[Any], Operation[bool]]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an execution came to: a value, or the exception it raised.

    ``recorded`` is True when the result was already recorded (in the
    transaction); ``fenced`` when the transaction found its claim taken over.
    """

    ok: bool
    value: Any = None
    error: BaseException | None = None
    recorded: bool = False
    fenced: bool = False


def _bubbles(exc: BaseException) -> bool:
    """Exceptions that suspend or steer the graph (interrupt, parent commands)."""
    try:
        from langgraph.errors import GraphBubbleUp
    except ImportError:  # pragma: no cover - langgraph is a dependency
        return False
    return isinstance(exc, GraphBubbleUp)


def _error_record(exc: BaseException) -> dict[str, Any]:
    cls = type(exc)
    args: list[Any] = []
    for arg in exc.args:
        if isinstance(arg, (str, int, float, bool)) or arg is None:
            args.append(arg)
        else:
            args = [str(exc)]
            break
    return {"type": f"{cls.__module__}.{cls.__qualname__}", "message": str(exc), "args": args}


def _package_errors() -> dict[str, type[Exception]]:
    from .. import errors

    found: dict[str, type[Exception]] = {}
    for value in vars(errors).values():
        if isinstance(value, type) and issubclass(value, Exception):
            if value.__module__ == errors.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def replayable(type_name: str, allowed: tuple[type[Exception], ...] = ()) -> type[Exception] | None:
    """The exception class a recorded error named ``type_name`` replays as, or None.

    Only the allowlist: the builtin exception types (``builtins.ValueError``,
    ...), this package's own (``langgraph_durable.errors``), and the classes in
    ``allowed`` (``@idempotent(replay_errors=...)``). A name is looked up, never
    imported: nothing a stored record names is imported or called.
    """
    module, _, qualname = type_name.rpartition(".")
    if module == "builtins":
        found = vars(builtins).get(qualname)
        if isinstance(found, type) and issubclass(found, Exception):
            return found
        return None
    for cls in allowed:
        if f"{cls.__module__}.{cls.__qualname__}" == type_name:
            return cls
    return _package_errors().get(type_name)


def rebuild_error(record: Any, allowed: tuple[type[Exception], ...] = ()) -> BaseException:
    """The exception a recorded terminal error replays as.

    The record is data (the type's ``module.qualname``, the message, the
    arguments as plain values). A type on the allowlist (:func:`replayable`)
    is built again from the recorded arguments; any other replays as
    :class:`EffectFailedError` carrying the type's name and the message.
    """
    if not isinstance(record, dict):
        return EffectFailedError(f"recorded effect error: {record!r}")
    type_name = str(record.get("type", ""))
    message = str(record.get("message", ""))
    target = replayable(type_name, allowed)
    stored = record.get("args")
    args: list[Any] = stored if isinstance(stored, list) else []
    plain = isinstance(stored, list) and all(
        a is None or isinstance(a, (str, int, float, bool)) for a in args
    )
    if target is not None and plain:
        try:
            error = target(*args)
        except Exception:  # noqa: BLE001 - arguments it does not take: our type below
            pass
        else:
            if hasattr(error, "add_note"):
                error.add_note("(replayed from the effect journal)")
            return error
    return EffectFailedError(
        f"{type_name}: {message} (replayed from the effect journal)", type_name
    )


def _replay(opened: OpenedEffect, policy: Policy) -> Any:
    if opened.entry.outcome == ERROR:
        raise rebuild_error(opened.result, policy.replay_errors)
    return opened.result


def _check_conflict(plan: CallPlan, opened: OpenedEffect, policy: Policy) -> None:
    if plan.user_key is None or plan.digest is None:
        return
    request = opened.request if isinstance(opened.request, dict) else {}
    stored = request.get("args_digest")
    if stored is not None and stored != plan.digest:
        raise EffectConflictError(
            f"effect key {plan.user_key!r} of {policy.name!r} (thread {plan.thread!r}) was "
            "recorded with other arguments; use a key that names the arguments too"
        )


def _on_another_branch(
    plan: CallPlan, original: OpenedEffect, clock: Callable[[], float]
) -> Generator[Any, Any, bool]:
    """Whether the entry one step earlier was recorded on another branch of the thread.

    The task runs from checkpoint B (``plan.branch``). A call one step earlier
    in B's own history ran from B's parent, and B was written by that step (its
    source is ``loop``). B written by ``update_state`` (``update``) or by a
    replay (``fork``) starts a new branch; and an entry recorded from another
    checkpoint than B's parent belongs to another branch (a fork's original).
    LangGraph may still be writing B (``durability="async"``): it is read again
    for up to ``_BRANCH_WAIT`` seconds; a B that cannot be read (``"exit"``)
    counts as another branch, so the effect is not repeated.
    """
    assert plan.branch is not None
    deadline = clock() + _BRANCH_WAIT
    pause = _FIRST_WAIT
    while True:
        base = yield RunOp(plan.saver._get_op(plan.branch))  # type: ignore[arg-type]
        if base is not None:
            break
        if clock() >= deadline:
            return True
        yield Sleep(pause)
        pause = min(pause * 2, _MAX_WAIT)
    if (base.metadata or {}).get("source") in ("update", "fork"):
        return True
    parent = ((base.parent_config or {}).get("configurable") or {}).get("checkpoint_id")
    request = original.request if isinstance(original.request, dict) else {}
    return request.get("checkpoint_id") != parent


def effect_flow(
    plan: CallPlan, policy: Policy, clock: Callable[[], float] = time.time
) -> Generator[Any, Any, Any]:
    """Claim, then replay, wait, or execute and record: the result of the call."""
    saver = plan.saver
    tenant, thread = plan.tenant, plan.thread
    takeover = policy.transactional or policy.on_ambiguous != "fail"
    wait = policy.wait if policy.wait is not None else 2 * policy.lease + 1.0
    deadline = clock() + wait
    while True:
        pause = _FIRST_WAIT
        while True:
            now = clock()
            opened: OpenedEffect = yield RunOp(
                saver._effect_claim_op(
                    tenant, thread, plan.material, plan.request, now + policy.lease, now, takeover
                )
            )
            entry: StoredEffect = opened.entry
            if not entry.won:
                _check_conflict(plan, opened, policy)
            decision = decide(entry, now)
            if decision.action == "run":
                break
            if decision.action == "replay":
                return _replay(opened, policy)
            if decision.action == "ambiguous":
                raise EffectAmbiguousError(
                    f"effect {policy.name!r} (thread {thread!r}, entry {entry.effect_id}) was "
                    f"claimed by attempt {entry.attempt} and never recorded a result; it may "
                    "have happened. Reconcile it, then forget the entry "
                    "(EffectJournal.forget) to run it again"
                )
            remaining = deadline - clock()
            if remaining <= 0:
                raise EffectBusyError(
                    f"effect {policy.name!r} (thread {thread!r}) is held by another execution "
                    f"(attempt {entry.attempt}, lease until {entry.lease_until:.3f}); waited "
                    f"{wait:.1f}s"
                )
            yield Sleep(min(pause, remaining, max(entry.lease_until - now, 0.001)))
            pause = min(pause * 2, _MAX_WAIT)

        effect_id, token = entry.effect_id, decision.token
        effect = Effect(
            downstream_key(tenant, thread, effect_id) if plan.user_key is None else plan.user_key,
            decision.attempt,
            policy.name,
            effect_id,
            thread,
            tenant,
            plan.args,
            plan.kwargs,
        )

        def complete(outcome: str, value: Any, _id: str = effect_id, _t: int = token) -> Any:
            return saver._effect_complete_op(tenant, thread, _id, _t, outcome, value, clock())

        if plan.replayed_from is not None:
            try:
                original = yield RunOp(saver._effect_lookup_op(tenant, thread, plan.replayed_from))
                if original is not None and original.entry.state == DONE and plan.branch:
                    if not (yield from _on_another_branch(plan, original, clock)):
                        original = None  # the same call earlier in this branch: a new effect
            except Exception:
                # nothing ran under this claim: give it back, so the next run looks again
                # (a claim taken over stays: the execution before it may have happened)
                if releasable(token):
                    yield RunOp(saver._effect_delete_op(tenant, thread, effect_id, token))
                raise
            if original is not None and original.entry.state == DONE:
                # the call this replay repeats: record its result here too, so a
                # crash later in this branch finds it under this step
                yield RunOp(complete(original.entry.outcome or OK, original.result))
                return _replay(original, policy)

        outcome: Outcome | None = None
        if decision.attempt > 1 and callable(policy.on_ambiguous) and not policy.transactional:
            outcome = yield Reconcile(effect, policy.on_ambiguous)
            if outcome.ok and outcome.value is RETRY:
                outcome = None
        if outcome is None:
            if policy.transactional:
                outcome = yield ExecuteInTransaction(effect, lambda value: complete(OK, value))
                if outcome.fenced:
                    continue  # rolled back: another execution owns the entry now
            else:
                outcome = yield Execute(effect)

        if outcome.ok:
            if not outcome.recorded:
                try:
                    recorded = yield RunOp(complete(OK, outcome.value))
                except EffectError:
                    raise
                except Exception as exc:
                    raise EffectError(
                        f"the result of effect {policy.name!r} could not be recorded: {exc}"
                    ) from exc
                if not recorded:
                    logger.warning(
                        "effect %r (thread %r) finished after its lease ran out and another "
                        "execution took it over; its result was not recorded",
                        policy.name,
                        thread,
                    )
            return outcome.value

        error = outcome.error
        assert error is not None
        if not isinstance(error, Exception):
            raise error  # cancelled or interrupted: the claim stays (ambiguous once it expires)
        if _bubbles(error) or policy.transient(error):
            if releasable(token):  # a claim taken over stays (see releasable)
                yield RunOp(saver._effect_delete_op(tenant, thread, effect_id, token))
            raise error
        yield RunOp(complete(ERROR, _error_record(error)))
        raise error
