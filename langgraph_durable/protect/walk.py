"""Rewrite every string inside a value, keeping the value's types.

Used by redaction: it walks what a graph stores (LangChain messages, dicts with
their keys, lists, tuples, sets, deques, bytes that are UTF-8 text, dataclasses,
pydantic models, exceptions, LangGraph ``Send`` and ``Interrupt``) and returns a
copy in which each string went through a function. Objects in which nothing
changed are returned as they are (no copy), and the input is never mutated, so
the running graph keeps its own objects.

Only identifiers an agent needs unchanged are left alone: a LangChain message's
``id`` and ``type``, a ``ToolMessage``'s ``tool_call_id``, the ``id`` of a tool
call (in ``tool_calls``, ``invalid_tool_calls``, ``tool_call_chunks``,
``additional_kwargs["tool_calls"]`` and content blocks) and an ``Interrupt``'s
``id`` (LangGraph's hash, which a resume names). Everything else is walked: every
dict key and value (an ``id`` or ``type`` key of any other dict included), every
field of a dataclass or pydantic model, a message's ``name`` and metadata.

An exception (LangGraph stores a failed task's exception as a pending write) is
rebuilt with its arguments and attributes rewritten, and kept only if its
``repr()`` and ``str()``, what serializers store of it, then hold nothing the
rewrite changes; otherwise it becomes the rewritten ``repr()`` text, which is
what LangGraph's serializer stores of an exception anyway (a read gives a string
either way).
"""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import operator
import pathlib
import sys
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Any

from ..errors import InvalidInputError


def _langgraph_type(name: str) -> Any:
    """``langgraph.types.<name>`` if that module is loaded, else None.

    Not imported here: ``langgraph.types`` loads langchain-core's tracers, about a third
    of a second that every command of the CLI (which runs no graph) paid; and a value of
    one of its types exists only once the module is loaded. langgraph itself is optional
    (langgraph-checkpoint is what the savers need).
    """
    module = sys.modules.get("langgraph.types")
    return None if module is None else getattr(module, name, None)


__all__ = ["StringRewriter", "BoundedCache"]

_NO_SKIP: frozenset[str] = frozenset()
#: A message's own identifiers (its ``name``, metadata and everything else is text).
_MESSAGE_SKIP = frozenset({"id", "type", "tool_call_id"})
#: In a tool call (or a content block): its id, which a ``ToolMessage`` answers, and
#: LangChain's type literal (``"tool_call"``, ``"text"``).
_CALL_SKIP = frozenset({"id", "type"})
_CALL_LISTS = frozenset({"tool_calls", "invalid_tool_calls", "tool_call_chunks", "content"})
#: LangGraph's interrupt id (a hash of the task's path), named by ``Command(resume=...)``.
_INTERRUPT_SKIP = frozenset({"id"})
_IP_TYPES: tuple[type, ...] = (
    ipaddress.IPv4Address,
    ipaddress.IPv6Address,
    ipaddress.IPv4Interface,
    ipaddress.IPv6Interface,
    ipaddress.IPv4Network,
    ipaddress.IPv6Network,
)
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


_MUTABLE = (list, dict)
_GETTERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _field_values(value: Any) -> tuple[Any, ...]:
    """The objects every field of a message holds (the skipped ones too), then its extras."""
    cls = type(value)
    getter = _GETTERS.get(cls)
    if getter is None:
        names = tuple(cls.model_fields)
        one = operator.attrgetter(*names)
        getter = (lambda v: (one(v),)) if len(names) == 1 else one
        _GETTERS[cls] = getter
    try:
        values = getter(value)
    except AttributeError:  # a field deleted from the instance
        values = tuple(getattr(value, name, None) for name in cls.model_fields)
    extra = _extra(value)
    return (*values, *extra.values()) if extra else values


def _sizes(values: tuple[Any, ...]) -> tuple[int, ...]:
    """The sizes of the lists and dicts among ``values``: one grown in place changes them."""
    return tuple([len(v) for v in values if isinstance(v, _MUTABLE)])


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Whether two tuples hold the very same objects (never their ``__eq__``)."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


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


def _extra(value: Any) -> dict[str, Any]:
    """A pydantic model's extra fields (``extra="allow"``), which the serializer stores."""
    try:
        extra = value.__pydantic_extra__
    except AttributeError:
        return {}
    return extra if isinstance(extra, dict) else {}


def _unique_key(key: Any, taken: dict[Any, Any]) -> Any:
    """``key``, or when an earlier key already became it, ``key#2``, ``key#3``..."""
    if key not in taken:
        return key
    if not isinstance(key, (str, bytes)):
        raise InvalidInputError(
            f"two keys of a dict are the same once redacted ({type(key).__name__}); "
            "the value is not stored"
        )
    n = 2
    while True:
        candidate = f"{key}#{n}" if isinstance(key, str) else key + b"#%d" % n
        if candidate not in taken:
            return candidate
        n += 1


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

    def _text(self, value: str) -> str:
        new = self.rewrite(value)
        return value if new is value or new == value else new

    def _walk(self, value: Any, depth: int) -> Any:
        cls = type(value)
        if cls is str:
            return self._text(value)
        if _PLANS.get(cls) and depth <= _MAX_DEPTH:  # a message class met before
            message = self._message(value, depth)
            if message is not None:
                return message
        if isinstance(value, str):
            return self._text(value)
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
            return self._dict(value, depth, _NO_SKIP)
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
        if isinstance(value, deque):
            items = list(value)
            new = self._seq(items, depth, list)
            return value if new is items else deque(new, maxlen=value.maxlen)
        if isinstance(value, BaseException):
            return self._exception(value, depth)
        if isinstance(value, type):  # a class (a schema, an exception type): no text of ours
            return value
        message = self._message(value, depth)
        if message is not None:
            return message
        if _pydantic_fields(value) is not None:
            return self._model(value, depth)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self._dataclass(value, depth)
        send = self._send(value, depth)
        if send is not None:
            return send
        return self._other(value)

    def _other(self, value: Any) -> Any:
        """Value types that print as their text: secrets, paths, IP addresses."""
        if isinstance(value, pathlib.PurePath):
            text = str(value)
            new = self._text(text)
            return value if new is text else type(value)(new)
        if isinstance(value, _IP_TYPES):
            text = str(value)
            new = self._text(text)
            return value if new is text else new  # an address found is no address once masked
        secret = getattr(value, "get_secret_value", None)
        if callable(secret):  # pydantic's SecretStr / SecretBytes
            inner = secret()
            new = self._walk(inner, 0)
            return value if new is inner else type(value)(new)
        return value

    def _bytes(self, value: bytes) -> bytes:
        """Bytes that are UTF-8 text are text: rewritten, and encoded again if changed."""
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            return value
        new = self._text(text)
        return value if new is text else new.encode("utf-8")

    def _key(self, key: Any, depth: int) -> Any:
        if type(key) is str:
            return self._text(key)
        if key is None or isinstance(key, (bool, int, float)):
            return key
        return self._walk(key, depth + 1)

    def _dict(self, value: dict[Any, Any], depth: int, skip: frozenset[str]) -> dict[Any, Any]:
        """Every key and value; a value under a key in ``skip`` (an id) is kept."""
        out: dict[Any, Any] | None = None
        for i, (key, item) in enumerate(value.items()):
            if key in skip:
                new_key, new = key, item
            else:
                new_key = self._key(key, depth)
                if key in _CALL_LISTS and skip is _CALL_SKIP and isinstance(item, list):
                    new = self._calls(item, depth + 1)  # a block's tool calls
                else:
                    new = self._walk(item, depth + 1)
            if out is None:
                if new_key is key and new is item:
                    continue
                out = {}
                for j, (k, v) in enumerate(value.items()):
                    if j == i:
                        break
                    out[k] = v
            out[_unique_key(new_key, out)] = new
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

    def _calls(self, items: list[Any], depth: int) -> list[Any]:
        """Tool calls or content blocks: dicts whose ``id`` is kept, everything else walked."""
        out: list[Any] | None = None
        for i, item in enumerate(items):
            if isinstance(item, dict):
                new = self._dict(item, depth + 1, _CALL_SKIP)
            else:
                new = self._walk(item, depth + 1)
            if new is not item:
                if out is None:
                    out = list(items)
                out[i] = new
        return items if out is None else out

    def _model(self, value: Any, depth: int) -> Any:
        changes: dict[str, Any] = {}
        for name in _pydantic_fields(value):
            item = getattr(value, name, None)
            new = self._walk(item, depth + 1)
            if new is not item:
                changes[name] = new
        self._extras(value, depth, changes)
        return value.model_copy(update=changes) if changes else value

    def _extras(self, value: Any, depth: int, changes: dict[str, Any]) -> None:
        extra = _extra(value)
        for name, item in extra.items():
            new = self._walk(item, depth + 1)
            if new is not item:
                changes[name] = new

    def _message(self, value: Any, depth: int) -> Any:
        """A LangChain message: every field but its ids and type.

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
            # The memo holds the field objects themselves, so an identity check cannot be
            # fooled by a freed object's id reused by a new one.
            fields = _field_values(value)
            sizes = _sizes(fields)
            key = (self.scope, id(value))
            hit = memo.get(key)
            if hit is not None and hit[0] is value and _same(hit[1], fields) and hit[2] == sizes:
                if self.found is not None and hit[4]:
                    self.found.extend(hit[4])
                return hit[3]
            start = len(self.found) if self.found is not None else 0
        changes: dict[str, Any] = {}
        for name in plan:
            item = getattr(value, name, None)
            new: Any
            if name in _CALL_LISTS and isinstance(item, list):
                new = self._calls(item, depth)
            elif name == "additional_kwargs" and isinstance(item, dict):
                new = self._dict(item, depth + 1, _CALL_SKIP)  # OpenAI-style tool_calls
            else:
                new = self._walk(item, depth + 1)
            if new is not item:
                changes[name] = new
        self._extras(value, depth, changes)
        result = value.model_copy(update=changes) if changes else value
        if memo is not None:
            found = tuple(self.found[start:]) if self.found is not None else ()
            memo.put(key, (value, fields, sizes, result, found))
        return result

    def _dataclass(self, value: Any, depth: int) -> Any:
        """Every field (``init=False`` ones too); the copy is made without ``__init__``."""
        interrupt = _langgraph_type("Interrupt")
        skip = _INTERRUPT_SKIP if interrupt is not None and type(value) is interrupt else ()
        changes: dict[str, Any] = {}
        for field in dataclasses.fields(value):
            if field.name in skip or not hasattr(value, field.name):
                continue
            item = getattr(value, field.name)
            new = self._walk(item, depth + 1)
            if new is not item:
                changes[field.name] = new
        if not changes:
            return value
        try:
            out = copy.copy(value)
            for name, new in changes.items():
                object.__setattr__(out, name, new)
        except Exception as exc:
            raise InvalidInputError(
                f"a {type(value).__name__} holding text to redact cannot be copied; "
                "it is not stored"
            ) from exc
        return out

    def _exception(self, exc: BaseException, depth: int) -> Any:
        """The exception with its text rewritten, or its rewritten ``repr()`` (see the module)."""
        args = exc.args
        new_args = self._seq(args, depth, tuple)
        state = getattr(exc, "__dict__", None) or {}
        new_state = self._dict(state, depth, _NO_SKIP) if state else state
        rebuilt: BaseException | None = exc
        if new_args is not args or new_state is not state:
            try:
                rebuilt = type(exc).__new__(type(exc), *new_args)
                rebuilt.args = tuple(new_args)
                rebuilt.__dict__.update(new_state)
            except Exception:
                rebuilt = None
        if rebuilt is not None:
            try:
                forms = (repr(rebuilt), str(rebuilt))
            except Exception:
                forms = None
            if forms is not None and all(self._text(text) is text for text in forms):
                return rebuilt
        try:
            text = repr(exc)
        except Exception as error:
            raise InvalidInputError(
                f"an exception of type {type(exc).__name__} cannot be shown as text to be "
                "redacted; it is not stored"
            ) from error
        return self._text(text)

    def _send(self, value: Any, depth: int) -> Any:
        """LangGraph's ``Send(node, arg)`` (a slotted class, not a dataclass)."""
        send = _langgraph_type("Send")
        if send is None or not isinstance(value, send):
            return None
        arg = self._walk(value.arg, depth + 1)
        if arg is value.arg:
            return value
        timeout = getattr(value, "timeout", None)
        return (
            send(value.node, arg, timeout=timeout) if timeout is not None else send(value.node, arg)
        )
