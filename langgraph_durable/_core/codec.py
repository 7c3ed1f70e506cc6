"""CheckpointTuple <-> storage records, independent of any backend.

Every decision about what a checkpoint turns into when stored (which channel
values stay inline, which become blobs, which metadata stays clear for
filtering, how special writes are indexed) and how it comes back lives here,
so every backend stores and reads the same shapes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.types import TASKS, _DeltaSnapshot

from ..errors import CorruptRecordError, DurableError, InvalidInputError, SettingsMismatchError
from .chain import TAG_SIZE, ChainCache, ChainKey, encode_block, split_block
from .delta import MEMO_MIN, DeltaTracker, ListMemo, Written, join_chain
from .ids import ThreadKey, tenant_from_config, thread_key
from .records import (
    BlobDelta,
    BlobRecord,
    CheckpointRecord,
    RecordIdentity,
    RecordKind,
    Sealed,
    WriteRecord,
)

__all__ = [
    "RecordPipeline",
    "tenant_from_config",
    "thread_key",
    "CheckpointCodec",
    "StoredCheckpoint",
    "ThreadKey",
    "PendingWrite",
]

_INLINE_TYPES = (str, int, float, bool)
#: The key of a stored body that holds the authenticated copy of its clear references:
#: {"b": channels whose value is stored beside the body, "p": the parent checkpoint id}.
BIND_KEY = "lgd_refs"
#: The key of stored (sealed) metadata that holds the settings its clear index was made
#: with (``RecordPipeline.index_settings``), so a reader with other settings is told so.
SETTINGS_KEY = "lgd_index"


def _describe(settings: Any) -> str:
    if not isinstance(settings, dict):
        return "no clear metadata index settings"
    return ", ".join(f"{name}={settings.get(name)!r}" for name in sorted(settings))


# Checkpoint format versions before 4 kept pending sends as writes of the parent.
_SENDS_IN_CHANNELS_SINCE = 4


class RecordPipeline(Protocol):
    """What the codec needs from the record pipeline (see ``langgraph_durable.protect``)."""

    def seal(self, identity: RecordIdentity, value: Any) -> Sealed:
        """Turn a value into stored bytes bound to ``identity``."""
        ...

    def open(self, identity: RecordIdentity, sealed: Sealed) -> Any:
        """Verify and turn stored bytes back into a value."""
        ...

    binds_identity: bool
    """Whether a sealed payload only opens under its own identity (encryption)."""

    joins_lists: bool
    """Whether stored payloads are the serializer's own bytes, opened by the serializer
    alone: then the parts of a delta chain (msgpack arrays) decode as one array."""

    def metadata_index(self, identity: RecordIdentity, metadata: dict[str, Any]) -> dict[str, Any]:
        """The part of the metadata (of the record ``identity``) stored in clear for filtering."""
        ...

    def split_filter(
        self, tenant: str, filter: dict[str, Any] | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(what backends match against the clear index, what is matched after decoding)."""
        ...

    def check_metadata(
        self,
        identity: RecordIdentity,
        metadata: Any,
        stored_index: dict[str, Any] | None,
        sealed: Sealed,
    ) -> None:
        """Raise if the stored clear index disagrees with the opened metadata."""
        ...

    def serialize(self, identity: RecordIdentity, value: Any) -> tuple[str, bytes]:
        """The (type, bytes) ``seal`` would protect for ``value`` stored as ``identity``."""
        ...

    def seal_serialized(self, identity: RecordIdentity, serialized: tuple[str, bytes]) -> Sealed:
        """``seal`` of a value already serialized by ``serialize``."""
        ...

    def tampered(self, why: str) -> Exception:
        """The error for a record whose clear fields disagree with its authenticated copy."""
        ...

    def index_settings(self) -> dict[str, Any] | None:
        """The settings that decide the clear metadata index (None: everything is clear).

        Sealed with each checkpoint's metadata, so a read with other settings is
        reported as such rather than as tampering.
        """
        ...

    def effect_id(self, tenant: str, material: bytes) -> str:
        """The stored id of an effect-journal entry derived from ``material``.

        Keyed by the tenant's index key when encryption is on, so the id does
        not reveal a guessable argument.
        """
        ...


class PendingWrite(tuple):
    """A pending write as ``CheckpointTuple.pending_writes`` holds it: (task_id, channel, value).

    Compares and unpacks as that 3-tuple; also carries where it was stored
    (``task_path`` and ``idx``), so a copy can store it again the same way.
    """

    task_path: str
    idx: int

    def __new__(cls, task_id: str, channel: str, value: Any, task_path: str, idx: int) -> Any:
        out = tuple.__new__(cls, (task_id, channel, value))
        out.task_path = task_path
        out.idx = idx
        return out

    def __getnewargs__(self) -> tuple[Any, ...]:  # type: ignore[override]
        return (*self, self.task_path, self.idx)


class StoredCheckpoint:
    """The parts of one stored checkpoint as a backend reads them back."""

    __slots__ = (
        "thread",
        "ns",
        "checkpoint_id",
        "parent_checkpoint_id",
        "body",
        "metadata",
        "blobs",
        "bases",
        "writes",
        "parent_sends",
        "metadata_index",
    )

    def __init__(
        self,
        *,
        thread: str,
        ns: str,
        checkpoint_id: str,
        parent_checkpoint_id: str | None,
        body: Sealed,
        metadata: Sealed,
        blobs: Iterable[tuple[str, str, Sealed | BlobDelta | None]] = (),
        bases: Mapping[tuple[str, str], Sealed | BlobDelta | None] | None = None,
        writes: Iterable[tuple[str, str, int, str, Sealed]] = (),
        parent_sends: Iterable[tuple[str, str, int, Sealed]] = (),
        metadata_index: dict[str, Any] | None = None,
    ) -> None:
        self.thread = thread
        self.ns = ns
        self.checkpoint_id = checkpoint_id
        self.parent_checkpoint_id = parent_checkpoint_id
        self.body = body
        self.metadata = metadata
        # (channel, version, sealed or delta, or None when empty)
        self.blobs = blobs
        # (channel, version) -> stored blob, for the versions deltas are built on
        self.bases = bases or {}
        # (task_id, task_path, idx, channel, sealed)
        self.writes = writes
        # pending sends of the parent, for checkpoints older than format 4:
        # (task_id, task_path, idx, sealed)
        self.parent_sends = parent_sends
        # the clear metadata index as stored (checked against the opened
        # metadata when the pipeline encrypts); None when not read
        self.metadata_index = metadata_index


def _json_safe(value: Any) -> Any:
    """Project a metadata value onto what JSON (and Postgres jsonb) can hold."""
    if value is None or isinstance(value, (bool, int, float)):
        if isinstance(value, float) and value != value:  # NaN has no JSON form
            return None
        return value
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str):
                out[k.replace("\x00", "")] = _json_safe(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return None


def json_safe_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """A JSON-safe copy of ``metadata`` (non-JSON values become null)."""
    return _json_safe(metadata)  # type: ignore[no-any-return]


def encode_filter(filter: dict[str, Any] | None) -> str | None:
    """The JSON text of a metadata filter, or None when there is no filter."""
    if not filter:
        return None
    if not isinstance(filter, dict):
        raise InvalidInputError(f"filter must be a dict of metadata keys to values, got {filter!r}")
    return json.dumps(_json_safe(filter), separators=(",", ":"))


class CheckpointCodec:
    """Turns LangGraph's checkpoint objects into records and back.

    Args:
        pipeline: The record pipeline every payload passes through.
        delta_chain: Store list channels that grow by appending as deltas, with
            at most this many deltas between two full copies (see
            ``langgraph_durable._core.delta``); 0 stores every value in full.
            Only for backends that read a delta's chain back with it.
    """

    def __init__(self, pipeline: RecordPipeline, delta_chain: int = 0) -> None:
        self.pipeline = pipeline
        self.deltas = DeltaTracker(delta_chain) if delta_chain > 0 else None
        chain = getattr(pipeline, "chain", None)
        # the hash chain (``integrity=``): the chain key and what is known of parents
        self.chain: ChainKey | None = chain if isinstance(chain, ChainKey) else None
        self.chain_cache = ChainCache() if self.chain is not None else None

    # ---- writing -------------------------------------------------------------

    def encode_checkpoint(
        self,
        key: ThreadKey,
        config: dict[str, Any],
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        allow_delta: bool = True,
    ) -> CheckpointRecord:
        """The record one ``put`` stores.

        Primitive channel values (None, str, int, float, bool) stay inline in the
        checkpoint body; every other value becomes a blob keyed by its channel
        version, written only when its channel is in ``new_versions`` (older
        versions were written by an earlier put of the same thread). With delta
        encoding on and ``allow_delta``, a list that extends the last list this
        codec wrote for the channel becomes a delta blob.
        """
        checkpoint_id = checkpoint.get("id")
        if not checkpoint_id or not isinstance(checkpoint_id, str):
            raise InvalidInputError(f"checkpoint has no string 'id': {checkpoint_id!r}")
        parent_id = config["configurable"].get("checkpoint_id")
        body = dict(checkpoint)
        inline: dict[str, Any] = {}
        blob_values: dict[str, Any] = {}
        for channel, value in checkpoint["channel_values"].items():
            if isinstance(value, _DeltaSnapshot):
                blob_values[channel] = value
                inline[channel] = True  # marker: the blob holds the snapshot
            elif value is None or isinstance(value, _INLINE_TYPES):
                inline[channel] = value
            else:
                blob_values[channel] = value
        body["channel_values"] = inline
        versions = checkpoint.get("channel_versions") or {}
        blob_refs = [(ch, str(versions[ch])) for ch in blob_values if ch in versions]
        # The authenticated copy of what the clear columns beside the body say: which
        # channels hold a stored value (their versions are the body's) and the parent.
        body[BIND_KEY] = {"b": [ch for ch, _ in blob_refs], "p": parent_id}
        blobs: list[BlobRecord] = []
        tracked: list[tuple[str, Any]] = []
        scope = (key.tenant, key.thread, key.ns)
        for ch, ver in new_versions.items():
            if ch not in blob_values:
                continue
            value = blob_values[ch]
            identity = RecordIdentity(
                key.tenant, key.thread, key.ns, RecordKind.BLOB, "", ch, str(ver), ch
            )
            if self.deltas is not None and type(value) is list:
                serialized = self.pipeline.serialize(identity, value)
                plan = self.deltas.plan(scope, ch, str(ver), value, serialized)
                written = plan.written
                if plan.base is not None and allow_delta:
                    tail_identity = delta_identity(identity, plan.base, plan.prefix)
                    if plan.tail is not None and type(serialized) is tuple:
                        # a plain serialization (no redaction vault): the delta's bytes
                        # are cut from it rather than serialized again
                        tail = self.pipeline.seal_serialized(
                            tail_identity, (serialized[0], plan.tail)
                        )
                    else:
                        tail = self.pipeline.seal(tail_identity, value[plan.prefix :])
                    blobs.append(BlobRecord(ch, str(ver), tail, plan.base, plan.prefix))
                    tracked.append((ch, written))
                    continue
                if plan.base is not None and written is not None:  # whole: a new chain
                    written = Written(
                        written.version, 0, written.items, written.size, written.digest
                    )
                tracked.append((ch, written))
                if plan.serialized is not None:
                    sealed = self.pipeline.seal_serialized(identity, plan.serialized)
                    blobs.append(BlobRecord(ch, str(ver), sealed))
                    continue
            blobs.append(BlobRecord(ch, str(ver), self.pipeline.seal(identity, value)))
        full_metadata = get_serializable_checkpoint_metadata(config, metadata)  # type: ignore[arg-type]
        run_id = full_metadata.get("run_id")
        sealed_body = self.pipeline.seal(self._body_identity(key, checkpoint_id), body)
        settings = self.pipeline.index_settings()
        metadata_identity = self._metadata_identity(key, checkpoint_id)
        sealed_metadata = self.pipeline.seal(
            metadata_identity,
            full_metadata if settings is None else {**full_metadata, SETTINGS_KEY: settings},
        )
        digest = None
        if self.chain is not None and self.chain_cache is not None:
            known = self.chain_cache.get(scope, parent_id) if parent_id else None
            covers = known[1] if known is not None else ()
            grand = self.chain_cache.grand_writes(scope, parent_id) if parent_id else ()
            digest = self.chain.link(
                key.tenant,
                key.thread,
                key.ns,
                checkpoint_id,
                parent_id,
                known[0] if known is not None else None,
                sealed_body.data[-TAG_SIZE:],
                sealed_metadata.data[-TAG_SIZE:],
                blob_refs,
                covers,
                grand,
            )
            block = encode_block(digest, covers, None, grand)
            sealed_body = Sealed(sealed_body.type, sealed_body.data + block)
        return CheckpointRecord(
            tenant=key.tenant,
            thread=key.thread,
            ns=key.ns,
            checkpoint_id=checkpoint_id,
            parent_checkpoint_id=parent_id,
            v=int(checkpoint.get("v", 1)),
            run_id=run_id if isinstance(run_id, str) else None,
            blob_refs=blob_refs,
            metadata_index=self.pipeline.metadata_index(metadata_identity, dict(full_metadata)),
            body=sealed_body,
            metadata=sealed_metadata,
            blobs=blobs,
            tracked=tracked,
            digest=digest,
        )

    def list_memo(self) -> ListMemo:
        """A memo for one listing, large enough for two chains of deltas."""
        chain = self.deltas.max_chain if self.deltas is not None else 0
        return ListMemo(max(MEMO_MIN, 2 * chain + 2))

    def written(self, rec: CheckpointRecord, created: Iterable[str] | None = None) -> None:
        """Tell the delta tracker that ``rec`` is stored.

        Args:
            rec: The record as ``encode_checkpoint`` made it.
            created: Channels whose blob this write created (a blob that already
                existed may hold another value: it is not a base for deltas);
                None when all were created.
        """
        scope = (rec.tenant, rec.thread, rec.ns)
        if self.chain_cache is not None and rec.digest is not None:
            self.chain_cache.put(scope, rec.checkpoint_id, rec.digest, (), rec.parent_checkpoint_id)
        if self.deltas is None:
            return
        fresh = None if created is None else set(created)
        for channel, written in rec.tracked:
            if fresh is None or channel in fresh:
                self.deltas.remember(scope, channel, written)
            else:
                self.deltas.forget_channel(scope, channel)

    def forget_thread(self, tenant: str, thread: str) -> None:
        """Forget delta bases of a thread (it was deleted, pruned or a write failed)."""
        if self.deltas is not None:
            self.deltas.forget(lambda scope: scope[:2] == (tenant, thread))  # type: ignore[index]
        if self.chain_cache is not None:
            self.chain_cache.forget(tenant, thread)

    def chain_needs_parent(self, key: ThreadKey, parent_id: str | None) -> bool:
        """Whether ``put`` under ``parent_id`` must read the parent first (its digest)."""
        if self.chain_cache is None or not parent_id:
            return False
        return not self.chain_cache.has((key.tenant, key.thread, key.ns), parent_id)

    def wrote(
        self, key: ThreadKey, checkpoint_id: str, writes: Sequence[tuple[str, Any]], task_id: str
    ) -> None:
        """Tell the chain that writes of ``checkpoint_id`` are stored (the next put covers them)."""
        if self.chain_cache is None:
            return
        keys = [(task_id, WRITES_IDX_MAP.get(ch, i)) for i, (ch, _v) in enumerate(writes)]
        self.chain_cache.add_writes((key.tenant, key.thread, key.ns), checkpoint_id, keys)

    def encode_writes(
        self,
        key: ThreadKey,
        checkpoint_id: str,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[list[WriteRecord], bool]:
        """The write records of one ``put_writes`` and whether they replace stored ones.

        Special writes (errors, interrupts, resumes, scheduled) use the fixed
        negative indexes of ``WRITES_IDX_MAP`` and replace an earlier write of the
        same task; regular writes are kept as first stored (a retried task must
        not change what was already recorded).
        """
        records = []
        for idx, (channel, value) in enumerate(writes):
            index = WRITES_IDX_MAP.get(channel, idx)
            records.append(
                WriteRecord(
                    task_id=task_id,
                    task_path=task_path,
                    idx=index,
                    channel=channel,
                    sealed=self.pipeline.seal(
                        write_identity(key, checkpoint_id, task_id, index, channel, task_path),
                        value,
                    ),
                )
            )
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        return records, replace

    # ---- reading -------------------------------------------------------------

    def decode(
        self, key: ThreadKey, stored: StoredCheckpoint, memo: ListMemo | None = None
    ) -> CheckpointTuple:
        """Rebuild the CheckpointTuple of one stored checkpoint.

        Args:
            key: The thread key of the call.
            stored: The checkpoint as the backend read it.
            memo: Decoded list values shared by the checkpoints of one listing,
                so a delta is rebuilt from list items decoded once. The
                checkpoints of one listing then share those item objects.
        """
        tenant, ns, thread = key.tenant, stored.ns, stored.thread
        pkey = ThreadKey(tenant, thread, ns, key.echo_tenant)
        sealed_body = stored.body
        if self.chain_cache is not None:
            sealed_body, block = split_block(sealed_body)
            if block is not None:
                self.chain_cache.put(
                    (tenant, thread, ns),
                    stored.checkpoint_id,
                    block.digest,
                    [(w[0], w[2]) for w in stored.writes],
                    stored.parent_checkpoint_id,
                )
        body = self.pipeline.open(self._body_identity(pkey, stored.checkpoint_id), sealed_body)
        if not isinstance(body, dict) or "channel_values" not in body:
            raise CorruptRecordError(
                f"checkpoint {stored.checkpoint_id} of thread {thread!r} has no channel values"
            )
        values = dict(body["channel_values"])
        bind = body.pop(BIND_KEY, None)
        held = self._check_refs(pkey, stored, body, bind) if bind is not None else None
        for channel, version, sealed in stored.blobs:
            if isinstance(sealed, BlobDelta):
                items = self._list_items(pkey, stored, channel, version, sealed, memo)
                values[channel] = list(items)
                continue
            if sealed is None or sealed.type == "empty":
                if held is not None and channel in held:
                    raise self._tampered(pkey, stored, f"the value of channel {channel!r} is gone")
                values.pop(channel, None)
                continue
            value = self.pipeline.open(
                RecordIdentity(tenant, thread, ns, RecordKind.BLOB, "", channel, version, channel),
                sealed,
            )
            if value is None:  # an empty value, sealed like any other (redaction's drop)
                values.pop(channel, None)
            else:
                values[channel] = value
        body["channel_values"] = values
        if int(body.get("v", 1)) < _SENDS_IN_CHANNELS_SINCE and stored.parent_checkpoint_id:
            self._migrate_pending_sends(pkey, stored, body)
        meta_identity = self._metadata_identity(pkey, stored.checkpoint_id)
        metadata = self.pipeline.open(meta_identity, stored.metadata)
        writer = metadata.pop(SETTINGS_KEY, None) if isinstance(metadata, dict) else None
        try:
            self.pipeline.check_metadata(
                meta_identity, metadata, stored.metadata_index, stored.metadata
            )
        except DurableError:
            mine = self.pipeline.index_settings()
            if writer is None or writer == mine:
                raise
            raise SettingsMismatchError(
                f"checkpoint {stored.checkpoint_id} of thread {thread!r} was written with "
                f"{_describe(writer)}; this saver has {_describe(mine)}: its clear metadata "
                "is checked against the writer's settings, so read it with the same "
                "Encryption(clear_metadata=..., searchable_metadata=...) as the writer"
            ) from None
        writes = sorted(stored.writes, key=lambda w: writes_sort_key(w[1], w[0], w[2]))
        pending = [
            PendingWrite(
                task_id,
                channel,
                self.pipeline.open(
                    write_identity(pkey, stored.checkpoint_id, task_id, idx, channel, path),
                    sealed,
                ),
                path,
                idx,
            )
            for task_id, path, idx, channel, sealed in writes
        ]
        return CheckpointTuple(
            config=self.config(pkey, stored.checkpoint_id),
            checkpoint=body,  # type: ignore[arg-type]
            metadata=metadata,
            parent_config=(
                self.config(pkey, stored.parent_checkpoint_id)
                if stored.parent_checkpoint_id
                else None
            ),
            pending_writes=pending,
        )

    def _check_refs(
        self, key: ThreadKey, stored: StoredCheckpoint, body: dict[str, Any], bind: Any
    ) -> frozenset[str] | None:
        """Check the clear references beside a body against the body's own copy.

        The body (authenticated when the pipeline binds identity) names the channels
        that hold a stored value and the parent; their versions are the body's
        ``channel_versions``. A reference rolled back, dropped or added, a value
        deleted or blanked, or a parent relinked raises the pipeline's error. Returns
        the channels whose value must be present (None when nothing is checked: a
        pipeline that authenticates nothing, where a missing value reads as empty).
        """
        if not self.pipeline.binds_identity:
            return None
        try:
            held = frozenset(bind["b"])
            parent = bind["p"]
        except (TypeError, KeyError) as exc:
            raise self._tampered(key, stored, "its reference block is malformed") from exc
        if parent != stored.parent_checkpoint_id:
            raise self._tampered(
                key, stored, f"its parent pointer says {stored.parent_checkpoint_id!r}, "
                f"its body says {parent!r}"
            )  # fmt: skip
        versions = body.get("channel_versions") or {}
        seen: set[str] = set()
        for channel, version, _sealed in stored.blobs:
            if channel not in held:
                raise self._tampered(
                    key, stored, f"it references a value of channel {channel!r} its body "
                    "does not hold"
                )  # fmt: skip
            if channel in seen or version != str(versions.get(channel)):
                raise self._tampered(
                    key, stored, f"channel {channel!r} is referenced at version {version}, "
                    f"its body has {versions.get(channel)}"
                )  # fmt: skip
            seen.add(channel)
        missing = held - seen
        if missing:
            raise self._tampered(
                key, stored, f"the values of channels {sorted(missing)} are not referenced"
            )
        return held

    def _tampered(self, key: ThreadKey, stored: StoredCheckpoint, why: str) -> Exception:
        where = (
            f"checkpoint {stored.checkpoint_id} of thread {stored.thread!r} (tenant "
            f"{key.tenant!r}, namespace {stored.ns!r})"
        )
        return self.pipeline.tampered(f"{where} disagrees with what its body says: {why}")

    def _list_items(
        self,
        key: ThreadKey,
        stored: StoredCheckpoint,
        channel: str,
        version: str,
        delta: BlobDelta,
        memo: ListMemo | None,
    ) -> tuple[Any, ...]:
        """The items of a delta-encoded list value, rebuilt along its chain.

        With a ``memo`` (a listing) every version on the way is kept for the
        next checkpoints; without one (a single read) only the value is built.
        """
        keep = memo is not None
        if not keep and self.pipeline.joins_lists:  # the whole chain in one pass
            joined = join_chain(channel, delta, stored.bases)
            if joined is not None:
                value = self._open_blob(key, stored, channel, version, Sealed("msgpack", joined[0]))
                if isinstance(value, list) and len(value) == joined[1]:
                    return tuple(value)
        memo = memo if memo is not None else ListMemo()
        thread, ns = key.thread, stored.ns
        # Walk down to a full copy or a version the memo holds, then back up.
        todo: list[tuple[str, BlobDelta]] = []
        ver: str = version
        payload: Sealed | BlobDelta | None = delta
        items: tuple[Any, ...] | None = None
        while True:
            items = memo.get((thread, ns, channel, ver))
            if items is not None:
                break
            if not isinstance(payload, BlobDelta):
                value = self._open_blob(key, stored, channel, ver, payload)
                if not isinstance(value, list):
                    raise self.pipeline.tampered(
                        f"channel {channel!r} version {ver} of thread {thread!r} is the base "
                        f"of a delta but holds a {type(value).__name__}, not a list"
                    )
                items = memo.put((thread, ns, channel, ver), value)
                break
            todo.append((ver, payload))
            if len(todo) > len(stored.bases) + 1:
                raise self.pipeline.tampered(
                    f"channel {channel!r} version {ver} of thread {thread!r} has a looping "
                    "delta chain"
                )
            ver = payload.base
            if (channel, ver) not in stored.bases:
                raise self.pipeline.tampered(
                    f"channel {channel!r} of thread {thread!r}: version {ver}, the base of "
                    f"a delta, is missing"
                )
            payload = stored.bases[(channel, ver)]
        built: list[Any] = list(items)
        for ver, step in reversed(todo):
            if len(built) != step.prefix:
                raise self.pipeline.tampered(
                    f"channel {channel!r} version {ver} of thread {thread!r} extends "
                    f"{step.prefix} items but its base has {len(built)}"
                )
            tail = self._open_blob(key, stored, channel, ver, step.tail, step)
            if not isinstance(tail, list):
                raise self.pipeline.tampered(
                    f"channel {channel!r} version {ver} of thread {thread!r}: a delta's "
                    "items are not a list"
                )
            built.extend(tail)
            if keep:
                memo.put((thread, ns, channel, ver), built)
        return tuple(built)

    def _open_blob(
        self,
        key: ThreadKey,
        stored: StoredCheckpoint,
        channel: str,
        version: str,
        sealed: Sealed | BlobDelta | None,
        delta: BlobDelta | None = None,
    ) -> Any:
        if sealed is None or isinstance(sealed, BlobDelta) or sealed.type == "empty":
            return None
        identity = RecordIdentity(  # delta_identity()'s, built in one step
            key.tenant,
            key.thread,
            stored.ns,
            RecordKind.BLOB,
            "",
            channel,
            version,
            channel,
            "" if delta is None else delta_extra(delta.base, delta.prefix),
        )
        return self.pipeline.open(identity, sealed)

    def _migrate_pending_sends(
        self, key: ThreadKey, stored: StoredCheckpoint, body: dict[str, Any]
    ) -> None:
        """Checkpoints before format 4 find their pending sends in the parent's writes."""
        sends = sorted(stored.parent_sends, key=lambda w: writes_sort_key(w[1], w[0], w[2]))
        if not sends:
            return
        parent = stored.parent_checkpoint_id or ""
        body["channel_values"][TASKS] = [
            self.pipeline.open(write_identity(key, parent, task_id, idx, TASKS, path), sealed)
            for task_id, path, idx, sealed in sends
        ]
        versions = body.setdefault("channel_versions", {})
        versions[TASKS] = max(versions.values()) if versions else "1"

    @staticmethod
    def config(key: ThreadKey, checkpoint_id: str) -> RunnableConfig:
        """The config that addresses one checkpoint."""
        configurable: dict[str, Any] = {
            "thread_id": key.thread,
            "checkpoint_ns": key.ns,
            "checkpoint_id": checkpoint_id,
        }
        if key.echo_tenant:
            configurable["tenant_id"] = key.tenant
        return cast(RunnableConfig, {"configurable": configurable})

    @staticmethod
    def _body_identity(key: ThreadKey, checkpoint_id: str) -> RecordIdentity:
        return RecordIdentity(key.tenant, key.thread, key.ns, RecordKind.CHECKPOINT, checkpoint_id)

    @staticmethod
    def _metadata_identity(key: ThreadKey, checkpoint_id: str) -> RecordIdentity:
        return RecordIdentity(key.tenant, key.thread, key.ns, RecordKind.METADATA, checkpoint_id)


def write_identity(
    key: ThreadKey, checkpoint_id: str, task_id: str, idx: int, channel: str, task_path: str
) -> RecordIdentity:
    """The identity a pending write is sealed under: its channel and task path are bound."""
    return RecordIdentity(
        key.tenant,
        key.thread,
        key.ns,
        RecordKind.WRITE,
        checkpoint_id,
        task_id,
        str(idx),
        channel,
        task_path,
    )


def delta_identity(identity: RecordIdentity, base: str, prefix: int) -> RecordIdentity:
    """The identity a delta's items are sealed under: it also binds the base and prefix."""
    return RecordIdentity(  # positional: _replace is slower, and this runs on the read path
        identity.tenant,
        identity.thread,
        identity.ns,
        identity.kind,
        identity.checkpoint_id,
        identity.key,
        identity.version,
        identity.channel,
        delta_extra(base, prefix),
    )


def delta_extra(base: str, prefix: int) -> str:
    """The clear extra field a delta's identity binds: its base version and item count."""
    return f"delta:{base}:{prefix}"
