"""Settings of the DynamoDB store: its tenant and clock; ``ttl=`` and ``index=`` are
checked by ``_core.store_settings``, as on every backend.

Pure: no driver import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.runnables.config import var_child_runnable_config

from .._core.ids import tenant_from_config
from .._core.store_settings import check_index, check_ttl
from ..errors import ConfigurationError

__all__ = ["StoreTenant", "check_ttl", "check_index", "tenant_resolver", "check_clock"]

StoreTenant = Callable[[], "str | None"]


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


def check_clock(clock: Any) -> Callable[[], float] | None:
    """An injected clock (Unix seconds), or None."""
    if clock is not None and not callable(clock):
        raise ConfigurationError(f"clock must be a callable returning Unix seconds, got {clock!r}")
    return clock  # type: ignore[no-any-return]
