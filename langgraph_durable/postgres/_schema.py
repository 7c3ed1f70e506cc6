"""The PostgreSQL schema: its tables, its migrations, its name (pure, no psycopg import).

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
  retention policy; ``row_level_security`` (``on`` once a ``setup()`` turned it on);
  ``tenant_signing`` (``on`` once a ``setup()`` stored a tenant signing key).
* ``tenant_signing_keys``: the secrets signed tenants are checked with (``_rls``);
  no role but the owner has any privilege on it.
* Row-level security (``_rls``): when on, every table with ``tenant_id`` (each
  partition too) enforces a tenant policy, and each statement of a tenant's
  operation carries the tenant (``Query.settings``).
* ``store_items``: the long-term memory store's items (``_store``), one row per
  (tenant, namespace, key); not partitioned: items live until deleted or expired
  one by one (a TTL refreshed on read moves an item's expiry), so no time bucket
  could be dropped whole.
* ``store_vectors``: the store's embeddings in pgvector's type, for a vector index
  (``_store_vectors``): made by the store's ``setup()``, not by a migration (its
  column's dimensions are the store's ``index`` setting), only where the extension is.
* ``schema_migrations``: versions applied; migrations run under an advisory lock
  (``_admin.AdminOps.setup``).
"""

from __future__ import annotations

import re

from ..errors import ConfigurationError
from . import _rls

__all__ = ["MIGRATIONS", "validate_schema_name"]

_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


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
    # 8: signed tenants (tenant_signing_keys, signed_tenant()); ensure_partitions keeps
    # the application role to epochs near the current one (see _rls)
    _rls.SIGNED_MIGRATION,
    # 9: the long-term memory store (``_store``): one row per (tenant, namespace, key),
    # apart from the checkpoint tables and not partitioned (see ``_store``)
    """
CREATE TABLE {s}.store_items (
    tenant_id text NOT NULL,
    prefix text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    value_type text NOT NULL,
    value bytea NOT NULL,
    vectors_type text NOT NULL,
    vectors bytea NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    ttl_minutes double precision,
    expires_at double precision,
    PRIMARY KEY (tenant_id, prefix, key)
);
CREATE INDEX store_items_expires_idx ON {s}.store_items (expires_at)
    WHERE expires_at IS NOT NULL;
DO $fn$
BEGIN
    IF 'lz4' = ANY((SELECT enumvals FROM pg_settings
                    WHERE name = 'default_toast_compression')::text[]) THEN
        EXECUTE format('ALTER TABLE %I.store_items ALTER COLUMN value SET COMPRESSION lz4, '
                       'ALTER COLUMN vectors SET COMPRESSION lz4', {lit});
    END IF;
END
$fn$;
""",
    # 10: search by meaning with pgvector (``_store_vectors``): whether an item's
    # embeddings are also in ``store_vectors`` (the vector index's table, made by the
    # store's setup() where the extension is); items with embeddings not indexed
    # (written before, or sealed only) are found through the partial index and scored
    # exactly beside the index's candidates
    """
ALTER TABLE {s}.store_items ADD COLUMN vectors_indexed boolean NOT NULL DEFAULT false;
CREATE INDEX store_items_unindexed_idx ON {s}.store_items (tenant_id, prefix)
    WHERE vectors_type <> '' AND NOT vectors_indexed;
""",
]

# How often effect_claim runs again when its statement saw neither its own insert


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
