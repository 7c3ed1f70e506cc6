"""Checking a thread's stored history against the chain key (``verify``).

Pure. :class:`AuditCodec` stands in for the saver's codec during a listing:
instead of opening payloads it checks their tags and collects each
checkpoint's chain fields (no decryption key is needed, nothing is
deserialized). :func:`check_thread` then walks the links of one thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import IntegrityError
from .chain import TAG_SIZE, ChainBlock, ChainKey, split_block
from .codec import CheckpointCodec, StoredCheckpoint, ThreadKey, delta_identity, write_identity
from .delta import ListMemo
from .records import BlobDelta, RecordIdentity, RecordKind, Sealed

__all__ = ["Audited", "AuditCodec", "Broken", "check_thread"]


@dataclass(slots=True)
class Audited:
    """One stored checkpoint as the audit saw it."""

    tenant: str
    thread: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    block: ChainBlock | None
    body_tag: bytes
    metadata_tag: bytes
    refs: list[tuple[str, str]]
    write_keys: set[tuple[str, int]]
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Broken:
    """A link that does not hold."""

    tenant: str
    thread: str
    ns: str
    checkpoint_id: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {
            "tenant": self.tenant,
            "thread": self.thread,
            "ns": self.ns,
            "checkpoint_id": self.checkpoint_id,
            "reason": self.reason,
        }


class _TagOnly:
    """A pipeline that only checks tags (``AuditCodec`` never opens payloads)."""

    binds_identity = True

    def __init__(self, chain: ChainKey) -> None:
        self.chain = chain


class AuditCodec(CheckpointCodec):
    """A codec whose ``decode`` checks and collects instead of rebuilding tuples."""

    def __init__(self, chain: ChainKey) -> None:
        super().__init__(_TagOnly(chain))  # type: ignore[arg-type]
        self.chain_key = chain

    def decode(  # type: ignore[override]
        self, key: ThreadKey, stored: StoredCheckpoint, memo: ListMemo | None = None
    ) -> Audited:
        tenant, thread, ns = key.tenant, stored.thread, stored.ns
        chain = self.chain_key
        problems: list[str] = []

        def tag_of(identity: RecordIdentity, sealed: Sealed, what: str) -> bytes:
            try:
                chain.check(identity, sealed)
            except IntegrityError:
                problems.append(f"{what} fails its integrity tag (altered, moved or forged)")
            return sealed.data[-TAG_SIZE:]

        cid = stored.checkpoint_id
        block: ChainBlock | None = None
        try:
            body, block = split_block(stored.body)
        except IntegrityError as exc:
            body = stored.body
            problems.append(str(exc))
        if block is None and not problems:
            problems.append("has no chain digest (written without integrity=, or stripped)")
        body_tag = tag_of(
            RecordIdentity(tenant, thread, ns, RecordKind.CHECKPOINT, cid), body, "the body"
        )
        meta_tag = tag_of(
            RecordIdentity(tenant, thread, ns, RecordKind.METADATA, cid),
            stored.metadata,
            "the metadata",
        )
        refs: list[tuple[str, str]] = []
        for channel, version, sealed in stored.blobs:
            refs.append((channel, version))
            self._check_blob(key, stored, channel, version, sealed, tag_of, problems)
        writes: set[tuple[str, int]] = set()
        wkey = ThreadKey(tenant, thread, ns, False)
        for task_id, path, idx, channel, sealed in stored.writes:
            writes.add((task_id, idx))
            tag_of(
                write_identity(wkey, cid, task_id, idx, channel, path),
                sealed,
                f"pending write ({task_id}, {idx})",
            )
        return Audited(
            tenant, thread, ns, cid, stored.parent_checkpoint_id, block, body_tag, meta_tag,
            refs, writes, problems,
        )  # fmt: skip

    def _check_blob(
        self,
        key: ThreadKey,
        stored: StoredCheckpoint,
        channel: str,
        version: str,
        sealed: Sealed | BlobDelta | None,
        tag_of: Any,
        problems: list[str],
    ) -> None:
        seen: set[str] = set()
        ver = version
        while True:
            identity = RecordIdentity(
                key.tenant, stored.thread, stored.ns, RecordKind.BLOB, "", channel, ver, channel
            )
            what = f"channel {channel!r} version {ver}"
            if sealed is None:
                return
            if not isinstance(sealed, BlobDelta):
                tag_of(identity, sealed, what)
                return
            tag_of(delta_identity(identity, sealed.base, sealed.prefix), sealed.tail, what)
            if (channel, sealed.base) not in stored.bases:
                problems.append(f"{what}: the base of its delta, {sealed.base}, is missing")
                return
            if sealed.base in seen:
                problems.append(f"{what}: its delta chain loops")
                return
            seen.add(ver)
            ver = sealed.base
            sealed = stored.bases[(channel, ver)]


def check_thread(chain: ChainKey, entries: Iterable[Audited]) -> list[Broken]:
    """The broken links of one thread's checkpoints (all its namespaces)."""
    by_id = {(e.ns, e.checkpoint_id): e for e in entries}
    broken: list[Broken] = []
    for e in sorted(by_id.values(), key=lambda e: (e.ns, e.checkpoint_id)):

        def bad(reason: str, e: Audited = e) -> None:
            broken.append(Broken(e.tenant, e.thread, e.ns, e.checkpoint_id, reason))

        if e.problems:
            bad("; ".join(e.problems))
            continue
        assert e.block is not None
        parent_digest: bytes | None = None
        if e.parent_id:
            parent = by_id.get((e.ns, e.parent_id))
            if parent is not None:
                if parent.block is None:
                    bad(f"its parent {e.parent_id} has no chain digest")
                    continue
                parent_digest = parent.block.digest
                missing = [c for c in e.block.covers if c not in parent.write_keys]
                if missing:
                    bad(
                        f"pending writes {missing} of its parent {e.parent_id}, covered by "
                        "this checkpoint, are missing"
                    )
                    continue
            else:
                tomb = e.block.tombstone
                if tomb is None or tomb.parent != e.parent_id:
                    bad(f"its parent {e.parent_id} is missing (removed, or this one was inserted)")
                    continue
                if not chain.tombstone_holds(e.tenant, e.thread, e.ns, e.checkpoint_id, tomb):
                    bad("its trim tombstone fails its signature")
                    continue
                parent_digest = tomb.digest
        want = chain.link(
            e.tenant,
            e.thread,
            e.ns,
            e.checkpoint_id,
            e.parent_id,
            parent_digest,
            e.body_tag,
            e.metadata_tag,
            e.refs,
            e.block.covers,
        )
        if want != e.block.digest:
            bad("its chain digest does not match what is stored (altered or re-linked)")
    return broken
