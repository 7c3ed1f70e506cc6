"""Move stored PostgreSQL threads back in time (the tests' injected clock).

The saver stamps rows with the server's clock, so a test that needs a thread
last written 31 days ago writes it now and then ages it: its registry row's
timestamps move back, and with ``move_epoch`` its rows move to the partition
of the epoch it would have started in.
"""

from __future__ import annotations

import math
from typing import Any

import psycopg

DAY = 86400.0


def age_thread(
    conn: psycopg.Connection[Any],
    schema: str,
    thread: str,
    *,
    days: float,
    tenant: str = "default",
    created_days: float | None = None,
    move_epoch: bool = False,
) -> None:
    """Make ``thread`` look last written ``days`` ago (created ``created_days`` ago).

    ``created_days`` defaults to ``days``. With ``move_epoch`` the thread's
    rows move to the epoch (partition) of its new creation time.
    """
    created = days if created_days is None else created_days
    s = f'"{schema}"'
    key = {"tenant": tenant, "thread": thread, "d": days * DAY, "c": created * DAY}
    with conn.transaction():
        conn.execute(
            f"UPDATE {s}.threads SET updated_at = updated_at - make_interval(secs => %(d)s), "
            "created_at = created_at - make_interval(secs => %(c)s), "
            "expires_at = expires_at - make_interval(secs => %(d)s) "
            "WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s",
            key,
        )
        if not move_epoch:
            return
        width = int(
            conn.execute(f"SELECT value FROM {s}.settings WHERE key = 'partition_days'").fetchone()[
                0
            ]  # type: ignore[index]
        )
        current = conn.execute(f"SELECT {s}.current_epoch()").fetchone()[0]  # type: ignore[index]
        epoch = current - max(1, math.ceil(created / width))
        conn.execute(f"SELECT {s}.ensure_partitions(%s)", (epoch,))
        for table in ("checkpoints", "blobs", "writes", "threads"):
            conn.execute(
                f"UPDATE {s}.{table} SET epoch = %(epoch)s "
                "WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s",
                {**key, "epoch": epoch},
            )


def rows_naming(conn: psycopg.Connection[Any], schema: str, thread: str) -> dict[str, int]:
    """Rows of every table (partitions included) whose thread_id is ``thread``."""
    s = f'"{schema}"'
    out = {}
    for table in ("threads", "checkpoints", "blobs", "writes", "effects"):
        row = conn.execute(
            f"SELECT count(*) FROM {s}.{table} WHERE thread_id = %s", (thread,)
        ).fetchone()
        out[table] = int(row[0])  # type: ignore[index]
    return out


def table_counts(conn: psycopg.Connection[Any], schema: str) -> dict[str, int]:
    """Row counts of every table of the saver."""
    s = f'"{schema}"'
    return {
        t: int(conn.execute(f"SELECT count(*) FROM {s}.{t}").fetchone()[0])  # type: ignore[index]
        for t in ("threads", "checkpoints", "blobs", "writes", "effects")
    }


def partitions(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """Names of the tables in ``schema`` that are partitions (attached or not)."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname ~ '_e[0-9]+$' "
        "ORDER BY c.relname",
        (schema,),
    ).fetchall()
    return [r[0] for r in rows]
