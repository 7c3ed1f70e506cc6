"""The effect journal on DynamoDB: claims, completions, listings, restores.

One item per entry in its thread's partition, sort key ``e#<effect id>``
(no Query of checkpoints, blobs or writes reads it: they are under ``c#``
and ``b#``). Attributes: ``state`` ("claimed" / "done"), ``token`` and
``attempt`` (N), ``lease_until`` and ``created`` (N, Unix seconds), the
sealed request ``req_t`` (S) / ``req`` (B) and, once done, ``outcome``
(S), the sealed result ``res_t`` (S) / ``res`` (B) and ``completed`` (N);
``expires_at`` when the saver has a TTL. An entry whose ``expires_at``
has passed counts as absent (DynamoDB deletes expired items lazily).
Leases compare with the caller's ``now``; TTL stamps and expiry with the
saver's clock, as every other item's.

Pure (no boto3 import, no I/O, no clock but the injected ``now``).
"""

from __future__ import annotations

import builtins
from collections.abc import Generator
from typing import Any

from .._core.effects import CLAIMED, DONE, StoredEffect, no_takeover
from .._core.records import Sealed
from .._core.sansio import operation
from ..errors import CorruptRecordError, InvalidInputError, StorageError
from ._calls import ConditionFailedError
from ._items import (
    HEAD_SK,
    ITEM_BUDGET,
    ITEM_LIMIT,
    TTL_ATTRIBUTE,
    B,
    N,
    S,
    _check_sk,
    _is_live,
    _num,
    _str,
    dec,
    enc,
    head_live,
    thread_pk,
)
from ._threads import ThreadOps

#: Sort-key prefix of the effect-journal entries of a thread.
EFFECT_PREFIX = "e#"


def effect_sk(effect_id: str) -> str:
    """The sort key of one effect-journal entry."""
    return _check_sk(EFFECT_PREFIX + enc(effect_id))


def is_effect_sk(sk: str) -> bool:
    """Whether a sort key is an effect-journal entry's."""
    return sk.startswith(EFFECT_PREFIX)


def effect_item(pk: str, effect: StoredEffect, stamp: dict[str, Any]) -> dict[str, Any]:
    """The item that stores ``effect`` in the partition ``pk``."""
    item = {
        "pk": S(pk),
        "sk": S(effect_sk(effect.effect_id)),
        "state": S(effect.state),
        "token": N(int(effect.token)),
        "attempt": N(int(effect.attempt)),
        "lease_until": N(effect.lease_until),
        "req_t": S(effect.request.type),
        "req": B(effect.request.data),
        "created": N(effect.created),
        **stamp,
    }
    if effect.outcome is not None:
        item["outcome"] = S(effect.outcome)
    if effect.result is not None:
        item["res_t"] = S(effect.result.type)
        item["res"] = B(effect.result.data)
    return item


def stored_effect(item: dict[str, Any], won: bool) -> StoredEffect:
    """The entry one ``e#`` item holds."""
    sk = item["sk"]["S"]
    if not is_effect_sk(sk) or "req" not in item:
        raise CorruptRecordError(f"item {sk!r} is not an effect-journal entry")
    res = item.get("res")
    return StoredEffect(
        effect_id=dec(sk[len(EFFECT_PREFIX) :]),
        state=_str(item, "state", "") or "",
        token=_num(item, "token", 0) or 0,
        attempt=_num(item, "attempt", 0) or 0,
        lease_until=float(item["lease_until"]["N"]) if "lease_until" in item else 0.0,
        request=Sealed(_str(item, "req_t", "") or "", bytes(item["req"]["B"])),
        outcome=_str(item, "outcome"),
        result=None if res is None else Sealed(_str(item, "res_t", "") or "", bytes(res["B"])),
        won=won,
        created=float(item["created"]["N"]) if "created" in item else 0.0,
    )


def _check_effect_size(request: Sealed | None, result: Sealed | None, effect_id: str) -> None:
    """Refuse an entry whose request and result cannot share one item."""
    size = sum(len(s.data) + len(s.type) for s in (request, result) if s is not None)
    if size > ITEM_BUDGET:
        what = "request" if result is None else "result" if request is None else "entry"
        raise InvalidInputError(
            f"the {what} of effect {effect_id!r} needs {size} bytes, more than one DynamoDB "
            f"item holds ({ITEM_LIMIT}, request and result together): return or pass a "
            "reference to large data (store it elsewhere) instead of the data itself"
        )


class EffectOps(ThreadOps):
    """The effect journal's operations (see the module docstring)."""

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
        """Claim an effect (a fresh entry with its sealed ``state`` record), or return
        its entry: one UpdateItem.

        The update inserts a fresh entry (token and attempt 1). When its
        condition fails, DynamoDB returns the stored entry in the same call.
        Only an entry that expired by TTL but is still stored takes a second
        call: a PutItem replacing it with a fresh claim. An expired claim is
        taken over by :meth:`effect_takeover`, after the saver checked it.
        """
        no_takeover(takeover)
        pk, sk = thread_pk(tenant, thread), effect_sk(effect_id)
        key = {"pk": S(pk), "sk": S(sk)}
        clock = self.now()
        _check_effect_size(request, state, effect_id)
        names = {
            "#sk": "sk",
            "#st": "state",
            "#tok": "token",
            "#att": "attempt",
            "#lu": "lease_until",
            "#qt": "req_t",
            "#q": "req",
            "#cr": "created",
        }
        values = {
            ":claimed": S(CLAIMED),
            ":zero": N(0),
            ":one": N(1),
            ":lu": N(lease_until),
            ":qt": S(request.type),
            ":q": B(request.data),
            ":now": N(now),
        }
        update = (
            "SET #st = :claimed, #tok = if_not_exists(#tok, :zero) + :one, "
            "#att = if_not_exists(#att, :zero) + :one, #lu = :lu, "
            "#qt = if_not_exists(#qt, :qt), #q = if_not_exists(#q, :q), "
            "#cr = if_not_exists(#cr, :now)"
        )
        if state is not None:
            update += ", #rt = :rt, #r = :r"
            names["#rt"], names["#r"] = "res_t", "res"
            values[":rt"], values[":r"] = S(state.type), B(state.data)
        stamp = self._stamp(self._expiry(tenant), clock)
        if stamp:
            update += ", #ex = :ex"
            names["#ex"] = TTL_ATTRIBUTE
            values[":ex"] = stamp[TTL_ATTRIBUTE]
        condition = "attribute_not_exists(#sk)"
        update_params = {
            "TableName": self.table,
            "Key": key,
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        fresh = {
            **key,
            "state": S(CLAIMED),
            "token": N(1),
            "attempt": N(1),
            "lease_until": N(lease_until),
            "req_t": S(request.type),
            "req": B(request.data),
            "created": N(now),
            **({} if state is None else {"res_t": S(state.type), "res": B(state.data)}),
            **stamp,
        }
        put_params = {
            "TableName": self.table,
            "Item": fresh,
            "ConditionExpression": "attribute_not_exists(#sk) OR #ex <= :clock",
            "ExpressionAttributeNames": {"#sk": "sk", "#ex": TTL_ATTRIBUTE},
            "ExpressionAttributeValues": {":clock": N(clock)},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        replace = False
        for _ in range(5):
            try:
                if replace:
                    yield from self._call("put_item", put_params)
                    return stored_effect(fresh, won=True)
                resp = yield from self._call("update_item", update_params)
                return stored_effect(resp["Attributes"], won=True)
            except ConditionFailedError as exc:
                old = exc.item
            if old is None:  # a server that does not return the stored item
                got = yield from self._call(
                    "get_item", {"TableName": self.table, "Key": key, "ConsistentRead": True}
                )
                old = got.get("Item")
            if old is None:
                replace = False  # deleted meanwhile: claim again
                continue
            if _is_live(old, clock):
                return stored_effect(old, won=False)
            replace = True  # expired by TTL, not deleted yet: replace it
        raise StorageError(
            f"could not claim effect {effect_id!r} of thread {thread!r}: "
            "its entry kept changing underneath"
        )

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
        """Take an expired claim over if it still holds ``token``: one UpdateItem.

        An entry expired by TTL is not taken over (a fresh claim replaces it).

        Returns:
            The entry now claimed (token and attempt + 1, ``state`` its record),
            or None when the entry changed since it was read.
        """
        clock = self.now()
        _check_effect_size(None, state, effect_id)
        names = {
            "#st": "state",
            "#tok": "token",
            "#att": "attempt",
            "#lu": "lease_until",
            "#rt": "res_t",
            "#r": "res",
            "#ex": TTL_ATTRIBUTE,
        }
        values = {
            ":claimed": S(CLAIMED),
            ":tok": N(int(token)),
            ":one": N(1),
            ":lu": N(lease_until),
            ":rt": S(state.type),
            ":r": B(state.data),
            ":now": N(now),
            ":clock": N(clock),
        }
        update = "SET #tok = #tok + :one, #att = #att + :one, #lu = :lu, #rt = :rt, #r = :r"
        stamp = self._stamp(self._expiry(tenant), clock)
        if stamp:
            update += ", #ex = :ex"
            values[":ex"] = stamp[TTL_ATTRIBUTE]
        params = {
            "TableName": self.table,
            "Key": {"pk": S(thread_pk(tenant, thread)), "sk": S(effect_sk(effect_id))},
            "UpdateExpression": update,
            "ConditionExpression": (
                "#st = :claimed AND #tok = :tok AND #lu <= :now "
                "AND (attribute_not_exists(#ex) OR #ex > :clock)"
            ),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ReturnValues": "ALL_NEW",
        }
        try:
            resp = yield from self._call("update_item", params)
        except ConditionFailedError:
            return None
        return stored_effect(resp["Attributes"], won=True)

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
        """Record a claimed effect's result under its fencing token: one UpdateItem.

        Returns:
            False, changing nothing, when the entry is gone, done, or holds
            another token.
        """
        clock = self.now()
        _check_effect_size(None, result, effect_id)
        names = {
            "#st": "state",
            "#tok": "token",
            "#oc": "outcome",
            "#rt": "res_t",
            "#r": "res",
            "#ct": "completed",
            "#ex": TTL_ATTRIBUTE,
        }
        values = {
            ":done": S(DONE),
            ":claimed": S(CLAIMED),
            ":tok": N(int(token)),
            ":oc": S(outcome),
            ":rt": S(result.type),
            ":r": B(result.data),
            ":now": N(now),
            ":clock": N(clock),
        }
        update = "SET #st = :done, #oc = :oc, #rt = :rt, #r = :r, #ct = :now"
        stamp = self._stamp(self._expiry(tenant), clock)
        if stamp:
            update += ", #ex = :ex"
            values[":ex"] = stamp[TTL_ATTRIBUTE]
        params = {
            "TableName": self.table,
            "Key": {"pk": S(thread_pk(tenant, thread)), "sk": S(effect_sk(effect_id))},
            "UpdateExpression": update,
            "ConditionExpression": (
                "#st = :claimed AND #tok = :tok AND (attribute_not_exists(#ex) OR #ex > :clock)"
            ),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        try:
            yield from self._call("update_item", params)
        except ConditionFailedError:
            return False
        return True

    @operation
    def effect_delete(
        self, tenant: str, thread: str, effect_id: str, token: int | None
    ) -> Generator[Any, Any, bool]:
        """Delete an entry: one DeleteItem, unconditional for ``token`` None, else
        only while it is claimed under ``token``.

        Returns:
            Whether an entry was deleted.
        """
        params: dict[str, Any] = {
            "TableName": self.table,
            "Key": {"pk": S(thread_pk(tenant, thread)), "sk": S(effect_sk(effect_id))},
            "ReturnValues": "ALL_OLD",
        }
        if token is not None:
            params["ConditionExpression"] = "#st = :claimed AND #tok = :tok"
            params["ExpressionAttributeNames"] = {"#st": "state", "#tok": "token"}
            params["ExpressionAttributeValues"] = {":claimed": S(CLAIMED), ":tok": N(int(token))}
        try:
            resp = yield from self._call("delete_item", params)
        except ConditionFailedError:
            return False
        return bool(resp.get("Attributes"))

    @operation
    def effect_get(
        self, tenant: str, thread: str, effect_id: str
    ) -> Generator[Any, Any, StoredEffect | None]:
        """One live entry, or None: one consistent GetItem."""
        key = {"pk": S(thread_pk(tenant, thread)), "sk": S(effect_sk(effect_id))}
        resp = yield from self._call(
            "get_item", {"TableName": self.table, "Key": key, "ConsistentRead": True}
        )
        item = resp.get("Item")
        if not item or not _is_live(item, self.now()):
            return None
        return stored_effect(item, won=False)

    @operation
    def effect_list(
        self, tenant: str, thread: str
    ) -> Generator[Any, Any, builtins.list[StoredEffect]]:
        """Every live entry of a thread: a consistent Query, all pages.

        The Query's range ``e#`` .. ``h`` holds the entries and the thread's
        head: a thread that expired by TTL lists none.
        """
        params = self._query_params(thread_pk(tenant, thread), None)
        params["KeyConditionExpression"] += " AND #sk BETWEEN :lo AND :hi"
        params["ExpressionAttributeNames"]["#sk"] = "sk"
        params["ExpressionAttributeValues"][":lo"] = S(EFFECT_PREFIX)
        params["ExpressionAttributeValues"][":hi"] = S(HEAD_SK)
        items: builtins.list[dict[str, Any]] = []
        while True:
            resp = yield from self._call("query", params)
            items.extend(resp.get("Items") or [])
            last = resp.get("LastEvaluatedKey")
            if not last:
                break
            params = {**params, "ExclusiveStartKey": last}
        clock = self.now()
        head = next((i for i in items if i["sk"]["S"] == HEAD_SK), None)
        if head is not None and not head_live(head, clock):
            return []  # the thread expired or is being deleted
        return [
            stored_effect(item, won=False)
            for item in items
            if item["sk"]["S"].startswith(EFFECT_PREFIX) and _is_live(item, clock)
        ]

    @operation
    def effect_restore(
        self, tenant: str, thread: str, effect: StoredEffect
    ) -> Generator[Any, Any, None]:
        """Write an entry exactly as given (insert or overwrite): one PutItem."""
        _check_effect_size(effect.request, effect.result, effect.effect_id)
        stamp = self._stamp(self._expiry(tenant), self.now())
        item = effect_item(thread_pk(tenant, thread), effect, stamp)
        yield from self._call("put_item", {"TableName": self.table, "Item": item})
        return None
