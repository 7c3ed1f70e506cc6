"""The effect journal of one saver, as the wrapper and users reach it.

The entries themselves are stored by each backend's operations (``effect_claim``,
``effect_complete``, ``effect_delete``, ``effect_list``, ``effect_restore``)
through the saver's record pipeline; this class only runs those operations
from sync or async code, whichever flavour the saver is.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from .._core.effects import DONE, ERROR
from .._core.sansio import Operation
from .._saver import AsyncSaverMethods, DurableSaverBase, OpenedEffect
from ..errors import ConfigurationError

__all__ = ["EffectJournal", "EffectEntry"]


@dataclass(frozen=True, slots=True)
class EffectEntry:
    """One recorded effect of a thread, opened.

    Attributes:
        effect_id: The entry's id within the thread.
        name: The wrapped function's or tool's name.
        state: ``"claimed"`` (running, or its process died) or ``"done"``.
        attempt: Executions started under this entry.
        outcome: ``"ok"`` or ``"error"`` once done, else None.
        result: The recorded result (for an error: its type, message and arguments).
        arguments: The call's arguments as recorded (injected arguments left out).
        lease_until: Unix seconds until which a claim is presumed alive.
        created: Unix seconds of the first claim.
    """

    effect_id: str
    name: str
    state: str
    attempt: int
    outcome: str | None
    result: Any
    arguments: Any
    lease_until: float
    created: float

    @property
    def failed(self) -> bool:
        """Whether a terminal error was recorded."""
        return self.state == DONE and self.outcome == ERROR


def _entry(opened: OpenedEffect) -> EffectEntry:
    entry = opened.entry
    request = opened.request if isinstance(opened.request, dict) else {}
    return EffectEntry(
        entry.effect_id,
        str(request.get("name", "")),
        entry.state,
        entry.attempt,
        entry.outcome,
        opened.result,
        request.get("args"),
        entry.lease_until,
        entry.created,
    )


class EffectJournal:
    """The effect journal kept by one of this package's savers.

    ``@idempotent`` finds it through the running graph's checkpointer; pass one
    as ``@idempotent(journal=...)`` to use another saver's. Also the way to
    look at a thread's effects, or to forget one so it runs again.

    Args:
        saver: A langgraph-durable saver (Postgres, Redis or DynamoDB; sync or async).
    """

    def __init__(self, saver: Any) -> None:
        if not isinstance(saver, DurableSaverBase):
            raise ConfigurationError(
                "EffectJournal needs a langgraph-durable saver (PostgresSaver, RedisSaver, "
                f"DynamoDBSaver or their async twins), got {type(saver).__name__}"
            )
        self.saver: DurableSaverBase = saver
        self.is_async = isinstance(saver, AsyncSaverMethods)

    # ---- running operations from either flavour ---------------------------------

    def run(self, op: Operation[Any]) -> Any:
        """Run an operation from sync code (an async saver's loop must run in another thread)."""
        saver: Any = self.saver
        if self.is_async:
            return saver._call_on_loop(saver._arun(op))
        return saver._run(op)

    async def arun(self, op: Operation[Any]) -> Any:
        """Run an operation from async code (a sync saver's in a worker thread)."""
        saver: Any = self.saver
        if self.is_async:
            saver._bind_loop()
            return await saver._arun(op)
        return await asyncio.to_thread(saver._run, op)

    # ---- inspection ------------------------------------------------------------

    def _tenant(self, tenant_id: str | None) -> str:
        return self.saver._tenant_of(None, tenant_id)

    def entries(self, thread_id: str, *, tenant_id: str | None = None) -> list[EffectEntry]:
        """Every recorded effect of a thread (any order)."""
        op = self.saver._effect_list_op(self._tenant(tenant_id), str(thread_id))
        return [_entry(opened) for opened in self.run(op)]

    async def aentries(self, thread_id: str, *, tenant_id: str | None = None) -> list[EffectEntry]:
        """Async :meth:`entries`."""
        op = self.saver._effect_list_op(self._tenant(tenant_id), str(thread_id))
        return [_entry(opened) for opened in await self.arun(op)]

    def forget(self, thread_id: str, effect_id: str, *, tenant_id: str | None = None) -> bool:
        """Delete one entry, so the next call that reaches it executes again."""
        op = self.saver._effect_delete_op(self._tenant(tenant_id), str(thread_id), effect_id, None)
        return bool(self.run(op))

    async def aforget(
        self, thread_id: str, effect_id: str, *, tenant_id: str | None = None
    ) -> bool:
        """Async :meth:`forget`."""
        op = self.saver._effect_delete_op(self._tenant(tenant_id), str(thread_id), effect_id, None)
        return bool(await self.arun(op))
