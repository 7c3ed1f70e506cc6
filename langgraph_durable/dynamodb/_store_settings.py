"""Settings of a LangGraph store (backend-neutral checks: TTL, index, tenant).

Pure: no driver import. The DynamoDB store checks its options here; the checks
are the same as the other backends' stores make.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.runnables.config import var_child_runnable_config

from .._core.ids import tenant_from_config
from ..errors import ConfigurationError

__all__ = ["StoreTenant", "check_ttl", "check_index", "tenant_resolver", "check_clock"]

StoreTenant = Callable[[], "str | None"]

_TTL_KEYS = {"default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired"}


def tenant_of_run() -> str | None:
    """The ``tenant_id`` of the graph run this call is part of (``configurable``), if any."""
    return tenant_from_config(var_child_runnable_config.get())


def tenant_resolver(tenant: Any) -> StoreTenant:
    """The tenant of a call: None (the graph run's ``tenant_id``), a fixed id, a callable."""
    if tenant is None:
        return tenant_of_run
    if isinstance(tenant, str) and tenant:
        fixed = tenant
        return lambda: fixed
    if callable(tenant):
        return tenant  # type: ignore[no-any-return]
    raise ConfigurationError(
        f"tenant must be None, a non-empty string or a callable() -> str, got {tenant!r}"
    )


def check_ttl(ttl: Any) -> dict[str, Any] | None:
    """LangGraph's ``TTLConfig`` (a dict), checked."""
    if ttl is None:
        return None
    if not isinstance(ttl, dict) or set(ttl) - _TTL_KEYS:
        raise ConfigurationError(
            f"ttl must be a TTLConfig dict with keys among {sorted(_TTL_KEYS)}, got {ttl!r}"
        )
    default = ttl.get("default_ttl")
    if default is not None and (
        isinstance(default, bool) or not isinstance(default, (int, float)) or default <= 0
    ):
        raise ConfigurationError(f"default_ttl must be minutes > 0 or None, got {default!r}")
    return dict(ttl)


def check_index(index: Any) -> dict[str, Any] | None:
    """LangGraph's ``IndexConfig`` (a dict with ``embed``), checked."""
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


def check_clock(clock: Any) -> Callable[[], float] | None:
    """An injected clock (Unix seconds), or None."""
    if clock is not None and not callable(clock):
        raise ConfigurationError(f"clock must be a callable returning Unix seconds, got {clock!r}")
    return clock  # type: ignore[no-any-return]
