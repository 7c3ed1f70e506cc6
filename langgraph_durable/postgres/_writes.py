"""The saver's checkpoint writes on PostgreSQL: ``put`` and ``put_writes``.

Each is one statement, one round trip: it reads the thread's registry row
(creating it on the thread's first write, refreshing ``updated_at`` and
``expires_at`` now and then) and inserts the rows in the thread's epoch. A
thread this process registered moments ago, in the current epoch, is written
by a lean form of the same statement that only checks its registry row (no
insert or update of it, no lock): if the row is gone, the epoch is no longer
the current one or a refresh of ``updated_at`` is due, nothing is written and
the full form runs. The lean form inserts into the current epoch's partitions
directly (no routing through the parent tables).
Pure: no psycopg import, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Sequence
from typing import Any

from .._core.codec import ThreadKey
from .._core.records import CheckpointRecord
from .._core.retention import DELETE
from .._core.sansio import operation
from ..errors import CheckpointConflictError, MissingPartitionError, SchemaError, StorageError
from ._base import OpsBase
from ._query import Query
from ._rls import tenant_scoped

__all__ = ["WriteOps", "int_array", "spread_bytea", "text_array"]

# How stale a thread's updated_at may get while it is being written.
TOUCH_INTERVAL = "30 seconds"
# How long after writing a thread through the statement that registers it a
# process writes it through the lean one (see ``lean_cte``); under half of
# TOUCH_INTERVAL, so that a lean write rarely finds a refresh due and has to
# run again in full.
LEAN_SECONDS = 10.0


class WriteOps(OpsBase):
    """Checkpoint and pending-write writes."""

    def _init_writes(self) -> None:
        """Build the write statements of this schema (called once, by ``PostgresOps``)."""
        s = self._s
        # The thread's registry row: read it, create it on the first write, and
        # refresh updated_at at most every TOUCH_INTERVAL so a busy thread does
        # not rewrite its registry row on every step.
        # expires_at (retention, strategy delete): the earlier of last write +
        # idle and creation + absolute; NULL when the tenant's policy sets neither.
        idle = "make_interval(secs => %(idle_s)s::double precision)"
        absolute = "make_interval(secs => %(abs_s)s::double precision)"
        # A thread of an older epoch may be moved forward by the pruner (see
        # ``_partitions._move_live``): its registry row is read FOR KEY SHARE, so a
        # write waits for a move in progress and then sees the thread's new
        # epoch (READ COMMITTED reads the locked row's latest version), and a
        # move waits for the writes in flight. A thread of the current epoch is
        # never moved: its row is read without a lock.
        # The current epoch is computed once, inline (as current_epoch() does): a
        # call of that SQL function costs more than the rest of the registry read.
        # A thread's row is found by the primary key: its epoch is compared as
        # ``epoch + 0``, which no index matches. Before the table's first ANALYZE
        # (autovacuum off, or a young table) the planner rates threads_epoch_idx as
        # cheap as the key, and a statement's cached plan that took it read every
        # thread of the epoch on each call (tests/postgres/test_lean_writes.py).
        thread_cte = (
            "ce AS MATERIALIZED (SELECT floor(extract(epoch FROM now()) / (86400 * ("
            f"SELECT value::integer FROM {s}.settings WHERE key = 'partition_days')))"
            "::integer AS e), "
            f"lk AS (SELECT epoch, updated_at FROM {s}.threads "
            "WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s "
            "AND epoch + 0 < (SELECT e FROM ce) FOR KEY SHARE), "
            "cur AS (SELECT epoch, updated_at FROM lk UNION ALL "
            f"SELECT epoch, updated_at FROM {s}.threads "
            "WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s "
            "AND epoch + 0 >= (SELECT e FROM ce)), "
            f"ins AS (INSERT INTO {s}.threads AS t (tenant_id, thread_id, epoch, expires_at) "
            "SELECT %(tenant)s, %(thread)s, (SELECT e FROM ce), "
            f"least(now() + {idle}, now() + {absolute}) "
            "WHERE NOT EXISTS (SELECT 1 FROM cur) "
            "ON CONFLICT (tenant_id, thread_id) DO UPDATE SET updated_at = now(), "
            f"expires_at = least(now() + {idle}, t.created_at + {absolute}) "
            "RETURNING t.epoch), "
            f"touch AS (UPDATE {s}.threads SET updated_at = now(), "
            f"expires_at = least(now() + {idle}, created_at + {absolute}) "
            "WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s AND EXISTS ("
            f"SELECT 1 FROM cur WHERE cur.updated_at < now() - interval '{TOUCH_INTERVAL}')), "
            "t AS (SELECT epoch FROM cur UNION ALL SELECT epoch FROM ins LIMIT 1)"
        )
        # The lean form, for a thread this process registered moments ago: its
        # row must still be there, in the epoch the process knows, that epoch
        # must be the current one (a thread of an older epoch may be moved by the
        # pruner: the full form's lock makes the write wait for that), and its
        # updated_at must not be due for a refresh. Nothing is inserted or
        # updated in the registry, nothing is locked.
        lean_cte = (
            "ce AS MATERIALIZED (SELECT floor(extract(epoch FROM now()) / (86400 * ("
            f"SELECT value::integer FROM {s}.settings WHERE key = 'partition_days')))"
            "::integer AS e), "
            f"t AS (SELECT epoch FROM {s}.threads WHERE tenant_id = %(tenant)s "
            "AND thread_id = %(thread)s AND epoch + 0 = %(epoch)s "
            "AND epoch + 0 >= (SELECT e FROM ce) "
            f"AND updated_at >= now() - interval '{TOUCH_INTERVAL}')"
        )
        self.PUT_SQL = (
            "WITH {thread}, "
            "u AS (SELECT * FROM unnest(%(b_channels)s::text[], %(b_versions)s::text[], "
            "%(b_types)s::text[], %(b_blobs)b::bytea[], %(b_bases)s::text[], "
            "%(b_counts)s::integer[]) AS u(channel, version, type, blob, base, base_count)), "
            # A delta's base must still be stored (the thread may have been deleted
            # or pruned since this process wrote it): if not, nothing is written and
            # the caller writes the checkpoint again with full copies.
            "{missing}, "
            # Append-only: a stored checkpoint is never replaced (the application
            # role needs no UPDATE on checkpoints). The blobs are written only when
            # the checkpoint row was (``b`` reads ``c``'s output, so ``c`` runs
            # first): a put that finds its id stored writes nothing, and the
            # caller compares the stored row (see ``put``).
            f"c AS (INSERT INTO {s}.checkpoints (tenant_id, thread_id, checkpoint_ns, "
            "checkpoint_id, epoch, parent_checkpoint_id, v, run_id, blob_channels, blob_versions, "
            "metadata_index, checkpoint_type, checkpoint, metadata_type, metadata) "
            "SELECT %(tenant)s, %(thread)s, %(ns)s, %(checkpoint_id)s, t.epoch, %(parent)s, "
            "%(v)s, %(run_id)s, %(r_channels)s::text[], %(r_versions)s::text[], "
            "%(metadata_index)s::jsonb, %(c_type)s, %(c_data)b, %(m_type)s, %(m_data)b FROM t "
            "WHERE NOT EXISTS (SELECT 1 FROM missing) "
            "ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id, epoch) DO NOTHING "
            "RETURNING 1 AS inserted), "
            f"b AS (INSERT INTO {s}.blobs (tenant_id, thread_id, checkpoint_ns, channel, "
            "version, epoch, type, blob, base, base_count) "
            "SELECT %(tenant)s, %(thread)s, %(ns)s, u.channel, u.version, t.epoch, u.type, "
            "u.blob, u.base, u.base_count FROM t CROSS JOIN u "
            "WHERE EXISTS (SELECT 1 FROM c) "
            "ON CONFLICT DO NOTHING RETURNING channel) "
            "SELECT (SELECT epoch FROM t), EXISTS (SELECT 1 FROM missing), "
            "(SELECT array_agg(channel) FROM b), EXISTS (SELECT 1 FROM c)"
        )
        # Without deltas nothing is checked; with deltas (see _put_delta_sql) the
        # check reads the thread's own partition only: a statement that read the
        # parent table would lock every partition, and wait behind the pruner's
        # detach of an old one.
        self._put_template = self.PUT_SQL
        self._thread_ctes = {False: thread_cte, True: lean_cte}
        no_check = "missing AS (SELECT 1 WHERE false)"
        self.PUT_SQL = self._put_template.format(thread=thread_cte, missing=no_check)
        self._put_lean_sql = self._put_template.format(thread=lean_cte, missing=no_check)
        # statements for a known epoch, built once per (kind, epoch, ...)
        self._known_sql: dict[tuple[Any, ...], str] = {}
        writes_head = (
            "WITH {thread}, "
            f"w AS (INSERT INTO {s}.writes (tenant_id, thread_id, checkpoint_ns, checkpoint_id, "
            "task_id, idx, epoch, task_path, channel, type, blob) "
            "SELECT %(tenant)s, %(thread)s, %(ns)s, %(checkpoint_id)s, %(task_id)s, u.idx, "
            "t.epoch, %(task_path)s, u.channel, u.type, u.blob "
            "FROM t CROSS JOIN unnest(%(idxs)s::integer[], %(channels)s::text[], "
            "%(types)s::text[], %(blobs)b::bytea[]) AS u(idx, channel, type, blob) "
            "ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx, epoch) "
        )
        insert = writes_head + "DO NOTHING) SELECT epoch FROM t"
        upsert = (
            writes_head + "DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, "
            "blob = EXCLUDED.blob, task_path = EXCLUDED.task_path) SELECT epoch FROM t"
        )
        # (replace, lean) -> statement
        self._writes_sql = {
            (replace, lean): (upsert if replace else insert).format(thread=self._thread_ctes[lean])
            for replace in (False, True)
            for lean in (False, True)
        }
        # The columns of a stored checkpoint with its blobs, writes and (for
        # checkpoints before format 4) the parent's pending sends, in one row.

    def _put_known_sql(self, epoch: int, deltas: bool, lean: bool) -> str:
        """PUT_SQL for a thread whose epoch this process knows (``%(epoch)s``).

        Lean (see ``lean_cte``): nothing is written when the thread's registry
        row is gone, in another epoch or in an old one. With deltas, nothing is
        written (``missing``) when a delta's base is not in the epoch's
        partition, or the thread is no longer in that epoch (deleted and started
        again). Either way the caller writes the checkpoint again, through the
        full form with full copies.
        """
        if not deltas and not lean:
            return self.PUT_SQL
        return self._cached(
            ("put", epoch, deltas, lean), lambda: self._make_put(epoch, deltas, lean)
        )

    def _make_put(self, epoch: int, deltas: bool, lean: bool) -> str:
        if not deltas:
            return self._into_leaves(self._put_lean_sql, epoch, ("checkpoints", "blobs"))
        leaf = self._leaf("blobs", epoch)
        missing = (
            "missing AS (SELECT 1 FROM t WHERE t.epoch <> %(epoch)s UNION ALL "
            "SELECT 1 FROM u WHERE u.base IS NOT NULL AND NOT EXISTS ("
            f"SELECT 1 FROM {leaf} x WHERE x.tenant_id = %(tenant)s "
            "AND x.thread_id = %(thread)s AND x.checkpoint_ns = %(ns)s "
            "AND x.epoch = %(epoch)s AND x.channel = u.channel AND x.version = u.base))"
        )
        sql = self._put_template.format(thread=self._thread_ctes[lean], missing=missing)
        return self._into_leaves(sql, epoch, ("checkpoints", "blobs")) if lean else sql

    def _lean_writes_sql(self, replace: bool, epoch: int) -> str:
        """The lean ``put_writes`` statement, inserting into ``epoch``'s partition."""
        return self._cached(
            ("writes", replace, epoch),
            lambda: self._into_leaves(self._writes_sql[(replace, True)], epoch, ("writes",)),
        )

    def _cached(self, key: tuple[Any, ...], make: Callable[[], str]) -> str:
        """The statement for ``key`` (per epoch: a bounded cache, emptied when full)."""
        sql = self._known_sql.get(key)
        if sql is None:
            if len(self._known_sql) > 1000:
                self._known_sql.clear()
            sql = self._known_sql[key] = make()
        return sql

    def _into_leaves(self, sql: str, epoch: int, tables: tuple[str, ...]) -> str:
        """``sql`` inserting into the partitions of ``epoch`` rather than through the parents.

        Only for the lean forms: they write nothing unless ``epoch`` is the current
        one, whose partitions the pruner never detaches. The server then skips
        routing each row through the parent, about a tenth of an insert's CPU.
        """
        for table in tables:
            sql = sql.replace(
                f"INSERT INTO {self._s}.{table} ", f"INSERT INTO {self._leaf(table, epoch)} "
            )
        return sql

    def _expiry(self, tenant: str) -> dict[str, float | None]:
        """The write parameters that set a thread's ``expires_at`` under its tenant's policy.

        Only ``delete`` policies expire threads by themselves; ``keep_latest``
        trims them when the pruner runs (see ``prune_expired``).
        """
        policy = self.retention(tenant) if self.retention is not None else None
        if policy is None or policy.strategy != DELETE:
            return {"idle_s": None, "abs_s": None}
        return {"idle_s": policy.idle_seconds, "abs_s": policy.absolute_seconds}

    # ---- writes --------------------------------------------------------------

    @operation
    @tenant_scoped
    def put(
        self,
        key: ThreadKey,
        config: dict[str, Any],
        checkpoint: Any,
        metadata: Any,
        new_versions: Any,
    ) -> Generator[Any, Any, Any]:
        """Store a checkpoint with its new blobs: one statement, one round trip.

        Append-only: a checkpoint id stored already is not replaced, and then
        one more statement compares the stored row (see ``_check_stored``).
        """
        # Deltas only where this process knows the thread's epoch (it wrote or
        # read the thread), so the base check reads one partition.
        epoch = self.epochs.get(key.tenant, key.thread)
        lean = self.epochs.registered_within(key.tenant, key.thread, LEAN_SECONDS)
        rec = self.codec.encode_checkpoint(
            key, config, checkpoint, metadata, new_versions, allow_delta=epoch is not None
        )
        try:
            row = None
            registered = not lean  # whether the statement that ran is a full one
            deltas = any(b.base is not None for b in rec.blobs)
            if epoch is not None and (lean or deltas):
                row = yield from self._put_known(rec, epoch, deltas, lean)
                if lean and row[0] is None and not row[1]:
                    # the lean form found the thread not as this process left it
                    # (deleted, moved, or due for a refresh): the full form decides
                    registered = True
                    row = (
                        (yield from self._put_known(rec, epoch, deltas, False)) if deltas else None
                    )
                if row is not None and (row[1] or row[0] is None):
                    # a delta's base is gone: write this checkpoint with full copies
                    self.codec.forget_thread(key.tenant, key.thread)
                    self.epochs.forget(key.tenant, key.thread)
                    rec = self.codec.encode_checkpoint(
                        key, config, checkpoint, metadata, new_versions, allow_delta=False
                    )
                    row = None
            if row is None:
                registered = True
                row = yield from self._with_partition(self._put_query(self.PUT_SQL, rec))
            if row is not None and not row[1] and not row[3]:
                # the id is stored already: a retry of the same put, or a conflict
                yield from self._check_stored(rec, int(row[0]))
        except BaseException:
            self.codec.forget_thread(key.tenant, key.thread)
            raise
        self.codec.written(rec, list(row[2] or []) if row is not None else [])
        self.epochs.remember(key.tenant, key.thread, row[0] if row else None, registered)
        return self.codec.config(key, rec.checkpoint_id)

    def _check_stored(self, rec: CheckpointRecord, epoch: int) -> Generator[Any, Any, None]:
        """Accept a put whose checkpoint id is stored already only if nothing differs.

        Checkpoints are append-only: the stored row is kept. Its body and
        metadata (type and bytes) equal to ``rec``'s make the put an idempotent
        retry (nothing was written); any difference is a conflict. One more
        round trip, only when the put found its id stored.

        Raises:
            CheckpointConflictError: The stored checkpoint differs.
            StorageError: The stored row is gone again (the thread was deleted
                between the two statements).
        """
        row = yield Query(
            "SELECT checkpoint_type, checkpoint, metadata_type, metadata "
            f"FROM {self._leaf('checkpoints', epoch)} WHERE tenant_id = %(tenant)s "
            "AND thread_id = %(thread)s AND checkpoint_ns = %(ns)s "
            "AND checkpoint_id = %(checkpoint_id)s AND epoch = %(epoch)s",
            {
                "tenant": rec.tenant,
                "thread": rec.thread,
                "ns": rec.ns,
                "checkpoint_id": rec.checkpoint_id,
                "epoch": epoch,
            },
            "one",
            retry=True,
        )
        if row is None:
            raise StorageError(
                f"checkpoint {rec.checkpoint_id!r} of thread {rec.thread!r} was neither "
                "written nor found: the thread was deleted meanwhile; write it again"
            )
        stored = (str(row[0]), bytes(row[1]), str(row[2]), bytes(row[3]))
        if stored != (rec.body.type, rec.body.data, rec.metadata.type, rec.metadata.data):
            raise CheckpointConflictError(rec.tenant, rec.thread, rec.ns, rec.checkpoint_id)
        return None

    def _put_known(
        self, rec: CheckpointRecord, epoch: int, deltas: bool, lean: bool
    ) -> Generator[Any, Any, Any]:
        """Run the put of a thread whose epoch is known; a partition gone reads as a base gone."""
        try:
            return (yield self._put_query(self._put_known_sql(epoch, deltas, lean), rec, epoch))
        except (SchemaError, MissingPartitionError):  # that partition is gone
            return (None, True, None, False)

    def _put_query(self, sql: str, rec: CheckpointRecord, epoch: int | None = None) -> Query:
        params = self._put_params(rec)
        if epoch is not None:
            params["epoch"] = epoch
        blobs = [b.sealed.data if b.sealed else None for b in rec.blobs]
        return Query(spread_bytea(sql, "b_blobs", blobs, params), params, "one", retry=True)

    def _put_params(self, rec: CheckpointRecord) -> dict[str, Any]:
        return {
            "tenant": rec.tenant,
            "thread": rec.thread,
            "ns": rec.ns,
            "checkpoint_id": rec.checkpoint_id,
            "parent": rec.parent_checkpoint_id,
            "v": rec.v,
            "run_id": rec.run_id,
            "r_channels": text_array(c for c, _ in rec.blob_refs),
            "r_versions": text_array(v for _, v in rec.blob_refs),
            "metadata_index": json.dumps(rec.metadata_index, separators=(",", ":")),
            "c_type": rec.body.type,
            "c_data": rec.body.data,
            "m_type": rec.metadata.type,
            "m_data": rec.metadata.data,
            "b_channels": text_array(b.channel for b in rec.blobs),
            "b_versions": text_array(b.version for b in rec.blobs),
            "b_types": text_array(b.sealed.type if b.sealed else "empty" for b in rec.blobs),
            "b_bases": text_array(b.base for b in rec.blobs),
            "b_counts": int_array(b.prefix if b.base is not None else None for b in rec.blobs),
            **self._expiry(rec.tenant),
        }

    @operation
    @tenant_scoped
    def put_writes(
        self,
        key: ThreadKey,
        checkpoint_id: str,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Generator[Any, Any, None]:
        """Store a task's pending writes: one statement, one round trip."""
        if not writes:
            return None
        records, replace = self.codec.encode_writes(key, checkpoint_id, writes, task_id, task_path)
        params = {
            "tenant": key.tenant,
            "thread": key.thread,
            "ns": key.ns,
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path,
            "idxs": int_array(r.idx for r in records),
            "channels": text_array(r.channel for r in records),
            "types": text_array(r.sealed.type for r in records),
            **self._expiry(key.tenant),
        }
        blobs: list[bytes | None] = [r.sealed.data for r in records]
        epoch = self.epochs.get(key.tenant, key.thread)
        if epoch is not None and self.epochs.registered_within(
            key.tenant, key.thread, LEAN_SECONDS
        ):
            try:
                lean_sql = spread_bytea(
                    self._lean_writes_sql(replace, epoch), "blobs", blobs, params
                )
                row = yield Query(lean_sql, {**params, "epoch": epoch}, "one", retry=True)
            except (SchemaError, MissingPartitionError):  # that partition is gone
                row = None
            if row is not None:
                return None
            self.epochs.forget(key.tenant, key.thread)  # not where this process left it
        sql = spread_bytea(self._writes_sql[(replace, False)], "blobs", blobs, params)
        row = yield from self._with_partition(Query(sql, params, "one", retry=True))
        self.epochs.remember(key.tenant, key.thread, row[0] if row else None, True)
        return None

    def _with_partition(self, query: Query) -> Generator[Any, Any, Any]:
        """Run a write; if its epoch has no partition yet, create it and retry once."""
        try:
            return (yield query)
        except MissingPartitionError:
            yield self._ensure_current_partitions()
        try:
            return (yield query)
        except MissingPartitionError as exc:
            raise SchemaError(
                f"thread data for schema {self.schema!r} has no partition even after "
                "creating the current one: its epoch's partition was dropped; "
                "delete the thread or restore the partition"
            ) from exc


#: Most values of a bytea[] parameter sent as separate parameters (see spread_bytea).
SPREAD_MAX = 8
_spread: dict[tuple[str, str, int], str] = {}


def spread_bytea(sql: str, name: str, values: list[bytes | None], params: dict[str, Any]) -> str:
    """Send the bytea[] parameter ``%(name)b::bytea[]`` of ``sql`` as separate parameters.

    psycopg adapts a Python list element by element, looking up each element's
    type on every call: for a statement with a few blobs that cost about a
    third of the statement's client CPU, where ``ARRAY[%(name_0)b, ...]``
    costs little. Sets the parameters in ``params`` and returns the statement
    (cached per statement, name and count); a list longer than SPREAD_MAX goes
    as one parameter.
    """
    n = len(values)
    if n > SPREAD_MAX:
        params[name] = values
        return sql
    out = _spread.get((sql, name, n))
    if out is None:
        items = ", ".join(f"%({name}_{i})b" for i in range(n))
        out = sql.replace(f"%({name})b::bytea[]", f"ARRAY[{items}]::bytea[]")
        if len(_spread) > 4096:
            _spread.clear()
        _spread[(sql, name, n)] = out
    for i, value in enumerate(values):
        params[f"{name}_{i}"] = value
    return out


def int_array(values: Any) -> str:
    """A PostgreSQL integer[] literal of ``values`` (ints or None), as ``text_array``."""
    return "{" + ",".join("NULL" if v is None else str(int(v)) for v in values) + "}"


def text_array(values: Any) -> str:
    """A PostgreSQL text[] literal of ``values`` (each quoted and escaped).

    Sent as one text parameter, it costs the client far less than letting the
    driver adapt a Python list element by element.
    """
    values = list(values)
    if None not in values:
        joined = "".join(values)
        if '"' not in joined and "\\" not in joined:  # nothing to escape: one join
            return '{"' + '","'.join(values) + '"}' if values else "{}"
    parts = []
    for value in values:
        if value is None:
            parts.append("NULL")
            continue
        parts.append('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return "{" + ",".join(parts) + "}"
