"""The saver's checkpoint reads on PostgreSQL: ``get_tuple`` and ``list``.

``get_tuple`` is one statement: the checkpoint with its blobs (and, for
deltas, their chains down to a full copy), its pending writes and, before
format 4, its parent's pending sends. ``list`` reads a page per statement,
each blob of the page once. A read of a thread whose epoch this process
knows names that epoch's partitions directly. Pure: no psycopg import, no I/O.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, cast

from langgraph.checkpoint.serde.types import TASKS

from .._core.codec import StoredCheckpoint, ThreadKey, encode_filter
from .._core.records import BlobDelta, Sealed
from .._core.sansio import Emit, operation
from ..errors import CorruptRecordError, SchemaError
from ._base import OpsBase
from ._query import Query
from ._rls import tenant_scoped

__all__ = ["ReadOps", "LIST_PAGE_SIZE"]

LIST_PAGE_SIZE = 100
#: Deepest delta chain a read follows (the saver's ``delta_chain`` is at most 1000).
MAX_CHAIN_READ = 1001

_W_ARRAYS = (
    "array_agg(w.task_id) AS task_ids, array_agg(w.task_path) AS task_paths, "
    "array_agg(w.idx) AS idxs, array_agg(w.channel) AS channels, "
    "array_agg(w.type) AS types, array_agg(w.blob) AS blobs"
)


class ReadOps(OpsBase):
    """Reads of one checkpoint and listings."""

    def _init_reads(self) -> None:
        """Build the read statements of this schema (called once, by ``PostgresOps``)."""
        s = self._s
        thread_epoch = self._thread_epoch
        self._select_head = (
            "SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, "
            "c.checkpoint_type, c.checkpoint, c.metadata_type, c.metadata, "
            "bl.channels, bl.versions, bl.types, bl.blobs, bl.bases, bl.base_counts, bl.depths, "
            "wr.task_ids, wr.task_paths, wr.idxs, wr.channels, wr.types, wr.blobs, "
            "ps.task_ids, ps.task_paths, ps.idxs, ps.types, ps.blobs, c.metadata_index, "
            "c.epoch FROM ("
        )
        self._select_tail = self._tail(f"{s}.blobs", f"{s}.writes", "c.epoch")
        # Reads of one thread come in two forms. With the thread's epoch looked
        # up in the statement (the first read of a thread in this process),
        # PostgreSQL must set up a scan of every partition. With the epoch known
        # (remembered from an earlier read or write), the statement names that
        # epoch's partitions directly, so no other partition is planned,
        # locked or scanned, however many there are.
        latest = (
            "SELECT * FROM {table} WHERE tenant_id = %(tenant)s "
            "AND thread_id = %(thread)s AND checkpoint_ns = %(ns)s AND epoch = {epoch} "
            "ORDER BY checkpoint_id DESC LIMIT 1"
        )
        by_id = (
            "SELECT * FROM {table} WHERE tenant_id = %(tenant)s "
            "AND thread_id = %(thread)s AND checkpoint_ns = %(ns)s AND epoch = {epoch} "
            "AND checkpoint_id = %(checkpoint_id)s"
        )
        self._latest, self._by_id = latest, by_id
        self.GET_LATEST_SQL = (
            self._select_head
            + latest.format(table=f"{s}.checkpoints", epoch=thread_epoch)
            + self._select_tail
        )
        self.GET_BY_ID_SQL = (
            self._select_head
            + by_id.format(table=f"{s}.checkpoints", epoch=thread_epoch)
            + self._select_tail
        )
        self._known_sql: dict[tuple[int, bool], str] = {}

    def _get_known_sql(self, epoch: int, by_id: bool) -> str:
        """The read of one checkpoint when the thread's epoch is known.

        It also returns the thread's actual epoch (and NULL checkpoint columns
        when the namespace has none), so a stale memo is told apart from an
        empty namespace in the same round trip.
        """
        sql = self._known_sql.get((epoch, by_id))
        if sql is None:
            inner = (self._by_id if by_id else self._latest).format(
                table=self._leaf("checkpoints", epoch), epoch="%(epoch)s"
            )
            select = self._select_head + inner + self._known_tail(epoch)
            sql = (
                f"SELECT th.epoch, q.* FROM {self._s}.threads th "
                f"LEFT JOIN LATERAL ({select}) AS q ON true "
                "WHERE th.tenant_id = %(tenant)s AND th.thread_id = %(thread)s"
            )
            if len(self._known_sql) > 1000:
                self._known_sql.clear()
            self._known_sql[(epoch, by_id)] = sql
        return sql

    def _list_sql(self, checkpoints: str, blobs: str, writes: str, where: str) -> str:
        """One page of a listing, its blobs fetched once for the page.

        A checkpoint row carries only the references to its blobs; the first
        row also carries every blob the page needs: the referenced ones and,
        for deltas, their chains down to a full copy, each blob once however
        many checkpoints share it (consecutive checkpoints share all but their
        newest delta). ``keys`` collects them by following ``base`` links;
        ``UNION`` stops at keys already found. Each blob is looked up by its
        whole key (a LATERAL subquery with LIMIT 1, which the planner keeps as
        a parameterized index probe).
        """
        same = (
            "b.tenant_id = %(tenant)s AND b.thread_id = k.thread_id "
            "AND b.checkpoint_ns = k.checkpoint_ns AND b.epoch = k.epoch "
            "AND b.channel = k.channel AND b.version = k.version"
        )
        c_order = " ORDER BY c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC"
        page = ", ".join(
            f"CASE WHEN row_number() OVER ({c_order.strip()}) = 1 "
            f"THEN (SELECT array_agg(pb.{col}) FROM pb) END"
            for col in _PAGE_BLOB_COLUMNS
        )
        return (
            f"WITH RECURSIVE c AS MATERIALIZED (SELECT * FROM {checkpoints} WHERE {where} "
            f"ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC LIMIT %(page)s), "
            "keys AS (SELECT c.thread_id, c.checkpoint_ns, c.epoch, r.channel, r.version FROM c "
            "CROSS JOIN LATERAL unnest(c.blob_channels, c.blob_versions) AS r(channel, version) "
            "UNION "
            f"SELECT k.thread_id, k.checkpoint_ns, k.epoch, k.channel, b.base FROM keys k "
            f"CROSS JOIN LATERAL (SELECT b.base FROM {blobs} b WHERE {same} LIMIT 1) b "
            "WHERE b.base IS NOT NULL), "
            f"pb AS (SELECT b.* FROM keys k "
            f"CROSS JOIN LATERAL (SELECT * FROM {blobs} b WHERE {same} LIMIT 1) b) "
            "SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, "
            "c.checkpoint_type, c.checkpoint, c.metadata_type, c.metadata, "
            "c.blob_channels, c.blob_versions, "
            "wr.task_ids, wr.task_paths, wr.idxs, wr.channels, wr.types, wr.blobs, "
            "ps.task_ids, ps.task_paths, ps.idxs, ps.types, ps.blobs, c.metadata_index, "
            f"{page} FROM c " + _writes_joins(writes, "c.epoch") + c_order
        )

    def _known_tail(self, epoch: int) -> str:
        return self._tail(self._leaf("blobs", epoch), self._leaf("writes", epoch), "%(epoch)s")

    def _tail(self, blobs: str, writes: str, epoch: str) -> str:
        """Joins a checkpoint row ``c`` to its blobs, writes and parent's sends."""
        return (
            # The referenced blobs (depth 0) and, for deltas, every blob of their
            # chains down to a full copy (depth > 0), in the same statement.
            ") AS c CROSS JOIN LATERAL ("
            # Each blob is looked up by its whole key (LATERAL makes the key
            # the index condition), so a chain costs one index probe a link.
            "WITH RECURSIVE chain AS ("
            # A referenced blob whose row is missing comes as (channel, version, NULL...):
            # the codec decides whether the body says that channel holds a value.
            "SELECT r.channel, r.version, b.type, b.blob, b.base, b.base_count, 0 AS depth "
            "FROM unnest(c.blob_channels, c.blob_versions) AS r(channel, version) "
            f"LEFT JOIN LATERAL (SELECT * FROM {blobs} b WHERE b.tenant_id = c.tenant_id "
            f"AND b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns "
            f"AND b.channel = r.channel AND b.version = r.version AND b.epoch = {epoch} LIMIT 1) b "
            "ON true "
            "UNION ALL "
            "SELECT b.channel, b.version, b.type, b.blob, b.base, b.base_count, ch.depth + 1 "
            f"FROM chain ch CROSS JOIN LATERAL (SELECT * FROM {blobs} b "
            "WHERE b.tenant_id = c.tenant_id AND b.thread_id = c.thread_id "
            "AND b.checkpoint_ns = c.checkpoint_ns AND b.channel = ch.channel "
            f"AND b.version = ch.base AND b.epoch = {epoch} LIMIT 1) b "
            f"WHERE ch.base IS NOT NULL AND ch.depth < {MAX_CHAIN_READ}) "
            "SELECT array_agg(channel) AS channels, array_agg(version) AS versions, "
            "array_agg(type) AS types, array_agg(blob) AS blobs, array_agg(base) AS bases, "
            "array_agg(base_count) AS base_counts, array_agg(depth) AS depths "
            "FROM chain) AS bl "
            + _writes_joins(writes, epoch)
            + " ORDER BY c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC"
        )

    # ---- reads ---------------------------------------------------------------

    @operation
    @tenant_scoped
    def get_tuple(self, key: ThreadKey, checkpoint_id: str | None) -> Generator[Any, Any, Any]:
        """The latest (or the given) checkpoint of a thread namespace: one round trip."""
        params: dict[str, Any] = {"tenant": key.tenant, "thread": key.thread, "ns": key.ns}
        if checkpoint_id:
            params["checkpoint_id"] = checkpoint_id
        epoch = self.epochs.get(key.tenant, key.thread)
        if epoch is not None:
            sql = self._get_known_sql(epoch, bool(checkpoint_id))
            try:
                row = yield Query(sql, {**params, "epoch": epoch}, "one", retry=True)
            except SchemaError:  # that epoch's partitions were dropped
                row = (None,)
            if row is None:  # the thread is gone
                self.epochs.forget(key.tenant, key.thread)
                return None
            if row[0] == epoch:
                return None if row[3] is None else self.codec.decode(key, _stored(row[1:]))
            self.epochs.forget(key.tenant, key.thread)  # deleted and started again
        sql = self.GET_BY_ID_SQL if checkpoint_id else self.GET_LATEST_SQL
        row = yield Query(sql, params, "one", retry=True)
        if row is None:
            return None
        self.epochs.remember(key.tenant, key.thread, row[-1])
        return self.codec.decode(key, _stored(row))

    @operation
    @tenant_scoped
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
        """Stream matching checkpoints newest first, a page per round trip.

        ``thread`` None lists across threads of the tenant; ``ns`` None across
        namespaces of the thread.
        """
        if limit == 0:  # the saver base has checked limit and filter
            return None
        s = self._s
        wheres = ["tenant_id = %(tenant)s"]
        params: dict[str, Any] = {"tenant": tenant}
        known = None if thread is None else self.epochs.get(tenant, thread)
        if thread is not None:
            wheres.append("thread_id = %(thread)s")
            # A remembered epoch is checked against the registry: the pruner may
            # have moved the thread forward, leaving its old rows until their
            # partition is dropped (nothing found: look again below).
            wheres.append(
                "epoch = %(epoch)s AND EXISTS (SELECT 1 FROM "
                f"{s}.threads r WHERE r.tenant_id = %(tenant)s AND r.thread_id = %(thread)s "
                "AND r.epoch + 0 = %(epoch)s)"  # by the primary key (see _writes.thread_cte)
                if known is not None
                else f"epoch = {self._thread_epoch}"
            )
            params["thread"] = thread
            if known is not None:
                params["epoch"] = known
            if ns is not None:
                wheres.append("checkpoint_ns = %(ns)s")
                params["ns"] = ns
        if checkpoint_id:
            wheres.append("checkpoint_id = %(checkpoint_id)s")
            params["checkpoint_id"] = checkpoint_id
        if (encoded := encode_filter(filter)) is not None:
            wheres.append("metadata_index @> %(filter)s::jsonb")
            params["filter"] = encoded
        if before_id:
            wheres.append("checkpoint_id < %(before)s")
            params["before"] = before_id
        base_where = " AND ".join(wheres)
        remaining = limit
        cursor: tuple[str, str, str] | None = None
        memo = self.codec.list_memo()
        while True:
            page = LIST_PAGE_SIZE if remaining is None else min(remaining, LIST_PAGE_SIZE)
            where = base_where
            if cursor is not None:
                where += (
                    " AND (checkpoint_id, thread_id, checkpoint_ns)"
                    " < (%(c_id)s, %(c_thread)s, %(c_ns)s)"
                )
                params["c_id"], params["c_thread"], params["c_ns"] = cursor
            params["page"] = page
            if known is not None:
                leaf = self._leaf
                sql = self._list_sql(
                    leaf("checkpoints", known), leaf("blobs", known), leaf("writes", known), where
                )
            else:
                sql = self._list_sql(f"{s}.checkpoints", f"{s}.blobs", f"{s}.writes", where)
            try:
                rows = yield Query(sql, dict(params), "all", retry=True)
            except SchemaError:
                if known is None:
                    raise
                rows = []  # that epoch's partitions were dropped: look again below
            if not rows and cursor is None and known is not None and thread is not None:
                # Nothing under the remembered epoch: it may be stale; look again.
                self.epochs.forget(tenant, thread)
                yield from self.list(
                    tenant, thread, ns, checkpoint_id, filter, before_id, limit, echo_tenant
                ).steps
                return None
            for stored in _stored_page(rows):
                row_key = ThreadKey(tenant, stored.thread, stored.ns, echo_tenant)
                yield Emit(self.codec.decode(row_key, stored, memo))
            if len(rows) < page:
                return None
            if remaining is not None:
                remaining -= len(rows)
                if remaining <= 0:
                    return None
            last = rows[-1]
            cursor = (last[2], last[0], last[1])


def _sealed_list(types: list[str] | None, blobs: list[bytes | None] | None) -> list[Sealed | None]:
    if not types:
        return []
    return [
        None if b is None else Sealed(t, bytes(b)) for t, b in zip(types, blobs or [], strict=True)
    ]


def _delta(base: Any, count: Any, sealed: Sealed) -> BlobDelta:
    """A stored delta's (base, count) as read; a count that is not a number is corrupt."""
    if not isinstance(count, int) or isinstance(count, bool):
        raise CorruptRecordError(f"a stored delta of version {base!r} has no item count")
    return BlobDelta(str(base), count, sealed)


def _refs(channels: Any, versions: Any, checkpoint_id: str) -> list[tuple[str, str]]:
    """A checkpoint row's (channel, version) references; arrays of unequal length are corrupt."""
    channels, versions = channels or [], versions or []
    if len(channels) != len(versions):
        raise CorruptRecordError(
            f"checkpoint {checkpoint_id!r}: {len(channels)} blob channels but "
            f"{len(versions)} blob versions stored"
        )
    return list(zip(channels, versions, strict=True))


def _writes_joins(writes: str, epoch: str) -> str:
    """Joins a checkpoint row ``c`` to its pending writes (``wr``) and, for formats
    before 4, its parent's pending sends (``ps``), each as arrays."""
    same = (
        "w.tenant_id = c.tenant_id AND w.thread_id = c.thread_id "
        f"AND w.checkpoint_ns = c.checkpoint_ns AND w.epoch = {epoch}"
    )
    return (
        f" CROSS JOIN LATERAL (SELECT {_W_ARRAYS} FROM {writes} w "
        f"WHERE {same} AND w.checkpoint_id = c.checkpoint_id) AS wr "
        f"CROSS JOIN LATERAL (SELECT {_W_ARRAYS} FROM {writes} w WHERE c.v < 4 AND {same} "
        f"AND w.checkpoint_id = c.parent_checkpoint_id AND w.channel = '{TASKS}') AS ps"
    )


#: The columns of a listing page's blobs, which its first row carries (``_list_sql``).
_PAGE_BLOB_COLUMNS = (
    "thread_id",
    "checkpoint_ns",
    "channel",
    "version",
    "type",
    "blob",
    "base",
    "base_count",
)


def _stored_page(rows: Sequence[Sequence[Any]]) -> list[StoredCheckpoint]:
    """The checkpoints of one listing page (``_list_sql``), sharing the page's blobs.

    Every checkpoint of a thread and namespace gets the same ``bases`` map,
    so the codec follows delta chains through blobs decoded once per page.
    """
    if not rows:
        return []
    threads, namespaces, channels, versions, types, datas, bases, counts = rows[0][22:30]
    scopes: dict[tuple[str, str], dict[tuple[str, str], Sealed | BlobDelta | None]] = {}
    for thread, ns, channel, version, sealed, base, count in zip(
        threads or [],
        namespaces or [],
        channels or [],
        versions or [],
        _sealed_list(types, datas),
        bases or [],
        counts or [],
        strict=True,
    ):
        value: Sealed | BlobDelta | None = sealed
        if base is not None and sealed is not None:
            value = _delta(base, count, sealed)
        scopes.setdefault((thread, ns), {})[(channel, version)] = value
    out = []
    for row in rows:
        thread, ns, checkpoint_id, parent, c_type, c_data, m_type, m_data = row[:8]
        scope = scopes.get((thread, ns), {})
        refs = _refs(row[8], row[9], checkpoint_id)
        out.append(
            StoredCheckpoint(
                thread=thread,
                ns=ns,
                checkpoint_id=checkpoint_id,
                parent_checkpoint_id=parent,
                body=Sealed(c_type, bytes(c_data)),
                metadata=Sealed(m_type, bytes(m_data)),
                # a missing blob row reaches the codec as None, as on every backend
                blobs=[(ch, ver, scope.get((ch, ver))) for ch, ver in refs],
                bases=scope,
                writes=_writes(row[10:16]),
                parent_sends=_sends(row[16:21]),
                metadata_index=row[21],
            )
        )
    return out


def _writes(cols: Sequence[Any]) -> list[tuple[str, str, int, str, Sealed]]:
    tasks, paths, idxs, channels, types, blobs = cols
    return cast(
        "list[tuple[str, str, int, str, Sealed]]",
        list(
            zip(
                tasks or [],
                paths or [],
                idxs or [],
                channels or [],
                _sealed_list(types, blobs),
                strict=True,
            )
        ),
    )


def _sends(cols: Sequence[Any]) -> list[tuple[str, str, int, Sealed]]:
    tasks, paths, idxs, types, blobs = cols
    return cast(
        "list[tuple[str, str, int, Sealed]]",
        list(zip(tasks or [], paths or [], idxs or [], _sealed_list(types, blobs), strict=True)),
    )


def _stored(row: Sequence[Any]) -> StoredCheckpoint:
    (
        thread,
        ns,
        checkpoint_id,
        parent,
        c_type,
        c_data,
        m_type,
        m_data,
        b_channels,
        b_versions,
        b_types,
        b_blobs,
        b_bases,
        b_counts,
        b_depths,
        w_tasks,
        w_paths,
        w_idxs,
        w_channels,
        w_types,
        w_blobs,
        s_tasks,
        s_paths,
        s_idxs,
        s_types,
        s_blobs,
        metadata_index,
        _epoch,
    ) = row
    blobs: list[tuple[str, str, Sealed | BlobDelta | None]] = []
    bases: dict[tuple[str, str], Sealed | BlobDelta | None] = {}
    for channel, version, sealed, base, count, depth in zip(
        b_channels or [],
        b_versions or [],
        _sealed_list(b_types, b_blobs),
        b_bases or [],
        b_counts or [],
        b_depths or [],
        strict=True,
    ):
        value: Sealed | BlobDelta | None = sealed
        if base is not None and sealed is not None:
            value = _delta(base, count, sealed)
        if depth:
            bases[(channel, version)] = value
        else:
            blobs.append((channel, version, value))
    writes = _writes((w_tasks, w_paths, w_idxs, w_channels, w_types, w_blobs))
    sends = _sends((s_tasks, s_paths, s_idxs, s_types, s_blobs))
    return StoredCheckpoint(
        thread=thread,
        ns=ns,
        checkpoint_id=checkpoint_id,
        parent_checkpoint_id=parent,
        body=Sealed(c_type, bytes(c_data)),
        metadata=Sealed(m_type, bytes(m_data)),
        blobs=blobs,
        bases=bases,
        writes=writes,
        parent_sends=sends,
        metadata_index=metadata_index,
    )
