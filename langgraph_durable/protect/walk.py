"""Rewrite every string inside a value, keeping the value's types.

Used by redaction: it walks what a graph stores (LangChain messages, dicts,
lists, tuples, sets, bytes that are UTF-8 text, dataclasses, pydantic models,
LangGraph ``Send`` and ``Interrupt``) and returns a copy in which each string went through a
function. Objects in which nothing changed are returned as they are (no copy),
and the input is never mutated, so the running graph keeps its own objects.

Identifiers are left alone, since rewriting them would break an agent: message
and tool-call ids, ``tool_call_id``, a tool call's ``name`` and ``type``, and
a message's ``response_metadata`` / ``usage_metadata`` (model bookkeeping).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from ..errors import InvalidInputError

_Send: Any
try:  # langgraph itself is optional (langgraph-checkpoint is what the savers need)
    from langgraph.types import Send as _Send
except ImportError:  # pragma: no cover - depends on what is installed
    _Send = None

__all__ = ["StringRewriter", "BoundedCache"]

# Keys and fields that hold identifiers or bookkeeping, never user text.
_ID_FIELDS = frozenset({"id", "tool_call_id", "type"})
# A message's ``name`` (who spoke: a person's name, an agent's) is text like any other.
_MESSAGE_SKIP = frozenset({"id", "type", "tool_call_id", "response_metadata"})
_MESSAGE_SKIP |= {"usage_metadata", "lc_attributes", "example"}
_TOOL_CALL_TEXT = ("args",)
_TOOL_CALL_FIELDS = frozenset({"tool_calls", "invalid_tool_calls", "tool_call_chunks"})
#: Containers nested deeper than this are refused, never stored unwalked (the serializer
#: refuses values not much deeper anyway).
_MAX_DEPTH = 200
_PLANS: dict[type, tuple[str, ...] | None] = {}


def _message_plan(cls: type) -> tuple[str, ...] | None:
    """The fields of a message class that hold text (None: not a pydantic message)."""
    plan = _PLANS.get(cls, ())
    if plan == ():
        fields = getattr(cls, "model_fields", None)
        plan = (
            tuple(name for name in fields if name not in _MESSAGE_SKIP)
            if isinstance(fields, dict)
            else None
        )
        _PLANS[cls] = plan
    return plan


def _shape(item: Any) -> tuple[int, int]:
    """Which object a field holds, and its size: a field replaced or grown changes it."""
    return id(item), len(item) if isinstance(item, (list, dict, str)) else -1


class BoundedCache:
    """A thread-safe cache of at most ``size`` entries, the oldest written dropped first.

    As the walker's message memo it holds each message it remembers, which keeps
    that message's ``id()`` from being reused while it is remembered.
    """

    def __init__(self, size: int) -> None:
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        return self._items.get(key)

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            if len(self._items) > self._size:
                self._items.popitem(last=False)


def _pydantic_fields(value: Any) -> Any:
    fields = getattr(type(value), "model_fields", None)
    return fields if isinstance(fields, dict) else None


class StringRewriter:
    """Applies ``rewrite(text) -> text`` to every string inside a value.

    Args:
        rewrite: The function applied to each string.
    """

    def __init__(
        self,
        rewrite: Callable[[str], str],
        memo: BoundedCache | None = None,
        scope: Hashable = None,
        found: list[Any] | None = None,
    ) -> None:
        self.rewrite = rewrite
        self.memo = memo
        self.scope = scope
        self.found = found

    def __call__(self, value: Any) -> Any:
        return self._walk(value, 0)

    def _walk(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return self.rewrite(value)
        if value is None or isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, bytes):
            return self._bytes(value)
        if depth > _MAX_DEPTH:
            raise InvalidInputError(
                f"a value nested deeper than {_MAX_DEPTH} levels cannot be redacted; "
                "it is not stored"
            )
        if isinstance(value, dict):
            return self._dict(value, depth, _ID_FIELDS)
        if isinstance(value, list):
            return self._seq(value, depth, list)
        if isinstance(value, tuple):
            if hasattr(value, "_fields"):  # a namedtuple
                items = self._seq(list(value), depth, list)
                return value if items is value else type(value)(*items)
            return self._seq(value, depth, type(value) if type(value) is tuple else None)
        if isinstance(value, (set, frozenset)):
            items = list(value)
            new = self._seq(items, depth, list)
            return value if new is items else type(value)(new)
        message = self._message(value, depth)
        if message is not None:
            return message
        if _pydantic_fields(value) is not None:
            return self._model(value, depth, _ID_FIELDS)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self._dataclass(value, depth)
        send = self._send(value, depth)
        if send is not None:
            return send
        return value

    def _bytes(self, value: bytes) -> bytes:
        """Bytes that are UTF-8 text are text: rewritten, and encoded again if changed."""
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            return value
        new = self.rewrite(text)
        return value if new == text else new.encode("utf-8")

    def _dict(self, value: dict[Any, Any], depth: int, skip: frozenset[str]) -> dict[Any, Any]:
        out: dict[Any, Any] | None = None
        for key, item in value.items():
            if key in skip:
                continue
            new = self._walk(item, depth + 1)
            if new is not item:
                if out is None:
                    out = dict(value)
                out[key] = new
        if out is None:
            return value
        if type(value) is not dict:
            try:
                return type(value)(out)
            except Exception:  # a dict subclass with another constructor
                return out
        return out

    def _seq(self, value: Any, depth: int, kind: Any) -> Any:
        out: list[Any] | None = None
        for i, item in enumerate(value):
            new = self._walk(item, depth + 1)
            if new is not item:
                if out is None:
                    out = list(value)
                out[i] = new
        if out is None:
            return value
        if kind is list and type(value) is not list:
            try:
                return type(value)(out)
            except Exception:
                return out
        return out if kind is list else (kind or tuple)(out)

    def _model(self, value: Any, depth: int, skip: frozenset[str]) -> Any:
        changes: dict[str, Any] = {}
        for name in _pydantic_fields(value):
            if name in skip:
                continue
            item = getattr(value, name, None)
            new = self._walk(item, depth + 1)
            if new is not item:
                changes[name] = new
        return value.model_copy(update=changes) if changes else value

    def _message(self, value: Any, depth: int) -> Any:
        """A LangChain message: content, tool-call arguments, kwargs, artifact.

        With a memo, a message object seen before with the same top-level field
        objects (and sizes) gives back its earlier result without a walk:
        LangGraph keeps the same message objects from step to step, so a long
        conversation is walked once, not at every step.
        """
        if not (hasattr(value, "content") and hasattr(value, "additional_kwargs")):
            return None
        plan = _message_plan(type(value))
        if plan is None:
            return None
        memo = self.memo
        if memo is not None:
            # Every field, the skipped ones too: a copy made at the first walk carries
            # them as they were then, and LangGraph sets a message's id in place
            # (add_messages) after a node returned it.
            fingerprint = tuple(
                _shape(getattr(value, name, None)) for name in type(value).model_fields
            )
            key = (self.scope, id(value))
            hit = memo.get(key)
            if hit is not None and hit[0] is value and hit[1] == fingerprint:
                if self.found is not None and hit[3]:
                    self.found.extend(hit[3])
                return hit[2]
            start = len(self.found) if self.found is not None else 0
        changes: dict[str, Any] = {}
        for name in plan:
            item = getattr(value, name, None)
            if name in _TOOL_CALL_FIELDS and isinstance(item, list):
                new = self._tool_calls(item, depth)
            else:
                new = self._walk(item, depth + 1)
            if new is not item:
                changes[name] = new
        result = value.model_copy(update=changes) if changes else value
        if memo is not None:
            found = tuple(self.found[start:]) if self.found is not None else ()
            memo.put(key, (value, fingerprint, result, found))
        return result

    def _tool_calls(self, calls: list[Any], depth: int) -> list[Any]:
        out: list[Any] | None = None
        for i, call in enumerate(calls):
            if not isinstance(call, dict):
                continue
            new_call = None
            for field in _TOOL_CALL_TEXT:
                if field in call:
                    new = self._walk(call[field], depth + 2)
                    if new is not call[field]:
                        new_call = dict(call) if new_call is None else new_call
                        new_call[field] = new
            if new_call is not None:
                if out is None:
                    out = list(calls)
                out[i] = new_call
        return calls if out is None else out

    def _dataclass(self, value: Any, depth: int) -> Any:
        changes: dict[str, Any] = {}
        for field in dataclasses.fields(value):
            if not field.init or field.name in _ID_FIELDS:
                continue
            item = getattr(value, field.name, None)
            new = self._walk(item, depth + 1)
            if new is not item:
                changes[field.name] = new
        if not changes:
            return value
        try:
            return dataclasses.replace(value, **changes)
        except Exception:  # a dataclass that cannot be rebuilt is stored as it is
            return value

    def _send(self, value: Any, depth: int) -> Any:
        """LangGraph's ``Send(node, arg)`` (a slotted class, not a dataclass)."""
        if _Send is None or not isinstance(value, _Send):
            return None
        arg = self._walk(value.arg, depth + 1)
        return value if arg is value.arg else _Send(value.node, arg)
