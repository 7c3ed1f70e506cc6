"""Checkpoints are append-only on every backend, sync and async.

A ``put`` of a checkpoint id that is stored already never replaces it: the
same body and metadata again is an idempotent retry (it succeeds and stores
nothing more), anything else raises ``CheckpointConflictError`` and leaves the
stored checkpoint, its channel values and its blobs as they were.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from langgraph_durable.errors import CheckpointConflictError, StorageError
from langgraph_durable.postgres import PostgresSaver
from langgraph_durable.postgres._rls import app_role_grants
from tests.effects.conftest import BACKENDS, make_spec
from tests.encryption_helpers import local_encryption
from tests.helpers import cfg, make_cp, put_chain
from tests.redaction_helpers import SaverSpec, aopen_saver, open_saver

METADATA = {"source": "loop", "step": 1}


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


def _checkpoint(checkpoint_id: str, **values: Any) -> dict[str, Any]:
    """A checkpoint ``checkpoint_id`` whose channels all have version 1."""
    cp = make_cp(**values)
    cp["id"] = checkpoint_id
    cp["ts"] = "2026-01-01T00:00:00+00:00"  # a retry carries the same checkpoint
    cp["channel_versions"] = {name: f"{1:032}.0" for name in values}
    return cp


def _original(checkpoint_id: str) -> dict[str, Any]:
    return _checkpoint(checkpoint_id, step=1, payload={"items": [1, 2, 3]}, note="first")


def _conflicting(checkpoint_id: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Puts of the same id that differ from ``_original``: (what, checkpoint, metadata)."""
    new_version = _checkpoint(checkpoint_id, step=1, payload={"items": ["new"]}, note="first")
    new_version["channel_versions"]["payload"] = f"{2:032}.0"
    inline = _checkpoint(checkpoint_id, step=2, payload={"items": [1, 2, 3]}, note="changed")
    return [
        ("a blob channel at a new version", new_version, METADATA),
        ("inline channel values", inline, METADATA),
        ("metadata only", _original(checkpoint_id), {"source": "loop", "step": 2}),
    ]


def _assert_original(tup: Any, checkpoint_id: str) -> None:
    assert tup is not None
    assert tup.checkpoint["id"] == checkpoint_id
    assert tup.checkpoint["channel_values"] == {
        "step": 1,
        "payload": {"items": [1, 2, 3]},
        "note": "first",
    }
    assert tup.checkpoint["channel_versions"]["payload"] == f"{1:032}.0"
    assert {k: tup.metadata[k] for k in METADATA} == METADATA


# ---- sync ---------------------------------------------------------------------------


def test_the_same_checkpoint_twice_is_stored_once(spec: SaverSpec) -> None:
    thread, cid = f"t-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    with open_saver(spec) as saver:
        cp = _original(cid)
        first = saver.put(cfg(thread), cp, METADATA, cp["channel_versions"])
        again = saver.put(cfg(thread), _original(cid), METADATA, cp["channel_versions"])
        assert first == again
        assert len(list(saver.list(cfg(thread)))) == 1
        _assert_original(saver.get_tuple(cfg(thread, checkpoint_id=cid)), cid)
        # the thread goes on as usual after the retry
        child = _checkpoint(str(uuid.uuid4()), step=2, payload={"items": [4]}, note="next")
        child["channel_versions"]["payload"] = f"{2:032}.0"
        saver.put(first, child, {"source": "loop", "step": 2}, child["channel_versions"])
        assert len(list(saver.list(cfg(thread)))) == 2


def test_other_content_under_a_stored_id_is_refused(spec: SaverSpec) -> None:
    thread, cid = f"t-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    with open_saver(spec) as saver:
        cp = _original(cid)
        saver.put(cfg(thread), cp, METADATA, cp["channel_versions"])
        for what, other, metadata in _conflicting(cid):
            with pytest.raises(CheckpointConflictError) as info:
                saver.put(cfg(thread), other, metadata, other["channel_versions"])
            assert isinstance(info.value, StorageError), what
            assert cid in str(info.value) and thread in str(info.value), what
            assert info.value.checkpoint_id == cid and info.value.thread_id == thread
            _assert_original(saver.get_tuple(cfg(thread, checkpoint_id=cid)), cid)
            _assert_original(saver.get_tuple(cfg(thread)), cid)
            assert len(list(saver.list(cfg(thread)))) == 1, what
        # a retry of the original still succeeds
        saver.put(cfg(thread), _original(cid), METADATA, cp["channel_versions"])
        _assert_original(saver.get_tuple(cfg(thread)), cid)
        # another value at a stored channel version: the body and metadata are the
        # same (blobs are keyed by version), so this is a retry, and the stored
        # value at that version stays
        same_version = _checkpoint(cid, step=1, payload={"items": ["other"]}, note="first")
        saver.put(cfg(thread), same_version, METADATA, same_version["channel_versions"])
        _assert_original(saver.get_tuple(cfg(thread)), cid)


def test_a_conflict_in_a_namespace_and_with_a_parent(spec: SaverSpec) -> None:
    thread, parent, cid = f"t-{uuid.uuid4().hex[:8]}", str(uuid.uuid4()), str(uuid.uuid4())
    with open_saver(spec) as saver:
        root = _checkpoint(parent, step=0)
        saver.put(cfg(thread, "sub:1"), root, METADATA, root["channel_versions"])
        cp = _original(cid)
        where = cfg(thread, "sub:1", checkpoint_id=parent)
        saver.put(where, cp, METADATA, cp["channel_versions"])
        saver.put(where, _original(cid), METADATA, cp["channel_versions"])
        _what, other, metadata = _conflicting(cid)[1]  # other inline values
        with pytest.raises(CheckpointConflictError) as info:
            saver.put(where, other, metadata, other["channel_versions"])
        assert info.value.checkpoint_ns == "sub:1"
        stored = saver.get_tuple(cfg(thread, "sub:1", checkpoint_id=cid))
        _assert_original(stored, cid)
        assert stored.parent_config["configurable"]["checkpoint_id"] == parent
        # the same id in another namespace is another checkpoint
        saver.put(cfg(thread), other, metadata, other["channel_versions"])
        elsewhere = saver.get_tuple(cfg(thread))
        assert elsewhere is not None and elsewhere.checkpoint["channel_values"]["step"] == 2


# ---- async --------------------------------------------------------------------------


async def test_async_the_same_checkpoint_twice_is_stored_once(spec: SaverSpec) -> None:
    thread, cid = f"t-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    async with aopen_saver(spec) as saver:
        cp = _original(cid)
        first = await saver.aput(cfg(thread), cp, METADATA, cp["channel_versions"])
        again = await saver.aput(cfg(thread), _original(cid), METADATA, cp["channel_versions"])
        assert first == again
        assert len([t async for t in saver.alist(cfg(thread))]) == 1
        _assert_original(await saver.aget_tuple(cfg(thread, checkpoint_id=cid)), cid)


async def test_async_other_content_under_a_stored_id_is_refused(spec: SaverSpec) -> None:
    thread, cid = f"t-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    async with aopen_saver(spec) as saver:
        cp = _original(cid)
        await saver.aput(cfg(thread), cp, METADATA, cp["channel_versions"])
        for what, other, metadata in _conflicting(cid):
            with pytest.raises(CheckpointConflictError):
                await saver.aput(cfg(thread), other, metadata, other["channel_versions"])
            _assert_original(await saver.aget_tuple(cfg(thread, checkpoint_id=cid)), cid)
            assert len([t async for t in saver.alist(cfg(thread))]) == 1, what


# ---- encryption ---------------------------------------------------------------------


def test_copy_thread_keeps_what_the_target_has(spec: SaverSpec) -> None:
    """The plain copy (no pipeline that binds identity) never overwrites the target's records."""
    cid = str(uuid.uuid4())
    with open_saver(spec) as saver:
        cp = _original(cid)
        saver.put(cfg("src"), cp, METADATA, cp["channel_versions"])
        # the target holds the same checkpoint id with other content (and the same blob key)
        _what, other, metadata = _conflicting(cid)[1]
        other["channel_versions"]["payload"] = cp["channel_versions"]["payload"]
        other["channel_values"]["payload"] = {"items": ["the target's own"]}
        saver.put(cfg("dst"), other, metadata, other["channel_versions"])
        saver.copy_thread("src", "dst")
        kept = saver.get_tuple(cfg("dst", checkpoint_id=cid))
        assert kept is not None
        assert kept.checkpoint["channel_values"]["payload"] == {"items": ["the target's own"]}
        assert kept.checkpoint["channel_values"]["note"] == "changed"
        _assert_original(saver.get_tuple(cfg("src", checkpoint_id=cid)), cid)


def test_encrypted_copy_thread_runs_again(spec: SaverSpec) -> None:
    """``copy_thread`` re-seals through ``put``: run again, it keeps what the target has."""
    encrypted = SaverSpec(
        spec.backend, spec.conn, {**spec.kwargs, "encryption": local_encryption()}
    )
    with open_saver(encrypted) as saver:
        configs = put_chain(saver, "src", 2)
        saver.copy_thread("src", "dst")
        first = saver.get_tuple(cfg("dst"))
        saver.copy_thread("src", "dst")  # e.g. after an interrupted copy
        again = saver.get_tuple(cfg("dst"))
        assert first is not None and again is not None
        assert again.checkpoint == first.checkpoint
        assert len(list(saver.list(cfg("dst")))) == len(configs)
        # a put of a stored checkpoint seals with a fresh nonce: never byte-identical
        stored = saver.get_tuple(configs[-1])
        assert stored is not None and stored.parent_config is not None
        with pytest.raises(CheckpointConflictError):
            saver.put(
                stored.parent_config,
                stored.checkpoint,
                stored.metadata,
                stored.checkpoint["channel_versions"],
            )
        again = saver.get_tuple(configs[-1])
        assert again is not None and again.checkpoint == stored.checkpoint


# ---- PostgreSQL: the application role needs no UPDATE on checkpoints ----------------


def append_only_grants(schema: str, app_role: str, owner_role: str) -> list[str]:
    """The recipe of docs/security.md: the app role's grants, less UPDATE on checkpoints."""
    s, app, owner = (f'"{x}"' for x in (schema, app_role, owner_role))
    return [
        *app_role_grants(schema, app_role, owner_role),
        f"REVOKE UPDATE ON {s}.checkpoints FROM {app}",
        "DO $$ DECLARE p regclass; BEGIN "
        "FOR p IN SELECT inhrelid::regclass FROM pg_inherits "
        f"WHERE inhparent = '{s}.checkpoints'::regclass LOOP "
        f"EXECUTE format('REVOKE UPDATE ON %s FROM {app}', p); END LOOP; END $$",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {s} "
        f"REVOKE UPDATE ON TABLES FROM {app}",
    ]


@pytest.fixture
def app_without_update(pg_url: str) -> Iterator[tuple[str, str, str]]:
    """(app role URL, schema, admin URL): a schema whose app role may not UPDATE checkpoints."""
    suffix = uuid.uuid4().hex[:10]
    owner, app = f"lgd_ao_owner_{suffix}", f"lgd_ao_app_{suffix}"
    schema = f"t_ao_{suffix}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(owner)))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(app)))
        conn.execute(
            sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
                sql.Identifier(schema), sql.Identifier(owner)
            )
        )
    try:
        owner_url = make_conninfo(pg_url, user=owner)
        with PostgresSaver.from_conn_string(
            owner_url, schema=schema, row_level_security=True
        ) as saver:
            saver.setup()
        with psycopg.connect(owner_url, autocommit=True) as conn:
            for statement in append_only_grants(schema, app, owner):
                conn.execute(statement)  # type: ignore[arg-type]
        yield make_conninfo(pg_url, user=app), schema, pg_url
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
                ([owner, app],),
            )
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
            for name in (owner, app):
                conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_postgres_app_role_without_update_on_checkpoints(
    app_without_update: tuple[str, str, str],
) -> None:
    app_url, schema, admin_url = app_without_update
    thread, cid = "t", str(uuid.uuid4())
    with PostgresSaver.from_conn_string(app_url, schema=schema, row_level_security=True) as saver:
        cp = _original(cid)
        stored = saver.put(cfg(thread), cp, METADATA, cp["channel_versions"])
        saver.put(cfg(thread), _original(cid), METADATA, cp["channel_versions"])
        _what, other, metadata = _conflicting(cid)[0]
        with pytest.raises(CheckpointConflictError):
            saver.put(cfg(thread), other, metadata, other["channel_versions"])
        # special writes replace earlier ones (an upsert through the parent table)
        saver.put_writes(stored, [("__error__", "one")], "task")
        saver.put_writes(stored, [("__error__", "two")], "task")
        saver.put_writes(stored, [("payload", {"items": [9]})], "task-2")
        got = saver.get_tuple(stored)
        _assert_original(got, cid)
        assert ("task", "__error__", "two") in got.pending_writes
        saver.copy_thread(thread, "copy")
        _assert_original(saver.get_tuple(cfg("copy")), cid)
        saver.delete_thread("copy")
        assert saver.get_tuple(cfg("copy")) is None
    # the role cannot change a stored checkpoint directly either (parent or partition)
    with psycopg.connect(app_url, autocommit=True) as conn:
        conn.execute("SELECT set_config('langgraph_durable.tenant', '', false)")
        leaves = [
            r[0]
            for r in conn.execute(
                "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = %s::regclass",
                (f'"{schema}".checkpoints',),
            )
        ]
        assert leaves
        for table in [f'"{schema}".checkpoints', *leaves]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"UPDATE {table} SET metadata = metadata")  # type: ignore[arg-type]
    # a partition made later (another epoch) comes without UPDATE, and puts still work
    with psycopg.connect(make_conninfo(admin_url), autocommit=True) as conn:
        epoch = conn.execute(f'SELECT "{schema}".current_epoch() + 1').fetchone()[0]  # type: ignore[index]
        conn.execute(f'SELECT "{schema}".ensure_partitions(%s)', (epoch,))  # type: ignore[arg-type]
        conn.execute(
            f'INSERT INTO "{schema}".threads (tenant_id, thread_id, epoch) '  # type: ignore[arg-type]
            "VALUES ('default', 'later', %s)",
            (epoch,),
        )
    with PostgresSaver.from_conn_string(app_url, schema=schema, row_level_security=True) as saver:
        later = saver.put(cfg("later"), _original(cid), METADATA, cp["channel_versions"])
        saver.put_writes(later, [("__error__", "one")], "task")
        saver.put_writes(later, [("__error__", "two")], "task")
        got = saver.get_tuple(later)
        _assert_original(got, cid)
        assert ("task", "__error__", "two") in got.pending_writes


def test_postgres_app_role_without_update_refuses_a_run_delete_that_needs_a_tombstone(
    app_without_update: tuple[str, str, str],
) -> None:
    """docs/security.md: under the recipe, a delete_for_runs whose survivor needs a chain
    tombstone (an UPDATE of its row) fails whole; deleting the latest run still works."""
    app_url, schema, admin_url = app_without_update
    key = b"k" * 32
    with PostgresSaver.from_conn_string(
        app_url, schema=schema, row_level_security=True, integrity=key
    ) as saver:
        for run in ("r1", "r2", "r3"):
            put_chain(saver, f"thread-{run}", 1)  # other threads: untouched throughout
        configs = [*put_chain(saver, "t", 2, run_id="r1")]
        parent = configs[-1]["configurable"]["checkpoint_id"]
        for run in ("r2", "r3"):
            cp = make_cp(step=run)
            parent = saver.put(cfg("t", checkpoint_id=parent, run_id=run), cp, {"run_id": run}, {})[
                "configurable"
            ]["checkpoint_id"]
        with pytest.raises(StorageError):
            saver.delete_for_runs(["r2"])
        assert len(list(saver.list(cfg("t")))) == 4
        saver.delete_for_runs(["r3"])  # the latest run: no survivor loses its parent
        assert len(list(saver.list(cfg("t")))) == 3
    # the same delete by a role that may UPDATE (as the recipe's admin operations run)
    with PostgresSaver.from_conn_string(
        admin_url, schema=schema, row_level_security=True, integrity=key
    ) as admin:
        admin.delete_for_runs(["r1"])  # r2's checkpoint loses its parent: a tombstone
        assert len(list(admin.list(cfg("t")))) == 1
        assert admin.verify(thread_id="t").ok
        assert all(admin.get_tuple(cfg(f"thread-{run}")) for run in ("r1", "r2", "r3"))
