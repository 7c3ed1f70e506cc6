"""The settings a store takes (``ttl=``, ``index=``, ``clock=``, ``max_search_items=``),
checked the same on every backend.

Pure: no driver import, no I/O.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError, InvalidInputError

__all__ = [
    "TTL_KEYS",
    "DEFAULT_MAX_SEARCH_ITEMS",
    "check_ttl",
    "check_index",
    "check_clock",
    "check_max_search_items",
    "search_too_large",
]

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


#: Items one search may read under its prefix by default (``max_search_items``).
DEFAULT_MAX_SEARCH_ITEMS = 10_000


def check_clock(clock: Any) -> Any:
    """An injected clock (a callable returning Unix seconds), or None."""
    if clock is not None and not callable(clock):
        raise ConfigurationError(f"clock must be a callable returning Unix seconds, got {clock!r}")
    return clock


def check_max_search_items(value: Any) -> int:
    """``max_search_items``: a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"max_search_items must be a positive integer, got {value!r}")
    return value


def search_too_large(prefix: Any, read: int | None, limit: int) -> InvalidInputError:
    """The error of a search that would read more than ``max_search_items`` items.

    Searches are exact (filters and scores apply after decryption, in Python), so a
    search answers from every item under its prefix or refuses: never from part of them.
    """
    many = "more" if read is None else str(read)
    return InvalidInputError(
        f"a search under namespace prefix {tuple(prefix)!r} would read {many} items, "
        f"more than max_search_items={limit} (searches are exact, after decryption): "
        "search a narrower prefix or raise the store's max_search_items; "
        "nothing of this batch was written"
    )
