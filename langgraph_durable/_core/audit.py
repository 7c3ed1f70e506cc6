"""Checking a thread's stored history against the chain key (``verify``).

Pure. :class:`AuditCodec` stands in for the saver's codec during a listing:
instead of opening payloads it checks their tags and collects each
checkpoint's chain fields (no decryption key is needed, nothing is
deserialized). :func:`check_thread` then walks the links of one thread.

The same check guards a trim: :func:`check_trim` lists one thread through an
``AuditCodec`` copy of a backend's operations and returns the broken links of
the region a ``keep_latest`` trim would remove (:func:`region_breaks`), so the
pruner never signs a tombstone over a link it has not verified. Heads
(:class:`Head`, :func:`thread_heads`, :func:`check_heads`) let a thread's
newest digest be anchored outside the store, so that removing the newest
checkpoints is detected too.
"""

from __future__ import annotations

import copy
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import IntegrityError, InvalidInputError
from .chain import TAG_SIZE, ChainBlock, ChainKey, split_block
from .codec import CheckpointCodec, StoredCheckpoint, ThreadKey, delta_identity, write_identity
from .delta import ListMemo
from .records import BlobDelta, RecordIdentity, RecordKind, Sealed
from .sansio import collect_emits

__all__ = [
    "Audited",
    "AuditCodec",
    "Broken",
    "Head",
    "check_heads",
    "check_thread",
    "check_trim",
    "region_breaks",
    "thread_heads",
    "trim_refused",
]


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
    joins_lists = False

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
                # the chain binds this reference: a value must be stored under it
                # (an empty one is sealed and tagged like any other)
                problems.append(
                    f"{what}, which the checkpoint references, is missing or blanked "
                    "(no value and no integrity tag)"
                )
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
                grand = by_id.get((e.ns, parent.parent_id)) if parent.parent_id else None
                if grand is not None:  # a trimmed grandparent left a tombstone instead
                    missing = [c for c in e.block.grand if c not in grand.write_keys]
                    if missing:
                        bad(
                            f"pending writes {missing} of its grandparent {parent.parent_id}, "
                            "covered by this checkpoint, are missing"
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
            e.block.grand,
        )
        if want != e.block.digest:
            bad("its chain digest does not match what is stored (altered or re-linked)")
    return broken


# ---- what a trim signs over -------------------------------------------------------


def region_breaks(
    chain: ChainKey, entries: Iterable[Audited], gone: set[tuple[str, str]]
) -> list[Broken]:
    """The broken links of the region a trim that removes ``gone`` would sign over.

    The region is every removed checkpoint and every surviving one whose parent
    is removed (its tombstone would carry that parent's digest): their tags,
    their links and the digests the links chain through, as :func:`check_thread`
    checks them. A removed checkpoint missing from the listing (deleted
    meanwhile) is not in the region; its child reports the missing parent.

    Args:
        chain: The chain key.
        entries: The thread's checkpoints as :class:`AuditCodec` read them.
        gone: (namespace, checkpoint id) of what the trim removes.
    """
    entries = list(entries)
    region = set(gone)
    region.update(
        (e.ns, e.checkpoint_id)
        for e in entries
        if e.parent_id is not None and (e.ns, e.parent_id) in gone
    )
    return [b for b in check_thread(chain, entries) if (b.ns, b.checkpoint_id) in region]


def auditing(ops: Any, chain: ChainKey) -> Any:
    """A copy of a backend's operations object that lists through an :class:`AuditCodec`.

    The copy shares the original's state (caches of epochs and the like); only
    its codec differs, so its ``list`` yields :class:`Audited` entries. Made
    once per operations object.
    """
    made = getattr(ops, "_audit_ops", None)
    if made is not None and made.codec.chain_key is chain:
        return made
    made = copy.copy(ops)
    made.codec = AuditCodec(chain)
    ops._audit_ops = made
    return made


def check_trim(
    ops: Any, chain: ChainKey, tenant: str, thread: str, gone: set[tuple[str, str]]
) -> Generator[Any, Any, list[Broken]]:
    """Before a trim signs tombstones: the broken links of what it removes (a sub-operation).

    Lists the whole thread through :func:`auditing` (the listing ``verify``
    makes: every tag down each delta chain, every write) and returns
    :func:`region_breaks`. An empty list: the trim may sign.
    """
    if not gone:
        return []
    listing = auditing(ops, chain).list(tenant, thread, None, None, None, None, None, False)
    entries = yield from collect_emits(listing.steps)
    return region_breaks(chain, entries, gone)


def trim_refused(broken: list[Broken]) -> IntegrityError:
    """The error of a trim (``prune(..., "keep_latest")``) refused over broken links."""
    first = broken[0]
    more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
    return IntegrityError(
        f"thread {first.thread!r} of tenant {first.tenant!r} is not trimmed: a link in what "
        f"keep_latest would remove is broken, namespace {first.ns!r} checkpoint "
        f"{first.checkpoint_id}: {first.reason}{more}. A trim never signs over a link it "
        "cannot verify; run langgraph-durable verify, and restore the thread from a backup "
        "or delete it"
    )


# ---- heads anchored outside the store -----------------------------------------------


@dataclass(frozen=True, slots=True)
class Head:
    """A thread's newest checkpoint in one namespace, and its chain digest.

    Exported by ``verify`` (``on_head``, ``--print-heads``) to be kept outside
    the store; given back to ``verify`` (``heads=``, ``--heads``,
    ``--expect-head``) it must still be found, so that removing a thread's
    newest checkpoints is detected. ``checkpoint_id`` None (``--expect-head``):
    any checkpoint of the thread with that digest.
    """

    tenant: str
    thread: str
    ns: str
    checkpoint_id: str | None
    digest: bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "thread": self.thread,
            "ns": self.ns,
            "checkpoint_id": self.checkpoint_id,
            "digest": self.digest.hex(),
        }

    @classmethod
    def from_json(cls, raw: Any) -> Head:
        """A head as :meth:`to_json` wrote it (``InvalidInputError`` when malformed)."""
        try:
            digest = bytes.fromhex(raw["digest"])
            cid = raw.get("checkpoint_id")
            head = cls(
                str(raw["tenant"]),
                str(raw["thread"]),
                str(raw.get("ns", "")),
                None if cid is None else str(cid),
                digest,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidInputError(f"a head is malformed ({exc!r}): {raw!r}"[:300]) from exc
        if len(digest) != TAG_SIZE:
            raise InvalidInputError(f"a head's digest must be {TAG_SIZE} bytes (hex): {raw!r}")
        return head


def thread_heads(entries: Iterable[Audited]) -> list[Head]:
    """The newest checkpoint of each namespace that has a chain digest, and its digest."""
    newest: dict[str, Audited] = {}
    for e in entries:
        if e.block is None:
            continue
        best = newest.get(e.ns)
        if best is None or e.checkpoint_id > best.checkpoint_id:
            newest[e.ns] = e
    return [
        Head(e.tenant, e.thread, e.ns, e.checkpoint_id, e.block.digest)  # type: ignore[union-attr]
        for _ns, e in sorted(newest.items())
    ]


def _absent(head: Head, by_id: dict[tuple[str, str], Audited]) -> bool:
    """Whether the head's checkpoint is absent (by id, or by digest for a head without id)."""
    return head.checkpoint_id is None or (head.ns, head.checkpoint_id) not in by_id


def check_heads(chain: ChainKey, entries: Iterable[Audited], heads: Iterable[Head]) -> list[Broken]:
    """The anchored heads of one thread that its stored history no longer holds.

    A head holds when its checkpoint is stored with the anchored digest, or
    when a trim removed it: a valid tombstone of the namespace names it (or its
    digest) or counts it in its removed range. Anything else (the newest
    checkpoints, or the whole thread, removed; a checkpoint re-signed) is a
    broken link named by the head's checkpoint.
    """
    entries = list(entries)
    by_id = {(e.ns, e.checkpoint_id): e for e in entries}
    digests = {e.block.digest for e in entries if e.block is not None}
    tombs = [
        (e.ns, e.block.tombstone)
        for e in entries
        if e.block is not None
        and e.block.tombstone is not None
        and chain.tombstone_holds(e.tenant, e.thread, e.ns, e.checkpoint_id, e.block.tombstone)
    ]
    broken: list[Broken] = []
    for head in heads:
        where = head.checkpoint_id or "-"
        if head.checkpoint_id is None:
            if head.digest in digests or any(t.digest == head.digest for _ns, t in tombs):
                continue
            reason = "no checkpoint of the thread has the anchored head digest"
        else:
            found = by_id.get((head.ns, head.checkpoint_id))
            if found is not None and found.block is not None:
                if found.block.digest == head.digest:
                    continue
                reason = "its chain digest differs from the anchored head's (re-signed)"
            elif found is not None:
                reason = "the anchored head has no chain digest any more"
            elif any(
                ns == head.ns
                and (
                    (t.parent == head.checkpoint_id and t.digest == head.digest)
                    or t.first <= head.checkpoint_id <= t.last
                )
                for ns, t in tombs
            ):
                continue  # removed by a signed trim
            else:
                reason = "the anchored head is missing"
        if not entries:
            reason += ": the thread is gone (removed whole)"
        elif _absent(head, by_id):
            reason += ": checkpoints at or after the anchored head were removed (truncated)"
        broken.append(Broken(head.tenant, head.thread, head.ns, where, reason))
    return broken
