"""The effect journal's pure parts: keys, stored shape, and what a claim means.

An effect is one call of a function wrapped with ``@idempotent`` inside a graph
task. Its journal entry lives under its thread (tenant, thread, effect id) and
goes through the record pipeline like every other payload. This module decides
everything that does not need I/O: the canonical digest of a call's arguments,
the key material an effect id is derived from, the entry shape backends store,
and what a backend's answer to a claim means for the caller.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import hashlib
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import DurableError, InvalidInputError
from .records import RecordIdentity, RecordKind, Sealed

__all__ = [
    "EFFECT_CHANNEL",
    "StoredEffect",
    "EffectSite",
    "args_digest",
    "effect_material",
    "user_key_material",
    "downstream_key",
    "request_identity",
    "state_identity",
    "claim_problem",
    "fresh_claim",
    "taken_over",
    "done_entry",
    "no_takeover",
    "releasable",
    "audit_entry",
    "Decision",
    "decide",
]

#: The channel redaction rules match for effect-journal entries (arguments and results).
EFFECT_CHANNEL = "__effect__"

CLAIMED = "claimed"
DONE = "done"
OK = "ok"
ERROR = "error"


@dataclass(frozen=True, slots=True)
class StoredEffect:
    """One journal entry as a backend stores and returns it.

    Attributes:
        effect_id: The entry's id within its thread (see :func:`effect_material`).
        state: ``"claimed"`` (an execution holds it) or ``"done"`` (result recorded).
        token: Fencing token: 1 at the first claim, +1 at every takeover. A
            completion names the token it holds; a stale one is refused.
        attempt: Executions started under this entry (1 at the first claim).
        lease_until: Unix seconds until which the claim holder is presumed alive.
        request: The sealed request (function name, argument digest, arguments).
        outcome: ``"ok"`` or ``"error"`` once done.
        result: The sealed state record (see :func:`state_identity`): while
            claimed, an empty payload sealed under the claim's state; once done,
            the result (or recorded error) sealed under the outcome.
        won: Whether the claim call that returned this entry took the claim
            (a fresh entry or a takeover); False for an entry that was already there.
        created: Unix seconds of the first claim.
    """

    effect_id: str
    state: str
    token: int
    attempt: int
    lease_until: float
    request: Sealed
    outcome: str | None = None
    result: Sealed | None = None
    won: bool = False
    created: float = 0.0


@dataclass(frozen=True, slots=True)
class EffectSite:
    """Where a call happens: what, besides its arguments, tells two calls apart.

    Attributes:
        ns: The checkpoint namespace of the graph the task runs in, without
            task ids (a replay from an older checkpoint gets new task ids).
        step: The superstep (``metadata["langgraph_step"]``).
        path: The task's path (``metadata["langgraph_path"]``), stable across
            replays (a ``Send``'s path carries its index).
        name: The wrapped function's (or tool's) name.
    """

    ns: str
    step: int
    path: str
    name: str


def _canonical(value: Any, depth: int = 0) -> Any:
    """A JSON-able tree, equal for equal arguments, with type tags where JSON merges types."""
    if depth > 64:
        raise InvalidInputError("effect arguments are nested too deeply to hash")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**53 else {"$int": str(value)}
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return {"$float": repr(value)}
        return value
    if isinstance(value, enum.Enum):
        return {"$enum": f"{type(value).__qualname__}.{value.name}"}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return {"$time": value.isoformat()}
    if isinstance(value, datetime.timedelta):
        return {"$delta": value.total_seconds()}
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return {"$" + type(value).__name__: str(value)}
    if isinstance(value, Mapping):
        items = [(_key(k), _canonical(v, depth + 1)) for k, v in value.items()]
        items.sort(key=lambda kv: kv[0])
        return {"$map": items}
    if isinstance(value, (set, frozenset)):
        members = [_canonical(v, depth + 1) for v in value]
        members.sort(key=lambda m: json.dumps(m, sort_keys=True))
        return {"$set": members}
    if isinstance(value, (list, tuple)):
        return [_canonical(v, depth + 1) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # pydantic models, LangChain messages
        return {"$model": type(value).__qualname__, "v": _canonical(dump(), depth + 1)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"$dc": type(value).__qualname__, "v": _canonical(fields, depth + 1)}
    raise InvalidInputError(
        f"cannot hash an effect argument of type {type(value).__qualname__}: pass plain "
        "values (str, numbers, lists, dicts, dataclasses, pydantic models), or give the "
        "effect its own key with @idempotent(key=...)"
    )


def _key(key: Any) -> str:
    if isinstance(key, str):
        return "s:" + key
    return "j:" + json.dumps(_canonical(key), sort_keys=True)


def args_digest(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """A canonical digest of a call's arguments (hex); equal arguments, equal digest."""
    tree = [_canonical(list(args)), _canonical(dict(kwargs))]
    text = json.dumps(tree, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _lp(*parts: str) -> bytes:
    out = bytearray()
    for part in parts:
        raw = part.encode()
        out += len(raw).to_bytes(4, "big") + raw
    return bytes(out)


def effect_material(site: EffectSite, index: int, digest: str) -> bytes:
    """What an effect id is derived from (the thread and tenant name the entry's place).

    ``index`` counts earlier calls of the same function with the same arguments
    in the same task execution, so two deliberate identical calls are two
    effects, and parallel calls with different arguments do not depend on the
    order they started in.
    """
    return b"lgd-effect-1" + _lp(site.ns, str(site.step), site.path, site.name, str(index), digest)


def user_key_material(key: str) -> bytes:
    """What an effect id is derived from when the caller supplies the key."""
    return b"lgd-effect-key-1" + _lp(key)


def downstream_key(tenant: str, thread: str, effect_id: str) -> str:
    """The idempotency key handed to the wrapped function (``current_effect().key``)."""
    digest = hashlib.sha256(b"lgd-idem-1" + _lp(tenant, thread, effect_id)).hexdigest()
    return "lgd-" + digest[:40]


def request_identity(tenant: str, thread: str, effect_id: str) -> RecordIdentity:
    """The record identity the request of an entry is sealed under."""
    return RecordIdentity(
        tenant, thread, "", RecordKind.EFFECT, "", effect_id, "request", EFFECT_CHANNEL
    )


def _seconds(value: float) -> str:
    return repr(float(value))


def state_identity(tenant: str, thread: str, entry: StoredEffect) -> RecordIdentity:
    """The identity an entry's state record is sealed under: it names every clear field
    a read depends on, so the record opens only while those fields are as written.

    A claim binds its state, fencing token, attempt, lease and creation time; a
    completion binds ``done``, the outcome and the token (the attempt always
    equals the token: both start at 1 and grow together at a takeover). With
    encryption the identity is associated data, with ``integrity=`` it is under
    the tag: an entry flipped from ok to error, reset from done to claimed, its
    lease shortened or its attempt rewound no longer opens.
    """
    if entry.state == CLAIMED:
        version = (
            f"claimed/{int(entry.token)}/{int(entry.attempt)}/"
            f"{_seconds(entry.lease_until)}/{_seconds(entry.created)}"
        )
    else:
        version = f"{entry.state}/{entry.outcome}/{int(entry.token)}/{int(entry.attempt)}"
    return RecordIdentity(
        tenant,
        thread,
        "",
        RecordKind.EFFECT,
        "",
        entry.effect_id,
        "state:" + version,
        EFFECT_CHANNEL,
    )


def claim_problem(entry: StoredEffect) -> str | None:
    """What is wrong with the shape of a stored entry (None when nothing is).

    These are the checks that need no key: a state the saver never writes, a
    done entry without outcome or record, a claim carrying an outcome, a
    missing state record, an attempt count that left the token.
    """
    if entry.state not in (CLAIMED, DONE):
        return f"its state is {entry.state!r}"
    if entry.result is None:
        return "its state record is missing"
    if entry.state == DONE and entry.outcome not in (OK, ERROR):
        return f"it is done with outcome {entry.outcome!r}"
    if entry.state == CLAIMED and entry.outcome is not None:
        return f"it is claimed but has the outcome {entry.outcome!r}"
    if entry.token < 1 or entry.attempt != entry.token:
        return f"its attempt {entry.attempt} does not match its token {entry.token}"
    return None


def fresh_claim(effect_id: str, request: Sealed, lease_until: float, now: float) -> StoredEffect:
    """The entry a first claim writes (its state record is sealed for it)."""
    return StoredEffect(effect_id, CLAIMED, 1, 1, float(lease_until), request, created=float(now))


def taken_over(entry: StoredEffect, lease_until: float) -> StoredEffect:
    """The entry a takeover of the (checked, expired) claim ``entry`` writes."""
    return dataclasses.replace(
        entry,
        token=entry.token + 1,
        attempt=entry.attempt + 1,
        lease_until=float(lease_until),
        result=None,
        won=True,
    )


def done_entry(entry: StoredEffect, token: int, outcome: str) -> StoredEffect:
    """The entry a completion under ``token`` leaves (what its record is sealed for)."""
    return dataclasses.replace(
        entry, state=DONE, token=int(token), attempt=int(token), outcome=outcome
    )


def releasable(token: int) -> bool:
    """Whether a claim held under ``token`` is deleted when its execution stops without a
    result the journal keeps (a transient error, an interrupt, a failed read before the
    effect ran), so that the next call runs the effect as a first attempt.

    Only a first claim (token 1): the entry came into being with it, so nothing else ran
    under it. A claim taken over (token > 1) follows an execution that never recorded a
    result and may have happened: deleting the entry would forget it, and the next call
    would run the effect again as attempt 1, unknown to ``on_ambiguous``. That claim is
    kept instead; once its lease runs out the next call takes it over (attempt + 1).
    """
    return int(token) == 1


def audit_entry(chain: Any, tenant: str, thread: str, entry: StoredEffect) -> str | None:
    """What is wrong with one stored entry, seen with the chain key alone (no data key):
    its shape, and the integrity tags of its request and its state record (for
    ``langgraph-durable verify``). None when it holds.

    Args:
        chain: The saver's ``ChainKey`` (``integrity=``); its ``check`` raises on a bad tag.
    """
    problem = claim_problem(entry)
    if problem is not None:
        return f"effect-journal entry {entry.effect_id!r} of thread {thread!r}: {problem}"
    assert entry.result is not None
    try:
        chain.check(request_identity(tenant, thread, entry.effect_id), entry.request)
        chain.check(state_identity(tenant, thread, entry), entry.result)
    except DurableError as exc:
        return f"effect-journal entry {entry.effect_id!r} of thread {thread!r}: {exc}"
    return None


def no_takeover(takeover: bool) -> None:
    """Refuse the retired ``takeover=True`` of a backend's ``effect_claim``."""
    if takeover:
        raise InvalidInputError(
            "effect_claim no longer takes an expired claim over: the saver checks the "
            "stored entry, then calls effect_takeover with the token it read"
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a backend's answer to a claim.

    ``action`` is one of:

    * ``"run"``: this caller holds the claim (``token``, ``attempt``); execute.
    * ``"replay"``: a result is recorded; return it (or raise the recorded error).
    * ``"wait"``: another execution holds a live lease; look again later.
    * ``"takeover"``: a claim with no result and an expired lease that this
      caller may take over (the saver does, conditioned on the token it read).
    * ``"ambiguous"``: a claim with no result and an expired lease, and this
      caller did not take it over (policy ``fail``).
    """

    action: str
    token: int = 0
    attempt: int = 0


def decide(entry: StoredEffect, now: float, takeover: bool = False) -> Decision:
    """The decision for ``entry`` as a claim returned it at time ``now``.

    With ``takeover``, an expired claim decides ``"takeover"`` (the caller then
    takes it over, conditioned on its token) instead of ``"ambiguous"``.
    """
    if entry.won:
        return Decision("run", entry.token, entry.attempt)
    if entry.state == DONE:
        return Decision("replay", entry.token, entry.attempt)
    if entry.lease_until > now:
        return Decision("wait", entry.token, entry.attempt)
    return Decision("takeover" if takeover else "ambiguous", entry.token, entry.attempt)
