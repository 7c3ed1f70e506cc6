"""Row-level security on PostgreSQL: the database itself keeps tenants apart.

Every test runs under the role recipe of ``docs/security.md``: a migration role
that owns the schema and runs ``setup(row_level_security=True)``, an application
role that owns nothing (the grants of ``_rls.app_role_grants``) and a pruner role
with BYPASSRLS. Roles get unique names per test run and are dropped afterwards.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from benchmarks.instrument import RoundTripProxy
from langgraph_durable import Retention
from langgraph_durable._core.versions import next_version
from langgraph_durable.errors import ConfigurationError, StorageError
from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver
from langgraph_durable.postgres._rls import TENANT_SETTING, app_role_grants
from tests.conformance import run_conformance
from tests.encryption_helpers import local_encryption
from tests.helpers import cfg, make_cp, put_chain, versioned_cp
from tests.sync_adapter import SyncSaverAdapter

T1, T2 = "t1", "t2"

_TENANT_TABLES = """
SELECT c.relname FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname
"""


@dataclass
class Roles:
    """The three roles of the recipe, on one server."""

    admin_url: str
    owner: str
    app: str
    pruner: str

    def url(self, role: str) -> str:
        return make_conninfo(self.admin_url, user=role)

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.admin_url, autocommit=True)

    def new_schema(self) -> str:
        """A schema the owner owns, set up with row-level security, the app role granted."""
        schema = f"t_rls_{uuid.uuid4().hex[:12]}"
        with self.admin() as conn:
            conn.execute(
                sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
                    sql.Identifier(schema), sql.Identifier(self.owner)
                )
            )
        with PostgresSaver.from_conn_string(
            self.url(self.owner), schema=schema, row_level_security=True
        ) as saver:
            saver.setup()
        with psycopg.connect(self.url(self.owner), autocommit=True) as conn:
            for statement in app_role_grants(schema, self.app, self.owner):
                conn.execute(statement)  # type: ignore[arg-type]
        return schema

    def drop_schema(self, schema: str) -> None:
        with self.admin() as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(scope="module")
def roles(pg_url: str) -> Iterator[Roles]:
    suffix = uuid.uuid4().hex[:10]
    r = Roles(pg_url, f"lgd_owner_{suffix}", f"lgd_app_{suffix}", f"lgd_pruner_{suffix}")
    names = [sql.Identifier(n) for n in (r.owner, r.app, r.pruner)]
    with r.admin() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(names[0]))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(names[1]))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN BYPASSRLS IN ROLE {}").format(*names[2::-2]))
    try:
        yield r
    finally:
        with r.admin() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
                ([r.owner, r.app, r.pruner],),
            )
            for name in names:
                conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(name))
            for name in names:
                conn.execute(sql.SQL("DROP ROLE {}").format(name))


@pytest.fixture
def schema(roles: Roles) -> Iterator[str]:
    name = roles.new_schema()
    try:
        yield name
    finally:
        roles.drop_schema(name)


@contextmanager
def app_saver(roles: Roles, schema: str, **kwargs: Any) -> Iterator[PostgresSaver]:
    with PostgresSaver.from_conn_string(
        roles.url(roles.app), schema=schema, row_level_security=True, **kwargs
    ) as saver:
        yield saver


@asynccontextmanager
async def async_app_saver(roles: Roles, schema: str) -> AsyncIterator[AsyncPostgresSaver]:
    async with AsyncPostgresSaver.from_conn_string(
        roles.url(roles.app), schema=schema, row_level_security=True
    ) as saver:
        yield saver


def seed(roles: Roles, schema: str, encryption: Any = None) -> None:
    """Rows of both tenants in every tenant table: threads, checkpoints, blobs, writes,
    effects and data keys (an encrypted saver), written as the application role."""
    with app_saver(roles, schema, encryption=encryption or local_encryption()) as saver:
        for tenant in (T1, T2):
            configs = put_chain(saver, "shared", 3, tenant_id=tenant)
            put_chain(saver, f"{tenant}-own", 2, tenant_id=tenant)
            saver.put_writes(configs[-1], [("a", {"x": 1}), ("b", [2])], "task", "p")
            claim = saver._effect_claim_op(tenant, "shared", b"e", {"r": 1}, 1e12, 1.0, False)
            assert saver._run(claim).entry.won


def tenant_tables(roles: Roles, schema: str) -> list[str]:
    with roles.admin() as conn:
        return [r[0] for r in conn.execute(_TENANT_TABLES, (schema,)).fetchall()]


def tenants_seen(conn: psycopg.Connection[Any], schema: str, table: str) -> set[str]:
    query = sql.SQL("SELECT DISTINCT tenant_id FROM {}.{}").format(
        sql.Identifier(schema), sql.Identifier(table)
    )
    return {r[0] for r in conn.execute(query).fetchall()}


# ---- the database enforces it ---------------------------------------------------------------


def test_every_tenant_table_and_partition_is_secured(roles: Roles, schema: str) -> None:
    tables = tenant_tables(roles, schema)
    for name in ("threads", "checkpoints", "blobs", "writes", "effects", "data_keys"):
        assert name in tables
    # the current and the next epoch's partitions of each partitioned table
    assert sum(t.startswith("checkpoints_e") for t in tables) == 2
    with roles.admin() as conn:
        rows = conn.execute(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
            "(SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = ANY(%s)",
            (schema, tables),
        ).fetchall()
    assert sorted(r[0] for r in rows) == tables
    assert all(r[1] and r[2] and r[3] == 1 for r in rows), rows


def test_the_app_role_reads_only_its_tenant_from_every_table_and_partition(
    roles: Roles, schema: str
) -> None:
    seed(roles, schema)
    tables = tenant_tables(roles, schema)
    with roles.admin() as conn:  # both tenants are there (the superuser bypasses RLS)
        stored = {t: tenants_seen(conn, schema, t) for t in tables}
    filled = [t for t in tables if stored[t]]
    assert {"threads", "checkpoints", "blobs", "writes", "effects", "data_keys"} <= set(filled)
    assert sum(t.startswith(("checkpoints_e", "blobs_e", "writes_e")) for t in filled) == 3
    assert all(stored[t] == {T1, T2} for t in filled)
    for tenant in (T1, T2):
        with psycopg.connect(roles.url(roles.app), autocommit=True) as conn:
            conn.execute("SELECT set_config(%s, %s, false)", (TENANT_SETTING, tenant))
            for table in tables:
                assert tenants_seen(conn, schema, table) == (stored[table] and {tenant}), table


@pytest.mark.parametrize("setting", [None, "", "nobody"])
def test_without_a_tenant_the_app_role_reads_nothing(
    roles: Roles, schema: str, setting: str | None
) -> None:
    seed(roles, schema)
    with psycopg.connect(roles.url(roles.app), autocommit=True) as conn:
        if setting is not None:
            conn.execute("SELECT set_config(%s, %s, false)", (TENANT_SETTING, setting))
        for table in tenant_tables(roles, schema):
            query = sql.SQL("SELECT count(*) FROM {}.{}").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            assert conn.execute(query).fetchone() == (0,), table
    # a setting set in a transaction is gone after it
    with psycopg.connect(roles.url(roles.app)) as conn:
        conn.execute("SELECT set_config(%s, %s, true)", (TENANT_SETTING, T1))
        assert conn.execute(f'SELECT count(*) FROM "{schema}".threads').fetchone() == (2,)
        conn.commit()
        assert conn.execute(f'SELECT count(*) FROM "{schema}".threads').fetchone() == (0,)


def test_the_app_role_cannot_write_into_another_tenant(roles: Roles, schema: str) -> None:
    seed(roles, schema)
    s = sql.Identifier(schema)
    with psycopg.connect(roles.url(roles.app), autocommit=True) as conn:
        conn.execute("SELECT set_config(%s, %s, false)", (TENANT_SETTING, T1))
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
            "DELETE FROM {}.effects WHERE tenant_id = %s",
        ):
            assert conn.execute(sql.SQL(statement).format(s), (T2,)).rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(sql.SQL("UPDATE {}.settings SET value = 'off'").format(s))
    with roles.admin() as conn:
        count = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.checkpoints WHERE tenant_id = %s").format(s), (T2,)
        ).fetchone()
    assert count == (5,)


def test_partitions_made_later_are_secured_too(roles: Roles, schema: str) -> None:
    with psycopg.connect(roles.url(roles.app), autocommit=True) as conn:
        # setup() made the current and the next epoch's; the app role may make the previous
        current = conn.execute(f'SELECT "{schema}".current_epoch()').fetchone()[0]  # type: ignore[index]
        epoch = current - 6
        conn.execute(f'SELECT "{schema}".ensure_partitions(%s)', (epoch + 5,))
    with roles.admin() as conn:
        rows = conn.execute(
            "SELECT c.relname, c.relrowsecurity AND c.relforcerowsecurity, "
            "pg_get_userbyid(c.relowner), "
            "(SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname LIKE %s",
            (schema, f"%_e{epoch + 5}"),
        ).fetchall()
    assert len(rows) == 3
    assert all(r[1] and r[2] == roles.owner and r[3] == 1 for r in rows), rows
    seed(roles, schema)  # the owner's default privileges reach the new partitions too
    with psycopg.connect(roles.url(roles.app), autocommit=True) as conn:
        conn.execute(f'SELECT count(*) FROM "{schema}"."checkpoints_e{epoch + 5}"')


def test_setup_keeps_row_level_security_on(roles: Roles, schema: str) -> None:
    # a saver without the flag migrates the schema, leaves RLS on, and sends tenants anyway
    with PostgresSaver.from_conn_string(roles.url(roles.owner), schema=schema) as saver:
        assert not saver.row_level_security
        assert saver.setup() == []
        assert saver.row_level_security
    with app_saver(roles, schema) as saver:
        put_chain(saver, "a", 2)
    with PostgresSaver.from_conn_string(roles.url(roles.app), schema=schema) as saver:
        # without the flag and without setup() it names no tenant: a write is refused
        with pytest.raises(StorageError, match="row_level_security=True"):
            put_chain(saver, "b", 1)
        assert saver.get_tuple(cfg("a")) is None


def test_the_flag_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="row_level_security"):
        PostgresSaver("postgresql://localhost/x", row_level_security="yes")  # type: ignore[arg-type]


# ---- the saver under the application role ----------------------------------------------------


async def _call(saver: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """``saver.a<name>(...)`` on an async saver, ``saver.<name>(...)`` in a thread on a sync one."""
    if isinstance(saver, AsyncPostgresSaver):
        if name == "list":
            return [t async for t in saver.alist(*args, **kwargs)]
        if name == "_run":
            return await saver._arun(*args)
        return await getattr(saver, f"a{name}")(*args, **kwargs)
    if name == "list":
        return await asyncio.to_thread(lambda: list(saver.list(*args, **kwargs)))
    return await asyncio.to_thread(getattr(saver, name), *args, **kwargs)


async def _scenario(saver: Any) -> None:
    """put/get_tuple/list/put_writes/copy_thread/delete_thread and the journal, two tenants."""
    c1, c2 = cfg("a", tenant_id=T1), cfg("a", tenant_id=T2)
    cp = versioned_cp(messages=["one"], n=1)
    stored = await _call(saver, "put", c1, cp, {"source": "input"}, cp["channel_versions"])
    await _call(saver, "put_writes", stored, [("messages", ["two"])], "task-1", "path")
    got = await _call(saver, "get_tuple", c1)
    assert got is not None and got.checkpoint["channel_values"]["messages"] == ["one"]
    assert got.pending_writes == [("task-1", "messages", ["two"])]
    assert await _call(saver, "get_tuple", stored) is not None
    assert await _call(saver, "get_tuple", c2) is None  # same thread id, other tenant
    assert await _call(saver, "list", c2) == []
    assert len(await _call(saver, "list", c1)) == 1
    await _call(saver, "copy_thread", "a", "b", tenant_id=T1)
    assert await _call(saver, "get_tuple", cfg("b", tenant_id=T1)) is not None
    await _call(saver, "copy_thread", "a", "b", tenant_id=T2)  # t2 has no thread "a"
    assert await _call(saver, "get_tuple", cfg("b", tenant_id=T2)) is None
    await _call(saver, "delete_thread", "a", tenant_id=T2)
    assert await _call(saver, "get_tuple", c1) is not None
    # the effect journal
    op = saver._effect_claim_op(T1, "a", b"m", {"q": 1}, 1e12, 1.0, False)
    claim = await _call(saver, "_run", op)
    assert claim.entry.won
    done = saver._effect_complete_op(T1, "a", claim.entry.effect_id, 1, "ok", {"r": 2}, 2.0)
    assert await _call(saver, "_run", done)
    found = await _call(saver, "_run", saver._effect_lookup_op(T1, "a", b"m"))
    assert found is not None and found.result == {"r": 2}
    assert await _call(saver, "_run", saver._effect_lookup_op(T2, "a", b"m")) is None
    assert len(await _call(saver, "_run", saver._effect_list_op(T1, "a"))) == 1
    await _call(saver, "delete_thread", "a", tenant_id=T1)
    assert await _call(saver, "get_tuple", c1) is None
    assert await _call(saver, "_run", saver._effect_list_op(T1, "a")) == []


def test_sync_saver_as_the_app_role(roles: Roles, schema: str) -> None:
    with app_saver(roles, schema) as saver:
        assert saver.row_level_security
        asyncio.run(_scenario(saver))


async def test_async_saver_as_the_app_role(roles: Roles, schema: str) -> None:
    async with async_app_saver(roles, schema) as saver:
        await _scenario(saver)


def test_cross_tenant_work_needs_the_pruner_role(roles: Roles, schema: str) -> None:
    encryption = local_encryption()
    seed(roles, schema, encryption)
    expire = Retention(idle="1s")
    with app_saver(roles, schema, encryption=encryption) as saver:
        with pytest.raises(ConfigurationError, match="BYPASSRLS"):
            saver.prune_expired(expire, now=2e9)
        with pytest.raises(ConfigurationError, match="BYPASSRLS"):
            saver.rotate_keys()
        assert saver.rotate_keys(T1)["tenants"] == 1  # one tenant: the app role may
        saver.prune(["shared"], strategy="delete", tenant_id=T1)  # one tenant's threads: too
        assert saver.get_tuple(cfg("shared", tenant_id=T1)) is None
    with PostgresSaver.from_conn_string(
        roles.url(roles.pruner), schema=schema, row_level_security=True
    ) as pruner:
        report = pruner.prune_expired(expire, now=2e9)
    assert report.threads == 3  # t1-own, t2's shared and t2-own
    with roles.admin() as conn:
        assert conn.execute(f'SELECT count(*) FROM "{schema}".threads').fetchone() == (0,)


# ---- round trips ------------------------------------------------------------------------------


def _proxied(url: str, proxy: RoundTripProxy) -> str:
    return make_conninfo(url, host="127.0.0.1", port=str(proxy.port))


@pytest.mark.parametrize("rls", [False, True])
def test_row_level_security_adds_no_round_trip(roles: Roles, schema: str, rls: bool) -> None:
    target = conninfo_to_dict(roles.admin_url)
    proxy = RoundTripProxy(str(target.get("host", "127.0.0.1")), int(target.get("port", 5432)))
    user = roles.app if rls else roles.pruner  # the pruner bypasses RLS: the baseline
    try:
        with psycopg.connect(_proxied(roles.url(user), proxy), autocommit=True) as conn:
            saver = PostgresSaver(conn, schema=schema, row_level_security=rls)

            def trips(call: Any) -> int:
                before = proxy.snapshot()[0]
                call()
                return proxy.snapshot()[0] - before

            def calls(thread: str) -> list[int]:
                """Round trips of each call: puts (new thread, delta, full copy),
                put_writes, get_tuple (latest, by id, epoch unknown) and list."""
                cp = versioned_cp(messages=["hi"])
                out = [
                    trips(
                        lambda: cp.update(c=saver.put(cfg(thread), cp, {}, cp["channel_versions"]))
                    )
                ]
                first, version = cp.pop("c"), cp["channel_versions"]["messages"]
                for values in (["hi", "there"], ["again"]):  # a delta, then a full copy
                    nxt = make_cp(messages=values)
                    version = next_version(version)
                    nxt["channel_versions"] = {"messages": version}
                    out.append(trips(lambda: saver.put(first, nxt, {}, nxt["channel_versions"])))  # noqa: B023
                out.append(trips(lambda: saver.put_writes(first, [("a", 1), ("b", [2])], "task")))
                out.append(trips(lambda: saver.get_tuple(cfg(thread))))
                out.append(trips(lambda: saver.get_tuple(first)))
                fresh = PostgresSaver(conn, schema=schema, row_level_security=rls)
                out.append(trips(lambda: fresh.get_tuple(cfg(thread))))
                out.append(trips(lambda: list(saver.list(cfg(thread)))))
                return out

            calls("warm-up")  # psycopg prepares each statement at its first run
            # The relay counts a round trip when an answer comes with none of the
            # client's bytes waiting; on a loaded machine a pipeline's pieces can arrive
            # so that one goes uncounted (a call that reads rows cannot take none). An
            # extra round trip is never counted away: every attempt would show it.
            for attempt in range(3):
                got = calls(f"t{attempt}")
                if got == [1] * 8:
                    break
            assert got == [1] * 8
    finally:
        proxy.close()


def test_payload_writes_go_as_prepared_statements_and_survive_a_session_reset(
    roles: Roles, schema: str
) -> None:
    """The sync saver sends put/put_writes as SELECT set_config(...); EXECUTE name(...).

    The statements are prepared once per connection; after DISCARD ALL (the session
    loses them) the next call prepares them again, and the tenant still binds.
    """

    def prepared(conn: psycopg.Connection[Any]) -> set[str]:
        rows = conn.execute("SELECT name FROM pg_prepared_statements").fetchall()
        return {str(r[0]) for r in rows if str(r[0]).startswith("lgd_s")}

    with psycopg.connect(roles.url(roles.app), autocommit=True) as conn:
        saver = PostgresSaver(conn, schema=schema, row_level_security=True)
        c1 = cfg("p", tenant_id=T1)
        cp = versioned_cp(messages=["one"], n=1)
        stored = saver.put(c1, cp, {"source": "input"}, cp["channel_versions"])
        saver.put_writes(stored, [("messages", ["two"])], "task-1")
        names = prepared(conn)
        assert len(names) >= 2, names  # the put and the put_writes statements
        conn.execute("DISCARD ALL")
        assert prepared(conn) == set()
        nxt = versioned_cp(messages=["one", "two"], n=2)
        nxt["channel_versions"] = {k: next_version(v) for k, v in cp["channel_versions"].items()}
        saver.put(stored, nxt, {"source": "loop"}, nxt["channel_versions"])
        saver.put_writes(stored, [("messages", ["three"])], "task-2")
        again = prepared(conn)
        assert len(again) >= 2 and again & names, (again, names)  # put_writes' again
        got = saver.get_tuple(c1)
        assert got is not None and got.checkpoint["channel_values"]["messages"] == ["one", "two"]
        assert saver.get_tuple(cfg("p", tenant_id=T2)) is None
        older = saver.get_tuple(stored)
        assert older is not None
        assert sorted(w[0] for w in older.pending_writes or []) == ["task-1", "task-2"]


# ---- the conformance suite --------------------------------------------------------------------


@pytest.mark.parametrize("is_async", [False, True])
async def test_conformance_with_row_level_security(roles: Roles, is_async: bool) -> None:
    async def factory() -> AsyncIterator[BaseCheckpointSaver]:
        schema = await asyncio.to_thread(roles.new_schema)
        try:
            if is_async:
                async with async_app_saver(roles, schema) as saver:
                    yield saver
                return
            managed = app_saver(roles, schema)
            saver = await asyncio.to_thread(managed.__enter__)
            try:
                yield SyncSaverAdapter(saver)
            finally:
                await asyncio.to_thread(managed.__exit__, None, None, None)
        finally:
            await asyncio.to_thread(roles.drop_schema, schema)

    label = "async" if is_async else "sync, via SyncSaverAdapter"
    run = await run_conformance(f"PostgresSaver with row-level security ({label})", factory)
    run.assert_full()
    assert run.passed() == 81 and run.failed() == 0, run.summary()


def test_the_agent_server_factory_reads_lgd_postgres_rls() -> None:
    from langgraph_durable.postgres.server import settings_from_env

    base = {"LGD_POSTGRES_URL": "postgresql://x"}
    assert settings_from_env(base)["row_level_security"] is False
    assert settings_from_env({**base, "LGD_POSTGRES_RLS": "1"})["row_level_security"] is True
    assert settings_from_env({**base, "LGD_POSTGRES_RLS": "on"})["row_level_security"] is True
    with pytest.raises(ConfigurationError, match="LGD_POSTGRES_RLS"):
        settings_from_env({**base, "LGD_POSTGRES_RLS": "maybe"})


def test_setup_as_the_app_role_is_refused_clearly(roles: Roles, schema: str) -> None:
    with app_saver(roles, schema) as saver, pytest.raises(StorageError, match="migration role"):
        saver.setup()
