"""The saver's checkpoint writes on Redis: ``put`` and ``put_writes``.

Each is one script on the thread's keys (``lua/put.lua``,
``lua/put_writes.lua``), one round trip; a thread's first write also adds it
to its tenant's index (see ``OpsBase._register``). Pure: no redis import, no I/O.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from .._core.codec import ThreadKey
from .._core.records import CheckpointRecord
from .._core.sansio import operation
from ..errors import CheckpointConflictError
from ._base import OpsBase
from ._keys import SEP, _ident
from ._records import _text, encode_blob, encode_frame, encode_header, encode_payload
from ._requests import Script
from ._scripts import PUT, PUT_WRITES

__all__ = ["WriteOps"]

#: What PUT returns when the checkpoint is stored already with another payload.
CONFLICT = -2


class WriteOps(OpsBase):
    """Checkpoint and pending-write writes."""

    @operation
    def put(
        self,
        key: ThreadKey,
        config: dict[str, Any],
        checkpoint: Any,
        metadata: Any,
        new_versions: Any,
    ) -> Generator[Any, Any, Any]:
        """Store a checkpoint with its new blobs: one script, one round trip.

        On a cluster the first write of a thread adds it to its tenant's index
        (one more); on one server the script does it.
        A list channel stored as a delta whose base is gone (the thread was
        deleted or expired meanwhile) is written again in full (one more).

        Append-only: when the checkpoint id is stored already, the script
        writes nothing; the same payload (body and metadata) is an idempotent
        retry, another raises :class:`CheckpointConflictError`.
        """
        tenant, thread, ns = self._thread_parts(key)
        keys = self.keys.thread(tenant, thread)
        if self._index_in_script:
            keys = (*keys, self.keys.tenant_index(tenant))
        rec = self.codec.encode_checkpoint(key, config, checkpoint, metadata, new_versions)
        checkpoint_id = _ident(rec.checkpoint_id, "checkpoint id")
        if rec.parent_checkpoint_id is not None:
            _ident(rec.parent_checkpoint_id, "parent checkpoint id")
        head = [self._write_spec(tenant), ns, checkpoint_id]
        result = yield Script(PUT, keys, (*head, *self._put_args(tenant, thread, ns, rec)))
        if result and int(result[0]) == -1:
            self.codec.forget_thread(tenant, thread)
            rec = self.codec.encode_checkpoint(
                key, config, checkpoint, metadata, new_versions, allow_delta=False
            )
            result = yield Script(PUT, keys, (*head, *self._put_args(tenant, thread, ns, rec)))
        if result and int(result[0]) == CONFLICT:
            self.codec.forget_thread(tenant, thread)
            raise CheckpointConflictError(tenant, thread, ns, checkpoint_id)
        flags = _text(result[2]) if len(result) > 2 else ""
        self.codec.written(
            rec, [b.channel for b, flag in zip(rec.blobs, flags, strict=False) if flag == "1"]
        )
        yield from self._register(tenant, thread, result)
        return self.codec.config(key, checkpoint_id)

    def _put_args(self, tenant: str, thread: str, ns: str, rec: CheckpointRecord) -> list[Any]:
        """PUT's arguments after the expiry spec, ns and id (see the script)."""
        args: list[Any] = [
            encode_header(rec),
            encode_payload(rec),
            self._mark_flag(tenant, thread),
            thread,
        ]
        fields: list[str] = []
        bases: list[str] = []
        for blob in rec.blobs:
            channel = _ident(blob.channel, "channel name")
            fields.append(ns + SEP + channel + SEP + _ident(blob.version, "channel version"))
            if blob.base is not None:
                bases.append(ns + SEP + channel + SEP + _ident(blob.base, "channel version"))
        args.append(len(bases))
        args.extend(bases)
        for blob, f in zip(rec.blobs, fields, strict=True):
            args.append(f)
            args.append(encode_blob(blob))
        return args

    @operation
    def put_writes(
        self,
        key: ThreadKey,
        checkpoint_id: str,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Generator[Any, Any, None]:
        """Store a task's pending writes: one script, one round trip."""
        if not writes:
            return None
        tenant, thread, ns = self._thread_parts(key)
        field = ns + SEP + _ident(checkpoint_id, "checkpoint id")
        task = _ident(task_id, "task id")
        records, replace = self.codec.encode_writes(key, checkpoint_id, writes, task, task_path)
        args: list[Any] = [self._write_spec(tenant), field, task, "1" if replace else "0"]
        for record in records:
            args.append(record.idx)
            args.append(encode_frame(record))
        yield Script(PUT_WRITES, self.keys.thread(tenant, thread), tuple(args))
        return None
