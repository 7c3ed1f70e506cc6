"""The hash chain's admin side: walking the table's threads, and trim tombstones.

Pure (no boto3 import, no I/O, no clock but the injected ``now``).

* :meth:`ChainOps.thread_page` walks the threads that have a readable
  checkpoint, a page at a time (``langgraph-durable verify``): a consistent,
  paginated Scan projecting keys and liveness only; the cursor is the key of
  the last item read of the last thread returned (a Scan's
  ``ExclusiveStartKey``).
* :meth:`ChainOps._tombstone_trim` is called by ``keep_latest`` trims
  (``prune`` and the pruner) before they delete anything: with ``integrity=``
  each surviving checkpoint whose parent the trim removes gets a signed
  tombstone in its body's chain block (see ``langgraph_durable._core.chain``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from .._core.chain import refuse_unkeyed_trim, split_block, tombstone_bodies
from .._core.records import Sealed
from .._core.sansio import operation
from ..errors import CorruptRecordError, IntegrityError, InvalidInputError
from ._calls import ConditionFailedError, TransactionCanceledError
from ._items import (
    HEAD_SK,
    HEADED,
    TRANSACTION_BYTES,
    TRANSACTION_ITEMS,
    TTL_ATTRIBUTE,
    N,
    S,
    _is_live,
    _str,
    action_size,
    chunk_count,
    chunk_sk,
    head_live,
    is_pointer_sk,
    is_thread_pk,
    item_size,
    parse_checkpoint_sk,
    pointer_sk,
    read_payload,
    refuse_transaction,
    split_pk,
    tenant_prefix,
    with_payloads,
)
from ._objects import S3_SUFFIX, object_key
from ._threads import ThreadOps

__all__ = ["ChainOps"]

#: Attributes of a pointer that hold or describe its body (inline, chunked or in S3).
_BODY = "b"
_BODY_ATTRIBUTES = (_BODY, f"{_BODY}_n", f"{_BODY}_len", f"{_BODY}_h", _BODY + S3_SUFFIX)


@dataclass
class _Walked:
    """One thread as :meth:`ChainOps.thread_page` reads it (keys and liveness only)."""

    pk: str
    last_sk: str = ""
    plain: bool = False  # a live checkpoint readers show without its head
    headed: bool = False  # a live checkpoint readers show only while its head is live
    head: dict[str, Any] | None = None

    def add(self, item: dict[str, Any], now: float) -> None:
        sk = item["sk"]["S"]
        self.last_sk = sk
        if sk == HEAD_SK:
            self.head = item
        elif is_pointer_sk(sk) and _is_live(item, now):
            if TTL_ATTRIBUTE in item or HEADED in item:
                self.headed = True
            else:
                self.plain = True

    def readable(self, now: float) -> bool:
        """Whether a reader sees a checkpoint of this thread (as ``get_tuple`` decides)."""
        return self.plain or (self.headed and self.head is not None and head_live(self.head, now))


class ChainOps(ThreadOps):
    """Thread enumeration for ``verify`` and tombstones for ``keep_latest`` trims."""

    # ---- walking the threads ------------------------------------------------------

    @operation
    def thread_page(
        self, tenant: str | None, cursor: Any, limit: int
    ) -> Generator[Any, Any, tuple[list[tuple[str, str]], Any]]:
        """Up to ``limit`` (tenant, thread) pairs of threads with a readable checkpoint.

        A consistent Scan, page by page, of checkpoint pointers and thread
        heads (projected to their keys and liveness; ``tenant``: a filter on
        the tenant's partition-key prefix), until ``limit`` threads are found
        or the table ends. Items of one partition come together in a Scan,
        so a thread is decided once its last item is read; the walk goes on
        after that item the next time, so every thread comes once over a
        whole walk (threads written meanwhile may or may not be seen).

        Args:
            tenant: Only this tenant's threads; None: every tenant's.
            cursor: None to start, else the cursor the previous page returned.
            limit: Threads per page (at least 1); memory stays bounded by it.

        Returns:
            (the threads, the cursor of the next page: a DynamoDB key, or None
            when the walk is done).
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInputError(f"thread_page: limit must be a positive int, got {limit!r}")
        now = self.now()
        names = {
            "#pk": "pk",
            "#sk": "sk",
            "#x": TTL_ATTRIBUTE,
            "#hd": HEADED,
            "#g": "gone",
            "#lu": "live_until",
            "#da": "dies_at",
        }
        values: dict[str, Any] = {":c": S("c#"), ":h": S(HEAD_SK)}
        condition = "(begins_with(#sk, :c) OR #sk = :h)"
        if tenant is not None:
            condition += " AND begins_with(#pk, :t)"
            values[":t"] = S(tenant_prefix(str(tenant)))
        params: dict[str, Any] = {
            "TableName": self.table,
            "ConsistentRead": True,
            "ProjectionExpression": ", ".join(names),
            "FilterExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "Limit": max(100, min(1000, 20 * limit)),
        }
        if cursor is not None:
            params["ExclusiveStartKey"] = cursor
        out: list[tuple[str, str]] = []
        walked: _Walked | None = None
        while True:
            resp = yield from self._call("scan", params)
            for item in resp.get("Items") or []:
                pk = item["pk"]["S"]
                if not is_thread_pk(pk):
                    continue
                if walked is None or walked.pk != pk:
                    if walked is not None and walked.readable(now):
                        out.append(split_pk(walked.pk))
                        if len(out) >= limit:
                            # go on right after this thread's last item
                            return out, {"pk": S(walked.pk), "sk": S(walked.last_sk)}
                    walked = _Walked(pk)
                walked.add(item, now)
            last = resp.get("LastEvaluatedKey")
            if not last:
                if walked is not None and walked.readable(now):
                    out.append(split_pk(walked.pk))
                return out, None
            params = {**params, "ExclusiveStartKey": last}

    # ---- tombstones ----------------------------------------------------------------

    def _tombstone_trim(
        self, pk: str, items: Sequence[dict[str, Any]], doomed: Sequence[dict[str, Any]]
    ) -> Generator[Any, Any, int]:
        """Before a trim deletes ``doomed``: tombstones in the survivors that lose their parent.

        Without ``integrity=``, the survivors' bodies are read only to check
        that none carries a chain block (``ChainKeyRequiredError`` otherwise,
        before anything is deleted). With it, per namespace, the bodies of
        each surviving checkpoint whose parent is removed and of those parents
        are read (from ``items`` when they were read whole, else one
        BatchGetItem; chunks of a chunked body one more, S3 bodies one
        GetObject each) and :func:`~langgraph_durable._core.chain.tombstone_bodies`
        gives the survivors' new bodies, written in place of the old (one
        TransactWriteItems per up to 100 small bodies, each a conditional
        update of the pointer, with its chunks for a chunked body; an S3 body
        is a new object, then a conditional update, then the old object's
        deletion). A survivor deleted meanwhile is skipped.

        Args:
            pk: The thread's partition key.
            items: The thread's items as the trim read them (whole, or projected).
            doomed: What the trim removes (:func:`~._prune.trim_plan`).

        Returns:
            How many bodies were rewritten.
        """
        chain = self.codec.chain
        if not doomed:
            return 0
        removed: dict[str, set[str]] = {}
        for item in doomed:
            sk = item["sk"]["S"]
            if is_pointer_sk(sk):
                ik = parse_checkpoint_sk(sk)
                removed.setdefault(ik.ns, set()).add(ik.checkpoint_id)
        if not removed:
            return 0
        gone = {item["sk"]["S"] for item in doomed}
        by_sk = {item["sk"]["S"]: item for item in items}
        survivors: dict[str, dict[str, str]] = {}  # ns -> survivor id -> parent id
        wanted: list[str] = []  # pointer sort keys whose body is needed
        for sk, item in by_sk.items():
            if not is_pointer_sk(sk) or sk in gone:
                continue
            ik = parse_checkpoint_sk(sk)
            parent = _str(item, "p")
            if parent and parent in removed.get(ik.ns, ()):
                survivors.setdefault(ik.ns, {})[ik.checkpoint_id] = parent
                wanted.append(sk)
                if chain is not None:  # without the key only the survivors (the check)
                    wanted.append(pointer_sk(ik.ns, parent))
        if not survivors:
            return 0
        pointers = yield from self._whole_pointers(pk, wanted, by_sk)
        bodies = yield from self._read_bodies(pk, pointers, by_sk)
        tenant, thread = split_pk(pk)
        if chain is None:
            refuse_unkeyed_trim(tenant, thread, bodies.values())
            return 0
        rewrites: list[tuple[str, dict[str, Any], Sealed]] = []
        for ns, kept in survivors.items():
            given: dict[str, tuple[str | None, Sealed]] = {}
            for cid, parent in kept.items():
                body = bodies.get(pointer_sk(ns, cid))
                if body is not None:
                    given[cid] = (parent, body)
            gone_bodies: dict[str, Sealed | None] = {
                cid: bodies.get(pointer_sk(ns, cid)) for cid in removed[ns]
            }
            for cid, new in tombstone_bodies(chain, tenant, thread, ns, given, gone_bodies).items():
                sk = pointer_sk(ns, cid)
                rewrites.append((sk, pointers[sk], new))
        if rewrites:
            yield from self._rewrite_bodies(pk, tenant, thread, rewrites)
        return len(rewrites)

    def _whole_pointers(
        self, pk: str, sks: Sequence[str], by_sk: dict[str, dict[str, Any]]
    ) -> Generator[Any, Any, dict[str, dict[str, Any]]]:
        """The pointers ``sks`` with every attribute: from ``by_sk`` if read whole
        (they carry ``bt``), else one BatchGetItem (up to 100 keys a call)."""
        out = {sk: by_sk[sk] for sk in sks if sk in by_sk and "bt" in by_sk[sk]}
        missing = [sk for sk in dict.fromkeys(sks) if sk not in out]
        if missing:
            got = yield from self._batch_get([(pk, sk) for sk in missing])
            out.update((sk, item) for (_pk, sk), item in got.items())
        return out

    def _read_bodies(
        self,
        pk: str,
        pointers: dict[str, dict[str, Any]],
        by_sk: dict[str, dict[str, Any]],
    ) -> Generator[Any, Any, dict[str, Sealed]]:
        """The stored bodies of ``pointers`` (chunks from ``by_sk`` or one
        BatchGetItem, S3 objects one GetObject each). A body that cannot be read
        or whose chain block is malformed is left out (no tombstone from it)."""
        chunk_keys = [
            chunk_sk(sk, _BODY, i)
            for sk, item in pointers.items()
            for i in range(chunk_count(item, _BODY))
        ]
        chunks = {sk: by_sk[sk] for sk in chunk_keys if sk in by_sk and "d" in by_sk[sk]}
        missing = [sk for sk in chunk_keys if sk not in chunks]
        if missing:
            got = yield from self._batch_get([(pk, sk) for sk in missing])
            chunks.update((sk, item) for (_pk, sk), item in got.items())
        stored = [
            str(item[_BODY + S3_SUFFIX]["S"])
            for item in pointers.values()
            if _BODY + S3_SUFFIX in item
        ]
        objects = (yield from self._get_objects(stored)) if stored and self.bucket else {}
        out: dict[str, Sealed] = {}
        for sk, item in pointers.items():
            parts = {
                i: chunks[chunk_sk(sk, _BODY, i)]["d"]["B"]
                for i in range(chunk_count(item, _BODY))
                if chunk_sk(sk, _BODY, i) in chunks
            }
            try:
                data = read_payload(item, _BODY, parts, f"checkpoint body {sk!r}", objects)
                if data is None:
                    continue
                body = Sealed(_str(item, "bt") or "", data)
                split_block(body)  # a malformed block: verify reports it, the trim goes on
            except (CorruptRecordError, IntegrityError):
                continue
            out[sk] = body
        return out

    def _rewrite_bodies(
        self,
        pk: str,
        tenant: str,
        thread: str,
        rewrites: Sequence[tuple[str, dict[str, Any], Sealed]],
    ) -> Generator[Any, Any, None]:
        """Store new bodies in place of the old (see :meth:`_tombstone_trim`)."""
        groups: list[list[dict[str, Any]]] = []
        for sk, pointer, body in rewrites:
            if _BODY + S3_SUFFIX in pointer and self.bucket is not None:
                yield from self._rewrite_object_body(pk, tenant, thread, sk, pointer, body.data)
            else:
                groups.append(self._body_actions(pk, sk, pointer, body.data))
        batch: list[list[dict[str, Any]]] = []
        size = 0
        for actions in groups:
            weight = _weight(actions)
            if batch and (
                sum(len(g) for g in batch) + len(actions) > TRANSACTION_ITEMS
                or size + weight > TRANSACTION_BYTES
            ):
                yield from self._transact_rewrites(batch)
                batch, size = [], 0
            batch.append(actions)
            size += weight
        if batch:
            yield from self._transact_rewrites(batch)
        return None

    def _body_actions(
        self, pk: str, sk: str, pointer: dict[str, Any], data: bytes
    ) -> list[dict[str, Any]]:
        """The transaction actions that store ``data`` as the body of ``pointer``:
        the pointer's update (on condition it still exists) first, then the puts
        of its chunks and the deletes of chunks it no longer has."""
        base = {k: v for k, v in pointer.items() if k not in _BODY_ATTRIBUTES}
        stamp = {TTL_ATTRIBUTE: pointer[TTL_ATTRIBUTE]} if TTL_ATTRIBUTE in pointer else {}
        item, chunks = with_payloads(base, {_BODY: data}, stamp)
        names = {"#sk": "sk"}
        values: dict[str, Any] = {}
        sets, removes = [], []
        for i, attr in enumerate(_BODY_ATTRIBUTES):
            if attr in item:
                names[f"#b{i}"] = attr
                sets.append(f"#b{i} = :b{i}")
                values[f":b{i}"] = item[attr]
            elif attr in pointer:
                names[f"#b{i}"] = attr
                removes.append(f"#b{i}")
        update = "SET " + ", ".join(sets)
        if removes:
            update += " REMOVE " + ", ".join(removes)
        actions: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": {"pk": S(pk), "sk": S(sk)},
                    "UpdateExpression": update,
                    "ConditionExpression": "attribute_exists(#sk)",
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                }
            }
        ]
        actions.extend(self._put_action(c) for c in chunks)
        kept = {c["sk"]["S"] for c in chunks}
        actions.extend(
            {"Delete": {"TableName": self.table, "Key": {"pk": S(pk), "sk": S(old)}}}
            for old in (chunk_sk(sk, _BODY, i) for i in range(chunk_count(pointer, _BODY)))
            if old not in kept
        )
        weight = _weight(actions)
        if len(actions) > TRANSACTION_ITEMS or weight > TRANSACTION_BYTES:
            refuse_transaction(weight, len(actions), f"the tombstone of checkpoint {sk!r}")
        return actions

    def _transact_rewrites(self, groups: list[list[dict[str, Any]]]) -> Generator[Any, Any, None]:
        """One TransactWriteItems of several bodies' actions; a body whose pointer is
        gone (its update's condition fails) is dropped and the rest resent."""
        while groups:
            actions = [a for g in groups for a in g]
            try:
                yield from self._call("transact_write_items", {"TransactItems": actions})
                return None
            except TransactionCanceledError as exc:
                failed = {i for i, r in enumerate(exc.reasons) if r == "ConditionalCheckFailed"}
                if not failed:
                    raise
                kept, at = [], 0
                for g in groups:
                    if not failed & set(range(at, at + len(g))):
                        kept.append(g)
                    at += len(g)
                groups = kept
        return None

    def _rewrite_object_body(
        self, pk: str, tenant: str, thread: str, sk: str, pointer: dict[str, Any], data: bytes
    ) -> Generator[Any, Any, None]:
        """A body kept in S3: a new object (its key names its content), the pointer
        pointed at it on condition it still names the old one, the old deleted."""
        ik = parse_checkpoint_sk(sk)
        digest = hashlib.sha256(data).hexdigest()
        old = str(pointer[_BODY + S3_SUFFIX]["S"])
        new = object_key(self.object_prefix, tenant, thread, ik.ns, ik.checkpoint_id, _BODY, digest)
        if new == old:
            return None
        yield from self._put_object(new, data)
        try:
            yield from self._call(
                "update_item",
                {
                    "TableName": self.table,
                    "Key": {"pk": S(pk), "sk": S(sk)},
                    "UpdateExpression": "SET #k = :new, #l = :len, #h = :h",
                    "ConditionExpression": "#k = :old",
                    "ExpressionAttributeNames": {
                        "#k": _BODY + S3_SUFFIX,
                        "#l": f"{_BODY}_len",
                        "#h": f"{_BODY}_h",
                    },
                    "ExpressionAttributeValues": {
                        ":new": S(new),
                        ":old": S(old),
                        ":len": N(len(data)),
                        ":h": S(digest),
                    },
                },
            )
        except ConditionFailedError:
            yield from self._delete_objects([new])  # the pointer is gone or was rewritten
            return None
        yield from self._delete_objects([old])
        return None


def _weight(actions: Sequence[dict[str, Any]]) -> int:
    """What transaction actions count against its 4 MB (an update's values included)."""
    total = 0
    for action in actions:
        total += action_size(action)
        update = action.get("Update")
        if update is not None:
            total += item_size(update["ExpressionAttributeValues"])
    return total
