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

Signed tenants (``tenant_signing_key=``, migration 8): the setting above is one any
role may set, so plain row-level security keeps apart the tenants of a saver, not
those of SQL run as the application role. With a signing key, ``setup()`` stores a
secret derived from it in ``tenant_signing_keys`` (no privilege for anyone but the
owner) and the policy becomes::

    tenant_id = (SELECT signed_tenant())

``signed_tenant()`` (SECURITY DEFINER, owned by the owner) returns the tenant
setting only when ``langgraph_durable.tenant_signature`` holds its HMAC-SHA256
under a stored secret (RFC 2104, built from PostgreSQL's own ``sha256()``: no
extension), else NULL: a missing, forged or copied signature matches no row.
The saver sends the signature as a bound parameter (:func:`tenant_settings`).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Callable, Generator
from typing import Any, ParamSpec, TypeVar

from .._core.sansio import Stepper
from ..errors import ConfigurationError
from ._query import Query

__all__ = [
    "TENANT_SETTING",
    "SIGNATURE_SETTING",
    "POLICY",
    "SIGNED_POLICY",
    "SIGNING_KEY",
    "SIGNED_MIGRATION",
    "TenantSigner",
    "tenant_settings",
    "store_signing_key",
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
#: The transaction-local setting that carries the tenant's signature (``key_id:hex``).
SIGNATURE_SETTING = "langgraph_durable.tenant_signature"
#: The policy's name on every table with a ``tenant_id`` column.
POLICY = "tenant_isolation"
#: Its name once the schema checks signed tenants (the two never coexist on a table).
SIGNED_POLICY = "tenant_isolation_signed"
#: The ``settings`` row that records the schema's choice (value ``on``).
SETTING_KEY = "row_level_security"
#: The ``settings`` row that says the schema checks signed tenants (value ``on``).
SIGNING_KEY = "tenant_signing"

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

#: How many epochs either side of the current one ``ensure_partitions`` creates for a
#: role that does not own the schema's tables (the application role): the saver only
#: ever asks for the current epoch, and the pruner's reading of it may be one behind.
EPOCH_WINDOW = 1

_SIGNED_ON = (
    f"coalesce((SELECT value FROM {{s}}.settings WHERE key = '{SIGNING_KEY}'), 'off') = 'on'"
)

# Migration 8 (``{s}`` the quoted schema, ``{lit}`` its name as a literal):
# * tenant_signing_keys: the secrets signed tenants are checked with, as HMAC's inner
#   and outer padded keys (the secret itself: only the owner may read them);
# * signed_tenant(): the tenant setting if its signature checks out, else NULL;
# * secure_table(t): now the policy the schema's choice asks for (signed or not),
#   dropping the other one in the same transaction (policies OR together);
# * apply_row_level_security(): also re-secures tables whose policy is the other kind;
# * lock_signing_keys(): revokes every privilege on tenant_signing_keys but the
#   owner's (default privileges may have granted some); setup() runs it each time;
# * ensure_partitions: refuses an epoch more than EPOCH_WINDOW from the current
#   one unless the caller could create the partition itself (owner member, superuser).
SIGNED_MIGRATION = (
    r"""
CREATE TABLE {s}.tenant_signing_keys (
    key_id text PRIMARY KEY,
    inner_pad bytea NOT NULL,
    outer_pad bytea NOT NULL,
    added_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON {s}.tenant_signing_keys FROM PUBLIC;
CREATE FUNCTION {s}.signed_tenant() RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    tenant text := nullif(current_setting('@TENANT@', true), '');
    signature text := current_setting('@SIGNATURE@', true);
    k record;
    message bytea;
BEGIN
    -- key_id (16 hex digits) ':' HMAC (64 hex digits); checked without a regular
    -- expression, which costs more than the rest of the check together
    IF tenant IS NULL OR signature IS NULL OR length(signature) <> 81
       OR substr(signature, 17, 1) <> ':'
       OR translate(signature, '0123456789abcdef:', '') <> '' THEN
        RETURN NULL;
    END IF;
    SELECT inner_pad, outer_pad INTO k FROM {s}.tenant_signing_keys
    WHERE key_id = left(signature, 16);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- HMAC-SHA256 (RFC 2104) of 'schema:tenant'; the two digests are compared
    -- hashed again, so the time a comparison takes says nothing of the expected one
    -- the UTF-8 bytes of 'schema:tenant': text cast to bytea (backslashes doubled,
    -- the cast's only escape) where the server's encoding is UTF-8; convert_to
    -- (several times slower) elsewhere
    IF current_setting('server_encoding') = 'UTF8' THEN
        message := replace({lit} || ':' || tenant, E'\\', E'\\\\')::bytea;
    ELSE
        message := convert_to({lit} || ':' || tenant, 'UTF8');
    END IF;
    IF sha256(sha256(k.outer_pad || sha256(k.inner_pad || message)))
       = sha256(decode(substr(signature, 18), 'hex')) THEN
        RETURN tenant;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE OR REPLACE FUNCTION {s}.secure_table(p_table text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    rel regclass := format('%I.%I', {lit}, p_table)::regclass;
    signed boolean := @SIGNED_ON@;
    name text := CASE WHEN signed THEN '@SIGNED_POLICY@' ELSE '@POLICY@' END;
    other text := CASE WHEN signed THEN '@POLICY@' ELSE '@SIGNED_POLICY@' END;
    cond text := CASE WHEN signed
        THEN format('tenant_id = (SELECT %I.signed_tenant())', {lit})
        ELSE '@CONDITION@' END;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = rel AND polname = name) THEN
        EXECUTE format('CREATE POLICY %I ON %s USING (%s) WITH CHECK (%s)',
                       name, rel, cond, cond);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = rel AND polname = other) THEN
        EXECUTE format('DROP POLICY %I ON %s', other, rel);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = rel
                   AND relrowsecurity AND relforcerowsecurity) THEN
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY',
                       rel);
    END IF;
END
$fn$;
CREATE OR REPLACE FUNCTION {s}.apply_row_level_security() RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    t text;
    n integer := 0;
    wanted text := CASE WHEN @SIGNED_ON@ THEN '@SIGNED_POLICY@' ELSE '@POLICY@' END;
BEGIN
    IF NOT @ENABLED@ THEN
        RETURN 0;
    END IF;
    FOR t IN
        SELECT c.relname FROM pg_class c
        JOIN pg_namespace ns ON ns.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id'
            AND NOT a.attisdropped
        WHERE ns.nspname = {lit} AND c.relkind IN ('r', 'p')
        AND NOT (c.relrowsecurity AND c.relforcerowsecurity AND EXISTS (
            SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = wanted)
            AND NOT EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid
                            AND p.polname IN ('@POLICY@', '@SIGNED_POLICY@')
                            AND p.polname <> wanted))
        ORDER BY c.relname
    LOOP
        PERFORM {s}.secure_table(t);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$fn$;
CREATE FUNCTION {s}.lock_signing_keys() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    rel regclass := format('%I.tenant_signing_keys', {lit})::regclass;
    grantee oid;
BEGIN
    FOR grantee IN
        SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = rel AND a.grantee <> c.relowner
    LOOP
        IF grantee = 0 THEN
            EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', rel);
        ELSE
            EXECUTE format('REVOKE ALL ON %s FROM %I', rel, pg_get_userbyid(grantee));
        END IF;
    END LOOP;
END
$fn$;
CREATE OR REPLACE FUNCTION {s}.ensure_partitions(p_epoch integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    t text;
    secure boolean := @ENABLED@;
    current integer := {s}.current_epoch();
BEGIN
    IF p_epoch IS NULL OR (abs(p_epoch::bigint - current) > @WINDOW@
       AND NOT (SELECT rolsuper FROM pg_roles WHERE rolname = session_user)
       AND NOT pg_has_role(session_user, (SELECT relowner FROM pg_class
           WHERE oid = format('%I.checkpoints', {lit})::regclass), 'MEMBER')) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('ensure_partitions(%s) refused: role %s may create the partitions '
                             'of epochs %s to %s only (the current epoch is %s)',
                             coalesce(p_epoch::text, 'NULL'), session_user,
                             current - @WINDOW@, current + @WINDOW@, current);
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext({lit} || ':partitions'));
    FOREACH t IN ARRAY ARRAY['checkpoints', 'blobs', 'writes'] LOOP
        EXECUTE format(
            'CREATE TABLE IF NOT EXISTS %I.%I PARTITION OF %I.%I FOR VALUES FROM (%s) TO (%s)',
            {lit}, t || '_e' || p_epoch, {lit}, t, p_epoch, p_epoch + 1);
        IF secure THEN
            PERFORM {s}.secure_table(t || '_e' || p_epoch);
        END IF;
    END LOOP;
END
$fn$;
REVOKE EXECUTE ON FUNCTION {s}.lock_signing_keys() FROM PUBLIC;
""".replace("@TENANT@", TENANT_SETTING)
    .replace("@SIGNATURE@", SIGNATURE_SETTING)
    .replace("@SIGNED_ON@", _SIGNED_ON.format(s="{s}"))
    .replace("@ENABLED@", _ENABLED.format(s="{s}"))
    .replace("@SIGNED_POLICY@", SIGNED_POLICY)
    .replace("@POLICY@", POLICY)
    .replace("@CONDITION@", _CONDITION)
    .replace("@WINDOW@", str(EPOCH_WINDOW))
)


class TenantSigner:
    """Signs each tenant of one schema with a secret derived from ``tenant_signing_key``.

    The key itself never reaches the database: ``setup()`` stores the secret
    derived from it (HMAC's padded keys, :meth:`pads`) under :attr:`key_id`;
    each statement carries ``key_id:HMAC-SHA256(secret, "schema:tenant")``. A
    signature names its schema and tenant, so it opens no other tenant (nor
    the same tenant of another schema under the same key).
    """

    __slots__ = ("schema", "key_id", "_secret", "_cache")

    _CONTEXT = b"langgraph-durable tenant signing v1"

    def __init__(self, key: str | bytes, schema: str) -> None:
        if isinstance(key, str):
            raw = key.encode("utf-8", "surrogatepass")
        elif isinstance(key, (bytes, bytearray)):
            raw = bytes(key)
        else:
            raise ConfigurationError(
                f"tenant_signing_key must be str or bytes, got {type(key).__name__}"
            )
        if len(raw) < 32:
            raise ConfigurationError(
                f"tenant_signing_key must be at least 32 bytes, got {len(raw)}: make one "
                "with python -c 'import secrets; print(secrets.token_hex(32))'"
            )
        self.schema = schema
        self._secret = hmac.new(raw, self._CONTEXT, hashlib.sha256).digest()
        self.key_id = hmac.new(self._secret, b"key id", hashlib.sha256).hexdigest()[:16]
        self._cache: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"TenantSigner(schema={self.schema!r}, key_id={self.key_id!r})"

    def pads(self) -> tuple[bytes, bytes]:
        """HMAC's inner and outer padded keys (RFC 2104), what the database stores."""
        block = self._secret.ljust(64, b"\0")
        return bytes(b ^ 0x36 for b in block), bytes(b ^ 0x5C for b in block)

    def __call__(self, tenant: str) -> str:
        """The signature setting for ``tenant``: ``key_id:hex``."""
        found = self._cache.get(tenant)
        if found is None:
            message = f"{self.schema}:{tenant}".encode("utf-8", "surrogatepass")
            digest = hmac.new(self._secret, message, hashlib.sha256).hexdigest()
            found = f"{self.key_id}:{digest}"
            if len(self._cache) >= 4096:
                self._cache.clear()
            self._cache[tenant] = found
        return found


def tenant_settings(ops: Any, tenant: str) -> tuple[tuple[str, str], ...]:
    """The settings a statement of ``tenant`` carries: the tenant, and its signature
    when ``ops`` has a signer (``ops.tenant_signer``)."""
    signer = getattr(ops, "tenant_signer", None)
    if signer is None:
        return ((TENANT_SETTING, tenant),)
    return ((TENANT_SETTING, tenant), (SIGNATURE_SETTING, signer(tenant)))


def signed(settings: tuple[tuple[str, str], ...]) -> bool:
    """Whether ``settings`` carry a signature: the driver then binds them as parameters
    (never as literals in the query text, which ``pg_stat_activity`` shows)."""
    return any(name == SIGNATURE_SETTING for name, _value in settings)


def store_signing_key(schema: str, signer: TenantSigner) -> Generator[Any, Any, None]:
    """Inside ``setup()`` (as the owner): store the signer's secret, turn signed tenants
    on for ``schema`` (it stays on), and take every privilege on the secrets from
    everyone but the owner. A key stored before stays (rotation: see docs/postgres.md)."""
    s = f'"{schema}"'
    inner, outer = signer.pads()
    yield Query(
        f"INSERT INTO {s}.tenant_signing_keys (key_id, inner_pad, outer_pad) "
        "VALUES (%s, %s, %s) ON CONFLICT (key_id) DO NOTHING",
        (signer.key_id, inner, outer),
        "none",
        False,
    )
    yield Query(
        f"INSERT INTO {s}.settings (key, value) VALUES ('{SIGNING_KEY}', 'on') "
        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        (),
        "none",
        False,
    )
    return None


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
        return with_settings(steps, tenant_settings(args[0], tenant))

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
                step = Query(step.sql, step.params, step.fetch, step.prepare, settings, step.retry)
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
    and may call ``current_epoch()``, ``ensure_partitions()`` (which runs as
    its owner) and ``signed_tenant()`` (the signed policy's check); it gets no
    privilege on ``tenant_signing_keys``. Partitions created later get the same
    table rights through the owner's default privileges.

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
        f"GRANT EXECUTE ON FUNCTION {s}.current_epoch(), {s}.ensure_partitions(integer), "
        f"{s}.signed_tenant() TO {app}",
        f"REVOKE ALL ON {s}.tenant_signing_keys FROM {app}",
    ]


def _identifier(name: str) -> str:
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ConfigurationError(f"a role or schema name must be a non-empty string, got {name!r}")
    return '"' + name.replace('"', '""') + '"'
