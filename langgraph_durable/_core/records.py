"""Storage-neutral record shapes shared by every backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "RecordKind",
    "RecordIdentity",
    "Sealed",
    "BlobRecord",
    "BlobDelta",
    "WriteRecord",
    "CheckpointRecord",
    "StoredDataKey",
]


class RecordKind:
    """The kinds of payload-bearing records a saver stores."""

    CHECKPOINT = "checkpoint"
    METADATA = "metadata"
    BLOB = "blob"
    WRITE = "write"
    EFFECT = "effect"
    STORE_ITEM = "store_item"
    STORE_VECTORS = "store_vectors"


class RecordIdentity(NamedTuple):
    """Where a payload belongs. The record pipeline binds it to the payload.

    Attributes:
        tenant: Tenant id.
        thread: Thread id.
        ns: Checkpoint namespace.
        kind: One of :class:`RecordKind`.
        checkpoint_id: Checkpoint id (empty for channel blobs, which are
            shared by every checkpoint that references their version).
        key: Channel name for blobs; ``task_id`` for writes.
        version: Channel version for blobs; write index for writes.
        channel: The channel the value belongs to (blobs and writes), for
            per-channel redaction rules; not part of what encryption binds
            (the other fields already name the record).
        extra: Clear fields stored beside the payload that the integrity tag
            also binds (a delta's base version and prefix length).

    A named tuple, not a dataclass: one is made per record on every write and
    read, and a frozen dataclass takes three times as long to build.
    """

    tenant: str
    thread: str
    ns: str
    kind: str
    checkpoint_id: str = ""
    key: str = ""
    version: str = ""
    channel: str = ""
    extra: str = ""


@dataclass(frozen=True, slots=True)
class Sealed:
    """A payload as the pipeline hands it to storage: a type tag plus bytes."""

    type: str
    data: bytes


@dataclass(frozen=True, slots=True)
class BlobRecord:
    """One channel value at one version (``sealed`` is None for an empty channel).

    When ``base`` is set the record is a delta of a list value: the value is
    the list stored at version ``base`` of the same channel (which has
    ``prefix`` items) followed by the items sealed in ``sealed``. The base may
    itself be a delta; a backend reads the whole chain down to a full copy.
    """

    channel: str
    version: str
    sealed: Sealed | None
    base: str | None = None
    prefix: int = 0


@dataclass(frozen=True, slots=True)
class BlobDelta:
    """A stored delta blob as a backend reads it back (see :class:`BlobRecord`)."""

    base: str
    prefix: int
    tail: Sealed


@dataclass(frozen=True, slots=True)
class WriteRecord:
    """One pending write of one task."""

    task_id: str
    task_path: str
    idx: int
    channel: str
    sealed: Sealed


@dataclass(slots=True)
class CheckpointRecord:
    """Everything one ``put`` stores, with its clear (indexed) fields separate.

    Attributes:
        tenant, thread, ns, checkpoint_id, parent_checkpoint_id: identity.
        v: Checkpoint format version (clear: old formats need migration on read).
        run_id: ``metadata["run_id"]`` if it is a string (clear: ``delete_for_runs``).
        blob_refs: (channel, version) of every channel value stored as a blob.
        metadata_index: JSON-safe projection of the metadata used for filtering.
        body: The sealed checkpoint without its blob channel values.
        metadata: The sealed full metadata.
        blobs: Blobs to write (only channels in ``new_versions``).
        tracked: (channel, what was written) of list blobs, for the codec's
            delta tracker once the write succeeded (``CheckpointCodec.written``).
        digest: The checkpoint's chain digest when the saver has ``integrity=``
            (also stored in the body's chain block).
    """

    tenant: str
    thread: str
    ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    v: int
    run_id: str | None
    blob_refs: list[tuple[str, str]]
    metadata_index: dict[str, Any]
    body: Sealed
    metadata: Sealed
    blobs: list[BlobRecord] = field(default_factory=list)
    tracked: list[tuple[str, Any]] = field(default_factory=list)
    digest: bytes | None = None


@dataclass(frozen=True, slots=True)
class StoredDataKey:
    """One data-key version of a tenant as the backend stores it.

    Attributes:
        version: 1, 2, ... per tenant.
        key_id: The keyring key that wrapped it (empty once shredded).
        wrapped: The wrapped data key; None once shredded.
        created: When it was made (Unix seconds).
    """

    version: int
    key_id: str
    wrapped: bytes | None
    created: float
