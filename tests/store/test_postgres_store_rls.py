"""PostgresStore under row-level security: the database keeps the tenants' items apart.

The roles follow ``docs/security.md``: a migration role owns the schema and runs
``setup()``, the application role owns nothing and connects with
``row_level_security=True`` (each statement carries its tenant).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from langgraph_durable.errors import ConfigurationError
from langgraph_durable.postgres import AsyncPostgresStore, PostgresStore
from langgraph_durable.postgres._rls import TENANT_SETTING, app_role_grants
from tests.encryption_helpers import local_encryption
from tests.store.differential import index_config


@pytest.fixture(scope="module")
def app(pg_url: str) -> Iterator[tuple[str, str]]:
    """(the application role's URL, the schema), set up with row-level security by its owner."""
    suffix = uuid.uuid4().hex[:10]
    owner, app_role = f"lgd_sowner_{suffix}", f"lgd_sapp_{suffix}"
    schema = f"t_srls_{suffix}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(owner)))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(app_role)))
        conn.execute(
            sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
                sql.Identifier(schema), sql.Identifier(owner)
            )
        )
    owner_url = make_conninfo(pg_url, user=owner)
    try:
        with PostgresStore.from_conn_string(
            owner_url, schema=schema, row_level_security=True
        ) as store:
            store.setup()
        with psycopg.connect(owner_url, autocommit=True) as conn:
            for statement in app_role_grants(schema, app_role, owner):
                conn.execute(statement)  # type: ignore[arg-type]
        yield make_conninfo(pg_url, user=app_role), schema
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
                ([owner, app_role],),
            )
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
            for role in (owner, app_role):
                conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _visible(url: str, schema: str, tenant: str | None) -> int:
    """How many store rows the application role sees with ``tenant`` set (or none)."""
    with psycopg.connect(url) as conn:
        if tenant is not None:
            conn.execute("SELECT set_config(%s, %s, true)", (TENANT_SETTING, tenant))
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.store_items").format(sql.Identifier(schema))
        ).fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.parametrize("encrypted", [False, True])
def test_the_database_keeps_tenants_apart(app: tuple[str, str], encrypted: bool) -> None:
    url, schema = app
    t1, t2 = uuid.uuid4().hex, uuid.uuid4().hex
    options: dict[str, Any] = {"schema": schema, "row_level_security": True}
    options["index"] = index_config()
    if encrypted:
        options["encryption"] = local_encryption()
    with (
        PostgresStore.from_conn_string(url, tenant=t1, **options) as s1,
        PostgresStore.from_conn_string(url, tenant=t2, **options) as s2,
    ):
        s1.put(("users", "u1"), "k", {"text": "apple", "n": 1}, ttl=None)
        s1.put(("users", "u2"), "k", {"text": "river", "n": 2})
        assert s1.get(("users", "u1"), "k").value["n"] == 1  # type: ignore[union-attr]
        assert [i.key for i in s1.search(("users",), filter={"n": {"$gt": 1}})] == ["k"]
        assert s1.search(("users",), query="apple", limit=1)[0].namespace == ("users", "u1")
        assert sorted(s1.list_namespaces()) == [("users", "u1"), ("users", "u2")]
        assert s2.get(("users", "u1"), "k") is None
        assert s2.search(()) == [] and s2.list_namespaces() == []
        assert s2.delete_namespace(("users",)) == 0
        assert _visible(url, schema, None) == 0  # no tenant named: no row
        assert _visible(url, schema, t2) == 0
        assert _visible(url, schema, t1) == 2
        assert s1.delete_namespace(("users", "u2")) == 1
        with pytest.raises(ConfigurationError, match="BYPASSRLS"):
            s1.sweep_ttl()  # across tenants: not for the application role
        with pytest.raises(ConfigurationError, match="BYPASSRLS"):
            s1.sweep_all_expired()
        s2.put(("users",), "gone", {"n": 0}, ttl=0.001)  # expired in 0.06 s
        time.sleep(0.1)
        assert s1.sweep_expired() == 0  # its own tenant's: the application role may
        assert s2.sweep_expired() == 1

    async def run() -> None:
        async with AsyncPostgresStore.from_conn_string(url, tenant=t1, **options) as a1:
            assert [n for n in await a1.alist_namespaces()] == [("users", "u1")]
            await a1.aput(("users", "u1"), "k", {"text": "stone", "n": 3})
            assert (await a1.aget(("users", "u1"), "k")).value["n"] == 3  # type: ignore[union-attr]

    asyncio.run(run())
