"""Which (tenant, thread, namespace) a call addresses, from its config (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidInputError

__all__ = ["ThreadKey", "thread_key", "tenant_from_config"]


class ThreadKey(tuple):  # noqa: SLOT001 - tiny value type
    """(tenant, thread_id, checkpoint_ns, echo_tenant) for one call."""

    __slots__ = ()

    def __new__(cls, tenant: str, thread: str, ns: str, echo_tenant: bool) -> ThreadKey:
        return tuple.__new__(cls, (tenant, thread, ns, echo_tenant))

    @property
    def tenant(self) -> str:
        return self[0]  # type: ignore[no-any-return]

    @property
    def thread(self) -> str:
        return self[1]  # type: ignore[no-any-return]

    @property
    def ns(self) -> str:
        return self[2]  # type: ignore[no-any-return]

    @property
    def echo_tenant(self) -> bool:
        return self[3]  # type: ignore[no-any-return]


def tenant_from_config(config: Mapping[str, Any] | None) -> str | None:
    """The default tenant resolver: ``config["configurable"]["tenant_id"]`` if set."""
    if not config:
        return None
    tenant = (config.get("configurable") or {}).get("tenant_id")
    return None if tenant is None else str(tenant)


def thread_key(
    config: Mapping[str, Any],
    tenant: str | None,
    default_tenant: str,
    *,
    require_ns: bool = False,
) -> ThreadKey:
    """The (tenant, thread, namespace) a call addresses.

    Args:
        config: The call's RunnableConfig.
        tenant: The tenant resolved for this call (None for the default one).
        default_tenant: The saver's default tenant.
        require_ns: Whether ``checkpoint_ns`` must be present (writes need it).

    Raises:
        InvalidInputError: The config has no ``configurable.thread_id``, or an id that
            is not valid Unicode text (a lone surrogate), which no backend can store.
    """
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    if thread is None or thread == "":
        raise InvalidInputError(
            "config['configurable']['thread_id'] is required: pass "
            "{'configurable': {'thread_id': ...}} to the graph or the saver"
        )
    ns = configurable.get("checkpoint_ns", "")
    if ns is None:
        ns = ""
    if require_ns and "checkpoint_ns" not in configurable:
        ns = ""
    key = ThreadKey(tenant or default_tenant, str(thread), str(ns), tenant is not None)
    checkpoint_id = configurable.get("checkpoint_id")
    for what, text in (
        ("thread_id", key.thread),
        ("checkpoint_ns", key.ns),
        ("tenant", key.tenant),
        ("checkpoint_id", checkpoint_id if isinstance(checkpoint_id, str) else ""),
    ):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInputError(f"{what} is not valid Unicode text: {text!r}") from exc
    return key
