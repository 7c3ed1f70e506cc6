"""``get_tuple`` and ``list``: checkpoints read back with their blobs and writes.

Pure (no boto3 import, no I/O, no clock but the injected ``now``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.serde.types import TASKS

from .._core.codec import StoredCheckpoint, ThreadKey
from .._core.delta import ListMemo
from .._core.filters import metadata_matches, normalize_filter
from .._core.records import BlobDelta, Sealed
from .._core.sansio import Emit, operation
from ..errors import CorruptRecordError
from ._deltas import BASE_COUNT, BASE_VERSION, Chain, item_chain, parse_refs
from ._items import (
    HEAD_SK,
    HEADED,
    TTL_ATTRIBUTE,
    CheckpointItemKey,
    S,
    _bin,
    _is_live,
    _num,
    _str,
    blob_sk,
    chunk_count,
    chunk_sk,
    enc,
    head_live,
    ns_prefix,
    parse_checkpoint_sk,
    pointer_sk,
    read_payload,
    split_pk,
    thread_pk,
)
from ._objects import object_keys_of
from ._threads import ThreadOps


@dataclass
class _Group:
    """The items of one checkpoint id in one namespace, as read."""

    pk: str
    ns: str
    checkpoint_id: str
    pointer: dict[str, Any] | None = None
    chunks: dict[str, dict[int, bytes]] = field(default_factory=dict)
    writes: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    write_chunks: dict[tuple[str, int], dict[int, bytes]] = field(default_factory=dict)
    parsed_refs: list[tuple[str, str, int, Chain | None]] | None = field(default=None, repr=False)

    def add(self, key: CheckpointItemKey, item: dict[str, Any]) -> None:
        if key.kind == "pointer":
            self.pointer = item
        elif key.kind == "chunk":
            self.chunks.setdefault(key.name, {})[key.index] = _bin(item, "d", "a chunk")
        elif key.kind == "write":
            self.writes[(key.task_id, key.idx)] = item
        else:
            chunk = _bin(item, "d", "a chunk of a pending write")
            self.write_chunks.setdefault((key.task_id, key.idx), {})[key.index] = chunk

    def metadata_index(self) -> dict[str, Any]:
        assert self.pointer is not None
        try:
            index = json.loads(_str(self.pointer, "mi", "{}") or "{}")
        except ValueError as exc:
            raise CorruptRecordError(
                f"checkpoint {self.checkpoint_id}: stored metadata index cannot be read: {exc}"
            ) from exc
        return index if isinstance(index, dict) else {}

    def refs(self) -> list[tuple[str, str, int, Chain | None]]:
        """(channel, version, known chunk count or -1, chain hint) of every referenced blob."""
        assert self.pointer is not None
        if self.parsed_refs is None:
            self.parsed_refs = parse_refs(_str(self.pointer, "refs"))
        return self.parsed_refs


def _sort_key_desc(entry: tuple[str, _Group]) -> tuple[str, str, str]:
    _tenant, g = entry
    return (g.checkpoint_id, split_pk(g.pk)[1], g.ns)


@dataclass
class _PageCache:
    """What a listing's previous page fetched: blob items, and objects of offloaded ones.

    Bases shared by consecutive pages (and their S3 objects) are fetched once.
    """

    items: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    objects: dict[str, bytes] = field(default_factory=dict)


def _blob_keys(pk: str, ns: str, channel: str, version: str, chunks: int) -> list[tuple[str, str]]:
    """The keys of a blob item and its ``chunks`` chunks (none when -1: unknown)."""
    bsk = blob_sk(ns, channel, version)
    return [(pk, bsk), *((pk, chunk_sk(bsk, "d", i)) for i in range(max(chunks, 0)))]


def _live(item: dict[str, Any] | None, now: float) -> dict[str, Any] | None:
    return item if item is not None and _is_live(item, now) else None


def _blob_value(
    g: _Group,
    got: dict[tuple[str, str], dict[str, Any]],
    objects: dict[str, bytes],
    item: dict[str, Any],
    channel: str,
    version: str,
    what: str,
) -> Sealed | BlobDelta | None:
    """The value one blob item holds: a full value, a delta, or None (empty channel)."""
    bsk = blob_sk(g.ns, channel, version)
    chunks = {}
    for i in range(chunk_count(item, "d")):
        c = got.get((g.pk, chunk_sk(bsk, "d", i)))
        if c is not None:
            chunks[i] = _bin(c, "d", f"a chunk of channel {channel!r} in {what}")
    data = read_payload(item, "d", chunks, f"value of channel {channel!r} in {what}", objects)
    type_ = _str(item, "t") or "empty"
    base = _str(item, BASE_VERSION)
    if base is not None:
        return BlobDelta(base, _num(item, BASE_COUNT, 0) or 0, Sealed(type_, data or b""))
    return None if data is None and type_ == "empty" else Sealed(type_, data or b"")


class ReadOps(ThreadOps):
    """Reads: the latest (or a given) checkpoint, and history listings."""

    @operation
    def get_tuple(self, key: ThreadKey, checkpoint_id: str | None) -> Generator[Any, Any, Any]:
        """The latest (or the given) checkpoint of a thread namespace.

        One Query (ConsistentRead) returns the pointer with its writes and
        chunks; one BatchGetItem fetches the blobs it references, the bases of
        the delta-encoded ones (their chains are in the pointer) and the
        thread's head when it carries a TTL. One more BatchGetItem fetches what
        the pointer could not name (chunks of a value written by an earlier
        checkpoint, bases of a delta whose chain its writer did not know).
        """
        pk = thread_pk(key.tenant, key.thread)
        now = self.now()
        found: _Group | None = None
        groups: dict[str, _Group] = {}
        if checkpoint_id:
            items = yield from self._query_all(pk, pointer_sk(key.ns, str(checkpoint_id)))
            group = _Group(pk, key.ns, str(checkpoint_id))
            for item in items:
                if _is_live(item, now):
                    group.add(parse_checkpoint_sk(item["sk"]["S"]), item)
            found = group if group.pointer is not None else None
        else:
            params = self._query_params(pk, ns_prefix(key.ns))
            params["ScanIndexForward"] = False
            params["Limit"] = self.get_page_items
            while found is None:
                resp = yield from self._call("query", params)
                for item in resp.get("Items") or []:
                    if not _is_live(item, now):
                        continue
                    ik = parse_checkpoint_sk(item["sk"]["S"])
                    group = groups.setdefault(
                        ik.checkpoint_id, _Group(pk, key.ns, ik.checkpoint_id)
                    )
                    group.add(ik, item)
                    if found is not None and ik.kind == "pointer":
                        break  # the parent's group is complete too
                    if found is None and ik.kind == "pointer":
                        found = group
                last = resp.get("LastEvaluatedKey")
                if found is not None or not last:
                    break
                params = {**params, "ExclusiveStartKey": last, "Limit": 200}
        if found is None:
            return None
        known = {(pk, key.ns, g.checkpoint_id): g for g in groups.values() if g.pointer}
        loaded = yield from self._load(
            [(key.tenant, found)], key.echo_tenant, now, known, learn=True
        )
        return loaded[0] if loaded else None

    def _load(
        self,
        entries: Sequence[tuple[str, _Group]],
        echo_tenant: bool,
        now: float,
        known: dict[tuple[str, str, str], _Group] | None = None,
        memo: ListMemo | None = None,
        cache: _PageCache | None = None,
        learn: bool = False,
    ) -> Generator[Any, Any, list[Any]]:
        """Decode complete groups: fetch their blobs (and heads) in one BatchGetItem.

        Args:
            entries: (tenant, group) of each checkpoint, its pointer read.
            echo_tenant: Whether configs name the tenant.
            now: The saver's clock.
            known: Other groups read alongside, by (pk, ns, checkpoint id):
                where an old-format checkpoint finds its parent's pending sends.
            memo: Decoded list values a listing shares between its checkpoints.
            cache: What a listing's previous page fetched (replaced by this
                page's): bases shared by consecutive pages are fetched once.
            learn: Remember the chunk counts and chains of the blobs read
                (``get_tuple``: the next ``put`` of the thread references them).
        """
        keys: list[tuple[str, str]] = []
        for _tenant, g in entries:
            assert g.pointer is not None
            if TTL_ATTRIBUTE in g.pointer or HEADED in g.pointer:
                keys.append((g.pk, HEAD_SK))
            for channel, version, n, hint in g.refs():
                keys.extend(_blob_keys(g.pk, g.ns, channel, version, n))
                for base, base_chunks in hint or ():
                    keys.extend(_blob_keys(g.pk, g.ns, channel, base, base_chunks))
        asked = set(keys)
        got: dict[tuple[str, str], dict[str, Any]] = {}
        if cache is not None:
            got.update((k, cache.items[k]) for k in asked if k in cache.items)
        wanted = [k for k in dict.fromkeys(keys) if k not in got]
        if wanted:
            got.update((yield from self._batch_get(wanted)))
        # what the pointers could not name: chunks of values written by an earlier
        # checkpoint, bases of deltas whose chain the writer did not know
        while True:
            missing = [k for k in self._unread(entries, got) if k not in asked]
            if not missing:
                break
            asked.update(missing)
            got.update((yield from self._batch_get(missing)))
        # payloads offloaded to S3: one GetObject each
        in_blobs = [key for k in self._needed(entries, got) for key in object_keys_of(got[k])]
        stored_in = [
            key
            for _t, g in entries
            for item in (g.pointer or {}, *g.writes.values())
            for key in object_keys_of(item)
        ]
        objects: dict[str, bytes] = {}
        if stored_in or in_blobs:
            objects = yield from self._get_objects(
                [*in_blobs, *stored_in], None if cache is None else cache.objects
            )
        if cache is not None:
            cache.items = {k: v for k, v in got.items() if k[1].startswith("b#")}
            cache.objects = {k: objects[k] for k in in_blobs if k in objects}
        out = []
        for tenant, g in entries:
            assert g.pointer is not None
            if TTL_ATTRIBUTE in g.pointer or HEADED in g.pointer:
                head = got.get((g.pk, HEAD_SK))
                if head is None or not head_live(head, now):
                    continue  # the thread expired or is being deleted
            parent_sends: list[tuple[str, str, int, Sealed]] = []
            parent = _str(g.pointer, "p")
            if (_num(g.pointer, "fv", 1) or 1) < 4 and parent:
                parent_sends = yield from self._parent_sends(g, parent, now, known or {})
            stored = self._stored(g, got, now, parent_sends, objects)
            _t, thread = split_pk(g.pk)
            if learn:
                self._learn(tenant, thread, g, got)
            out.append(
                self.codec.decode(ThreadKey(tenant, thread, g.ns, echo_tenant), stored, memo)
            )
        return out

    @staticmethod
    def _unread(
        entries: Sequence[tuple[str, _Group]], got: dict[tuple[str, str], dict[str, Any]]
    ) -> list[tuple[str, str]]:
        """Keys the referenced blobs need that ``got`` lacks: chunks and delta bases.

        A blob item's own chunk count and chain are the authority; each base
        named by a chain comes with its chunk count.
        """
        out: list[tuple[str, str]] = []
        for _tenant, g in entries:
            for channel, version, _n, _hint in g.refs():
                bsk = blob_sk(g.ns, channel, version)
                item = got.get((g.pk, bsk))
                if item is None:
                    continue
                links = [(bsk, item)]
                what = f"value of channel {channel!r} version {version}"
                for base, base_chunks in item_chain(item, what) or ():
                    base_sk = blob_sk(g.ns, channel, base)
                    base_item = got.get((g.pk, base_sk))
                    if base_item is None:
                        out.extend(_blob_keys(g.pk, g.ns, channel, base, base_chunks))
                    else:
                        links.append((base_sk, base_item))
                for sk, it in links:
                    out.extend(
                        (g.pk, chunk_sk(sk, "d", i))
                        for i in range(chunk_count(it, "d"))
                        if (g.pk, chunk_sk(sk, "d", i)) not in got
                    )
        return out

    @staticmethod
    def _needed(
        entries: Sequence[tuple[str, _Group]], got: dict[tuple[str, str], dict[str, Any]]
    ) -> list[tuple[str, str]]:
        """Keys of the blob items the groups' values are read from (bases included)."""
        out: list[tuple[str, str]] = []
        for _tenant, g in entries:
            for channel, version, _n, _hint in g.refs():
                item = got.get((g.pk, blob_sk(g.ns, channel, version)))
                if item is None:
                    continue
                out.append((g.pk, blob_sk(g.ns, channel, version)))
                for base, _c in item_chain(item, f"value of channel {channel!r}") or ():
                    if (g.pk, blob_sk(g.ns, channel, base)) in got:
                        out.append((g.pk, blob_sk(g.ns, channel, base)))
        return list(dict.fromkeys(out))

    def _learn(
        self, tenant: str, thread: str, g: _Group, got: dict[tuple[str, str], dict[str, Any]]
    ) -> None:
        """Remember the chunk counts and chains of a checkpoint's blobs."""
        scope = (tenant, thread, g.ns)
        for channel, version, _n, _hint in g.refs():
            item = got.get((g.pk, blob_sk(g.ns, channel, version)))
            if item is not None:
                chain = item_chain(item, f"value of channel {channel!r}")
                self.chains.remember(scope, channel, version, chunk_count(item, "d"), chain)

    def _parent_sends(
        self, g: _Group, parent: str, now: float, known: dict[tuple[str, str, str], _Group]
    ) -> Generator[Any, Any, list[tuple[str, str, int, Sealed]]]:
        """Pending sends of a pre-format-4 checkpoint: the parent's TASKS writes.

        The parent's items sort right after the checkpoint's, so the read that
        found the checkpoint has usually read them too (``known``: groups whose
        pointer was read, hence all their writes); otherwise one more Query.
        """
        pg = known.get((g.pk, g.ns, parent))
        if pg is None or pg.pointer is None:
            items = yield from self._query_all(g.pk, pointer_sk(g.ns, parent) + "w#")
            pg = _Group(g.pk, g.ns, parent)
            for item in items:
                if _is_live(item, now):
                    pg.add(parse_checkpoint_sk(item["sk"]["S"]), item)
        sends = []
        tasks = [item for item in pg.writes.values() if _str(item, "ch") == TASKS]
        stored_in = [key for item in tasks for key in object_keys_of(item)]
        objects = (yield from self._get_objects(stored_in)) if stored_in else {}
        for (task_id, idx), item in pg.writes.items():
            if _str(item, "ch") != TASKS:
                continue
            chunks = pg.write_chunks.get((task_id, idx), {})
            data = read_payload(item, "v", chunks, "write", objects)
            sends.append(
                (
                    task_id,
                    _str(item, "tp", "") or "",
                    idx,
                    Sealed(_str(item, "t") or "", data or b""),
                )
            )
        return sends

    def _stored(
        self,
        g: _Group,
        got: dict[tuple[str, str], dict[str, Any]],
        now: float,
        parent_sends: list[tuple[str, str, int, Sealed]],
        objects: dict[str, bytes],
    ) -> StoredCheckpoint:
        p = g.pointer
        assert p is not None
        what = f"checkpoint {g.checkpoint_id} of thread {split_pk(g.pk)[1]!r}"
        body = read_payload(p, "b", g.chunks.get("b", {}), what, objects)
        meta = read_payload(p, "m", g.chunks.get("m", {}), what, objects)
        if body is None or meta is None:
            raise CorruptRecordError(f"{what} has no body or metadata")
        blobs: list[tuple[str, str, Sealed | BlobDelta | None]] = []
        bases: dict[tuple[str, str], Sealed | BlobDelta | None] = {}
        for channel, version, _n, _hint in g.refs():
            item = _live(got.get((g.pk, blob_sk(g.ns, channel, version))), now)
            if item is None:  # missing: the codec decides (the body says what it holds)
                blobs.append((channel, version, None))
                continue
            value = _blob_value(g, got, objects, item, channel, version, what)
            blobs.append((channel, version, value))
            for base, _chunks in item_chain(item, what) or ():
                if (channel, base) in bases:
                    continue
                base_item = _live(got.get((g.pk, blob_sk(g.ns, channel, base))), now)
                if base_item is None:
                    break  # the codec names the missing base
                bases[(channel, base)] = _blob_value(
                    g, got, objects, base_item, channel, base, what
                )
        writes = []
        for (task_id, idx), item in g.writes.items():
            data = read_payload(
                item,
                "v",
                g.write_chunks.get((task_id, idx), {}),
                f"write of task {task_id!r}",
                objects,
            )
            writes.append(
                (
                    task_id,
                    _str(item, "tp", "") or "",
                    idx,
                    _str(item, "ch") or "",
                    Sealed(_str(item, "t") or "", data or b""),
                )
            )
        return StoredCheckpoint(
            thread=split_pk(g.pk)[1],
            ns=g.ns,
            checkpoint_id=g.checkpoint_id,
            parent_checkpoint_id=_str(p, "p"),
            body=Sealed(_str(p, "bt") or "", body),
            metadata=Sealed(_str(p, "mt") or "", meta),
            blobs=blobs,
            bases=bases,
            writes=writes,
            parent_sends=parent_sends,
            metadata_index=g.metadata_index(),
        )

    def _list_namespace(
        self,
        tenant: str,
        thread: str,
        ns: str,
        checkpoint_id: str | None,
        before_id: str | None,
        limit: int | None,
        echo_tenant: bool,
        keep: Callable[[_Group], bool],
        now: float,
    ) -> Generator[Any, Any, None]:
        pk = thread_pk(tenant, thread)
        if checkpoint_id:
            params = self._query_params(pk, pointer_sk(ns, checkpoint_id))
        elif before_id:
            # everything of this namespace strictly older than before_id:
            # escaped ids sort above '"', so '<prefix><before>"' bounds them
            params = self._query_params(pk, None)
            params["KeyConditionExpression"] += " AND #sk BETWEEN :lo AND :hi"
            params["ExpressionAttributeNames"]["#sk"] = "sk"
            params["ExpressionAttributeValues"][":lo"] = S(ns_prefix(ns))
            params["ExpressionAttributeValues"][":hi"] = S(ns_prefix(ns) + enc(before_id) + '"')
        else:
            params = self._query_params(pk, ns_prefix(ns))
        params["ScanIndexForward"] = False
        remaining = limit
        page = self.list_page_items
        if remaining is not None:
            page = min(page, max(8, remaining * 4))
        params["Limit"] = page
        pending: dict[str, _Group] = {}
        memo = self.codec.list_memo()
        cache = _PageCache()
        while True:
            resp = yield from self._call("query", params)
            complete: list[tuple[str, _Group]] = []
            read: dict[tuple[str, str, str], _Group] = {}  # every group completed here
            for item in resp.get("Items") or []:
                if not _is_live(item, now):
                    continue
                ik = parse_checkpoint_sk(item["sk"]["S"])
                group = pending.setdefault(ik.checkpoint_id, _Group(pk, ns, ik.checkpoint_id))
                group.add(ik, item)
                if ik.kind == "pointer":
                    pending.clear()  # newer ids without a pointer are orphan writes
                    read[(pk, ns, group.checkpoint_id)] = group
                    if keep(group):
                        complete.append((tenant, group))
            if remaining is not None:
                complete = complete[:remaining]
            if complete:
                loaded = yield from self._load(complete, echo_tenant, now, read, memo, cache)
                for tup in loaded:
                    yield Emit(tup)
                    if remaining is not None:
                        remaining -= 1
                if remaining is not None and remaining <= 0:
                    return None
            last = resp.get("LastEvaluatedKey")
            if not last:
                return None
            params = {**params, "ExclusiveStartKey": last, "Limit": self.list_page_items}

    @operation
    def list(
        self,
        tenant: str,
        thread: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        filter: dict[str, Any] | None,
        before_id: str | None,
        limit: int | None,
        echo_tenant: bool,
    ) -> Generator[Any, Any, None]:
        """Stream matching checkpoints newest first.

        One namespace of one thread streams page by page (a Query per page,
        newest first, and one BatchGetItem per page for the blobs and delta
        bases; bases the previous page fetched are not fetched again, and a
        list value shared by deltas is decoded once per listing). Without a
        namespace the thread is read whole and sorted; without a thread the
        tenant's checkpoints come from a Scan of the table (an admin
        operation: it reads the whole table).
        """
        if limit == 0:  # the saver base has checked limit and filter
            return None
        wanted = normalize_filter(filter)
        now = self.now()

        def keep(g: _Group) -> bool:
            if checkpoint_id and g.checkpoint_id != checkpoint_id:
                return False
            if before_id and not g.checkpoint_id < before_id:
                return False
            return metadata_matches(g.metadata_index(), wanted)

        if thread is not None and ns is not None:
            yield from self._list_namespace(
                tenant, thread, ns, checkpoint_id, before_id, limit, echo_tenant, keep, now
            )
            return None
        # Across namespaces or threads: gather every complete checkpoint, then sort.
        if thread is not None:
            pk = thread_pk(tenant, thread)
            items = yield from self._query_all(pk, "c#")
        else:
            items = yield from self._scan_tenant(tenant, "c#")
        groups: dict[tuple[str, str, str], _Group] = {}
        for item in items:
            if not _is_live(item, now):
                continue
            ik = parse_checkpoint_sk(item["sk"]["S"])
            pk = item["pk"]["S"]
            group = groups.setdefault(
                (pk, ik.ns, ik.checkpoint_id), _Group(pk, ik.ns, ik.checkpoint_id)
            )
            group.add(ik, item)
        complete = sorted(
            ((tenant, g) for g in groups.values() if g.pointer is not None and keep(g)),
            key=_sort_key_desc,
            reverse=True,
        )
        remaining = limit
        batch = max(1, min(self.list_page_items, 50))
        memo = self.codec.list_memo()
        cache = _PageCache()
        for start in range(0, len(complete), batch):
            part = complete[start : start + batch]
            if remaining is not None:
                part = part[:remaining]
            loaded = yield from self._load(part, echo_tenant, now, groups, memo, cache)
            for tup in loaded:
                yield Emit(tup)
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return None
        return None
