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

from ..errors import InvalidInputError
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
    "result_identity",
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
        result: The sealed result (or recorded error) once done.
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


def result_identity(tenant: str, thread: str, effect_id: str) -> RecordIdentity:
    """The record identity the result of an entry is sealed under."""
    return RecordIdentity(
        tenant, thread, "", RecordKind.EFFECT, "", effect_id, "result", EFFECT_CHANNEL
    )


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a backend's answer to a claim.

    ``action`` is one of:

    * ``"run"``: this caller holds the claim (``token``, ``attempt``); execute.
    * ``"replay"``: a result is recorded; return it (or raise the recorded error).
    * ``"wait"``: another execution holds a live lease; look again later.
    * ``"ambiguous"``: a claim with no result and an expired lease, and this
      caller did not take it over (policy ``fail``).
    """

    action: str
    token: int = 0
    attempt: int = 0


def decide(entry: StoredEffect, now: float) -> Decision:
    """The decision for ``entry`` as a claim returned it at time ``now``."""
    if entry.won:
        return Decision("run", entry.token, entry.attempt)
    if entry.state == DONE:
        return Decision("replay", entry.token, entry.attempt)
    if entry.lease_until > now:
        return Decision("wait", entry.token, entry.attempt)
    return Decision("ambiguous", entry.token, entry.attempt)
