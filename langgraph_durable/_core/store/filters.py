"""Search filters: ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, nested dicts and
lists; numbers compared as numbers, strings as strings (pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...errors import InvalidInputError

_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


# ---- filters -----------------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ordered(value: Any, operator: str, operand: Any) -> bool:
    """``value <op> operand``: numbers as numbers, strings as strings, else false."""
    if _number(value) and _number(operand):
        if isinstance(value, float) and math.isnan(value):
            return False
    elif not (isinstance(value, str) and isinstance(operand, str)):
        return False
    if operator == "$gt":
        return bool(value > operand)
    if operator == "$gte":
        return bool(value >= operand)
    if operator == "$lt":
        return bool(value < operand)
    return bool(value <= operand)


def _apply(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    if operator in _OPERATORS:
        return _ordered(value, operator, operand)
    raise InvalidInputError(
        f"unsupported filter operator {operator!r}: use one of {', '.join(_OPERATORS)}"
    )


def _compare(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_apply(value, k, v) for k, v in wanted.items())
        if not isinstance(value, Mapping):
            return False
        return all(_compare(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(wanted)
            and all(_compare(a, b) for a, b in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes a search filter (None or {}: every value)."""
    if not filter:
        return True
    return all(_compare(value.get(k), wanted) for k, wanted in filter.items())
