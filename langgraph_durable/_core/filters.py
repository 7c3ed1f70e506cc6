"""Metadata filters evaluated in Python (for backends that cannot run them server side).

The semantics are PostgreSQL's ``jsonb @>`` containment on the JSON-safe
metadata projection (see ``codec.json_safe_metadata``), so every backend
answers ``list(filter=...)`` the same way: each filter key must be present and
its value contained (objects key by key, arrays element-wise as a subset,
scalars by equality, ``True`` never equal to ``1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .codec import _json_safe

__all__ = ["metadata_matches", "normalize_filter"]


def normalize_filter(filter: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The filter as JSON-safe data, or None when there is nothing to match."""
    if not filter:
        return None
    return _json_safe(dict(filter))  # type: ignore[no-any-return]


def _same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def _contains(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        return isinstance(value, dict) and all(
            k in value and _contains(value[k], v) for k, v in wanted.items()
        )
    if isinstance(wanted, list):
        if not isinstance(value, list):
            return False
        return all(any(_contains(item, w) for item in value) for w in wanted)
    if isinstance(value, (dict, list)):
        return False
    return _same_scalar(value, wanted)


def metadata_matches(metadata_index: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether stored metadata (its JSON-safe index) contains the filter.

    Args:
        metadata_index: The checkpoint's clear metadata projection.
        filter: A normalized filter (see :func:`normalize_filter`), or None.
    """
    if not filter:
        return True
    return _contains(dict(metadata_index), dict(filter))
