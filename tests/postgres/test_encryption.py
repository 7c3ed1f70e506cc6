"""Envelope encryption on PostgreSQL: nothing readable at rest, tampering detected, keys managed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from langgraph_durable.errors import DecryptionError
from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver
from langgraph_durable.protect import Encryption, LocalKeyring
from tests.encryption_helpers import (
    Canaries,
    arun_canary_graph,
    canary_hits,
    flip_bit,
    local_encryption,
    run_canary_graph,
    state_has_canaries,
)
from tests.helpers import cfg, make_cp, versioned_cp


def dump_schema(pg_url: str, schema: str) -> bytes:
    """Every row of every table of ``schema`` (partitions included), as bytes."""
    out = bytearray()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchall()
        assert len(tables) > 5
        for (table,) in tables:
            rows = conn.execute(
                sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(table))
            ).fetchall()
            for row in rows:
                for value in row:
                    if isinstance(value, (bytes, memoryview)):
                        out += bytes(value)
                    else:
                        out += repr(value).encode()
                    out += b"\n"
    return bytes(out)


@pytest.fixture
def enc() -> Encryption:
    return local_encryption()


@pytest.fixture
def saver(pg_url: str, pg_schema: str, enc: Encryption) -> Iterator[PostgresSaver]:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=enc) as s:
        s.setup()
        yield s


def execute(pg_url: str, statement: str, params: Any = ()) -> list[Any]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


# ---- nothing readable at rest ------------------------------------------------------


@pytest.mark.parametrize("encrypted", [True, False])
def test_canaries_never_reach_storage_sync(pg_url: str, pg_schema: str, encrypted: bool) -> None:
    canaries = Canaries()
    enc = local_encryption() if encrypted else None
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=enc) as s:
        s.setup()
        state = run_canary_graph(s, canaries)
    assert state_has_canaries(state, canaries)
    hits = canary_hits(dump_schema(pg_url, pg_schema), canaries)
    assert hits == ([] if encrypted else canaries.all())


@pytest.mark.parametrize("encrypted", [True, False])
async def test_canaries_never_reach_storage_async(
    pg_url: str, pg_schema: str, encrypted: bool
) -> None:
    canaries = Canaries()
    enc = local_encryption() if encrypted else None
    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=enc) as s:
        await s.setup()
        state = await arun_canary_graph(s, canaries)
    assert state_has_canaries(state, canaries)
    hits = canary_hits(dump_schema(pg_url, pg_schema), canaries)
    assert hits == ([] if encrypted else canaries.all())


def test_history_and_filters_work_on_encrypted_metadata(saver: PostgresSaver) -> None:
    canaries = Canaries()
    run_canary_graph(saver, canaries, thread="a")
    run_canary_graph(saver, Canaries(), thread="b")
    history = list(saver.list(cfg("a")))
    assert len(history) >= 4
    # user_email is encrypted metadata: matched after decryption, limit applied after it
    mine = list(saver.list(None, filter={"user_email": canaries.email}))
    assert {t.config["configurable"]["thread_id"] for t in mine} == {"a"}
    assert len(list(saver.list(None, filter={"user_email": canaries.email}, limit=2))) == 2
    # source is clear metadata: matched by the database
    loops = list(saver.list(cfg("a"), filter={"source": "loop"}))
    assert loops and all(t.metadata["source"] == "loop" for t in loops)


def test_searchable_metadata_is_stored_as_a_blind_index(pg_url: str, pg_schema: str) -> None:
    canaries = Canaries()
    enc = local_encryption(searchable_metadata=("user_email",))
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=enc) as s:
        s.setup()
        run_canary_graph(s, canaries, thread="a")
        run_canary_graph(s, Canaries(), thread="b")
        found = list(s.list(None, filter={"user_email": canaries.email}))
        assert found and {t.config["configurable"]["thread_id"] for t in found} == {"a"}
        index = execute(
            pg_url,
            sql.SQL("SELECT metadata_index FROM {}.checkpoints WHERE thread_id = 'a'")
            .format(sql.Identifier(pg_schema))
            .as_string(),
        )
    assert all(str(row[0]["user_email"]).startswith("bi1:") for row in index)
    assert canary_hits(dump_schema(pg_url, pg_schema), canaries) == []


# ---- tampering -----------------------------------------------------------------------


def _two_threads(saver: PostgresSaver) -> None:
    for thread in ("x", "y"):
        saver.put(cfg(thread), make_cp(n=1), {"source": "input", "step": -1}, {})


def _table(schema: str, table: str) -> str:
    return f'"{schema}".{table}'


def test_swapped_bodies_of_two_threads_fail(pg_url: str, saver: PostgresSaver) -> None:
    _two_threads(saver)
    t = _table(saver.schema, "checkpoints")
    execute(
        pg_url,
        f"UPDATE {t} c SET checkpoint = o.checkpoint FROM {t} o "
        "WHERE c.thread_id = 'x' AND o.thread_id = 'y'",
    )
    with pytest.raises(DecryptionError, match="failed authentication"):
        saver.get_tuple(cfg("x"))
    assert saver.get_tuple(cfg("y")) is not None


def test_swapped_blobs_of_two_checkpoints_of_one_thread_fail(
    pg_url: str, saver: PostgresSaver
) -> None:
    one = versioned_cp(msgs=["one"])
    first = saver.put(cfg("x"), one, {"source": "input", "step": -1}, one["channel_versions"])
    two = versioned_cp(msgs=["one", "two"])
    two["channel_versions"] = {"msgs": "2"}
    saver.put(first, two, {"source": "loop", "step": 0}, two["channel_versions"])
    t = _table(saver.schema, "blobs")
    rows = execute(pg_url, f"SELECT version, blob FROM {t} WHERE thread_id = 'x' ORDER BY version")
    assert len(rows) == 2
    for (version, _), (_, other) in zip(rows, reversed(rows), strict=True):
        execute(pg_url, f"UPDATE {t} SET blob = %s WHERE version = %s", (other, version))
    with pytest.raises(DecryptionError):
        saver.get_tuple(cfg("x"))
    with pytest.raises(DecryptionError):
        list(saver.list(cfg("x")))


@pytest.mark.parametrize("damage", ["truncate", "flip"])
@pytest.mark.parametrize("column", ["checkpoint", "metadata"])
def test_truncated_or_flipped_ciphertext_fails(
    pg_url: str, saver: PostgresSaver, damage: str, column: str
) -> None:
    _two_threads(saver)
    t = _table(saver.schema, "checkpoints")
    (data,) = execute(pg_url, f"SELECT {column} FROM {t} WHERE thread_id = 'x'")[0]
    data = bytes(data)
    changed = data[: len(data) // 2] if damage == "truncate" else flip_bit(data, len(data) // 2)
    execute(pg_url, f"UPDATE {t} SET {column} = %s WHERE thread_id = 'x'", (changed,))
    with pytest.raises(DecryptionError):
        saver.get_tuple(cfg("x"))
    assert saver.get_tuple(cfg("y")) is not None


def test_flipped_pending_write_fails(pg_url: str, saver: PostgresSaver) -> None:
    stored = saver.put(cfg("x"), make_cp(), {"source": "input", "step": -1}, {})
    saver.put_writes(stored, [("messages", "secret")], "task-1")
    t = _table(saver.schema, "writes")
    (data,) = execute(pg_url, f"SELECT blob FROM {t}")[0]
    execute(pg_url, f"UPDATE {t} SET blob = %s", (flip_bit(bytes(data)),))
    with pytest.raises(DecryptionError):
        saver.get_tuple(cfg("x"))


def test_altered_clear_metadata_is_detected(pg_url: str, saver: PostgresSaver) -> None:
    saver.put(cfg("x"), make_cp(), {"source": "input", "step": -1}, {})
    t = _table(saver.schema, "checkpoints")
    execute(pg_url, f"""UPDATE {t} SET metadata_index = '{{"source": "loop", "step": 5}}'""")
    with pytest.raises(DecryptionError, match="clear metadata"):
        saver.get_tuple(cfg("x"))


def test_plaintext_rows_fail_closed_unless_migrating(pg_url: str, pg_schema: str) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as plain:
        plain.setup()
        plain.put(cfg("old"), make_cp(n="before"), {"source": "input", "step": -1}, {})
    keyring = LocalKeyring({"k1": os.urandom(32)}, "k1")
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, encryption=Encryption(keyring)
    ) as strict:
        with pytest.raises(DecryptionError, match="not encrypted"):
            strict.get_tuple(cfg("old"))
    migrating = Encryption(keyring, allow_plaintext=True)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=migrating) as s:
        old = s.get_tuple(cfg("old"))
        assert old is not None and old.checkpoint["channel_values"]["n"] == "before"
        s.put(old.config, make_cp(n="after"), {"source": "loop", "step": 0}, {})
        assert s.get_tuple(cfg("old")).checkpoint["channel_values"]["n"] == "after"
    # the new row is encrypted: a strict saver reads it
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, encryption=Encryption(keyring)
    ) as strict:
        assert strict.get_tuple(cfg("old")).checkpoint["channel_values"]["n"] == "after"


# ---- keys: rotation, shredding, versions -------------------------------------------


def test_rotation_then_the_old_key_can_go(pg_url: str, pg_schema: str) -> None:
    a, b = os.urandom(32), os.urandom(32)
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, encryption=Encryption(LocalKeyring({"A": a}, "A"))
    ) as s:
        s.setup()
        s.put(cfg("t1"), make_cp(n="under A"), {"source": "input", "step": -1}, {})
        s.put(cfg("t2", tenant_id="other"), make_cp(n="A too"), {"source": "input", "step": -1}, {})
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, encryption=Encryption(LocalKeyring({"B": b, "A": a}, "B"))
    ) as s:
        s.put(cfg("t3"), make_cp(n="after B"), {"source": "input", "step": -1}, {})
        assert s.rotate_keys() == {"tenants": 2, "rewrapped": 2, "current": 0}
        assert s.rotate_keys() == {"tenants": 2, "rewrapped": 0, "current": 2}
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, encryption=Encryption(LocalKeyring({"B": b}, "B"))
    ) as s:
        assert s.get_tuple(cfg("t1")).checkpoint["channel_values"]["n"] == "under A"
        assert s.get_tuple(cfg("t3")).checkpoint["channel_values"]["n"] == "after B"
        other = s.get_tuple(cfg("t2", tenant_id="other"))
        assert other.checkpoint["channel_values"]["n"] == "A too"


def test_without_rotation_a_dropped_key_is_a_clear_error(pg_url: str, pg_schema: str) -> None:
    a, b = os.urandom(32), os.urandom(32)
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, encryption=Encryption(LocalKeyring({"A": a}, "A"))
    ) as s:
        s.setup()
        s.put(cfg("t1"), make_cp(n=1), {"source": "input", "step": -1}, {})
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, encryption=Encryption(LocalKeyring({"B": b}, "B"))
    ) as s:
        with pytest.raises(DecryptionError, match="not in the keyring"):
            s.get_tuple(cfg("t1"))


async def test_shredding_one_tenant_leaves_the_other(pg_url: str, pg_schema: str) -> None:
    enc = local_encryption()
    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=enc) as s:
        await s.setup()
        for tenant in ("t1", "t2"):
            await s.aput(
                cfg("th", tenant_id=tenant), make_cp(n=tenant), {"source": "input", "step": -1}, {}
            )
        assert await s.ashred_tenant("t1") == 1
        # this saver dropped t1's keys from its cache too
        with pytest.raises(DecryptionError, match="shredded"):
            await s.aget_tuple(cfg("th", tenant_id="t1"))
    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=enc) as s:
        with pytest.raises(DecryptionError, match="shredded"):
            await s.aget_tuple(cfg("th", tenant_id="t1"))
        with pytest.raises(DecryptionError, match="shredded"):
            [t async for t in s.alist(cfg("th", tenant_id="t1"))]
        t2 = await s.aget_tuple(cfg("th", tenant_id="t2"))
        assert t2.checkpoint["channel_values"]["n"] == "t2"
        # the tenant may start again: new writes get a new data-key version
        await s.aput(
            cfg("new", tenant_id="t1"), make_cp(n="again"), {"source": "input", "step": -1}, {}
        )
        again = await s.aget_tuple(cfg("new", tenant_id="t1"))
        assert again.checkpoint["channel_values"]["n"] == "again"


def test_new_data_key_versions_by_age_and_all_stay_readable(pg_url: str, pg_schema: str) -> None:
    clock = [1_000_000.0]
    enc = local_encryption(max_key_age=100.0, max_key_uses=3)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=enc) as s:
        s.setup()
        s._keys.now = lambda: clock[0]  # type: ignore[union-attr]
        parent = cfg("t")
        for i in range(8):
            clock[0] += 10.0 if i != 4 else 200.0
            parent = s.put(parent, make_cp(n=i), {"source": "loop", "step": i}, {})
        versions = execute(
            pg_url,
            sql.SQL("SELECT version FROM {}.data_keys ORDER BY version")
            .format(sql.Identifier(pg_schema))
            .as_string(),
        )
        assert len(versions) >= 3  # by uses (3 seals each) and by age
    # a fresh process reads every checkpoint, each under its own version
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=enc) as s:
        values = [t.checkpoint["channel_values"]["n"] for t in s.list(cfg("t"))]
        assert values == list(range(7, -1, -1))


def test_copy_thread_reencrypts_for_the_target(saver: PostgresSaver) -> None:
    canaries = Canaries()
    run_canary_graph(saver, canaries, thread="src")
    saver.copy_thread("src", "dst")
    source = list(saver.list(cfg("src")))
    target = list(saver.list(cfg("dst")))
    assert [t.checkpoint["id"] for t in source] == [t.checkpoint["id"] for t in target]
    for s_t, d_t in zip(source, target, strict=True):
        assert s_t.checkpoint["channel_values"] == d_t.checkpoint["channel_values"]
        assert s_t.metadata == d_t.metadata
        assert s_t.pending_writes == d_t.pending_writes
        assert (s_t.parent_config is None) == (d_t.parent_config is None)


def test_searchable_filter_of_a_tenant_without_live_keys(pg_url: str, pg_schema: str) -> None:
    """Nothing written yet, or only plaintext rows: searchable keys are matched after opening."""
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as plain:
        plain.setup()
        plain.put(cfg("old"), make_cp(), {"source": "input", "step": -1, "user": "ann"}, {})
    keyring = LocalKeyring({"k1": os.urandom(32)}, "k1")
    enc = Encryption(keyring, searchable_metadata=("user",), allow_plaintext=True)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=enc) as s:
        found = list(s.list(None, filter={"user": "ann"}))
        assert [t.config["configurable"]["thread_id"] for t in found] == ["old"]
        assert list(s.list(None, filter={"user": "bob"})) == []
        assert list(s.list(cfg("x", tenant_id="nobody"), filter={"user": "ann"})) == []
