"""Where in a value the serializer fails: ``messages[3].content``, for error messages.

Only the error path walks a value: the pipeline serializes first and, when the
serializer refuses, :func:`culprit_path` descends into the first child the
serializer also refuses until no child does. :func:`has_lone_surrogate` finds a
string LangGraph's serializer would store with ``?`` in place of a lone surrogate
(the pipeline calls it only when the serialized bytes hold a ``?``).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["culprit_path", "has_lone_surrogate"]

# Path segments shown in full; a longer path shows its start, its end and its depth.
_SHOWN = 12
_KEY_REPR = 40


def _short(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= _KEY_REPR else text[: _KEY_REPR - 3] + "..."


def _children(value: Any) -> Iterator[tuple[str, Any]]:
    """``(path segment, child)`` of a container, a model or a dataclass; none otherwise."""
    if isinstance(value, (str, bytes, bytearray, int, float, bool)) or value is None:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"[{_short(key)}]", item
        for key in value:
            yield f"[{_short(key)}] (the key)", key
    elif isinstance(value, (list, tuple, deque)):
        for index, item in enumerate(value):
            yield f"[{index}]", item
    elif isinstance(value, (set, frozenset)):
        for item in value:
            yield f"{{{_short(item)}}}", item
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield f".{f.name}", getattr(value, f.name, None)
    elif hasattr(value, "__pydantic_fields_set__") or hasattr(value, "__fields_set__"):
        for name, item in vars(value).items():  # a pydantic model's field values
            yield f".{name}", item


def culprit_path(value: Any, root: str, fails: Callable[[Any], bool]) -> tuple[str, Any]:
    """The path from ``root`` to the deepest part of ``value`` that ``fails``, and that part.

    ``value`` itself is known to fail; each step descends into the first child
    that fails too.
    """
    segments: list[str] = []
    node = value
    while True:
        for segment, child in _children(node):
            if fails(child):
                segments.append(segment)
                node = child
                break
        else:
            break
    if len(segments) > _SHOWN:
        shown = [*segments[: _SHOWN // 2], "...", *segments[-3:]]
        return f"{root}{''.join(shown)} ({len(segments)} levels deep)", node
    return root + "".join(segments), node


def _surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_LEAVES = (int, float, bool, bytes, bytearray, type(None))


def has_lone_surrogate(value: Any) -> bool:
    """Whether a string anywhere in ``value`` (keys included) holds a lone surrogate."""
    stack = [value]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        node = pop()
        kind = type(node)
        if kind is str:
            if not node.isascii() and _surrogate(node):
                return True
        elif kind is dict:
            extend(node.values())
            extend(node)
        elif kind is list or kind is tuple:
            extend(node)
        elif kind in _LEAVES:
            continue
        elif isinstance(node, str):
            push(str(node))
        elif hasattr(node, "__pydantic_fields_set__"):
            extend(vars(node).values())
        else:
            extend(child for _segment, child in _children(node))
    return False
