"""Every PostgreSQL statement of the saver, and the operations that use them.

This module is pure (no psycopg import, no I/O): each saver operation is a
generator that yields :class:`Query` requests and receives their rows (see
``langgraph_durable._core.sansio``). ``PostgresSaver`` and
``AsyncPostgresSaver`` run the same generators through a sync or async driver.

Schema (all tables in one configurable schema):

* ``threads``: one row per (tenant, thread): the thread's ``epoch`` (the time
  bucket it started in), created/updated/expires timestamps.
* ``checkpoints``, ``blobs``, ``writes``: data rows, primary keys led by
  (tenant_id, thread_id), declaratively partitioned by RANGE on ``epoch``.
  Every query for one thread looks its epoch up in ``threads`` first, so it
  touches one partition; retention can drop a whole partition once every
  thread in it has expired.
* ``effects``: the effect journal, one row per (tenant, thread, effect id);
  not partitioned (an effect can be claimed before its thread's first
  checkpoint exists). Deleted with its thread.
* ``data_keys``: the tenants' wrapped data keys (envelope encryption).
* ``settings``: the partition width in days, fixed at the first ``setup()``; the
  retention policy; ``row_level_security`` (``on`` once a ``setup()`` turned it on).
* Row-level security (``_rls``): when on, every table with ``tenant_id`` (each
  partition too) enforces a tenant policy, and each statement of a tenant's
  operation carries the tenant (``Query.settings``).
* ``schema_migrations``: versions applied; migrations run under an advisory lock.
"""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Callable, Generator, Sequence
from typing import Any, cast

from langgraph.checkpoint.serde.types import TASKS

from .._core.codec import (
    CheckpointCodec,
    StoredCheckpoint,
    ThreadKey,
    encode_filter,
)
from .._core.effects import DONE, StoredEffect
from .._core.epochs import EpochCache
from .._core.records import BlobDelta, CheckpointRecord, Sealed, StoredDataKey
from .._core.retention import DELETE, PruneReport, PruneRequest, Retention
from .._core.sansio import Emit, operation
from ..errors import (
    CheckpointConflictError,
    ConfigurationError,
    InvalidInputError,
    MissingPartitionError,
    SchemaError,
    StorageError,
)
from . import _rls
from ._prune import prune_expired, rewrite_cte, run_tombstones, thread_page, trim_batch
from ._query import Query
from ._rls import tenant_scoped

__all__ = ["Query", "PostgresOps", "MIGRATIONS", "validate_schema_name"]

_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
LIST_PAGE_SIZE = 100
#: Deepest delta chain a read follows (the saver's ``delta_chain`` is at most 1000).
MAX_CHAIN_READ = 1001
# How stale a thread's updated_at may get while it is being written.
TOUCH_INTERVAL = "30 seconds"


def validate_schema_name(schema: str) -> str:
    """Check that ``schema`` is a plain SQL identifier and return it."""
    if not isinstance(schema, str) or not _SCHEMA_RE.match(schema):
        raise ConfigurationError(
            f"schema name {schema!r} is not allowed: use 1-63 letters, digits or "
            "underscores, not starting with a digit (e.g. 'langgraph_durable')"
        )
    return schema


# Migrations, in order; version N is MIGRATIONS[N - 1]. ``{s}`` is the quoted schema.
MIGRATIONS: list[str] = [
    # 1: tables
    """
CREATE TABLE {s}.settings (
    key text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE {s}.threads (
    tenant_id text NOT NULL,
    thread_id text NOT NULL,
    epoch integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    PRIMARY KEY (tenant_id, thread_id)
);
CREATE INDEX threads_epoch_idx ON {s}.threads (epoch);
CREATE INDEX threads_expires_idx ON {s}.threads (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE {s}.checkpoints (
    tenant_id text NOT NULL,
    thread_id text NOT NULL,
    checkpoint_ns text NOT NULL,
    checkpoint_id text NOT NULL,
    epoch integer NOT NULL,
    parent_checkpoint_id text,
    v integer NOT NULL,
    run_id text,
    blob_channels text[] NOT NULL,
    blob_versions text[] NOT NULL,
    metadata_index jsonb NOT NULL,
    checkpoint_type text NOT NULL,
    checkpoint bytea NOT NULL,
    metadata_type text NOT NULL,
    metadata bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, thread_id, checkpoint_ns, checkpoint_id, epoch)
) PARTITION BY RANGE (epoch);
CREATE INDEX checkpoints_run_idx ON {s}.checkpoints (tenant_id, run_id)
    WHERE run_id IS NOT NULL;
CREATE TABLE {s}.blobs (
    tenant_id text NOT NULL,
    thread_id text NOT NULL,
    checkpoint_ns text NOT NULL,
    channel text NOT NULL,
    version text NOT NULL,
    epoch integer NOT NULL,
    type text NOT NULL,
    blob bytea,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, thread_id, checkpoint_ns, channel, version, epoch)
) PARTITION BY RANGE (epoch);
CREATE TABLE {s}.writes (
    tenant_id text NOT NULL,
    thread_id text NOT NULL,
    checkpoint_ns text NOT NULL,
    checkpoint_id text NOT NULL,
    task_id text NOT NULL,
    idx integer NOT NULL,
    epoch integer NOT NULL,
    task_path text NOT NULL,
    channel text NOT NULL,
    type text NOT NULL,
    blob bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx, epoch)
) PARTITION BY RANGE (epoch);
""",
    # 2: partition helpers (plain SQL/PL/pgSQL, no extension)
    """
CREATE FUNCTION {s}.current_epoch() RETURNS integer
LANGUAGE sql STABLE AS $fn$
    SELECT floor(extract(epoch FROM now())
                 / (86400 * (SELECT value::integer FROM {s}.settings
                             WHERE key = 'partition_days')))::integer
$fn$;
CREATE FUNCTION {s}.ensure_partitions(p_epoch integer) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    t text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext({lit} || ':partitions'));
    FOREACH t IN ARRAY ARRAY['checkpoints', 'blobs', 'writes'] LOOP
        EXECUTE format(
            'CREATE TABLE IF NOT EXISTS %I.%I PARTITION OF %I.%I FOR VALUES FROM (%s) TO (%s)',
            {lit}, t || '_e' || p_epoch, {lit}, t, p_epoch, p_epoch + 1);
    END LOOP;
END
$fn$;
""",
    # 3: compress large payloads with lz4 where the server has it (far less CPU than pglz)
    """
DO $fn$
BEGIN
    IF 'lz4' = ANY((SELECT enumvals FROM pg_settings
                    WHERE name = 'default_toast_compression')::text[]) THEN
        EXECUTE format('ALTER TABLE %I.checkpoints ALTER COLUMN checkpoint SET COMPRESSION lz4, '
                       'ALTER COLUMN metadata SET COMPRESSION lz4', {lit});
        EXECUTE format('ALTER TABLE %I.blobs ALTER COLUMN blob SET COMPRESSION lz4', {lit});
        EXECUTE format('ALTER TABLE %I.writes ALTER COLUMN blob SET COMPRESSION lz4', {lit});
    END IF;
END
$fn$;
""",
    # 4: the tenants' wrapped data keys (envelope encryption); wrapped is NULL once shredded
    """
CREATE TABLE {s}.data_keys (
    tenant_id text NOT NULL,
    version integer NOT NULL,
    key_id text NOT NULL,
    wrapped bytea,
    created double precision NOT NULL,
    rotated_at timestamptz,
    shredded_at timestamptz,
    PRIMARY KEY (tenant_id, version)
);
""",
    # 5: the effect journal (not partitioned: an entry may precede its thread's first checkpoint)
    """
CREATE TABLE {s}.effects (
    tenant_id text NOT NULL,
    thread_id text NOT NULL,
    effect_id text NOT NULL,
    state text NOT NULL,
    token bigint NOT NULL,
    attempt integer NOT NULL,
    lease_until double precision NOT NULL,
    request_type text NOT NULL,
    request bytea NOT NULL,
    outcome text,
    result_type text,
    result bytea,
    created double precision NOT NULL,
    completed double precision,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, thread_id, effect_id)
);
DO $fn$
BEGIN
    IF 'lz4' = ANY((SELECT enumvals FROM pg_settings
                    WHERE name = 'default_toast_compression')::text[]) THEN
        EXECUTE format('ALTER TABLE %I.effects ALTER COLUMN request SET COMPRESSION lz4, '
                       'ALTER COLUMN result SET COMPRESSION lz4', {lit});
    END IF;
END
$fn$;
""",
    # 6: delta blobs: a list value stored as the items appended to version ``base``
    # (which has ``base_count`` items); NULL for a full copy (every row before this)
    """
ALTER TABLE {s}.blobs ADD COLUMN base text, ADD COLUMN base_count integer;
""",
    # 7: row-level security helpers; ensure_partitions runs as its owner (see _rls)
    _rls.MIGRATION,
]

# How often effect_claim runs again when its statement saw neither its own insert
# nor the conflicting row (a concurrent first claim committed after the
# statement's snapshot was taken); the next statement's snapshot sees that row.
CLAIM_ATTEMPTS = 5

_EFFECT_COLUMNS = (
    "state, token, attempt, lease_until, request_type, request, outcome, result_type, "
    "result, created"
)

_W_ARRAYS = (
    "array_agg(w.task_id) AS task_ids, array_agg(w.task_path) AS task_paths, "
    "array_agg(w.idx) AS idxs, array_agg(w.channel) AS channels, "
    "array_agg(w.type) AS types, array_agg(w.blob) AS blobs"
)


class PostgresOps:
    """The saver's operations on one schema, as sans-IO generators.

    Args:
        schema: Schema that holds the tables (validated identifier).
        codec: The checkpoint codec (owns the record pipeline).
        retention: The retention policy of a tenant, for the expiry writes store.
        row_level_security: Send each tenant operation's tenant with its
            statements (see ``_rls``); ``setup()`` also turns it on when the
            schema has row-level security on.
    """

    def __init__(
        self,
        schema: str,
        codec: CheckpointCodec,
        retention: Callable[[str], Retention | None] | None = None,
        row_level_security: bool = False,
    ) -> None:
        self.schema = validate_schema_name(schema)
        self.row_level_security = bool(row_level_security)
        self.codec = codec
        self.retention = retention
        self.epochs = EpochCache()
        s = f'"{self.schema}"'
        self._s = s
        self._lock_key = f"langgraph_durable:{self.schema}"
        thread_epoch = (
            f"(SELECT epoch FROM {s}.threads "
            "WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s)"
        )
        self._thread_epoch = thread_epoch
        # The thread's registry row: read it, create it on the first write, and
        # refresh updated_at at most every TOUCH_INTERVAL so a busy thread does
        # not rewrite its registry row on every step.
        # expires_at (retention, strategy delete): the earlier of last write +
        # idle and creation + absolute; NULL when the tenant's policy sets neither.
        idle = "make_interval(secs => %(idle_s)s::double precision)"
        absolute = "make_interval(secs => %(abs_s)s::double precision)"
        # A thread of an older epoch may be moved forward by the pruner (see
        # ``_prune._move_live``): its registry row is read FOR KEY SHARE, so a
        # write waits for a move in progress and then sees the thread's new
        # epoch (READ COMMITTED reads the locked row's latest version), and a
        # move waits for the writes in flight. A thread of the current epoch is
        # never moved: its row is read without a lock.
        # The current epoch is computed once, inline (as current_epoch() does): a
        # call of that SQL function costs more than the rest of the registry read.
        thread_cte = (
            "ce AS MATERIALIZED (SELECT floor(extract(epoch FROM now()) / (86400 * ("
            f"SELECT value::integer FROM {s}.settings WHERE key = 'partition_days')))"
            "::integer AS e), "
            f"lk AS (SELECT epoch, updated_at FROM {s}.threads "
            "WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s "
            "AND epoch < (SELECT e FROM ce) FOR KEY SHARE), "
            "cur AS (SELECT epoch, updated_at FROM lk UNION ALL "
            f"SELECT epoch, updated_at FROM {s}.threads "
            "WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s "
            "AND epoch >= (SELECT e FROM ce)), "
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
        self.PUT_SQL = (
            f"WITH {thread_cte}, "
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
        self.PUT_SQL = self._put_template.replace("{missing}", "missing AS (SELECT 1 WHERE false)")
        self._put_delta_cache: dict[int, str] = {}
        writes_head = (
            f"WITH {thread_cte}, "
            f"w AS (INSERT INTO {s}.writes (tenant_id, thread_id, checkpoint_ns, checkpoint_id, "
            "task_id, idx, epoch, task_path, channel, type, blob) "
            "SELECT %(tenant)s, %(thread)s, %(ns)s, %(checkpoint_id)s, %(task_id)s, u.idx, "
            "t.epoch, %(task_path)s, u.channel, u.type, u.blob "
            "FROM t CROSS JOIN unnest(%(idxs)s::integer[], %(channels)s::text[], "
            "%(types)s::text[], %(blobs)b::bytea[]) AS u(idx, channel, type, blob) "
            "ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx, epoch) "
        )
        self.INSERT_WRITES_SQL = writes_head + "DO NOTHING) SELECT epoch FROM t"
        self.UPSERT_WRITES_SQL = (
            writes_head + "DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, "
            "blob = EXCLUDED.blob, task_path = EXCLUDED.task_path) SELECT epoch FROM t"
        )
        # The columns of a stored checkpoint with its blobs, writes and (for
        # checkpoints before format 4) the parent's pending sends, in one row.
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
        self.DELETE_THREAD_SQL = (
            f"WITH t AS (DELETE FROM {s}.threads WHERE tenant_id = %(tenant)s "
            "AND thread_id = %(thread)s RETURNING epoch), "
            f"c AS (DELETE FROM {s}.checkpoints WHERE tenant_id = %(tenant)s "
            "AND thread_id = %(thread)s AND epoch = (SELECT epoch FROM t)), "
            f"w AS (DELETE FROM {s}.writes WHERE tenant_id = %(tenant)s "
            "AND thread_id = %(thread)s AND epoch = (SELECT epoch FROM t)), "
            f"e AS (DELETE FROM {s}.effects WHERE tenant_id = %(tenant)s "
            "AND thread_id = %(thread)s) "
            f"DELETE FROM {s}.blobs WHERE tenant_id = %(tenant)s "
            "AND thread_id = %(thread)s AND epoch = (SELECT epoch FROM t)"
        )
        # Every checkpoint of the threads the runs wrote to, and whether a run made
        # it: a survivor whose parent goes gets a chain tombstone (run_tombstones).
        self.RUN_FAMILIES_SQL = (
            "SELECT c.thread_id, c.epoch, c.checkpoint_ns, c.checkpoint_id, "
            "c.parent_checkpoint_id, coalesce(c.run_id = ANY(%(run_ids)s::text[]), false) "
            f"FROM {s}.checkpoints c JOIN (SELECT DISTINCT thread_id, epoch "
            f"FROM {s}.checkpoints WHERE tenant_id = %(tenant)s "
            "AND run_id = ANY(%(run_ids)s::text[])) AS d "
            "ON c.thread_id = d.thread_id AND c.epoch = d.epoch "
            "WHERE c.tenant_id = %(tenant)s"
        )
        self.RUN_THREADS_LOCK_SQL = (
            f"SELECT 1 FROM {s}.threads th WHERE th.tenant_id = %(tenant)s "
            f"AND th.thread_id IN (SELECT thread_id FROM {s}.checkpoints "
            "WHERE tenant_id = %(tenant)s AND run_id = ANY(%(run_ids)s::text[])) "
            "ORDER BY th.thread_id FOR KEY SHARE"
        )
        # after "WITH " and, with tombstones to write, rewrite_cte (delete_for_runs)
        self.DELETE_FOR_RUNS_SQL = (
            f"c AS (DELETE FROM {s}.checkpoints WHERE tenant_id = %(tenant)s "
            "AND run_id = ANY(%(run_ids)s::text[]) "
            "RETURNING thread_id, checkpoint_ns, checkpoint_id, epoch), "
            f"w AS (DELETE FROM {s}.writes w USING c WHERE w.tenant_id = %(tenant)s "
            "AND w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns "
            "AND w.checkpoint_id = c.checkpoint_id AND w.epoch = c.epoch) "
            "SELECT count(*) FROM c"
        )
        # A claim in one statement: insert the entry, or take an expired claim
        # over, or (neither) read the stored entry. ON CONFLICT locks the row
        # even when its WHERE is false; FOR SHARE then reads the row's latest
        # committed version, not the statement snapshot's.
        effect_key = "tenant_id = %(tenant)s AND thread_id = %(thread)s AND effect_id = %(effect)s"
        self.EFFECT_CLAIM_SQL = (
            f"WITH claim AS (INSERT INTO {s}.effects AS e (tenant_id, thread_id, effect_id, "
            "state, token, attempt, lease_until, request_type, request, created) "
            "VALUES (%(tenant)s, %(thread)s, %(effect)s, 'claimed', 1, 1, %(lease)s, "
            "%(r_type)s, %(r_data)b, %(now)s) "
            "ON CONFLICT (tenant_id, thread_id, effect_id) DO UPDATE SET "
            "token = e.token + 1, attempt = e.attempt + 1, lease_until = EXCLUDED.lease_until "
            "WHERE %(takeover)s::boolean AND e.state = 'claimed' "
            "AND e.lease_until <= %(now)s::double precision "
            f"RETURNING {_EFFECT_COLUMNS}, true AS won) "
            "SELECT * FROM claim UNION ALL "
            "SELECT * FROM (SELECT "
            f"{_EFFECT_COLUMNS}, false AS won FROM {s}.effects "
            f"WHERE {effect_key} FOR SHARE) AS stored "
            "WHERE NOT EXISTS (SELECT 1 FROM claim)"
        )
        self.EFFECT_COMPLETE_SQL = (
            f"UPDATE {s}.effects SET state = 'done', outcome = %(outcome)s, "
            "result_type = %(r_type)s, result = %(r_data)b, completed = %(now)s "
            f"WHERE {effect_key} AND state = 'claimed' AND token = %(token)s"
        )
        self.EFFECT_DELETE_SQL = f"DELETE FROM {s}.effects WHERE {effect_key}"
        self.EFFECT_RELEASE_SQL = (
            f"DELETE FROM {s}.effects WHERE {effect_key} "
            "AND state = 'claimed' AND token = %(token)s"
        )
        self.EFFECT_GET_SQL = f"SELECT {_EFFECT_COLUMNS} FROM {s}.effects WHERE {effect_key}"
        self.EFFECT_LIST_SQL = (
            f"SELECT effect_id, {_EFFECT_COLUMNS} FROM {s}.effects "
            "WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s ORDER BY created, effect_id"
        )
        self.EFFECT_RESTORE_SQL = (
            f"INSERT INTO {s}.effects (tenant_id, thread_id, effect_id, state, token, attempt, "
            "lease_until, request_type, request, outcome, result_type, result, created, "
            "completed) VALUES (%(tenant)s, %(thread)s, %(effect)s, %(state)s, %(token)s, "
            "%(attempt)s, %(lease)s, %(r_type)s, %(r_data)b, %(outcome)s, %(res_type)s, "
            "%(res_data)b, %(created)s, %(completed)s) "
            "ON CONFLICT (tenant_id, thread_id, effect_id) DO UPDATE SET "
            "state = EXCLUDED.state, token = EXCLUDED.token, attempt = EXCLUDED.attempt, "
            "lease_until = EXCLUDED.lease_until, request_type = EXCLUDED.request_type, "
            "request = EXCLUDED.request, outcome = EXCLUDED.outcome, "
            "result_type = EXCLUDED.result_type, result = EXCLUDED.result, "
            "created = EXCLUDED.created, completed = EXCLUDED.completed"
        )

    def _put_delta_sql(self, epoch: int) -> str:
        """PUT_SQL for a checkpoint with deltas, by a process that knows the thread's epoch.

        Nothing is written (``missing``) when a delta's base is not in the
        epoch's partition, or the thread is no longer in that epoch (deleted
        and started again): the caller then writes full copies.
        """
        sql = self._put_delta_cache.get(epoch)
        if sql is None:
            leaf = self._leaf("blobs", epoch)
            missing = (
                "missing AS (SELECT 1 FROM t WHERE t.epoch <> %(epoch)s UNION ALL "
                "SELECT 1 FROM u WHERE u.base IS NOT NULL AND NOT EXISTS ("
                f"SELECT 1 FROM {leaf} x WHERE x.tenant_id = %(tenant)s "
                "AND x.thread_id = %(thread)s AND x.checkpoint_ns = %(ns)s "
                "AND x.epoch = %(epoch)s AND x.channel = u.channel AND x.version = u.base))"
            )
            sql = self._put_template.replace("{missing}", missing)
            if len(self._put_delta_cache) > 1000:
                self._put_delta_cache.clear()
            self._put_delta_cache[epoch] = sql
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

    def _leaf(self, table: str, epoch: int) -> str:
        """The partition of ``table`` that holds ``epoch`` (see ``ensure_partitions``)."""
        return f'{self._s}."{table}_e{int(epoch)}"'

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
            "SELECT b.channel, b.version, b.type, b.blob, b.base, b.base_count, 0 AS depth "
            "FROM unnest(c.blob_channels, c.blob_versions) AS r(channel, version) "
            f"CROSS JOIN LATERAL (SELECT * FROM {blobs} b WHERE b.tenant_id = c.tenant_id "
            f"AND b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns "
            f"AND b.channel = r.channel AND b.version = r.version AND b.epoch = {epoch} LIMIT 1) b "
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

    # ---- setup ---------------------------------------------------------------

    @operation(transaction=True)
    def setup(
        self, partition_days: int, retention: str | None = None, row_level_security: bool = False
    ) -> Generator[Any, Any, list[int]]:
        """Create or migrate the schema; returns the migration versions applied.

        ``retention`` (a ``Retention.to_json()``) is stored as the schema's
        policy, which ``langgraph-durable prune`` applies when given no flags.
        ``row_level_security`` turns the schema's row-level security on (it
        stays on: no setup turns it off); when the schema has it on, every
        table with ``tenant_id`` is secured, and these operations send tenants.
        """
        s = self._s
        yield Query("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._lock_key,), "one", False)
        # A schema made beforehand for its owner (docs/security.md) is not created again:
        # CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege on the database anyway.
        row = yield Query(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %s)",
            (self.schema,),
            "one",
            False,
        )
        if not row[0]:
            yield Query(f"CREATE SCHEMA IF NOT EXISTS {s}", (), "none", False)
        yield Query(
            f"CREATE TABLE IF NOT EXISTS {s}.schema_migrations ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
            (),
            "none",
            False,
        )
        row = yield Query(
            f"SELECT coalesce(max(version), 0) FROM {s}.schema_migrations", (), "one", False
        )
        current = int(row[0])
        if current > len(MIGRATIONS):
            raise SchemaError(
                f"schema {self.schema!r} is at migration {current}, newer than this "
                f"package knows ({len(MIGRATIONS)}): upgrade langgraph-durable"
            )
        applied: list[int] = []
        lit = "'" + self.schema + "'"
        for version in range(current + 1, len(MIGRATIONS) + 1):
            script = MIGRATIONS[version - 1].replace("{s}", s).replace("{lit}", lit)
            for statement in _split_statements(script):
                yield Query(statement, (), "none", False)
            yield Query(
                f"INSERT INTO {s}.schema_migrations (version) VALUES (%s)",
                (version,),
                "none",
                False,
            )
            applied.append(version)
        yield Query(
            f"INSERT INTO {s}.settings (key, value) VALUES ('partition_days', %s) "
            "ON CONFLICT (key) DO NOTHING",
            (str(partition_days),),
            "none",
            False,
        )
        if retention is not None:
            yield from self._store_retention(retention)
        if row_level_security:
            yield Query(
                f"INSERT INTO {s}.settings (key, value) VALUES ('{_rls.SETTING_KEY}', 'on') "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                (),
                "none",
                False,
            )
        yield Query(
            f"SELECT {s}.ensure_partitions({s}.current_epoch()), "
            f"{s}.ensure_partitions({s}.current_epoch() + 1)",
            (),
            "one",
            False,
        )
        row = yield Query(
            f"SELECT {s}.apply_row_level_security(), coalesce((SELECT value FROM {s}.settings "
            f"WHERE key = '{_rls.SETTING_KEY}'), 'off') = 'on'",
            (),
            "one",
            False,
        )
        if row[1]:
            self.row_level_security = True
        return applied

    def _ensure_current_partitions(self) -> Query:
        s = self._s
        return Query(f"SELECT {s}.ensure_partitions({s}.current_epoch())", (), "one", False)

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
        rec = self.codec.encode_checkpoint(
            key, config, checkpoint, metadata, new_versions, allow_delta=epoch is not None
        )
        try:
            row = None
            if epoch is not None and any(b.base is not None for b in rec.blobs):
                try:
                    row = yield Query(
                        self._put_delta_sql(epoch),
                        {**self._put_params(rec), "epoch": epoch},
                        "one",
                    )
                except (SchemaError, MissingPartitionError):  # that partition is gone
                    row = (None, True, None)
                if row is not None and row[1]:
                    # a delta's base is gone: write this checkpoint with full copies
                    self.codec.forget_thread(key.tenant, key.thread)
                    self.epochs.forget(key.tenant, key.thread)
                    rec = self.codec.encode_checkpoint(
                        key, config, checkpoint, metadata, new_versions, allow_delta=False
                    )
                    row = None
            if row is None:
                row = yield from self._with_partition(
                    Query(self.PUT_SQL, self._put_params(rec), "one")
                )
            if row is not None and not row[1] and not row[3]:
                # the id is stored already: a retry of the same put, or a conflict
                yield from self._check_stored(rec, int(row[0]))
        except BaseException:
            self.codec.forget_thread(key.tenant, key.thread)
            raise
        self.codec.written(rec, list(row[2] or []) if row is not None else [])
        self.epochs.remember(key.tenant, key.thread, row[0] if row else None)
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
            "b_blobs": [b.sealed.data if b.sealed else None for b in rec.blobs],
            "b_bases": text_array(b.base for b in rec.blobs),
            "b_counts": [b.prefix if b.base is not None else None for b in rec.blobs],
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
            "idxs": "{" + ",".join(str(r.idx) for r in records) + "}",
            "channels": text_array(r.channel for r in records),
            "types": text_array(r.sealed.type for r in records),
            "blobs": [r.sealed.data for r in records],
            **self._expiry(key.tenant),
        }
        sql = self.UPSERT_WRITES_SQL if replace else self.INSERT_WRITES_SQL
        row = yield from self._with_partition(Query(sql, params, "one"))
        self.epochs.remember(key.tenant, key.thread, row[0] if row else None)
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
                row = yield Query(sql, {**params, "epoch": epoch}, "one")
            except SchemaError:  # that epoch's partitions were dropped
                row = (None,)
            if row is None:  # the thread is gone
                self.epochs.forget(key.tenant, key.thread)
                return None
            if row[0] == epoch:
                return None if row[3] is None else self.codec.decode(key, _stored(row[1:]))
            self.epochs.forget(key.tenant, key.thread)  # deleted and started again
        sql = self.GET_BY_ID_SQL if checkpoint_id else self.GET_LATEST_SQL
        row = yield Query(sql, params, "one")
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
                "AND r.epoch = %(epoch)s)"
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
                rows = yield Query(sql, dict(params), "all")
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

    # ---- deletes, copies, pruning -------------------------------------------

    @operation(transaction=True)
    @tenant_scoped
    def delete_thread(self, tenant: str, thread_id: str) -> Generator[Any, Any, None]:
        """Delete every row of one thread (all namespaces): two statements, one transaction."""
        yield from self._delete_thread(tenant, thread_id)
        return None

    def _delete_thread(self, tenant: str, thread_id: str) -> Generator[Any, Any, None]:
        """Lock the thread's registry row, then delete the thread (inside a transaction).

        The lock comes first, in a statement of its own: if the pruner is
        moving the thread forward (``_prune``), the lock waits for the move to
        commit, and the delete's own snapshot, taken after, sees the moved rows.
        One statement would delete the registry row but miss the moved rows.
        """
        self.epochs.forget(tenant, thread_id)
        p = {"tenant": tenant, "thread": thread_id}
        yield Query(
            f"SELECT 1 FROM {self._s}.threads WHERE tenant_id = %(tenant)s "
            "AND thread_id = %(thread)s FOR UPDATE",
            p,
            "none",
        )
        yield Query(self.DELETE_THREAD_SQL, p)
        return None

    @operation(transaction=True)
    @tenant_scoped
    def delete_for_runs(self, tenant: str, run_ids: Sequence[str]) -> Generator[Any, Any, int]:
        """Delete the checkpoints (and their writes) made by the given runs.

        One statement reads which checkpoints of the runs' threads stay while
        their parent goes; with the hash chain on, those get a tombstone, written
        by the statement that deletes (see ``run_tombstones``), so the threads
        still verify. That rewrite needs ``UPDATE`` on ``checkpoints``.
        """
        ids = [str(r) for r in run_ids]
        if not ids:
            return 0
        params: dict[str, Any] = {"tenant": tenant, "run_ids": ids}
        # The runs' threads' registry rows first, in a statement of their own:
        # a move forward by the pruner in progress is waited for, and the reads
        # and the delete below see the moved rows (see ``_delete_thread``).
        yield Query(self.RUN_THREADS_LOCK_SQL, params, "none")
        rows = list((yield Query(self.RUN_FAMILIES_SQL, params, "all")) or [])
        if not rows:
            return 0  # the runs have no checkpoint here
        stones = yield from run_tombstones(self, tenant, rows)
        params.update(stones)
        rewrite = rewrite_cte(self._s) if stones else ""
        row = yield Query(f"WITH {rewrite}{self.DELETE_FOR_RUNS_SQL}", params, "one")
        return int(row[0])

    @operation(transaction=True)
    @tenant_scoped
    def copy_thread(self, tenant: str, source: str, target: str) -> Generator[Any, Any, None]:
        """Copy every checkpoint, blob and write of a thread to another thread id."""
        s = self._s
        if source == target:
            raise InvalidInputError("copy_thread: source and target thread ids are the same")
        yield self._ensure_current_partitions()
        p = {"tenant": tenant, "source": source, "target": target}
        # Effects first: a thread may have entries before its first checkpoint.
        yield Query(
            f"INSERT INTO {s}.effects (tenant_id, thread_id, effect_id, state, token, attempt, "
            "lease_until, request_type, request, outcome, result_type, result, created, "
            "completed) SELECT tenant_id, %(target)s, effect_id, state, token, attempt, "
            "lease_until, request_type, request, outcome, result_type, result, created, "
            f"completed FROM {s}.effects WHERE tenant_id = %(tenant)s "
            "AND thread_id = %(source)s ON CONFLICT DO NOTHING",
            p,
        )
        # FOR KEY SHARE: the pruner does not move the source forward meanwhile.
        row = yield Query(
            f"SELECT epoch FROM {s}.threads "
            "WHERE tenant_id = %(tenant)s AND thread_id = %(source)s FOR KEY SHARE",
            p,
            "one",
        )
        if row is None:
            return None
        p["src_epoch"] = row[0]
        row = yield Query(
            f"INSERT INTO {s}.threads AS t (tenant_id, thread_id, epoch) "
            f"VALUES (%(tenant)s, %(target)s, {s}.current_epoch()) "
            "ON CONFLICT (tenant_id, thread_id) DO UPDATE SET updated_at = now() "
            "RETURNING t.epoch",
            p,
            "one",
        )
        p["dst_epoch"] = row[0]
        src = "tenant_id = %(tenant)s AND thread_id = %(source)s AND epoch = %(src_epoch)s"
        yield Query(
            f"INSERT INTO {s}.checkpoints (tenant_id, thread_id, checkpoint_ns, checkpoint_id, "
            "epoch, parent_checkpoint_id, v, run_id, blob_channels, blob_versions, "
            "metadata_index, checkpoint_type, checkpoint, metadata_type, metadata) "
            "SELECT tenant_id, %(target)s, checkpoint_ns, checkpoint_id, %(dst_epoch)s, "
            "parent_checkpoint_id, v, run_id, blob_channels, blob_versions, metadata_index, "
            "checkpoint_type, checkpoint, metadata_type, metadata "
            f"FROM {s}.checkpoints WHERE {src} ON CONFLICT DO NOTHING",
            p,
        )
        yield Query(
            f"INSERT INTO {s}.blobs (tenant_id, thread_id, checkpoint_ns, channel, version, "
            "epoch, type, blob, base, base_count) SELECT tenant_id, %(target)s, checkpoint_ns, "
            f"channel, version, %(dst_epoch)s, type, blob, base, base_count FROM {s}.blobs "
            f"WHERE {src} ON CONFLICT DO NOTHING",
            p,
        )
        yield Query(
            f"INSERT INTO {s}.writes (tenant_id, thread_id, checkpoint_ns, checkpoint_id, "
            "task_id, idx, epoch, task_path, channel, type, blob) "
            "SELECT tenant_id, %(target)s, checkpoint_ns, checkpoint_id, task_id, idx, "
            f"%(dst_epoch)s, task_path, channel, type, blob FROM {s}.writes WHERE {src} "
            "ON CONFLICT DO NOTHING",
            p,
        )
        return None

    @operation(transaction=True)
    @tenant_scoped
    def prune(
        self, tenant: str, thread_ids: Sequence[str], strategy: str
    ) -> Generator[Any, Any, None]:
        """Prune threads: ``keep_latest`` per namespace, or ``delete`` everything."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(
                f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'"
            )
        thread_ids = [str(t) for t in thread_ids]
        s = self._s
        for thread_id in thread_ids:
            p = {"tenant": tenant, "thread": thread_id}
            if strategy == "delete":
                yield from self._delete_thread(tenant, thread_id)
                continue
            row = yield Query(
                f"SELECT epoch FROM {s}.threads WHERE tenant_id = %(tenant)s "
                "AND thread_id = %(thread)s FOR UPDATE",
                p,
                "one",
            )
            if row is not None:
                # Keep each namespace's latest checkpoint and what it needs:
                # DeltaChannel ancestors, and before format 4 the parent's sends.
                yield from trim_batch(
                    self, False, lambda _t: 1, [(tenant, thread_id, int(row[0]))], PruneReport()
                )
        return None

    @operation(session=True)
    def prune_expired(
        self, request: PruneRequest, policy: Callable[[str], Retention | None] | None
    ) -> Generator[Any, Any, None]:
        """The pruner (``_prune``): emits ``PruneProgress`` items, then one ``PruneReport``.

        Across tenants: with row-level security on, only a role that bypasses it may run.
        """
        yield from _rls.require_bypass(self.schema, "pruning expired threads")
        return (yield from prune_expired(self, request, policy))

    @operation
    def thread_page(
        self, tenant: str | None, cursor: Any, limit: int
    ) -> Generator[Any, Any, tuple[builtins.list[tuple[str, str]], Any]]:
        """Up to ``limit`` (tenant, thread) pairs of threads with a checkpoint (``verify``).

        ``tenant`` None: every tenant (with row-level security on, only a role
        that bypasses it may run). Returns the page and the cursor of the next
        one (start with None; None after the last page). See ``_prune.thread_page``.
        """
        return (yield from thread_page(self, tenant, cursor, limit))

    def _store_retention(self, text: str) -> Generator[Any, Any, None]:
        yield Query(
            f"INSERT INTO {self._s}.settings (key, value) VALUES ('retention', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (text,),
            "none",
            False,
        )

    @operation
    def retention_set(self, text: str) -> Generator[Any, Any, None]:
        """Store the schema's retention policy (``Retention.to_json()``)."""
        yield from self._store_retention(text)

    @operation
    def retention_get(self) -> Generator[Any, Any, str | None]:
        """The schema's stored retention policy, or None."""
        row = yield Query(
            f"SELECT value FROM {self._s}.settings WHERE key = 'retention'", (), "one", False
        )
        return None if row is None else str(row[0])

    # ---- effect journal --------------------------------------------------------

    @operation
    @tenant_scoped
    def effect_claim(
        self,
        tenant: str,
        thread: str,
        effect_id: str,
        request: Sealed,
        lease_until: float,
        now: float,
        takeover: bool,
    ) -> Generator[Any, Any, StoredEffect]:
        """Claim an effect: a fresh entry, a takeover of an expired claim, or the stored entry.

        One statement (a second only when a concurrent first claim committed
        after the statement's snapshot was taken).
        """
        params = {
            "tenant": tenant,
            "thread": thread,
            "effect": effect_id,
            "lease": float(lease_until),
            "now": float(now),
            "takeover": bool(takeover),
            "r_type": request.type,
            "r_data": request.data,
        }
        for _ in range(CLAIM_ATTEMPTS):
            row = yield Query(self.EFFECT_CLAIM_SQL, params, "one")
            if row is not None:
                return _effect(effect_id, row[:-1], bool(row[-1]))
        raise StorageError(
            f"effect {effect_id!r} of thread {thread!r} could be neither claimed nor read "
            f"in {CLAIM_ATTEMPTS} attempts (it keeps being deleted and claimed concurrently)"
        )

    @operation
    @tenant_scoped
    def effect_complete(
        self,
        tenant: str,
        thread: str,
        effect_id: str,
        token: int,
        outcome: str,
        result: Sealed,
        now: float,
    ) -> Generator[Any, Any, bool]:
        """Record an effect's result if ``token`` still holds its claim; one statement."""
        count = yield Query(
            self.EFFECT_COMPLETE_SQL,
            {
                "tenant": tenant,
                "thread": thread,
                "effect": effect_id,
                "token": int(token),
                "outcome": outcome,
                "r_type": result.type,
                "r_data": result.data,
                "now": float(now),
            },
        )
        return bool(count)

    @operation
    @tenant_scoped
    def effect_delete(
        self, tenant: str, thread: str, effect_id: str, token: int | None
    ) -> Generator[Any, Any, bool]:
        """Delete an entry (any, or only a claim ``token`` holds); whether one was deleted."""
        params: dict[str, Any] = {"tenant": tenant, "thread": thread, "effect": effect_id}
        if token is None:
            count = yield Query(self.EFFECT_DELETE_SQL, params)
        else:
            params["token"] = int(token)
            count = yield Query(self.EFFECT_RELEASE_SQL, params)
        return bool(count)

    @operation
    @tenant_scoped
    def effect_get(
        self, tenant: str, thread: str, effect_id: str
    ) -> Generator[Any, Any, StoredEffect | None]:
        """One entry, or None; one statement."""
        params = {"tenant": tenant, "thread": thread, "effect": effect_id}
        row = yield Query(self.EFFECT_GET_SQL, params, "one")
        return None if row is None else _effect(effect_id, row, False)

    @operation
    @tenant_scoped
    def effect_list(
        self, tenant: str, thread: str
    ) -> Generator[Any, Any, builtins.list[StoredEffect]]:
        """Every journal entry of a thread (oldest first)."""
        rows = yield Query(self.EFFECT_LIST_SQL, {"tenant": tenant, "thread": thread}, "all")
        return [_effect(row[0], row[1:], False) for row in rows]

    @operation
    @tenant_scoped
    def effect_restore(
        self, tenant: str, thread: str, effect: StoredEffect
    ) -> Generator[Any, Any, None]:
        """Write an entry exactly as given (insert or overwrite)."""
        yield Query(
            self.EFFECT_RESTORE_SQL,
            {
                "tenant": tenant,
                "thread": thread,
                "effect": effect.effect_id,
                "state": effect.state,
                "token": int(effect.token),
                "attempt": int(effect.attempt),
                "lease": float(effect.lease_until),
                "r_type": effect.request.type,
                "r_data": effect.request.data,
                "outcome": effect.outcome,
                "res_type": None if effect.result is None else effect.result.type,
                "res_data": None if effect.result is None else effect.result.data,
                "created": float(effect.created),
                "completed": float(effect.created) if effect.state == DONE else None,
            },
        )
        return None

    # ---- data keys (envelope encryption) --------------------------------------

    @operation
    @tenant_scoped
    def data_keys(self, tenant: str) -> Generator[Any, Any, builtins.list[StoredDataKey]]:
        """Every stored data-key version of a tenant, shredded ones included."""
        rows = yield Query(
            f"SELECT version, key_id, wrapped, created FROM {self._s}.data_keys "
            "WHERE tenant_id = %(tenant)s ORDER BY version",
            {"tenant": tenant},
            "all",
        )
        return [
            StoredDataKey(int(v), k, None if w is None else bytes(w), float(c))
            for v, k, w, c in rows
        ]

    @operation
    @tenant_scoped
    def add_data_key(self, tenant: str, key: StoredDataKey) -> Generator[Any, Any, bool]:
        """Store a new data-key version; False if that version exists."""
        row = yield Query(
            f"INSERT INTO {self._s}.data_keys (tenant_id, version, key_id, wrapped, created) "
            "VALUES (%(tenant)s, %(version)s, %(key_id)s, %(wrapped)s, %(created)s) "
            "ON CONFLICT DO NOTHING RETURNING version",
            {
                "tenant": tenant,
                "version": key.version,
                "key_id": key.key_id,
                "wrapped": key.wrapped,
                "created": key.created,
            },
            "one",
        )
        return row is not None

    @operation
    @tenant_scoped
    def rewrap_data_key(
        self, tenant: str, version: int, old_wrapped: bytes, key_id: str, wrapped: bytes
    ) -> Generator[Any, Any, bool]:
        """Replace one version's wrapped key if it is still ``old_wrapped``."""
        row = yield Query(
            f"UPDATE {self._s}.data_keys SET key_id = %(key_id)s, wrapped = %(wrapped)s, "
            "rotated_at = now() WHERE tenant_id = %(tenant)s AND version = %(version)s "
            "AND wrapped = %(old)s RETURNING version",
            {
                "tenant": tenant,
                "version": version,
                "old": old_wrapped,
                "key_id": key_id,
                "wrapped": wrapped,
            },
            "one",
        )
        return row is not None

    @operation
    @tenant_scoped
    def shred_data_keys(self, tenant: str) -> Generator[Any, Any, int]:
        """Delete every wrapped data key of a tenant (the versions stay as tombstones)."""
        rows = yield Query(
            f"UPDATE {self._s}.data_keys SET wrapped = NULL, key_id = '', "
            "shredded_at = now() WHERE tenant_id = %(tenant)s AND wrapped IS NOT NULL "
            "RETURNING version",
            {"tenant": tenant},
            "all",
        )
        return len(rows)

    @operation
    def data_key_tenants(self) -> Generator[Any, Any, builtins.list[str]]:
        """Every tenant with stored data keys (across tenants: see ``_rls.require_bypass``)."""
        yield from _rls.require_bypass(self.schema, "listing the tenants with data keys")
        rows = yield Query(
            f"SELECT DISTINCT tenant_id FROM {self._s}.data_keys ORDER BY tenant_id", {}, "all"
        )
        return [r[0] for r in rows]


def text_array(values: Any) -> str:
    """A PostgreSQL text[] literal of ``values`` (each quoted and escaped).

    Sent as one text parameter, it costs the client far less than letting the
    driver adapt a Python list element by element.
    """
    parts = []
    for value in values:
        if value is None:
            parts.append("NULL")
            continue
        parts.append('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return "{" + ",".join(parts) + "}"


def _split_statements(script: str) -> list[str]:
    """Split a migration script on ``;`` at line ends outside ``$fn$`` bodies."""
    statements, current, in_body = [], [], False
    for line in script.splitlines():
        if line.count("$fn$") % 2 == 1:
            in_body = not in_body
        current.append(line)
        if not in_body and line.rstrip().endswith(";"):
            statement = "\n".join(current).strip().rstrip(";")
            if statement:
                statements.append(statement)
            current = []
    rest = "\n".join(current).strip()
    if rest:
        statements.append(rest)
    return statements


def _effect(effect_id: str, row: Sequence[Any], won: bool) -> StoredEffect:
    """A journal entry from the columns ``_EFFECT_COLUMNS`` (in that order)."""
    state, token, attempt, lease, r_type, r_data, outcome, res_type, res_data, created = row
    return StoredEffect(
        effect_id=effect_id,
        state=state,
        token=int(token),
        attempt=int(attempt),
        lease_until=float(lease),
        request=Sealed(r_type, bytes(r_data)),
        outcome=outcome,
        result=None if res_type is None else Sealed(res_type, bytes(res_data)),
        won=won,
        created=float(created),
    )


def _sealed_list(types: list[str] | None, blobs: list[bytes | None] | None) -> list[Sealed | None]:
    if not types:
        return []
    return [
        None if b is None else Sealed(t, bytes(b)) for t, b in zip(types, blobs or [], strict=True)
    ]


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
            value = BlobDelta(str(base), int(count), sealed)
        scopes.setdefault((thread, ns), {})[(channel, version)] = value
    out = []
    for row in rows:
        thread, ns, checkpoint_id, parent, c_type, c_data, m_type, m_data = row[:8]
        scope = scopes.get((thread, ns), {})
        refs = zip(row[8] or [], row[9] or [], strict=True)
        out.append(
            StoredCheckpoint(
                thread=thread,
                ns=ns,
                checkpoint_id=checkpoint_id,
                parent_checkpoint_id=parent,
                body=Sealed(c_type, bytes(c_data)),
                metadata=Sealed(m_type, bytes(m_data)),
                blobs=[(ch, ver, scope[(ch, ver)]) for ch, ver in refs if (ch, ver) in scope],
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
            value = BlobDelta(str(base), int(count), sealed)
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
