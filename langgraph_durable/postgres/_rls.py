"""PostgreSQL row-level security: the policy, and the tenant sent with each statement (pure).

With row-level security on (``PostgresSaver(..., row_level_security=True)``, or a
schema whose ``setup()`` turned it on), every table of the schema that has a
``tenant_id`` column, each partition included, has row-level security enabled
and forced, under one policy (for every command, USING and WITH CHECK)::

    tenant_id = nullif(current_setting('langgraph_durable.tenant', true), '')

A statement of one tenant's operation carries that tenant as a transaction-local
setting (:attr:`Query.settings`), which the driver sends in the same round trip,
right before the statement. Without the setting (or with it empty) the policy
matches no row: a connection that names no tenant reads nothing and writes
nothing. Operations across tenants (the pruner, key rotation of every tenant)
need a role that bypasses row-level security; :func:`require_bypass` makes them
fail with our error instead of seeing an empty schema. See ``docs/security.md``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from typing import Any, ParamSpec, TypeVar

from .._core.sansio import Stepper
from ..errors import ConfigurationError
from ._query import Query

__all__ = [
    "TENANT_SETTING",
    "POLICY",
    "SETTING_KEY",
    "MIGRATION",
    "tenant_scoped",
    "with_settings",
    "require_bypass",
    "app_role_grants",
]

P = ParamSpec("P")
R = TypeVar("R")

#: The transaction-local setting that names the tenant of a statement.
TENANT_SETTING = "langgraph_durable.tenant"
#: The policy's name on every table with a ``tenant_id`` column.
POLICY = "tenant_isolation"
#: The ``settings`` row that records the schema's choice (value ``on``).
SETTING_KEY = "row_level_security"

_CONDITION = f"tenant_id = nullif(current_setting(''{TENANT_SETTING}'', true), '''')"
_ENABLED = f"coalesce((SELECT value FROM {{s}}.settings WHERE key = '{SETTING_KEY}'), 'off') = 'on'"

# Migration 7 (``{s}`` the quoted schema, ``{lit}`` its name as a literal):
# * secure_table(t): the policy on t, then ENABLE and FORCE (each only if missing,
#   so a repeated setup() takes no lock on a table that is already secured);
# * apply_row_level_security(): secure_table on every table with tenant_id when
#   the schema's setting is on (setup() calls it; returns how many it changed);
# * ensure_partitions runs as its owner (SECURITY DEFINER), so an application
#   role that does not own the tables can still create the partition of a new
#   epoch, and secures each partition it creates when the setting is on.
MIGRATION = f"""
CREATE FUNCTION {{s}}.secure_table(p_table text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    rel regclass := format('%I.%I', {{lit}}, p_table)::regclass;
    cond text := '{_CONDITION}';
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = rel AND polname = '{POLICY}') THEN
        EXECUTE format('CREATE POLICY {POLICY} ON %s USING (%s) WITH CHECK (%s)',
                       rel, cond, cond);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = rel
                   AND relrowsecurity AND relforcerowsecurity) THEN
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY',
                       rel);
    END IF;
END
$fn$;
CREATE FUNCTION {{s}}.apply_row_level_security() RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    t text;
    n integer := 0;
BEGIN
    IF NOT {_ENABLED} THEN
        RETURN 0;
    END IF;
    FOR t IN
        SELECT c.relname FROM pg_class c
        JOIN pg_namespace ns ON ns.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id'
            AND NOT a.attisdropped
        WHERE ns.nspname = {{lit}} AND c.relkind IN ('r', 'p')
        AND NOT (c.relrowsecurity AND c.relforcerowsecurity AND EXISTS (
            SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = '{POLICY}'))
        ORDER BY c.relname
    LOOP
        PERFORM {{s}}.secure_table(t);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$fn$;
CREATE OR REPLACE FUNCTION {{s}}.ensure_partitions(p_epoch integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    t text;
    secure boolean := {_ENABLED};
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext({{lit}} || ':partitions'));
    FOREACH t IN ARRAY ARRAY['checkpoints', 'blobs', 'writes'] LOOP
        EXECUTE format(
            'CREATE TABLE IF NOT EXISTS %I.%I PARTITION OF %I.%I FOR VALUES FROM (%s) TO (%s)',
            {{lit}}, t || '_e' || p_epoch, {{lit}}, t, p_epoch, p_epoch + 1);
        IF secure THEN
            PERFORM {{s}}.secure_table(t || '_e' || p_epoch);
        END IF;
    END LOOP;
END
$fn$;
REVOKE EXECUTE ON FUNCTION {{s}}.secure_table(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{s}}.apply_row_level_security() FROM PUBLIC;
"""


def tenant_scoped(
    gen: Callable[P, Generator[Any, Any, R]],
) -> Callable[P, Generator[Any, Any, R]]:
    """Send the operation's tenant with each of its statements, when RLS is on.

    For a method of ``PostgresOps`` whose first argument is the tenant (a
    string) or a ``ThreadKey``; with ``ops.row_level_security`` off the
    operation is returned unchanged.
    """

    @functools.wraps(gen)
    def scoped(*args: P.args, **kwargs: P.kwargs) -> Generator[Any, Any, R]:
        steps = gen(*args, **kwargs)
        if not getattr(args[0], "row_level_security", False):
            return steps
        first = args[1]
        tenant = str(getattr(first, "tenant", first))
        return with_settings(steps, ((TENANT_SETTING, tenant),))

    return scoped


def with_settings(
    steps: Generator[Any, Any, R], settings: tuple[tuple[str, str], ...]
) -> Generator[Any, Any, R]:
    """Run ``steps``, giving each of its statements that has none these ``settings``.

    Results and errors go back to ``steps`` unchanged; other requests pass through.
    """
    stepper = Stepper(steps)
    step = stepper.first()
    try:
        while step is not None:
            if type(step) is Query and not step.settings:
                step = Query(step.sql, step.params, step.fetch, step.prepare, settings)
            try:
                result = yield step
            except Exception as exc:
                step = stepper.throw(exc)
                continue
            step = stepper.send(result)
    finally:
        stepper.close()
    return stepper.result  # type: ignore[no-any-return]


def require_bypass(schema: str, what: str) -> Generator[Any, Any, None]:
    """Fail unless the connection's role may see every tenant's rows of ``schema``.

    One statement. Nothing to check when the schema's row-level security is off;
    with it on, the role must be a superuser or have BYPASSRLS (the pruner
    role), else ``what`` would see only the rows of no tenant at all.
    """
    s = f'"{schema}"'
    row = yield Query(
        f"SELECT {_ENABLED.format(s=s)}, "
        "(SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user), "
        "current_user",
        (),
        "one",
        False,
    )
    if row is not None and row[0] and not row[1]:
        raise ConfigurationError(
            f"{what} works across tenants, and schema {schema!r} has row-level security "
            f"on: role {row[2]!r} would see no tenant's rows. Run it as a role with "
            "BYPASSRLS (the pruner role in docs/security.md), or name one tenant where "
            "the call takes one"
        )
    return None


def app_role_grants(schema: str, app_role: str, owner_role: str) -> list[str]:
    """The statements that let ``app_role`` run a saver on ``schema`` (``docs/security.md``).

    Run them as ``owner_role`` (the migration role that owns the schema and ran
    ``setup()``), after ``setup()``. The application role reads and writes the
    tenant tables (row-level security confines it to the tenant each statement
    names), reads ``settings`` and ``schema_migrations`` without changing them,
    and may call ``current_epoch()`` and ``ensure_partitions()`` (which runs as
    its owner). Partitions created later get the same table rights through the
    owner's default privileges.

    Args:
        schema: The saver's schema.
        app_role: The role the application connects as (not the owner, no BYPASSRLS).
        owner_role: The role that owns the schema's tables.
    """
    s, app, owner = (_identifier(x) for x in (schema, app_role, owner_role))
    dml = "SELECT, INSERT, UPDATE, DELETE"
    return [
        f"GRANT USAGE ON SCHEMA {s} TO {app}",
        f"GRANT {dml} ON ALL TABLES IN SCHEMA {s} TO {app}",
        f"REVOKE INSERT, UPDATE, DELETE ON {s}.settings, {s}.schema_migrations FROM {app}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {s} GRANT {dml} ON TABLES TO {app}",
        f"REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA {s} FROM PUBLIC",
        f"GRANT EXECUTE ON FUNCTION {s}.current_epoch(), {s}.ensure_partitions(integer) TO {app}",
    ]


def _identifier(name: str) -> str:
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ConfigurationError(f"a role or schema name must be a non-empty string, got {name!r}")
    return '"' + name.replace('"', '""') + '"'
