"""The settings a store takes (``ttl=``, ``index=``), checked the same on every backend.

Pure: no driver import, no I/O.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError

__all__ = ["TTL_KEYS", "check_ttl", "check_index"]

#: The keys of LangGraph's ``TTLConfig``.
TTL_KEYS = frozenset({"default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired"})


def check_ttl(ttl: Any) -> dict[str, Any] | None:
    """``ttl`` as a ``TTLConfig`` dict (None: no TTL); a clear error otherwise."""
    if ttl is None:
        return None
    if not isinstance(ttl, dict) or set(ttl) - TTL_KEYS:
        raise ConfigurationError(
            f"ttl must be a TTLConfig dict with keys among {sorted(TTL_KEYS)}, got {ttl!r}"
        )
    default = ttl.get("default_ttl")
    if default is not None and (
        isinstance(default, bool) or not isinstance(default, (int, float)) or default <= 0
    ):
        raise ConfigurationError(f"default_ttl must be minutes > 0 or None, got {default!r}")
    return dict(ttl)


def check_index(index: Any) -> dict[str, Any] | None:
    """``index`` as an ``IndexConfig`` dict (None: no search by meaning)."""
    if index is None:
        return None
    if not isinstance(index, dict) or "embed" not in index:
        raise ConfigurationError(
            "index must be an IndexConfig dict with 'embed' (and 'dims', optionally "
            f"'fields'), got {index!r}"
        )
    dims = index.get("dims")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        raise ConfigurationError(f"index dims must be a positive integer, got {dims!r}")
    return dict(index)
