"""``put`` and ``put_writes``: a checkpoint or a task's writes in one transaction.

Pure (no boto3 import, no I/O, no clock but the injected ``now``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Generator, Sequence
from typing import Any

from .._core.codec import ThreadKey
from .._core.records import CheckpointRecord
from .._core.sansio import operation
from ..errors import CheckpointConflictError
from ._calls import BaseMissingError, TransactionCanceledError
from ._deltas import Chain, delta_attributes, refs_entry
from ._items import (
    TRANSACTION_BYTES,
    TTL_ATTRIBUTE,
    N,
    S,
    _is_live,
    action_size,
    blob_sk,
    chunk_count,
    pointer_sk,
    same_checkpoint,
    thread_pk,
    with_payloads,
    write_sk,
)
from ._objects import S3_SUFFIX, object_key
from ._threads import ThreadOps

#: Bytes of a transaction left for a write's item and chunk keys when its value
#: is sent as is; a larger value goes to S3 (with a bucket).
WRITE_ROOM = 64 * 1024


def _offload_payloads(
    base: dict[str, Any],
    payloads: dict[str, bytes],
    offloaded: dict[tuple[int, str], str],
    group: int,
) -> None:
    """Replace the payloads of ``group`` that went to S3 by their object's attributes."""
    for name in list(payloads):
        stored = offloaded.get((group, name))
        if stored is not None:
            data = payloads.pop(name)
            base[name + S3_SUFFIX] = S(stored)
            base[f"{name}_len"] = N(len(data))
            base[f"{name}_h"] = S(hashlib.sha256(data).hexdigest())


class WriteOps(ThreadOps):
    """Writes: checkpoints with their blobs, and pending writes."""

    @operation
    def put(
        self,
        key: ThreadKey,
        config: dict[str, Any],
        checkpoint: Any,
        metadata: Any,
        new_versions: Any,
    ) -> Generator[Any, Any, Any]:
        """Store a checkpoint with its new blobs: one TransactWriteItems.

        A list channel stored as a delta carries a ``ConditionCheck`` on its
        base: when the base is gone (the thread was deleted or pruned meanwhile
        by another process) nothing is written, and the checkpoint is written
        again with full copies (one more call).

        Append-only: the pointer is put only if its id is not stored. When it
        is, the transaction writes nothing and one GetItem reads the stored
        pointer: the same body and metadata make the put an idempotent retry,
        others raise :class:`CheckpointConflictError`.
        """
        rec = self.codec.encode_checkpoint(key, config, checkpoint, metadata, new_versions)
        chains = self._delta_chains(key, rec)
        if chains is None:  # a base whose chain this process no longer knows
            rec = self.codec.encode_checkpoint(
                key, config, checkpoint, metadata, new_versions, allow_delta=False
            )
            chains = {}
        try:
            try:
                created = yield from self._put_record(key, rec, chains)
            except BaseMissingError:
                self._forget_thread(key.tenant, key.thread)
                rec = self.codec.encode_checkpoint(
                    key, config, checkpoint, metadata, new_versions, allow_delta=False
                )
                created = yield from self._put_record(key, rec, {})
        except BaseException:
            self._forget_thread(key.tenant, key.thread)
            raise
        self.codec.written(rec, created)
        return self.codec.config(key, rec.checkpoint_id)

    def _delta_chains(self, key: ThreadKey, rec: CheckpointRecord) -> dict[str, Chain] | None:
        """The chain of each delta blob of ``rec`` (None: one is not known whole)."""
        scope = (key.tenant, key.thread, key.ns)
        chains: dict[str, Chain] = {}
        for b in rec.blobs:
            if b.base is None:
                continue
            known = self.chains.lookup(scope, b.channel, b.base)
            if known is None:
                return None
            chains[b.channel] = ((b.base, known[0]), *known[1])
        return chains

    def _put_record(
        self, key: ThreadKey, rec: CheckpointRecord, chains: dict[str, Chain]
    ) -> Generator[Any, Any, list[str]]:
        """Write one checkpoint record; the channels whose blob this write created.

        Blob items are insert-only (a version already stored keeps its value,
        as on the other backends: a delta's base never changes); a delta also
        checks its base is stored. The pointer goes last.

        Raises:
            BaseMissingError: A delta's base is gone; nothing was written.
        """
        pk = thread_pk(key.tenant, key.thread)
        psk = pointer_sk(key.ns, rec.checkpoint_id)
        scope = (key.tenant, key.thread, key.ns)
        blob_sks = [blob_sk(key.ns, b.channel, b.version) for b in rec.blobs]
        metadata_index = json.dumps(rec.metadata_index, separators=(",", ":"))
        what = f"checkpoint {rec.checkpoint_id} of thread {key.thread!r}"
        exp = self._expiry(key.tenant)
        new = {(b.channel, b.version): b for b in rec.blobs}
        # values unchanged since an earlier checkpoint: their chunks and chains, if known
        hints = {
            (c, v): known
            for c, v in rec.blob_refs
            if (c, v) not in new and (known := self.chains.lookup(scope, c, v)) is not None
        }
        written: dict[tuple[str, str], int] = {}
        pointer = len(rec.blobs)  # the pointer's group comes after the blobs'
        offloaded: dict[tuple[int, str], str] = {}  # (group, payload name) -> S3 object key

        def build(now: float) -> list[list[dict[str, Any]]]:
            stamp = self._stamp(exp, now)
            groups: list[list[dict[str, Any]]] = []
            for gi, (b, bsk) in enumerate(zip(rec.blobs, blob_sks, strict=True)):
                base = {
                    "pk": S(pk),
                    "sk": S(bsk),
                    "t": S(b.sealed.type if b.sealed else "empty"),
                    "ts": N(int(now)),
                }
                if b.base is not None:
                    base.update(delta_attributes(b.base, b.prefix, chains[b.channel]))
                payloads = {"d": b.sealed.data} if b.sealed else {}
                _offload_payloads(base, payloads, offloaded, gi)
                item, chunks = with_payloads(base, payloads, stamp)
                written[(b.channel, b.version)] = chunk_count(item, "d")
                # the blob first (its condition decides), then its chunks and base check
                group = [self._blob_put(item, now)] + [self._put_action(c) for c in chunks]
                if b.base is not None:
                    group.append(self._base_check(pk, blob_sk(key.ns, b.channel, b.base), now))
                groups.append(group)
            refs = []
            for c, v in rec.blob_refs:
                if (c, v) in written:
                    blob = new[(c, v)]
                    chain = chains.get(c) if blob.base is not None else None
                    refs.append(refs_entry(c, v, written[(c, v)], chain))
                elif (c, v) in hints:
                    refs.append(refs_entry(c, v, hints[(c, v)][0], hints[(c, v)][1]))
                else:
                    refs.append(refs_entry(c, v, -1, None))
            base = {
                "pk": S(pk),
                "sk": S(psk),
                "fv": N(rec.v),
                "bt": S(rec.body.type),
                "mt": S(rec.metadata.type),
                "mi": S(metadata_index),
                "refs": S(json.dumps(refs, separators=(",", ":"))),
                "ts": N(int(now)),
            }
            if rec.parent_checkpoint_id:
                base["p"] = S(str(rec.parent_checkpoint_id))
            if rec.run_id:
                base["r"] = S(rec.run_id)
            payloads = {"b": rec.body.data, "m": rec.metadata.data}
            _offload_payloads(base, payloads, offloaded, pointer)
            item, chunks = with_payloads(base, payloads, stamp)
            # the pointer last, insert-only (append-only checkpoints): if its id
            # is stored already the transaction writes nothing (see below)
            groups.append([self._put_action(c) for c in chunks] + [self._pointer_put(item, now)])
            return groups

        if self.bucket is not None:
            yield from self._offload(key, rec, build, offloaded)
        try:
            dropped = yield from self._write_groups(
                pk, exp, build, lambda gi: gi != pointer, what, whole_limit=True
            )
        except TransactionCanceledError as exc:
            # the pointer is the last action: did its condition (id not stored) fail?
            if not exc.reasons or exc.reasons[-1] != "ConditionalCheckFailed":
                raise
            same = yield from self._stored_matches(pk, psk, rec)
            if same is None:  # not stored after all: another cause
                raise
            if not same:
                raise CheckpointConflictError(
                    key.tenant, key.thread, key.ns, rec.checkpoint_id
                ) from None
            return []  # the same checkpoint is stored: an idempotent retry, nothing written
        created = []
        for gi, b in enumerate(rec.blobs):
            if gi in dropped:  # stored already (by an earlier attempt or another writer)
                self.chains.forget_versions(scope, b.channel, [b.version])
                continue
            created.append(b.channel)
            chain = chains.get(b.channel) if b.base is not None else None
            self.chains.remember(
                scope, b.channel, b.version, written[(b.channel, b.version)], chain
            )
        return created

    def _offload(
        self,
        key: ThreadKey,
        rec: CheckpointRecord,
        build: Callable[[float], list[list[dict[str, Any]]]],
        offloaded: dict[tuple[int, str], str],
    ) -> Generator[Any, Any, None]:
        """Move the largest payloads of a checkpoint to S3 until its transaction fits.

        One PutObject per payload moved, before the transaction that references
        them (see ``_objects``); nothing moves when the checkpoint fits as it is.
        """
        room = TRANSACTION_BYTES - 1024
        pointer = len(rec.blobs)
        candidates: list[tuple[int, str, bytes, str | None, str | None]] = [
            (gi, "d", b.sealed.data, b.channel, b.version)
            for gi, b in enumerate(rec.blobs)
            if b.sealed is not None
        ]
        candidates += [
            (pointer, "b", rec.body.data, None, None),
            (pointer, "m", rec.metadata.data, None, None),
        ]
        candidates.sort(key=lambda c: -len(c[2]))
        for gi, name, data, channel, version in candidates:
            size = sum(action_size(a) for group in build(self.now()) for a in group)
            if size <= room:
                break
            digest = hashlib.sha256(data).hexdigest()
            object_key_ = object_key(
                self.object_prefix,
                key.tenant,
                key.thread,
                key.ns,
                rec.checkpoint_id,
                name,
                digest,
                channel,
                version,
            )
            yield from self._put_object(object_key_, data)
            offloaded[(gi, name)] = object_key_
        return None

    def _pointer_put(self, item: dict[str, Any], now: float) -> dict[str, Any]:
        """Put a checkpoint (pointer) item unless its id is stored (and not expired)."""
        return self._blob_put(item, now)

    def _stored_matches(
        self, pk: str, psk: str, rec: CheckpointRecord
    ) -> Generator[Any, Any, bool | None]:
        """Whether the stored checkpoint ``psk`` holds ``rec``'s body and metadata.

        One consistent GetItem, made only when a put found its id stored.
        None when no live item is stored (the transaction failed for another reason).
        """
        resp = yield from self._call(
            "get_item",
            {"TableName": self.table, "Key": {"pk": S(pk), "sk": S(psk)}, "ConsistentRead": True},
        )
        item = (resp or {}).get("Item")
        if not item or not _is_live(item, self.now()):
            return None
        return same_checkpoint(
            item, rec.body.type, rec.body.data, rec.metadata.type, rec.metadata.data
        )

    def _blob_put(self, item: dict[str, Any], now: float) -> dict[str, Any]:
        """Put a blob item unless that version is stored (and not expired) already."""
        return {
            "Put": {
                "TableName": self.table,
                "Item": item,
                "ConditionExpression": "attribute_not_exists(#sk) OR #ex <= :now",
                "ExpressionAttributeNames": {"#sk": "sk", "#ex": TTL_ATTRIBUTE},
                "ExpressionAttributeValues": {":now": N(now)},
            }
        }

    def _base_check(self, pk: str, sk: str, now: float) -> dict[str, Any]:
        """Check that a delta's base is stored (and not expired)."""
        return {
            "ConditionCheck": {
                "TableName": self.table,
                "Key": {"pk": S(pk), "sk": S(sk)},
                "ConditionExpression": "attribute_exists(#sk) AND "
                "(attribute_not_exists(#ex) OR #ex > :now)",
                "ExpressionAttributeNames": {"#sk": "sk", "#ex": TTL_ATTRIBUTE},
                "ExpressionAttributeValues": {":now": N(now)},
            }
        }

    @operation
    def put_writes(
        self,
        key: ThreadKey,
        checkpoint_id: str,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Generator[Any, Any, None]:
        """Store a task's pending writes: one TransactWriteItems per 100 items / 4 MB.

        With a bucket, a write larger than a transaction goes to S3 first (one
        PutObject), then its item.
        """
        if not writes:
            return None
        records, replace = self.codec.encode_writes(key, checkpoint_id, writes, task_id, task_path)
        # Special writes share fixed indexes, so one call may hold two writes of one key:
        # like the Postgres saver, an insert keeps the first, a replacement the last.
        position: dict[int, int] = {}
        for pos, r in enumerate(records):
            if replace or r.idx not in position:
                position[r.idx] = pos
        records = [records[pos] for pos in sorted(position.values())]
        pk = thread_pk(key.tenant, key.thread)
        sks = [write_sk(key.ns, checkpoint_id, task_id, r.idx) for r in records]
        what = f"{len(records)} writes of task {task_id!r} on thread {key.thread!r}"
        exp = self._expiry(key.tenant)
        offloaded: dict[tuple[int, str], str] = {}
        if self.bucket is not None:
            for gi, r in enumerate(records):
                if len(r.sealed.data) > TRANSACTION_BYTES - WRITE_ROOM:
                    digest = hashlib.sha256(r.sealed.data).hexdigest()
                    stored_at = object_key(
                        self.object_prefix,
                        key.tenant,
                        key.thread,
                        key.ns,
                        checkpoint_id,
                        "v",
                        digest,
                        task_id=task_id,
                        idx=r.idx,
                    )
                    yield from self._put_object(stored_at, r.sealed.data)
                    offloaded[(gi, "v")] = stored_at

        def build(now: float) -> list[list[dict[str, Any]]]:
            stamp = self._stamp(exp, now)
            groups = []
            for gi, (r, sk) in enumerate(zip(records, sks, strict=True)):
                base = {
                    "pk": S(pk),
                    "sk": S(sk),
                    "ch": S(r.channel),
                    "tp": S(r.task_path),
                    "t": S(r.sealed.type),
                    "ts": N(int(now)),
                }
                payloads = {"v": r.sealed.data}
                _offload_payloads(base, payloads, offloaded, gi)
                item, chunks = with_payloads(base, payloads, stamp)
                # the write first: its condition decides; its chunks ride along
                groups.append(
                    [self._put_action(item, insert_only=not replace)]
                    + [self._put_action(c) for c in chunks]
                )
            return groups

        yield from self._write_groups(pk, exp, build, not replace, what, whole_limit=False)
        return None
