"""The effect journal on Redis: claim, complete, delete, read and restore entries.

An entry is the hash ``P:{T}:e:<effect id>`` in its thread's slot, and the
set ``P:{T}:e`` lists the thread's entries, so a thread's deletion, copy and
expiry cover them (see ``_keys``). Each operation is one script or command,
one round trip (``lua/effect_*.lua``). Times are Python float reprs (see
``_records._time``). The field ``call`` holds the id of the last call that
claimed or completed an entry, so that call, sent again after its reply was
lost, finds its own change instead of refusing it. Pure: no redis import, no I/O.
"""

from __future__ import annotations

import builtins
import secrets
from collections.abc import Generator
from typing import Any

from .._core.effects import StoredEffect, no_takeover
from .._core.records import Sealed
from .._core.sansio import operation
from ._base import OpsBase
from ._keys import EFFECT_FIELDS, _effect_id, _ident
from ._records import _decode_effect, _effect_args, _text, _time
from ._requests import Command, Script
from ._scripts import (
    EFFECT_CLAIM,
    EFFECT_COMPLETE,
    EFFECT_DELETE,
    EFFECT_PAGE,
    EFFECT_TAKEOVER,
    EFFECT_WRITE,
)

__all__ = ["EffectOps"]

#: Effect ids per read of a thread's journal (an SSCAN hint).
EFFECT_PAGE_SIZE = 100


class EffectOps(OpsBase):
    """The effect journal's operations."""

    def _effect_keys(self, tenant: str, thread: str, effect_id: str) -> tuple[str, tuple[str, ...]]:
        """The checked effect id and the keys the claim and complete scripts take:
        the thread's six, E, the entry."""
        tenant = _ident(tenant, "tenant id")
        thread = _ident(thread, "thread_id")
        effect_id = _effect_id(effect_id)
        keys = (
            *self.keys.thread(tenant, thread),
            self.keys.effects(tenant, thread),
            self.keys.effect(tenant, thread, effect_id),
        )
        return effect_id, keys

    @operation
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

        One script, one round trip. A fresh claim is a write: it restarts the
        thread's TTL, entries included. An expired claim is taken over by
        :meth:`effect_takeover`, after the saver checked it.
        """
        no_takeover(takeover)
        effect_id, keys = self._effect_keys(tenant, thread, effect_id)
        write_spec, read_spec = self._specs(_ident(tenant, "tenant id"))
        reply = yield Script(
            EFFECT_CLAIM,
            keys,
            (
                write_spec,
                read_spec,
                effect_id,
                _time(lease_until, "lease_until"),
                _time(now, "now"),
                "" if state is None else _ident(state.type, "state type"),
                b"" if state is None else bytes(state.data),
                _ident(request.type, "request type"),
                bytes(request.data),
                _call_id(),
            ),
        )
        return _decode_effect(effect_id, reply[1:], bool(int(reply[0])))

    @operation
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
        """Take an expired claim over if it still holds ``token``; one round trip.

        Returns:
            The entry now claimed (token and attempt + 1, ``state`` its record),
            or None when the entry changed since it was read.
        """
        effect_id, keys = self._effect_keys(tenant, thread, effect_id)
        reply = yield Script(
            EFFECT_TAKEOVER,
            keys,
            (
                self._write_spec(_ident(tenant, "tenant id")),
                effect_id,
                str(int(token)),
                _time(lease_until, "lease_until"),
                _time(now, "now"),
                _ident(state.type, "state type"),
                bytes(state.data),
                _call_id(),
            ),
        )
        return None if not reply else _decode_effect(effect_id, reply, True)

    @operation
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
        """Record an effect's result if ``token`` still holds its claim; one round trip."""
        effect_id, keys = self._effect_keys(tenant, thread, effect_id)
        done = yield Script(
            EFFECT_COMPLETE,
            keys,
            (
                self._write_spec(_ident(tenant, "tenant id")),
                str(int(token)),
                _ident(outcome, "effect outcome"),
                _ident(result.type, "result type"),
                bytes(result.data),
                _time(now, "now"),
                _call_id(),
            ),
        )
        return bool(int(done))

    @operation
    def effect_delete(
        self, tenant: str, thread: str, effect_id: str, token: int | None
    ) -> Generator[Any, Any, bool]:
        """Delete an entry (any, or only a claim ``token`` holds); whether one was deleted.

        One round trip. Sent again after a lost reply, it reports False for the
        entry it deleted the first time.
        """
        effect_id, keys = self._effect_keys(tenant, thread, effect_id)
        gone = yield Script(
            EFFECT_DELETE, keys[6:], (effect_id, "" if token is None else str(int(token)))
        )
        return bool(int(gone))

    @operation
    def effect_get(
        self, tenant: str, thread: str, effect_id: str
    ) -> Generator[Any, Any, StoredEffect | None]:
        """One entry, or None: one HMGET."""
        tenant = _ident(tenant, "tenant id")
        thread = _ident(thread, "thread_id")
        effect_id = _effect_id(effect_id)
        key = self.keys.effect(tenant, thread, effect_id)
        values = yield Command(("HMGET", key, *EFFECT_FIELDS))
        if not values or values[0] is None:
            return None
        return _decode_effect(effect_id, values, False)

    @operation
    def effect_list(
        self, tenant: str, thread: str
    ) -> Generator[Any, Any, builtins.list[StoredEffect]]:
        """Every journal entry of a thread (any order), a page per round trip."""
        tenant = _ident(tenant, "tenant id")
        thread = _ident(thread, "thread_id")
        keys = (*self.keys.thread(tenant, thread), self.keys.effects(tenant, thread))
        found: dict[str, StoredEffect] = {}
        cursor: Any = "0"
        read_spec = self._read_spec(tenant)
        while True:
            cursor, rows = yield Script(EFFECT_PAGE, keys, (read_spec, cursor, EFFECT_PAGE_SIZE))
            for raw_id, values in rows:
                effect_id = _text(raw_id)
                found[effect_id] = _decode_effect(effect_id, values, False)
            if _text(cursor) == "0":
                return builtins.list(found.values())

    @operation
    def effect_restore(
        self, tenant: str, thread: str, effect: StoredEffect
    ) -> Generator[Any, Any, None]:
        """Write an entry exactly as given (insert or overwrite); one round trip."""
        tenant = _ident(tenant, "tenant id")
        thread = _ident(thread, "thread_id")
        keys = (*self.keys.thread(tenant, thread), self.keys.effects(tenant, thread))
        args = _effect_args(effect)
        yield Script(EFFECT_WRITE, keys, (self._write_spec(tenant), "1", *args))
        return None


def _call_id() -> str:
    """A fresh id naming one claim or completion call (see the scripts' ``call`` field)."""
    return secrets.token_hex(12)
