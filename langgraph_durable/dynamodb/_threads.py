"""A thread's retention on writes: stamps, the thread head, sweeps, purges; the
transactions that write a thread.

Pure (no boto3 import, no I/O, no clock but the injected ``now``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from .._core.retention import DELETE, LOCK_LEASE_SECONDS, Retention, holder_gone, pruner_identity
from .._core.sansio import Blocking, Sleep
from ..errors import ConfigurationError, StorageError, StorageUnavailableError
from ._calls import (
    BaseMissingError,
    ConditionFailedError,
    TransactionCanceledError,
    new_token,
)
from ._items import (
    HEAD_SK,
    PRUNER_ROLE,
    TRANSACTION_BYTES,
    TRANSACTION_ITEMS,
    TTL_ATTRIBUTE,
    WRITER_ROLE,
    N,
    S,
    _float,
    _is_live,
    _str,
    action_size,
    head_live,
    refuse_transaction,
    split_pk,
)
from ._objects import OBJECT_ATTRIBUTES, ObjectOps, object_keys_of

#: Longest a write waits for another process to finish deleting its thread.
PURGE_WAIT_SECONDS = 2 * LOCK_LEASE_SECONDS


@dataclass(frozen=True, slots=True)
class Expiry:
    """What writes of one tenant carry under its retention policy.

    Attributes:
        idle: Seconds a thread lives after its last write (``live_until``), or None.
        absolute: Seconds a thread lives after its creation (``dies_at``), or None.
        refresh: Seconds between sweeps that extend the items' ``expires_at``
            (idle policies; also the margin every stamp adds).
        ttl: Whether items carry ``expires_at`` for DynamoDB's own deletion
            (``delete`` policies; ``keep_latest`` threads are trimmed, never
            deleted whole).
    """

    idle: int | None
    absolute: int | None
    refresh: int
    ttl: bool

    @classmethod
    def of(cls, policy: Retention, refresh: int | None) -> Expiry:
        if policy.strategy != DELETE or not policy.expires:
            return cls(None, None, 0, False)
        idle = None if policy.idle_seconds is None else math.ceil(policy.idle_seconds)
        absolute = None if policy.absolute_seconds is None else math.ceil(policy.absolute_seconds)
        if idle is None:
            return cls(None, absolute, refresh or 0, True)  # no sweeps: stamps outlive it
        return cls(idle, absolute, refresh or max(1, idle // 2), True)

    def stamp(self, now: float) -> dict[str, Any]:
        """The ``expires_at`` of an item written at ``now`` (empty without TTL).

        Never before the thread's own expiry: a thread expires at the latest
        ``bound`` after any write (the absolute bound counts from its creation,
        which is earlier), and sweeps extend the items of an active thread.
        """
        if not self.ttl:
            return {}
        bound = min(b for b in (self.idle, self.absolute) if b is not None)
        return {TTL_ATTRIBUTE: N(int(now) + bound + self.refresh)}


class ThreadOps(ObjectOps):
    """Retention stamps, the thread head, sweeps and purges; the transactions of a thread."""

    def _expiry(self, tenant: str) -> Expiry | None:
        """What writes of ``tenant`` carry under its policy (None: no retention)."""
        if self.retention is None:
            return None
        policy = self.retention(tenant)
        if policy is None:
            return None
        if not isinstance(policy, Retention):
            raise ConfigurationError(
                f"the retention policy of tenant {tenant!r} is {policy!r}: "
                "use a langgraph_durable.Retention or None"
            )
        return Expiry.of(policy, self.ttl_refresh)

    @staticmethod
    def _stamp(exp: Expiry | None, now: float) -> dict[str, Any]:
        """The ``expires_at`` every item written now carries (empty without TTL)."""
        return {} if exp is None else exp.stamp(now)

    def _head_action(self, pk: str, now: float, exp: Expiry) -> dict[str, Any]:
        """Record a write on the thread's head; fails if the thread expired, is being
        deleted, or is due a sweep (or its items carry a TTL it no longer wants).

        ``created`` is kept from the first write; ``live_until`` is the last write
        + idle, ``dies_at`` the creation + absolute (each removed when the policy
        has no such bound).
        """
        t = int(now)
        names = {
            "#sk": "sk",
            "#ts": "ts",
            "#cr": "created",
            "#lu": "live_until",
            "#da": "dies_at",
            "#g": "gone",
            "#ex": TTL_ATTRIBUTE,
            "#sw": "swept_at",
        }
        values: dict[str, Any] = {":now": N(t)}
        sets = ["#ts = :now", "#cr = if_not_exists(#cr, :now)"]
        removes: list[str] = []
        if exp.idle is not None:
            sets.append("#lu = :lu")
            values[":lu"] = N(t + exp.idle)
        else:
            removes.append("#lu")
        if exp.absolute is not None:
            sets.append("#da = if_not_exists(#cr, :now) + :abs")
            values[":abs"] = N(exp.absolute)
        else:
            removes.append("#da")
        live = (
            "attribute_not_exists(#g) AND (attribute_not_exists(#lu) OR #lu > :now)"
            " AND (attribute_not_exists(#da) OR #da > :now)"
        )
        if exp.ttl:
            sets += ["#ex = :ex", "#sw = if_not_exists(#sw, :now)"]
            values[":ex"] = exp.stamp(now)[TTL_ATTRIBUTE]
            if exp.idle is not None:
                live += " AND #sw > :cutoff"
                values[":cutoff"] = N(t - exp.refresh)
            else:
                live += " AND attribute_exists(#sw)"
        else:
            removes += ["#ex", "#sw"]
            live += " AND attribute_not_exists(#ex)"
        update = "SET " + ", ".join(sets)
        if removes:
            update += " REMOVE " + ", ".join(removes)
        return {
            "Update": {
                "TableName": self.table,
                "Key": {"pk": S(pk), "sk": S(HEAD_SK)},
                "UpdateExpression": update,
                "ConditionExpression": f"attribute_not_exists(#sk) OR ({live})",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def _head_item(self, pk: str, now: float, exp: Expiry) -> dict[str, Any]:
        """The head of a thread first written at ``now`` (what :meth:`_head_action` makes)."""
        t = int(now)
        head = {"pk": S(pk), "sk": S(HEAD_SK), "created": N(t), "ts": N(t)}
        if exp.idle is not None:
            head["live_until"] = N(t + exp.idle)
        if exp.absolute is not None:
            head["dies_at"] = N(t + exp.absolute)
        if exp.ttl:
            head.update(exp.stamp(now))
            head["swept_at"] = N(t)
        return head

    def _get_head(self, pk: str) -> Generator[Any, Any, dict[str, Any] | None]:
        resp = yield from self._call(
            "get_item",
            {
                "TableName": self.table,
                "Key": {"pk": S(pk), "sk": S(HEAD_SK)},
                "ConsistentRead": True,
            },
        )
        return resp.get("Item")  # type: ignore[no-any-return]

    def _on_head_refused(self, pk: str, exp: Expiry) -> Generator[Any, Any, bool]:
        """A write found its thread's head refusing it; make the write possible.

        A live thread is due a sweep (or its items' stamps no longer match the
        policy): sweep it. An expired thread is deleted first (a write starts
        it afresh). A thread another process is deleting is waited for, unless
        that process's lease ran out or it is a dead process of this host.

        Returns:
            Whether the thread's items may have been deleted meanwhile (False:
            it was swept, every item is still there).
        """
        waited = 0.0
        attempt = 0
        while True:
            head = yield from self._get_head(pk)
            now = self.now()
            if head is None:
                return True
            if head_live(head, now):
                yield from self._sweep(pk, now, exp)
                return False
            holder = _str(head, "gb")
            if holder and (_float(head, "gu") or 0.0) > now:
                dead = yield Blocking(holder_gone, (holder,))
                if not dead:
                    if waited >= PURGE_WAIT_SECONDS:
                        raise StorageUnavailableError(
                            f"thread {split_pk(pk)[1]!r} is being deleted by {holder} (retention "
                            f"expired it) and was still being deleted after {waited:.0f} s; "
                            "retry the write later"
                        )
                    attempt += 1
                    pause = min(1.0, 0.02 * attempt)
                    yield Sleep(pause)
                    waited += pause
                    continue
            me = pruner_identity()
            if (yield from self._mark_gone(pk, me, WRITER_ROLE, now, holder, False)):
                items = yield from self._query_all(pk, None, ("pk", "sk", *OBJECT_ATTRIBUTES))
                self._forget_thread(*split_pk(pk))
                yield from self._purge_marked(pk, me, items)
                return True
            attempt += 1  # the head changed meanwhile: look again
            if attempt > 1000:
                raise StorageError(f"could not delete expired thread {split_pk(pk)[1]!r}")

    def _mark_gone(
        self,
        pk: str,
        holder: str,
        role: str,
        now: float,
        previous: str | None,
        readable: bool,
        last_write: dict[str, Any] | None = None,
    ) -> Generator[Any, Any, bool]:
        """Mark a thread gone (readers stop seeing it) and hold its deletion for a lease.

        Args:
            pk: The thread's partition key.
            holder: Who deletes it (a :func:`pruner_identity`).
            role: ``"p"`` (the pruner, which may take over another pruner's
                lease since it holds the pruner lock) or ``"w"`` (a writer).
            now: The time; the lease lasts ``LOCK_LEASE_SECONDS`` from it.
            previous: The holder of a lease this call may take over (its lease
                ran out or it is dead), or None.
            readable: Whether readers still see the thread (the pruner decided
                by its policy); then the head must be unchanged since the
                decision (``ts`` equal to ``last_write``, the attribute value
                read, or absent when that is None): no write came in between.
                Otherwise the head must still be expired or marked gone.

        Returns:
            Whether the head now names ``holder``.
        """
        names = {"#sk": "sk", "#g": "gone", "#gb": "gb", "#gr": "gr", "#gu": "gu"}
        values: dict[str, Any] = {
            ":now": N(now),
            ":me": S(holder),
            ":role": S(role),
            ":until": N(now + LOCK_LEASE_SECONDS),
        }
        free = ["attribute_not_exists(#gb)", "#gu <= :now", "#gb = :me"]
        if previous:
            free.append("#gb = :old")
            values[":old"] = S(previous)
        if role == PRUNER_ROLE:
            free.append("#gr = :role")
        condition = f"attribute_exists(#sk) AND ({' OR '.join(free)})"
        names["#ts"] = "ts"
        if readable and last_write is None:
            condition += " AND attribute_not_exists(#g) AND attribute_not_exists(#ts)"
        elif readable:
            values[":ts"] = last_write
            condition += " AND attribute_not_exists(#g) AND #ts = :ts"
        else:
            del names["#ts"]
            names["#lu"] = "live_until"
            names["#da"] = "dies_at"
            condition += " AND (attribute_exists(#g) OR #lu <= :now OR #da <= :now)"
        try:
            yield from self._call(
                "update_item",
                {
                    "TableName": self.table,
                    "Key": {"pk": S(pk), "sk": S(HEAD_SK)},
                    "UpdateExpression": (
                        "SET #g = if_not_exists(#g, :now), #gb = :me, #gr = :role, #gu = :until"
                    ),
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                },
            )
        except ConditionFailedError:
            return False
        return True

    def _purge_marked(
        self, pk: str, holder: str, items: Sequence[dict[str, Any]]
    ) -> Generator[Any, Any, None]:
        """Delete a thread marked gone by ``holder``: its items (pointers first), the
        S3 objects they referenced (``items`` read with their ``*_s3`` attributes),
        then its head, on condition ``holder`` still holds it."""
        yield from self._delete_keys(pk, [i["sk"]["S"] for i in items if i["sk"]["S"] != HEAD_SK])
        yield from self._delete_objects([k for i in items for k in object_keys_of(i)])
        try:
            yield from self._call(
                "delete_item",
                {
                    "TableName": self.table,
                    "Key": {"pk": S(pk), "sk": S(HEAD_SK)},
                    "ConditionExpression": "#gb = :me",
                    "ExpressionAttributeNames": {"#gb": "gb"},
                    "ExpressionAttributeValues": {":me": S(holder)},
                },
            )
        except ConditionFailedError:
            pass  # taken over: the new holder deletes it
        return None

    def _sweep(self, pk: str, now: float, exp: Expiry) -> Generator[Any, Any, None]:
        """Make a live thread's items' ``expires_at`` match its policy; drop expired ones.

        Under a policy with TTL every live item's ``expires_at`` is extended to
        what a write now stamps; under one without (``keep_latest``) it is
        removed, so DynamoDB never deletes part of a thread that is trimmed.
        """
        items = yield from self._query_all(pk, None, ("pk", "sk", TTL_ATTRIBUTE))
        stamp = exp.stamp(now).get(TTL_ATTRIBUTE)
        live = [i for i in items if i["sk"]["S"] != HEAD_SK and _is_live(i, now)]
        dead = [i for i in items if i["sk"]["S"] != HEAD_SK and not _is_live(i, now)]
        if stamp is None:
            live = [i for i in live if TTL_ATTRIBUTE in i]
        updates = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": {"pk": i["pk"], "sk": i["sk"]},
                    "UpdateExpression": "SET #ex = :ex" if stamp else "REMOVE #ex",
                    "ConditionExpression": "attribute_exists(#sk)",
                    "ExpressionAttributeNames": {"#ex": TTL_ATTRIBUTE, "#sk": "sk"},
                    **({"ExpressionAttributeValues": {":ex": stamp}} if stamp else {}),
                }
            }
            for i in live
        ]
        yield from self._transact_updates(updates)
        if dead:
            yield from self._batch_write(
                [{"DeleteRequest": {"Key": {"pk": i["pk"], "sk": i["sk"]}}} for i in dead]
            )
        head: dict[str, Any] = {
            "TableName": self.table,
            "Key": {"pk": S(pk), "sk": S(HEAD_SK)},
            "ConditionExpression": "attribute_exists(#sk)",
        }
        if stamp:
            head["UpdateExpression"] = "SET #sw = :now"
            head["ExpressionAttributeNames"] = {"#sw": "swept_at", "#sk": "sk"}
            head["ExpressionAttributeValues"] = {":now": N(int(now))}
        else:
            head["UpdateExpression"] = "REMOVE #sw, #ex"
            head["ExpressionAttributeNames"] = {
                "#sw": "swept_at",
                "#ex": TTL_ATTRIBUTE,
                "#sk": "sk",
            }
        yield from self._call("update_item", head)
        return None

    def _write_groups(
        self,
        pk: str,
        exp: Expiry | None,
        build: Callable[[float], list[list[dict[str, Any]]]],
        droppable: bool | Callable[[int], bool],
        what: str,
        whole_limit: bool,
    ) -> Generator[Any, Any, set[int]]:
        """Write groups of actions to one thread: one transaction when they fit.

        A group (an item with its chunks) never spans transactions. When the
        groups exceed one transaction they go in order across several, the
        last group in the last one (for ``put``: the payloads first, the
        checkpoint pointer last, so a reader never sees part of a checkpoint).
        Every limit is checked before the first call.

        Args:
            pk: The thread's partition key.
            exp: What the tenant's retention policy asks of writes (None: none).
            build: Makes the groups for a write at time ``now`` (the same
                groups, in the same order, on every call).
            droppable: Whether a group whose conditional put fails is already
                stored and may be dropped (insert-only writes); or a function
                of the group's index saying so.
            what: Names the write in errors.
            whole_limit: Refuse the write if all groups together exceed one
                transaction's bytes (a checkpoint); else only each part must.

        Returns:
            The indexes of the groups dropped because they were stored already.

        Raises:
            BaseMissingError: A ``ConditionCheck`` of the groups failed (a
                delta's base is gone); nothing of that transaction was written.
        """
        groups = build(self.now())
        head = 0 if exp is None else 1
        sizes = [sum(action_size(a) for a in g) for g in groups]
        room = TRANSACTION_BYTES - 1024
        if whole_limit and sum(sizes) > room:
            refuse_transaction(sum(sizes), sum(len(g) for g in groups), what)
        for group, size in zip(groups, sizes, strict=True):
            if len(group) + head > TRANSACTION_ITEMS or size > room:
                refuse_transaction(size, len(group) + head, what)
        parts: list[list[int]] = [[]]
        count = total = 0
        for gi, (group, size) in enumerate(zip(groups, sizes, strict=True)):
            if parts[-1] and (count + len(group) + head > TRANSACTION_ITEMS or total + size > room):
                parts.append([])
                count = total = 0
            parts[-1].append(gi)
            count += len(group)
            total += size
        dropped: set[int] = set()
        for part in parts:

            def build_part(now: float, part: list[int] = part) -> list[list[dict[str, Any]]]:
                made = build(now)
                return [made[gi] for gi in part]

            def may_drop(i: int, part: list[int] = part) -> bool:
                return droppable(part[i]) if callable(droppable) else droppable

            done = yield from self._transact_thread(pk, exp, build_part, may_drop, what)
            dropped.update(part[i] for i in done)
        return dropped

    def _transact_thread(
        self,
        pk: str,
        exp: Expiry | None,
        build: Callable[[float], list[list[dict[str, Any]]]],
        droppable: Callable[[int], bool],
        what: str,
    ) -> Generator[Any, Any, set[int]]:
        """Write groups of actions to one thread in one transaction.

        Under a retention policy the thread's head is updated in the same
        transaction; if the head refuses (expired thread, a thread being
        deleted, or a sweep is due) that is handled and the write retried. A
        group whose conditional put fails is dropped when ``droppable(index)``
        (an insert-only write that is already stored) and the rest retried; a
        failed ``ConditionCheck`` raises :class:`BaseMissingError`.

        Returns:
            The indexes of the groups dropped.
        """
        dropped: set[int] = set()
        for _ in range(5):
            now = self.now()
            groups = build(now)
            actions: list[dict[str, Any]] = []
            owner: list[int] = []  # group index of each action (-1: head)
            if exp is not None:
                actions.append(self._head_action(pk, now, exp))
                owner.append(-1)
            for gi, group in enumerate(groups):
                if gi in dropped:
                    continue
                actions.extend(group)
                owner.extend([gi] * len(group))
            if len(owner) == (0 if exp is None else 1):
                return dropped
            params = {"TransactItems": actions, "ClientRequestToken": new_token()}
            try:
                yield from self._call("transact_write_items", params)
                return dropped
            except TransactionCanceledError as exc:
                failed = [
                    i
                    for i, reason in enumerate(exc.reasons)
                    if reason == "ConditionalCheckFailed" and i < len(owner)
                ]
                if any("ConditionCheck" in actions[i] for i in failed):
                    raise BaseMissingError(
                        f"a delta base of {what} is no longer stored; nothing was written"
                    ) from exc
                groups_failed = [owner[i] for i in failed]
                other = [r for r in exc.reasons if r not in ("None", "", "ConditionalCheckFailed")]
                if not failed or other or any(g >= 0 and not droppable(g) for g in groups_failed):
                    raise TransactionCanceledError(
                        f"DynamoDB cancelled the transaction writing {what} "
                        f"(reasons: {', '.join(exc.reasons)}); nothing of it was written",
                        exc.reasons,
                    ) from exc
                if -1 in groups_failed and exp is not None:
                    purged = yield from self._on_head_refused(pk, exp)
                    if purged:
                        continue  # what else failed may be gone now: try it all again
                dropped.update(g for g in groups_failed if g >= 0)
        raise StorageError(f"could not write {what}: the thread kept changing underneath")
