"""Signed tenants on PostgreSQL, attacked as the application role with plain SQL.

Without ``tenant_signing_key`` the tenant setting is one any role may set (the
application role reads a victim's rows with ``SET langgraph_durable.tenant``:
the first test shows it, as the limit docs/postgres.md states). With the key the
database checks each statement's tenant against its signature, under a secret
the application role cannot read: a missing, forged, malformed or copied
signature reads 0 rows of every tenant table (enumerated from the catalog, so a
table added later is covered), and writes nothing. The saver with the key
works as before, sync and async; ``ensure_partitions`` refuses far epochs.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from langgraph_durable.errors import ConfigurationError, StorageError
from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver
from langgraph_durable.postgres._rls import (
    SIGNATURE_SETTING,
    TENANT_SETTING,
    TenantSigner,
    app_role_grants,
)
from tests.encryption_helpers import local_encryption
from tests.helpers import cfg, put_chain, versioned_cp
from tests.postgres.test_rls import _TENANT_TABLES, Roles, _scenario
from tests.postgres.test_rls import roles as roles  # the module's roles fixture

KEY = "k" * 16 + secrets.token_hex(16)
OTHER_KEY = secrets.token_hex(32)
T1, T2 = "t1", "t2"
#: Every tenant table the schema has today; the catalog may list more (checked too).
KNOWN = {"threads", "checkpoints", "blobs", "writes", "effects", "data_keys"}
ENCRYPTION = local_encryption()  # encrypted seed rows: the data_keys table is filled


def new_signed_schema(roles: Roles, key: str = KEY) -> str:
    schema = f"t_sig_{uuid.uuid4().hex[:12]}"
    with roles.admin() as conn:
        conn.execute(
            sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
                sql.Identifier(schema), sql.Identifier(roles.owner)
            )
        )
    with PostgresSaver.from_conn_string(
        roles.url(roles.owner), schema=schema, row_level_security=True, tenant_signing_key=key
    ) as saver:
        saver.setup()
    with psycopg.connect(roles.url(roles.owner), autocommit=True) as conn:
        for statement in app_role_grants(schema, roles.app, roles.owner):
            conn.execute(statement)  # type: ignore[arg-type]
    return schema


@pytest.fixture
def signed_schema(roles: Roles) -> Iterator[str]:
    name = new_signed_schema(roles)
    try:
        yield name
    finally:
        roles.drop_schema(name)


@pytest.fixture(scope="module")
def seeded_schema(roles: Roles) -> Iterator[str]:
    """A signed schema with rows of both tenants, shared by the read-only attacks."""
    name = new_signed_schema(roles)
    try:
        seed(roles, name)
        yield name
    finally:
        roles.drop_schema(name)


def keyed_saver(roles: Roles, schema: str, key: str | None = KEY, **kw: Any) -> Any:
    return PostgresSaver.from_conn_string(
        roles.url(roles.app),
        schema=schema,
        row_level_security=True,
        tenant_signing_key=key,
        **kw,
    )


def seed(roles: Roles, schema: str) -> None:
    """Rows of both tenants in every tenant table, written by the saver with the key."""
    with keyed_saver(roles, schema, encryption=ENCRYPTION) as saver:
        for tenant in (T1, T2):
            configs = put_chain(saver, "shared", 3, tenant_id=tenant)
            saver.put_writes(configs[-1], [("a", {"x": 1})], "task", "p")
            claim = saver._effect_claim_op(tenant, "shared", b"e", {"r": 1}, 1e12, 1.0, False)
            assert saver._run(claim).entry.won


def tenant_tables(roles: Roles, schema: str) -> dict[str, set[str]]:
    """Every table with a tenant_id column (partitions too) -> the tenants it holds."""
    out = {}
    with roles.admin() as conn:  # the superuser bypasses row-level security
        for (table,) in conn.execute(_TENANT_TABLES, (schema,)).fetchall():
            query = sql.SQL("SELECT DISTINCT tenant_id FROM {}.{}").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            out[table] = {r[0] for r in conn.execute(query).fetchall()}
    assert KNOWN <= set(out), out
    assert all(out[t] == {T1, T2} for t in KNOWN), out  # the victim's rows are there
    return out


def seen_as_app(roles: Roles, schema: str, settings: dict[str, str]) -> dict[str, set[str]]:
    """The tenants each tenant table shows to plain SQL as the application role."""
    seen = {}
    with psycopg.connect(roles.url(roles.app), autocommit=True) as conn:
        for name, value in settings.items():
            conn.execute(sql.SQL("SET {} = {}").format(sql.Identifier(*name.split(".")), value))
        for (table,) in conn.execute(_TENANT_TABLES, (schema,)).fetchall():
            query = sql.SQL("SELECT DISTINCT tenant_id FROM {}.{}").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            seen[table] = {r[0] for r in conn.execute(query).fetchall()}
    return seen


# ---- the limit of plain row-level security, and what the signature stops -------------------


def test_without_the_key_the_app_role_can_name_any_tenant(roles: Roles) -> None:
    """Plain row-level security: the setting is the application's word (the documented limit)."""
    schema = roles.new_schema()
    try:
        with PostgresSaver.from_conn_string(
            roles.url(roles.app), schema=schema, row_level_security=True
        ) as saver:
            put_chain(saver, "x", 2, tenant_id=T2)
        seen = seen_as_app(roles, schema, {TENANT_SETTING: T2})
        assert seen["threads"] == {T2} and seen["checkpoints"] == {T2}
    finally:
        roles.drop_schema(schema)


ATTACKS = {
    "victim named, no signature": lambda: {TENANT_SETTING: T2},
    "empty signature": lambda: {TENANT_SETTING: T2, SIGNATURE_SETTING: ""},
    "forged signature, real key id": lambda: {
        TENANT_SETTING: T2,
        SIGNATURE_SETTING: f"{TenantSigner(KEY, 'x').key_id}:{secrets.token_hex(32)}",
    },
    "signature copied from another tenant": lambda: {
        TENANT_SETTING: T2,
        SIGNATURE_SETTING: _signer()(T1),
    },
    "signature of the victim under another key": lambda: {
        TENANT_SETTING: T2,
        SIGNATURE_SETTING: TenantSigner(OTHER_KEY, _SCHEMA[0])(T2),
    },
    "signature of the victim for another schema": lambda: {
        TENANT_SETTING: T2,
        SIGNATURE_SETTING: TenantSigner(KEY, "another_schema")(T2),
    },
    "signature in upper case": lambda: {
        TENANT_SETTING: T2,
        SIGNATURE_SETTING: _signer()(T2).upper(),
    },
    "signature cut short": lambda: {TENANT_SETTING: T2, SIGNATURE_SETTING: _signer()(T2)[:-2]},
    "not hex": lambda: {TENANT_SETTING: T2, SIGNATURE_SETTING: "zz'; SELECT 1; --"},
    "signature of the victim with its tenant renamed": lambda: {
        TENANT_SETTING: T2 + " ",
        SIGNATURE_SETTING: _signer()(T2),
    },
}
_SCHEMA: list[str] = [""]


def _signer() -> TenantSigner:
    return TenantSigner(KEY, _SCHEMA[0])


def test_a_signed_tenant_reads_only_its_rows(roles: Roles, seeded_schema: str) -> None:
    """The positive control: the one valid signature opens its tenant, nothing else."""
    signed_schema = seeded_schema
    stored = tenant_tables(roles, signed_schema)
    settings = {TENANT_SETTING: T1, SIGNATURE_SETTING: TenantSigner(KEY, signed_schema)(T1)}
    seen = seen_as_app(roles, signed_schema, settings)
    assert seen == {t: stored[t] and {T1} for t in stored}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_the_app_role_reads_no_row_without_a_valid_signature(
    roles: Roles, seeded_schema: str, attack: str
) -> None:
    signed_schema = seeded_schema
    stored = tenant_tables(roles, signed_schema)
    _SCHEMA[0] = signed_schema
    seen = seen_as_app(roles, signed_schema, ATTACKS[attack]())
    assert seen == {t: set() for t in stored}, attack


def test_the_app_role_writes_nothing_without_a_valid_signature(
    roles: Roles, signed_schema: str
) -> None:
    seed(roles, signed_schema)
    s = sql.Identifier(signed_schema)
    with psycopg.connect(roles.url(roles.app), autocommit=True) as conn:
        conn.execute(sql.SQL("SET langgraph_durable.tenant = {}").format(T2))
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.threads (tenant_id, thread_id, epoch) VALUES (%s, 'x', 0)"
                ).format(s),
                (T2,),
            )
        for statement in (
            "UPDATE {}.threads SET epoch = 0 WHERE tenant_id = %s",
            "DELETE FROM {}.checkpoints WHERE tenant_id = %s",
            "DELETE FROM {}.data_keys WHERE tenant_id = %s",
            "DELETE FROM {}.effects WHERE tenant_id = %s",
        ):
            assert conn.execute(sql.SQL(statement).format(s), (T2,)).rowcount == 0
    assert tenant_tables(roles, signed_schema)["checkpoints"] == {T1, T2}


# ---- the secret ------------------------------------------------------------------------------


def test_the_app_role_cannot_read_or_plant_the_secret(roles: Roles, signed_schema: str) -> None:
    table = sql.SQL("{}.tenant_signing_keys").format(sql.Identifier(signed_schema))
    with psycopg.connect(roles.url(roles.app), autocommit=True) as conn:
        for statement in (
            sql.SQL("SELECT * FROM {}").format(table),
            sql.SQL("SELECT count(*) FROM {}").format(table),
            sql.SQL("INSERT INTO {} (key_id, inner_pad, outer_pad) VALUES ('a', '', '')").format(
                table
            ),
            sql.SQL("UPDATE {} SET key_id = key_id").format(table),
            sql.SQL("DELETE FROM {}").format(table),
            sql.SQL("TRUNCATE {}").format(table),
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        # the check function gives a tenant or NULL, never what it compares with
        fn = sql.SQL("SELECT {}.signed_tenant()").format(sql.Identifier(signed_schema))
        assert conn.execute(fn).fetchone() == (None,)
        conn.execute("SELECT set_config(%s, %s, false)", (TENANT_SETTING, T1))
        conn.execute(
            "SELECT set_config(%s, %s, false)",
            (SIGNATURE_SETTING, TenantSigner(KEY, signed_schema)(T1)),
        )
        assert conn.execute(fn).fetchone() == (T1,)
        args = conn.execute(
            "SELECT pronargs, prosecdef, provolatile FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = %s AND proname = 'signed_tenant'",
            (signed_schema,),
        ).fetchone()
        assert args == (0, True, "s")


def test_setup_takes_back_a_privilege_granted_on_the_secret(
    roles: Roles, signed_schema: str
) -> None:
    """A grant by mistake (or by default privileges) is revoked by the next setup()."""
    table = sql.SQL("{}.tenant_signing_keys").format(sql.Identifier(signed_schema))
    with psycopg.connect(roles.url(roles.owner), autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT SELECT, INSERT ON {} TO PUBLIC").format(table))
        conn.execute(sql.SQL("GRANT ALL ON {} TO {}").format(table, sql.Identifier(roles.app)))
    with psycopg.connect(roles.url(roles.app), autocommit=True) as conn:
        assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone() == (1,)
    with PostgresSaver.from_conn_string(
        roles.url(roles.owner), schema=signed_schema, row_level_security=True
    ) as saver:
        saver.setup()
    with psycopg.connect(roles.url(roles.app), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table))


def test_the_signature_is_never_in_the_query_text(roles: Roles, signed_schema: str) -> None:
    """A put (which would go as literals in the query text) binds the signature instead:
    pg_stat_activity, which the application role sees for its own sessions, never shows it."""
    signature = TenantSigner(KEY, signed_schema)(T1)
    with psycopg.connect(roles.url(roles.app), autocommit=True) as conn:
        saver = PostgresSaver(
            conn, schema=signed_schema, row_level_security=True, tenant_signing_key=KEY
        )
        pid = conn.info.backend_pid
        with psycopg.connect(roles.url(roles.app), autocommit=True) as watcher:
            for call in range(2):  # the second put is a prepared statement's
                cp = versioned_cp(messages=["x"] * (call + 1), n=call + 1)
                saver.put(cfg("q", tenant_id=T1), cp, {}, cp["channel_versions"])
                query = watcher.execute(
                    "SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,)
                ).fetchone()
                assert query is not None and query[0]
                assert TENANT_SETTING not in query[0] and signature[17:] not in query[0]
        assert saver.get_tuple(cfg("q", tenant_id=T1)) is not None


# ---- the saver with the key ------------------------------------------------------------------


def test_sync_saver_with_the_key(roles: Roles, signed_schema: str) -> None:
    with keyed_saver(roles, signed_schema) as saver:
        asyncio.run(_scenario(saver))


async def test_async_saver_with_the_key(roles: Roles, signed_schema: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(
        roles.url(roles.app), schema=signed_schema, row_level_security=True, tenant_signing_key=KEY
    ) as saver:
        await _scenario(saver)


def test_a_saver_without_the_key_or_with_another_sees_nothing(
    roles: Roles, signed_schema: str
) -> None:
    seed(roles, signed_schema)
    for key in (None, OTHER_KEY):
        with keyed_saver(roles, signed_schema, key=key) as saver:
            assert saver.get_tuple(cfg("shared", tenant_id=T1)) is None
            assert list(saver.list(cfg("shared", tenant_id=T2))) == []
            with pytest.raises(StorageError, match="row-level security"):
                put_chain(saver, "new", 1, tenant_id=T1)


def test_rotation_adds_a_key_then_retires_the_old(roles: Roles, signed_schema: str) -> None:
    seed(roles, signed_schema)
    with PostgresSaver.from_conn_string(
        roles.url(roles.owner),
        schema=signed_schema,
        row_level_security=True,
        tenant_signing_key=OTHER_KEY,
    ) as owner:
        owner.setup()  # the new key joins the old one
    for key in (KEY, OTHER_KEY):
        with keyed_saver(roles, signed_schema, key=key, encryption=ENCRYPTION) as saver:
            assert saver.get_tuple(cfg("shared", tenant_id=T1)) is not None, key
    with psycopg.connect(roles.url(roles.owner), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DELETE FROM {}.tenant_signing_keys WHERE key_id <> %s").format(
                sql.Identifier(signed_schema)
            ),
            (TenantSigner(OTHER_KEY, signed_schema).key_id,),
        )
    with keyed_saver(roles, signed_schema, key=KEY, encryption=ENCRYPTION) as saver:
        assert saver.get_tuple(cfg("shared", tenant_id=T1)) is None
    with keyed_saver(roles, signed_schema, key=OTHER_KEY, encryption=ENCRYPTION) as saver:
        assert saver.get_tuple(cfg("shared", tenant_id=T1)) is not None


def test_every_tenant_table_has_the_signed_policy_only(roles: Roles, signed_schema: str) -> None:
    with roles.admin() as conn:
        rows = conn.execute(
            "SELECT c.relname, array_agg(p.polname ORDER BY p.polname), "
            "bool_and(c.relrowsecurity AND c.relforcerowsecurity) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' "
            "LEFT JOIN pg_policy p ON p.polrelid = c.oid "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') GROUP BY c.relname",
            (signed_schema,),
        ).fetchall()
    assert KNOWN <= {r[0] for r in rows}
    assert all(r[1] == ["tenant_isolation_signed"] and r[2] for r in rows), rows


def test_the_key_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="row_level_security=True"):
        PostgresSaver("postgresql://localhost/x", tenant_signing_key=KEY)
    with pytest.raises(ConfigurationError, match="at least 32 bytes"):
        PostgresSaver("postgresql://localhost/x", row_level_security=True, tenant_signing_key="x")
    with pytest.raises(ConfigurationError, match="str or bytes"):
        PostgresSaver(
            "postgresql://localhost/x",
            row_level_security=True,
            tenant_signing_key=12345,  # type: ignore[arg-type]
        )
    assert KEY not in repr(TenantSigner(KEY, "s"))


def test_the_environment_variable_reaches_the_server_factory_and_the_cli(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langgraph_durable.cli._savers import Target, open_saver
    from langgraph_durable.postgres.server import settings_from_env

    base = {"LGD_POSTGRES_URL": "postgresql://x", "LGD_TENANT_SIGNING_KEY": KEY}
    got = settings_from_env(base)
    assert got["tenant_signing_key"] == KEY and got["row_level_security"] is True
    with pytest.raises(ConfigurationError, match="LGD_POSTGRES_RLS"):
        settings_from_env({**base, "LGD_POSTGRES_RLS": "off"})
    assert "tenant_signing_key" not in settings_from_env({"LGD_POSTGRES_URL": "postgresql://x"})
    seen: dict[str, Any] = {}

    class Probe:
        @staticmethod
        def from_conn_string(url: str, **kwargs: Any) -> Any:
            seen.update(kwargs)
            return _Null()

    monkeypatch.setenv("LGD_TENANT_SIGNING_KEY", KEY)
    monkeypatch.setattr("langgraph_durable.postgres.PostgresSaver", Probe)
    with open_saver(Target("postgres", "postgresql://x"), None, integrity=False):
        pass
    assert seen["tenant_signing_key"] == KEY and seen["row_level_security"] is True


class _Null:
    def __enter__(self) -> _Null:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


# ---- ensure_partitions ----------------------------------------------------------------------


def test_ensure_partitions_refuses_far_epochs_to_the_app_role(
    roles: Roles, signed_schema: str
) -> None:
    ensure = sql.SQL("SELECT {}.ensure_partitions(%s)").format(sql.Identifier(signed_schema))
    epoch = sql.SQL("SELECT {}.current_epoch()").format(sql.Identifier(signed_schema))
    with psycopg.connect(roles.url(roles.app), autocommit=True) as conn:
        current = conn.execute(epoch).fetchone()[0]  # type: ignore[index]
        for far in (current + 2, current - 2, current + 10_000, -(2**31), 2**31 - 1, None):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="refused"):
                conn.execute(ensure, (far,))
        for near in (current - 1, current, current + 1):
            conn.execute(ensure, (near,))
    with roles.admin() as conn:
        count = conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname LIKE 'checkpoints\\_e%%'",
            (signed_schema,),
        ).fetchone()
    assert count == (3,)
    # the owner (who could create the table itself) is not limited
    with psycopg.connect(roles.url(roles.owner), autocommit=True) as conn:
        conn.execute(ensure, (current - 30,))


@pytest.mark.parametrize("tenant", ["a\\b", "\\x41", "t'1", "é€😀", "x" * 300])
def test_tenants_of_any_text_sign_and_check_alike(
    roles: Roles, seeded_schema: str, tenant: str
) -> None:
    """The database hashes exactly the UTF-8 bytes the saver signed (backslashes, quotes,
    a bytea hex prefix, non-ASCII text): the saver reads its own rows back."""
    with keyed_saver(roles, seeded_schema) as saver:
        put_chain(saver, "odd", 1, tenant_id=tenant)
        assert saver.get_tuple(cfg("odd", tenant_id=tenant)) is not None
    settings = {TENANT_SETTING: tenant, SIGNATURE_SETTING: TenantSigner(KEY, seeded_schema)(tenant)}
    assert seen_as_app(roles, seeded_schema, settings)["threads"] == {tenant}
