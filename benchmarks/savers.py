"""The savers under test, each opened on its own fresh schema with its own connection pool."""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg.rows import dict_row

# Upstream langgraph-checkpoint-postgres documents these settings for its connections.
UPSTREAM_CONN_KWARGS = {"autocommit": True, "row_factory": dict_row, "prepare_threshold": 0}


@dataclass(frozen=True)
class SaverSpec:
    name: str
    label: str
    is_async: bool
    uses_db: bool
    kind: str  # "ours" | "upstream" (the saver ours is compared with) | "memory"
    backend: str = "postgres"  # "postgres" | "redis" | "dynamodb" | "memory"
    encrypted: bool = False  # ours with encryption= (a LocalKeyring): see encryption()
    redacted: bool = False  # ours with redaction=Redaction(): every built-in detector, mask
    rls: bool = False  # ours (PostgreSQL) with RLS on, as an app role: see rls_app_url
    integrity: bool = False  # ours with integrity= (record tags and the hash chain)
    signed: bool = False  # an RLS saver with tenant_signing_key= (signed tenants)
    retained: bool = False  # ours with retention= (delete after 30 idle days)
    from_url: bool = False  # ours opened from its URL (its own client and pool), not given one

    def kwargs(self) -> dict[str, Any]:
        """Extra constructor arguments of ours: ``encryption=`` for an encrypted twin,
        ``redaction=`` for a redacted one."""
        out: dict[str, Any] = {"encryption": encryption()} if self.encrypted else {}
        if self.rls:
            out["row_level_security"] = True
        if self.signed:
            out["tenant_signing_key"] = _SIGNING_KEY
        if self.integrity:
            out["integrity"] = _CHAIN_KEY
        if self.redacted:
            from langgraph_durable.protect import Redaction

            out["redaction"] = Redaction()
        if self.retained:
            import datetime

            from langgraph_durable import Retention

            out["retention"] = Retention(idle=datetime.timedelta(days=30))
        return out


# The chain key of the integrity twins (fresh per run).
_CHAIN_KEY = os.urandom(32)
# The tenant signing key of the signed RLS twins (fresh per run).
_SIGNING_KEY = os.urandom(32)


def encryption() -> Any:
    """Envelope encryption with a fresh local key (AES-256-GCM), default settings."""
    from langgraph_durable.protect import Encryption, LocalKeyring

    return Encryption(LocalKeyring({"bench": os.urandom(32)}, "bench"))


SPECS: dict[str, SaverSpec] = {
    s.name: s
    for s in (
        SaverSpec("ours", "ours PostgresSaver", False, True, "ours"),
        SaverSpec("ours-async", "ours AsyncPostgresSaver", True, True, "ours"),
        SaverSpec("upstream", "upstream PostgresSaver", False, True, "upstream"),
        SaverSpec("upstream-async", "upstream AsyncPostgresSaver", True, True, "upstream"),
        SaverSpec("memory", "InMemorySaver", False, False, "memory", "memory"),
        SaverSpec("redis", "ours RedisSaver", False, True, "ours", "redis"),
        SaverSpec("redis-async", "ours AsyncRedisSaver", True, True, "ours", "redis"),
        SaverSpec(
            "redis-url",
            "ours RedisSaver, opened from its URL",
            False,
            True,
            "ours",
            "redis",
            from_url=True,
        ),
        SaverSpec("plainredis", "plainredis RedisSaver", False, True, "upstream", "redis"),
        SaverSpec(
            "plainredis-async", "plainredis AsyncRedisSaver", True, True, "upstream", "redis"
        ),
        SaverSpec("dynamodb", "ours DynamoDBSaver", False, True, "ours", "dynamodb"),
        SaverSpec("dynamodb-async", "ours AsyncDynamoDBSaver", True, True, "ours", "dynamodb"),
        SaverSpec(
            "aws-dynamodb",
            "langgraph-checkpoint-aws DynamoDBSaver",
            False,
            True,
            "upstream",
            "dynamodb",
        ),
        SaverSpec(
            "aws-dynamodb-async",
            "langgraph-checkpoint-aws DynamoDBSaver (async methods)",
            True,
            True,
            "upstream",
            "dynamodb",
        ),
    )
}


def _twins(suffix: str, flag: str) -> dict[str, str]:
    """Give each of ours a twin "<name>-<suffix>" with ``flag`` set; returns name -> twin."""
    plain = [
        n
        for n, s in SPECS.items()
        if s.kind == "ours" and not (s.encrypted or s.redacted or s.integrity or s.from_url)
    ]
    twins = {n: f"{n}-{suffix}" for n in plain}
    SPECS.update(
        {
            t: replace(SPECS[n], name=t, label=f"{SPECS[n].label}, {flag}", **{flag: True})
            for n, t in twins.items()
        }
    )
    return twins


# Each of ours has an encrypted twin, "<name>-enc" ("ours-async" -> "ours-async-enc"),
# and a redacted one, "<name>-red" ("ours-async" -> "ours-async-red").
ENCRYPTED: dict[str, str] = _twins("enc", "encrypted")
REDACTED: dict[str, str] = _twins("red", "redacted")
# ... and a twin with the hash chain on, "<name>-int" ("ours" -> "ours-int").
INTEGRITY: dict[str, str] = _twins("int", "integrity")

# ... and a twin with every protection on: encryption, redaction (mask), integrity and
# retention, "<name>-all" ("ours" -> "ours-all").
ALL: dict[str, str] = {
    n: f"{n}-all"
    for n, s in list(SPECS.items())
    if s.kind == "ours" and not (s.encrypted or s.redacted or s.integrity or s.from_url)
}
SPECS.update(
    {
        t: replace(
            SPECS[n],
            name=t,
            label=f"{SPECS[n].label}, every protection",
            encrypted=True,
            redacted=True,
            integrity=True,
            retained=True,
        )
        for n, t in ALL.items()
    }
)

# Our PostgreSQL savers with row-level security on, connected as an application role that
# owns nothing (docs/security.md): "ours-rls", "ours-async-rls".
RLS: dict[str, str] = {"ours": "ours-rls", "ours-async": "ours-async-rls"}
SPECS.update(
    {
        t: replace(SPECS[n], name=t, label=f"{SPECS[n].label}, row-level security", rls=True)
        for n, t in RLS.items()
    }
)

# ... and their twins with signed tenants ("ours-rls-signed", "ours-async-rls-signed").
SIGNED: dict[str, str] = {rls: f"{rls}-signed" for rls in RLS.values()}
SPECS.update(
    {
        t: replace(SPECS[n], name=t, label=f"{SPECS[n].label}, signed tenants", signed=True)
        for n, t in SIGNED.items()
    }
)

# Our PostgreSQL savers' identical twins, "<name>-same": an A/A comparison. Their ratio
# to the original is 1 but for one run's noise, which is what reading a twin's ratio
# above (a cost of a few %) needs to know.
SAME: dict[str, str] = {"ours": "ours-same", "ours-async": "ours-async-same"}
SPECS.update(
    {
        t: replace(SPECS[n], name=t, label=f"{SPECS[n].label}, identical twin")
        for n, t in SAME.items()
    }
)

# Each of ours next to the saver it is compared with (ratios are ours / theirs).
PAIRS: list[tuple[str, str]] = [
    ("ours", "upstream"),
    ("ours-async", "upstream-async"),
    ("redis", "plainredis"),
    ("redis-async", "plainredis-async"),
    ("redis-url", "plainredis"),
    ("dynamodb", "aws-dynamodb"),
    ("dynamodb-async", "aws-dynamodb-async"),
]
# Each encrypted saver next to its unencrypted twin (ratios are encrypted / plain).
ENCRYPTION_PAIRS: list[tuple[str, str]] = [(enc, plain) for plain, enc in ENCRYPTED.items()]
# Each redacted saver next to its unredacted twin (ratios are redacted / plain).
REDACTION_PAIRS: list[tuple[str, str]] = [(red, plain) for plain, red in REDACTED.items()]

# Each saver with row-level security next to its twin without (ratios are RLS / plain).
RLS_PAIRS: list[tuple[str, str]] = [(rls, plain) for plain, rls in RLS.items()]
# Each saver with signed tenants next to its plain-RLS twin (ratios are signed / RLS).
SIGNED_PAIRS: list[tuple[str, str]] = [(t, rls) for rls, t in SIGNED.items()]
# Each saver with integrity= next to its twin without (ratios are chained / plain).
INTEGRITY_PAIRS: list[tuple[str, str]] = [(t, plain) for plain, t in INTEGRITY.items()]
# Each identical twin next to its original (the ratio is noise).
SAME_PAIRS: list[tuple[str, str]] = [(t, plain) for plain, t in SAME.items()]

# What ``--backend`` runs when ``--savers`` is not given (pairs side by side).
DEFAULT_SAVERS: dict[str, str] = {
    "postgres": "ours,upstream,ours-async,upstream-async,memory",
    "redis": "redis,plainredis,redis-async,plainredis-async,memory",
    "dynamodb": "dynamodb,aws-dynamodb,dynamodb-async,aws-dynamodb-async",
}

# The module each saver comes from, imported to tell whether it can run.
_MODULES: dict[tuple[str, str], str] = {
    ("postgres", "ours"): "langgraph_durable.postgres",
    ("postgres", "upstream"): "langgraph.checkpoint.postgres",
    ("redis", "ours"): "langgraph_durable.redis",
    ("redis", "upstream"): "langgraph_checkpoint_plainredis",
    ("dynamodb", "ours"): "langgraph_durable.dynamodb",
    ("dynamodb", "upstream"): "langgraph_checkpoint_aws",
}


def unavailable(spec: SaverSpec) -> str | None:
    """None if the saver's package imports, else the reason it does not."""
    module = _MODULES.get((spec.backend, spec.kind))
    if module is None:
        return None
    try:
        importlib.import_module(module)
    except Exception as exc:  # pragma: no cover - depends on the environment
        return f"{module}: {type(exc).__name__}: {exc}"
    return None


def _upstream_kwargs(schema: str) -> dict[str, Any]:
    return {**UPSTREAM_CONN_KWARGS, "options": f"-c search_path={schema}"}


def admin_connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


def drop_schema(url: str, schema: str) -> None:
    with admin_connect(url) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


_RLS_APP_ROLE = f"lgd_bench_app_{os.getpid()}"


def rls_app_url(url: str, schema: str, signing_key: bytes | None = None) -> str:
    """Set ``schema`` up with row-level security and return the URL of an application role.

    The run's own role (a superuser by default) owns the schema and runs
    ``setup(row_level_security=True)``; the saver under measurement then connects as
    ``lgd_bench_app_<pid>``, a role made here (once, dropped at exit) that owns nothing
    and has the grants of docs/security.md, so that the policies apply to it (a
    superuser or the owner of a table with RLS forced off would skip them).
    ``signing_key``: setup() stores it (signed tenants).
    """
    import atexit

    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    from langgraph_durable.postgres import PostgresSaver
    from langgraph_durable.postgres._rls import app_role_grants

    app = sql.Identifier(_RLS_APP_ROLE)
    with admin_connect(url) as conn:
        owner = conn.execute("SELECT current_user").fetchone()[0]  # type: ignore[index]
        known = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (_RLS_APP_ROLE,))
        if known.fetchone() is None:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(app))
            atexit.register(_drop_rls_role, url)
    with PostgresSaver.from_conn_string(
        url, schema=schema, row_level_security=True, pool_size=1, tenant_signing_key=signing_key
    ) as saver:
        saver.setup()
    with admin_connect(url) as conn:
        for statement in app_role_grants(schema, _RLS_APP_ROLE, owner):
            conn.execute(statement)  # type: ignore[arg-type]
    return make_conninfo(url, user=_RLS_APP_ROLE)


def _drop_rls_role(url: str) -> None:
    from psycopg import sql

    app = sql.Identifier(_RLS_APP_ROLE)
    with admin_connect(url) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(app))
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(app))


def create_schema(url: str, schema: str) -> None:
    with admin_connect(url) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')


SIZE_SQL = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind IN ('r', 'm')
"""


def backend_pids(url: str, application_name: str) -> list[int]:
    """Server process ids of the connections that carry this application_name."""
    with admin_connect(url) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,)
        ).fetchall()
    return [int(r[0]) for r in rows]


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def server_cpu_seconds(pids: list[int], comm: str = "postgres") -> float | None:
    """CPU time used so far by these server processes (PostgreSQL backends by default).

    Uses ``/proc/<pid>/schedstat`` (nanoseconds on CPU), else ``/proc/<pid>/stat``
    (utime + stime, in clock ticks). None when the server is not on this machine (no
    such process, or one whose command name does not contain ``comm``) or /proc is not
    readable, so that a remote server simply reports no server CPU.
    """
    if not pids:
        return None
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                raw = f.read()
        except OSError:
            return None
        comm_end = raw.rfind(")")
        if comm not in raw[: comm_end + 1]:
            return None
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                total += int(f.read().split()[0]) / 1e9
            continue
        except (OSError, ValueError, IndexError):
            pass
        fields = raw[comm_end + 2 :].split()
        total += (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
    return total


def add_old_partitions(url: str, schema: str, count: int) -> int:
    """Give our schema ``count`` partitions for past epochs, as a long-lived deployment has.

    Uses the schema's own ``current_epoch()`` and ``ensure_partitions(epoch)`` helpers; returns
    how many partitions the ``checkpoints`` table has afterwards.
    """
    with admin_connect(url) as conn:
        current = conn.execute(f'SELECT "{schema}".current_epoch()').fetchone()[0]
        for epoch in range(current - count, current):
            conn.execute(f'SELECT "{schema}".ensure_partitions(%s)', (epoch,))
        row = conn.execute(
            "SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent "
            "JOIN pg_namespace n ON n.oid = p.relnamespace "
            "WHERE n.nspname = %s AND p.relname = 'checkpoints'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def schema_bytes(url: str, schema: str) -> int:
    """On-disk bytes of every table in the schema: heap + TOAST + indexes.

    Partitions are ordinary tables (relkind 'r') in the same schema, so partitioned
    tables are covered by summing over them; the partitioned parents hold no storage.
    """
    with admin_connect(url) as conn:
        row = conn.execute(SIZE_SQL, (schema,)).fetchone()
    return int(row[0]) if row else 0


@contextlib.contextmanager
def open_sync(spec: SaverSpec, url: str, schema: str, pool_size: int) -> Iterator[Any]:
    """Yield a set-up sync saver of this kind on ``schema`` (created if needed)."""
    if spec.kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
        return
    from psycopg_pool import ConnectionPool

    if spec.kind == "upstream":
        from langgraph.checkpoint.postgres import PostgresSaver as UpstreamSaver

        create_schema(url, schema)
        pool = ConnectionPool(
            url,
            min_size=pool_size,
            max_size=pool_size,
            kwargs=_upstream_kwargs(schema),
            open=True,
        )
        try:
            pool.wait()
            saver = UpstreamSaver(pool)
            saver.setup()
            yield saver
        finally:
            pool.close()
    else:
        from langgraph_durable.postgres import PostgresSaver as OursSaver

        if spec.rls:
            url = rls_app_url(url, schema, spec.kwargs().get("tenant_signing_key"))
        pool = ConnectionPool(url, min_size=pool_size, max_size=pool_size, open=True)
        try:
            pool.wait()
            saver = OursSaver(pool, schema=schema, **spec.kwargs())
            if not spec.rls:  # rls_app_url set it up as the owner; the app role may not
                saver.setup()
            yield saver
        finally:
            pool.close()


@contextlib.asynccontextmanager
async def open_async(spec: SaverSpec, url: str, schema: str, pool_size: int) -> AsyncIterator[Any]:
    """Yield a set-up async saver of this kind on ``schema`` (created if needed)."""
    from psycopg_pool import AsyncConnectionPool

    if spec.kind == "upstream":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver as UpstreamAsync

        create_schema(url, schema)
        pool = AsyncConnectionPool(
            url,
            min_size=pool_size,
            max_size=pool_size,
            kwargs=_upstream_kwargs(schema),
            open=False,
        )
        await pool.open(wait=True)
        try:
            saver = UpstreamAsync(pool)
            await saver.setup()
            yield saver
        finally:
            await pool.close()
    elif spec.kind == "ours":
        from langgraph_durable.postgres import AsyncPostgresSaver as OursAsync

        if spec.rls:
            url = rls_app_url(url, schema, spec.kwargs().get("tenant_signing_key"))
        pool = AsyncConnectionPool(url, min_size=pool_size, max_size=pool_size, open=False)
        await pool.open(wait=True)
        try:
            saver = OursAsync(pool, schema=schema, **spec.kwargs())
            if not spec.rls:  # rls_app_url set it up as the owner; the app role may not
                await saver.setup()
            yield saver
        finally:
            await pool.close()
    else:
        raise ValueError(f"{spec.name} has no async flavour")
