"""Decoding stored payloads by an allowlist: reading a record never runs what it names.

LangGraph's serializer stores an object as the module and name of its class (or
of a function) with the arguments to rebuild it, and by default imports that
module and calls that name on read. Whoever can write the storage can then run
code in every process that reads it. :class:`AllowlistSerializer`, the savers'
default ``serde``, decodes the same bytes but rebuilds only the types on its
list:

- standard-library value types and LangChain messages and documents (LangGraph's
  own safe list, ``SAFE_MSGPACK_TYPES``), LangGraph's types (``Send``,
  ``Command``, ``Interrupt``, ...) and pydantic's secret strings;
- the classes of a compiled graph's schemas: ``StateGraph.compile`` hands them
  to the saver's ``with_allowlist``, which clones the saver with this
  serializer's list extended (:func:`collect_schema_allowlists` turns LangGraph's
  collection on without its ``LANGGRAPH_STRICT_MSGPACK`` variable);
- what the application adds: ``AllowlistSerializer(allowed=[MyClass, ...])``.

Anything else is refused with :class:`~langgraph_durable.errors.CorruptRecordError`
before any import or call: a type off the list, a method call other than
``datetime.fromisoformat``, an unknown extension code, a ``pickle`` payload, a
LangChain ``lc`` envelope in a ``json`` payload. A type on the list whose module
is not importable here (moved or renamed since it was stored) reads back as its
stored data, as LangGraph does, with a warning.

Opting out: pass a permissive serializer as ``serde``, e.g.
``JsonPlusSerializer(allowed_msgpack_modules=True)``; a ``serde`` given to a saver
is used as given.
"""

from __future__ import annotations

import copy
import datetime
import importlib
import json
import logging
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_METHODS, SAFE_MSGPACK_TYPES
from langgraph.checkpoint.serde.jsonplus import (
    EXT_CONSTRUCTOR_KW_ARGS,
    EXT_CONSTRUCTOR_POS_ARGS,
    EXT_CONSTRUCTOR_SINGLE_ARG,
    EXT_DELTA_SNAPSHOT,
    EXT_METHOD_SINGLE_ARG,
    EXT_NUMPY_ARRAY,
    EXT_PYDANTIC_V1,
    EXT_PYDANTIC_V2,
    JsonPlusSerializer,
)
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from ..errors import ConfigurationError, CorruptRecordError

__all__ = ["AllowlistSerializer", "BASE_ALLOWLIST", "collect_schema_allowlists"]

logger = logging.getLogger(__name__)

#: What every :class:`AllowlistSerializer` rebuilds: LangGraph's safe types (standard
#: library values, LangChain messages and documents, LangGraph's own types) and
#: pydantic's secret strings.
BASE_ALLOWLIST: frozenset[tuple[str, str]] = frozenset(
    {(str(key[0]), str(key[1])) for key in SAFE_MSGPACK_TYPES if len(key) == 2}
    | {("pydantic.types", "SecretStr"), ("pydantic.types", "SecretBytes")}
)

_CONSTRUCTORS = frozenset(
    {
        EXT_CONSTRUCTOR_SINGLE_ARG,
        EXT_CONSTRUCTOR_POS_ARGS,
        EXT_CONSTRUCTOR_KW_ARGS,
        EXT_PYDANTIC_V1,
        EXT_PYDANTIC_V2,
    }
)
_UNRESOLVED = object()
_MAX_WARNED = 1000
_warned: set[tuple[str, str]] = set()
_LC_KINDS = frozenset({"constructor", "secret", "not_implemented"})


class _Refused(Exception):
    """A stored payload names something this serializer does not rebuild."""


def _keys(items: Iterable[Any]) -> dict[tuple[str, str], Any]:
    """``{(module, name): class or None}`` of classes and ``(module, name)`` pairs."""
    out: dict[tuple[str, str], Any] = {}
    for item in items:
        if isinstance(item, type):
            out[(item.__module__, item.__name__)] = item
        elif (
            isinstance(item, tuple)
            and len(item) == 2
            and all(isinstance(part, str) and part for part in item)
        ):
            out.setdefault((item[0], item[1]), None)
        else:
            raise ConfigurationError(
                f"an allowlist entry must be a class or a (module, name) pair, got {item!r}"
            )
    return out


def collect_schema_allowlists() -> None:
    """Have ``StateGraph.compile`` hand a graph's schema classes to its saver.

    LangGraph collects the classes of a graph's schemas and calls the saver's
    ``with_allowlist`` only when ``LANGGRAPH_STRICT_MSGPACK`` is set. This turns that
    collection on for graphs compiled from now on (what the variable does for
    graphs). A saver whose serializer has its own permissive setting (LangGraph's
    default ``JsonPlusSerializer``) is returned unchanged by ``with_allowlist``.
    """
    try:
        from langgraph._internal import _serde
    except ImportError:  # only langgraph-checkpoint installed: no graphs to compile
        return
    if hasattr(_serde, "STRICT_MSGPACK_ENABLED"):
        _serde.STRICT_MSGPACK_ENABLED = True  # type: ignore[attr-defined]


class AllowlistSerializer(JsonPlusSerializer):
    """LangGraph's serializer that rebuilds only the types on its allowlist.

    Writes exactly what ``JsonPlusSerializer`` writes; reads it back without
    importing or calling anything a payload names that is not on the list (see
    the module doc). ``with_msgpack_allowlist`` (what ``with_allowlist`` of a saver
    calls) returns a copy with the list extended.

    Args:
        allowed: More classes (or ``(module, name)`` pairs) to rebuild, beside
            :data:`BASE_ALLOWLIST` and the classes of compiled graphs' schemas.
    """

    def __init__(self, *, allowed: Iterable[type | tuple[str, str]] = ()) -> None:
        super().__init__(allowed_msgpack_modules=None)
        given = _keys(allowed)
        self._allowed: frozenset[tuple[str, str]] = BASE_ALLOWLIST | frozenset(given)
        self._allowed_msgpack_modules = set(self._allowed)  # what LangGraph's own code reads
        self._resolved: dict[tuple[str, str], Any] = {
            key: cls for key, cls in given.items() if cls is not None
        }

    @property
    def allowed(self) -> frozenset[tuple[str, str]]:
        """The ``(module, name)`` of every type this serializer rebuilds."""
        return self._allowed

    def with_msgpack_allowlist(
        self, extra_allowlist: Iterable[tuple[str, ...] | type]
    ) -> AllowlistSerializer:
        extra = _keys(extra_allowlist)
        if extra.keys() <= self._allowed:
            return self
        clone = copy.copy(self)
        clone._allowed = self._allowed | frozenset(extra)
        clone._allowed_msgpack_modules = set(clone._allowed)
        clone._resolved = dict(self._resolved)
        clone._resolved.update((key, cls) for key, cls in extra.items() if cls is not None)
        return clone

    # ---- reading ----------------------------------------------------------------

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, raw = data
        if type_ == "msgpack":
            return self._unpack(raw)
        if type_ == "null":
            return None
        if type_ == "bytes":
            return raw
        if type_ == "bytearray":
            return bytearray(raw)
        if type_ == "json":
            return json.loads(raw, object_hook=_plain_json)
        if type_ == "pickle":
            raise CorruptRecordError(
                "a stored payload of type 'pickle' is never decoded (unpickling runs code "
                "the payload names); our savers do not write pickle"
            )
        raise CorruptRecordError(f"unknown stored payload type {type_!r}")

    def _unpack(self, raw: bytes) -> Any:
        refused: list[str] = []

        def hook(code: int, data: bytes) -> Any:
            try:
                return self._ext(code, data, hook)
            except _Refused as exc:
                refused.append(str(exc))
                raise

        try:
            return ormsgpack.unpackb(raw, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        except ValueError:
            if refused:  # ormsgpack reports a hook's error as "ext_hook failed"
                raise CorruptRecordError(
                    f"stored payload refused: {refused[0]} (the savers' serializer rebuilds "
                    "only allowlisted types; see langgraph_durable.protect.allowlist)"
                ) from None
            raise

    def _ext(self, code: int, data: bytes, hook: Callable[[int, bytes], Any]) -> Any:
        value = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        if code == EXT_DELTA_SNAPSHOT:
            return _DeltaSnapshot(value)
        if code == EXT_NUMPY_ARRAY:
            return _numpy_array(value)
        if code != EXT_METHOD_SINGLE_ARG and code not in _CONSTRUCTORS:
            raise _Refused(f"unknown msgpack extension code {code}")
        if (
            not isinstance(value, (list, tuple))
            or len(value) < 3
            or not isinstance(value[0], str)
            or not isinstance(value[1], str)
        ):
            raise _Refused(f"malformed msgpack extension {code}")
        module, name, arg = value[0], value[1], value[2]
        if code == EXT_METHOD_SINGLE_ARG:
            method = value[3] if len(value) > 3 else None
            if (module, name, method) not in SAFE_MSGPACK_METHODS or not isinstance(arg, str):
                raise _Refused(f"method call {module}.{name}.{method} is not allowed")
            return datetime.datetime.fromisoformat(arg)
        key = (module, name)
        if key not in self._allowed:
            raise _Refused(f"{module}.{name} is not on the decoding allowlist")
        if key == ("re", "compile"):
            return _pattern(arg)
        cls = self._resolve(key)
        if cls is _UNRESOLVED:
            return _stored_data(key, arg, "its module or class is not importable here")
        if not isinstance(cls, type):
            raise _Refused(f"{module}.{name} is not a class")
        try:
            return _build(cls, code, arg)
        except Exception as exc:  # a class that changed since: its data, as LangGraph does
            return _stored_data(key, arg, f"{type(exc).__name__} rebuilding it")

    def _resolve(self, key: tuple[str, str]) -> Any:
        cls = self._resolved.get(key)
        if cls is not None:
            return cls
        module = sys.modules.get(key[0])
        if module is None:
            try:
                module = importlib.import_module(key[0])  # on the allowlist
            except Exception:
                return _UNRESOLVED
        cls = getattr(module, key[1], _UNRESOLVED)
        if cls is not _UNRESOLVED:
            self._resolved[key] = cls
        return cls


def _build(cls: type, code: int, arg: Any) -> Any:
    if code == EXT_CONSTRUCTOR_SINGLE_ARG:
        return cls(arg)
    if code == EXT_CONSTRUCTOR_POS_ARGS:
        if cls.__module__ == "langgraph.types" and cls.__name__ == "Send" and len(arg) == 3:
            return cls(arg[0], arg[1], timeout=arg[2])  # type: ignore[call-arg]
        return cls(*arg)
    if not isinstance(arg, dict):
        raise TypeError("keyword arguments are not a map")
    if code == EXT_CONSTRUCTOR_KW_ARGS:
        return cls(**arg)
    try:
        return cls(**arg)
    except Exception:  # a model whose fields changed: without validation, as LangGraph does
        construct = "construct" if code == EXT_PYDANTIC_V1 else "model_construct"
        return getattr(cls, construct)(**arg)


def _stored_data(key: tuple[str, str], arg: Any, why: str) -> Any:
    if key not in _warned and len(_warned) < _MAX_WARNED:
        _warned.add(key)
        logger.warning(
            "read %s.%s back as its stored data: %s (it is on the decoding allowlist)",
            key[0],
            key[1],
            why,
        )
    return arg


def _pattern(arg: Any) -> re.Pattern[Any]:
    if (
        not isinstance(arg, (list, tuple))
        or len(arg) != 2
        or not isinstance(arg[0], (str, bytes))
        or not isinstance(arg[1], int)
    ):
        raise _Refused("malformed regular expression")
    return re.compile(arg[0], arg[1])


def _numpy_array(parts: Any) -> Any:
    try:
        import numpy
    except ImportError:
        raise _Refused("a numpy array, and numpy is not installed") from None
    try:
        dtype_str, shape, order, buf = parts
        dtype = numpy.dtype(dtype_str)
    except Exception:
        raise _Refused("malformed numpy array") from None
    if dtype.hasobject:
        raise _Refused("a numpy array of Python objects")
    return numpy.frombuffer(buf, dtype=dtype).reshape(shape, order=order)


def _plain_json(value: dict[str, Any]) -> Any:
    if "lc" in value and value.get("type") in _LC_KINDS:
        raise CorruptRecordError(
            "a stored json payload holds a LangChain serialized object "
            f"({value.get('type')} {value.get('id')!r}), which is never rebuilt on read"
        )
    return value
