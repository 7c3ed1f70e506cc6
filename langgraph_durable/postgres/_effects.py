"""The effect journal on PostgreSQL (``langgraph_durable.effects``).

One row per (tenant, thread, effect id) in ``effects``; a claim, a completion,
a release is one statement each. Pure: no psycopg import, no I/O.
"""

from __future__ import annotations

import builtins
from collections.abc import Generator, Sequence
from typing import Any

from .._core.effects import DONE, StoredEffect, no_takeover
from .._core.records import Sealed
from .._core.sansio import operation
from ..errors import StorageError
from ._base import OpsBase
from ._query import Query
from ._rls import tenant_scoped

__all__ = ["EffectOps"]

# How often effect_claim runs again when its statement saw neither its own insert
# nor the conflicting row (a concurrent first claim committed after the
# statement's snapshot was taken); the next statement's snapshot sees that row.
CLAIM_ATTEMPTS = 5

_EFFECT_COLUMNS = (
    "state, token, attempt, lease_until, request_type, request, outcome, result_type, "
    "result, created"
)


class EffectOps(OpsBase):
    """Claims, results and reads of the effect journal."""

    def _init_effects(self) -> None:
        """Build the journal's statements of this schema (called once, by ``PostgresOps``)."""
        s = self._s
        # A claim in one statement: insert the entry or (it is there) read it.
        # FOR SHARE reads the row's latest committed version; a row committed
        # after the statement's snapshot is seen by the next attempt.
        effect_key = "tenant_id = %(tenant)s AND thread_id = %(thread)s AND effect_id = %(effect)s"
        self.EFFECT_CLAIM_SQL = (
            f"WITH claim AS (INSERT INTO {s}.effects AS e (tenant_id, thread_id, effect_id, "
            "state, token, attempt, lease_until, request_type, request, result_type, result, "
            "created) VALUES (%(tenant)s, %(thread)s, %(effect)s, 'claimed', 1, 1, %(lease)s, "
            "%(r_type)s, %(r_data)b, %(s_type)s, %(s_data)b, %(now)s) "
            "ON CONFLICT (tenant_id, thread_id, effect_id) DO NOTHING "
            f"RETURNING {_EFFECT_COLUMNS}, true AS won) "
            "SELECT * FROM claim UNION ALL "
            "SELECT * FROM (SELECT "
            f"{_EFFECT_COLUMNS}, false AS won FROM {s}.effects "
            f"WHERE {effect_key} FOR SHARE) AS stored "
            "WHERE NOT EXISTS (SELECT 1 FROM claim)"
        )
        # A takeover of an expired claim the saver has read and checked: only while
        # the entry still holds the token it read; the new claim's state record
        # replaces the old one.
        self.EFFECT_TAKEOVER_SQL = (
            f"UPDATE {s}.effects SET token = token + 1, attempt = attempt + 1, "
            "lease_until = %(lease)s, result_type = %(s_type)s, result = %(s_data)b "
            f"WHERE {effect_key} AND state = 'claimed' AND token = %(token)s "
            "AND lease_until <= %(now)s::double precision "
            f"RETURNING {_EFFECT_COLUMNS}"
        )
        # A completion while ``token`` still holds the claim. Sent again after a lost
        # reply, it finds its own completion (same token, same ``completed``: a takeover
        # would have raised the token) and counts it as recorded.
        self.EFFECT_COMPLETE_SQL = (
            f"UPDATE {s}.effects SET state = 'done', outcome = %(outcome)s, "
            "result_type = %(r_type)s, result = %(r_data)b, completed = %(now)s "
            f"WHERE {effect_key} AND token = %(token)s "
            "AND (state = 'claimed' OR (state = 'done' AND completed = %(now)s))"
        )
        self.EFFECT_DELETE_SQL = f"DELETE FROM {s}.effects WHERE {effect_key}"
        self.EFFECT_RELEASE_SQL = (
            f"DELETE FROM {s}.effects WHERE {effect_key} "
            "AND state = 'claimed' AND token = %(token)s"
        )
        self.EFFECT_GET_SQL = f"SELECT {_EFFECT_COLUMNS} FROM {s}.effects WHERE {effect_key}"
        self.EFFECT_LIST_SQL = (
            f"SELECT effect_id, {_EFFECT_COLUMNS} FROM {s}.effects "
            "WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s ORDER BY created, effect_id"
        )
        self.EFFECT_RESTORE_SQL = (
            f"INSERT INTO {s}.effects (tenant_id, thread_id, effect_id, state, token, attempt, "
            "lease_until, request_type, request, outcome, result_type, result, created, "
            "completed) VALUES (%(tenant)s, %(thread)s, %(effect)s, %(state)s, %(token)s, "
            "%(attempt)s, %(lease)s, %(r_type)s, %(r_data)b, %(outcome)s, %(res_type)s, "
            "%(res_data)b, %(created)s, %(completed)s) "
            "ON CONFLICT (tenant_id, thread_id, effect_id) DO UPDATE SET "
            "state = EXCLUDED.state, token = EXCLUDED.token, attempt = EXCLUDED.attempt, "
            "lease_until = EXCLUDED.lease_until, request_type = EXCLUDED.request_type, "
            "request = EXCLUDED.request, outcome = EXCLUDED.outcome, "
            "result_type = EXCLUDED.result_type, result = EXCLUDED.result, "
            "created = EXCLUDED.created, completed = EXCLUDED.completed"
        )

    @operation
    @tenant_scoped
    def effect_claim(
        self,
        tenant: str,
        thread: str,
        effect_id: str,
        request: Sealed,
        lease_until: float,
        now: float,
        takeover: bool = False,
        state: Sealed | None = None,
    ) -> Generator[Any, Any, StoredEffect]:
        """Claim an effect: a fresh entry (with its sealed ``state`` record), or the stored one.

        One statement (a second only when a concurrent first claim committed
        after the statement's snapshot was taken). An expired claim is taken
        over by :meth:`effect_takeover`, after the saver checked it.
        """
        no_takeover(takeover)
        params = {
            "tenant": tenant,
            "thread": thread,
            "effect": effect_id,
            "lease": float(lease_until),
            "now": float(now),
            "r_type": request.type,
            "r_data": request.data,
            "s_type": None if state is None else state.type,
            "s_data": None if state is None else state.data,
        }
        for _ in range(CLAIM_ATTEMPTS):
            # Sent again after a lost reply: a claim the first sending made reads as
            # another's (not won), so the effect waits for the lease, never runs twice.
            row = yield Query(self.EFFECT_CLAIM_SQL, params, "one", retry=True)
            if row is not None:
                return _effect(effect_id, row[:-1], bool(row[-1]))
        raise StorageError(
            f"effect {effect_id!r} of thread {thread!r} could be neither claimed nor read "
            f"in {CLAIM_ATTEMPTS} attempts (it keeps being deleted and claimed concurrently)"
        )

    @operation
    @tenant_scoped
    def effect_takeover(
        self,
        tenant: str,
        thread: str,
        effect_id: str,
        token: int,
        state: Sealed,
        lease_until: float,
        now: float,
    ) -> Generator[Any, Any, StoredEffect | None]:
        """Take an expired claim over if it still holds ``token``; one statement.

        Returns:
            The entry now claimed (token and attempt + 1, ``state`` its record),
            or None when the entry changed since it was read.
        """
        row = yield Query(
            self.EFFECT_TAKEOVER_SQL,
            {
                "tenant": tenant,
                "thread": thread,
                "effect": effect_id,
                "token": int(token),
                "lease": float(lease_until),
                "now": float(now),
                "s_type": state.type,
                "s_data": state.data,
            },
            "one",
        )
        return None if row is None else _effect(effect_id, row, True)

    @operation
    @tenant_scoped
    def effect_complete(
        self,
        tenant: str,
        thread: str,
        effect_id: str,
        token: int,
        outcome: str,
        result: Sealed,
        now: float,
    ) -> Generator[Any, Any, bool]:
        """Record an effect's result if ``token`` still holds its claim; one statement."""
        count = yield Query(
            self.EFFECT_COMPLETE_SQL,
            {
                "tenant": tenant,
                "thread": thread,
                "effect": effect_id,
                "token": int(token),
                "outcome": outcome,
                "r_type": result.type,
                "r_data": result.data,
                "now": float(now),
            },
            retry=True,
        )
        return bool(count)

    @operation
    @tenant_scoped
    def effect_delete(
        self, tenant: str, thread: str, effect_id: str, token: int | None
    ) -> Generator[Any, Any, bool]:
        """Delete an entry (any, or only a claim ``token`` holds); whether one was deleted."""
        params: dict[str, Any] = {"tenant": tenant, "thread": thread, "effect": effect_id}
        if token is None:
            count = yield Query(self.EFFECT_DELETE_SQL, params)
        else:
            params["token"] = int(token)
            count = yield Query(self.EFFECT_RELEASE_SQL, params)
        return bool(count)

    @operation
    @tenant_scoped
    def effect_get(
        self, tenant: str, thread: str, effect_id: str
    ) -> Generator[Any, Any, StoredEffect | None]:
        """One entry, or None; one statement."""
        params = {"tenant": tenant, "thread": thread, "effect": effect_id}
        row = yield Query(self.EFFECT_GET_SQL, params, "one")
        return None if row is None else _effect(effect_id, row, False)

    @operation
    @tenant_scoped
    def effect_list(
        self, tenant: str, thread: str
    ) -> Generator[Any, Any, builtins.list[StoredEffect]]:
        """Every journal entry of a thread (oldest first)."""
        rows = yield Query(self.EFFECT_LIST_SQL, {"tenant": tenant, "thread": thread}, "all")
        return [_effect(row[0], row[1:], False) for row in rows]

    @operation
    @tenant_scoped
    def effect_restore(
        self, tenant: str, thread: str, effect: StoredEffect
    ) -> Generator[Any, Any, None]:
        """Write an entry exactly as given (insert or overwrite)."""
        yield Query(
            self.EFFECT_RESTORE_SQL,
            {
                "tenant": tenant,
                "thread": thread,
                "effect": effect.effect_id,
                "state": effect.state,
                "token": int(effect.token),
                "attempt": int(effect.attempt),
                "lease": float(effect.lease_until),
                "r_type": effect.request.type,
                "r_data": effect.request.data,
                "outcome": effect.outcome,
                "res_type": None if effect.result is None else effect.result.type,
                "res_data": None if effect.result is None else effect.result.data,
                "created": float(effect.created),
                "completed": float(effect.created) if effect.state == DONE else None,
            },
        )
        return None


def _effect(effect_id: str, row: Sequence[Any], won: bool) -> StoredEffect:
    """A journal entry from the columns ``_EFFECT_COLUMNS`` (in that order)."""
    state, token, attempt, lease, r_type, r_data, outcome, res_type, res_data, created = row
    return StoredEffect(
        effect_id=effect_id,
        state=state,
        token=int(token),
        attempt=int(attempt),
        lease_until=float(lease),
        request=Sealed(r_type, bytes(r_data)),
        outcome=outcome,
        result=None if res_type is None else Sealed(res_type, bytes(res_data)),
        won=won,
        created=float(created),
    )
