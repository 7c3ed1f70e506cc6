"""The saver's admin operations on PostgreSQL.

``setup`` (migrations, partitions, row-level security), the deletes
(``delete_thread``, ``delete_for_runs``), ``copy_thread``, ``prune``, the
pruner's entry (``prune_expired``, carried out by ``_prune``), ``thread_page``
(``verify``) and the stored retention policy. Pure: no psycopg import, no I/O.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Generator, Sequence
from typing import Any

from .._core.audit import trim_refused
from .._core.retention import PruneReport, PruneRequest, Retention
from .._core.sansio import operation
from ..errors import InvalidInputError, SchemaError
from . import _rls
from ._base import OpsBase
from ._prune import prune_expired, thread_page
from ._query import Query
from ._rls import tenant_scoped
from ._schema import MIGRATIONS, _split_statements
from ._trim import rewrite_cte, run_tombstones, trim_batch

__all__ = ["AdminOps"]


class AdminOps(OpsBase):
    """Setup, deletes, copies, pruning and the stored retention policy."""

    def _init_admin(self) -> None:
        """Build the delete statements of this schema (called once, by ``PostgresOps``)."""
        s = self._s
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

    # ---- setup ---------------------------------------------------------------

    @operation(transaction=True)
    def setup(
        self,
        partition_days: int,
        retention: str | None = None,
        row_level_security: bool = False,
        tenant_signer: _rls.TenantSigner | None = None,
    ) -> Generator[Any, Any, list[int]]:
        """Create or migrate the schema; returns the migration versions applied.

        ``retention`` (a ``Retention.to_json()``) is stored as the schema's
        policy, which ``langgraph-durable prune`` applies when given no flags.
        ``row_level_security`` turns the schema's row-level security on (it
        stays on: no setup turns it off); when the schema has it on, every
        table with ``tenant_id`` is secured, and these operations send tenants.
        ``tenant_signer`` stores its secret and turns signed tenants on (``_rls``).
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
        if tenant_signer is not None:
            yield from _rls.store_signing_key(self.schema, tenant_signer)
        yield Query(f"SELECT {s}.lock_signing_keys()", (), "one", False)
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
        moving the thread forward (``_partitions``), the lock waits for the move to
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
        """Prune threads: ``keep_latest`` per namespace, or ``delete`` everything.

        With ``integrity=``, a thread with a broken link in what ``keep_latest``
        would remove raises ``IntegrityError`` (one transaction: nothing of the
        call is trimmed).
        """
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
                report = PruneReport()
                yield from trim_batch(
                    self, False, lambda _t: 1, [(tenant, thread_id, int(row[0]))], report
                )
                if report.broken:  # not trimmed: a link in what would go is broken
                    raise trim_refused(report.broken)
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
