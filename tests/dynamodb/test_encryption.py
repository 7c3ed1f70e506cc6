"""Envelope encryption on DynamoDBSaver and AsyncDynamoDBSaver (moto's server, boto3 unpatched).

The tests read and edit the table's raw items with the same boto3 client the
saver uses: a dump of every item must hold no canary, every altered payload or
clear metadata index must fail with ``DecryptionError``, and the tenants' data
keys (items of their own partitions) must rotate, shred and outlive thread
deletes.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from langgraph_durable._core.records import StoredDataKey
from langgraph_durable.dynamodb import AsyncDynamoDBSaver, DynamoDBSaver
from langgraph_durable.dynamodb._ops import TTL_ATTRIBUTE, is_pointer_sk
from langgraph_durable.errors import CorruptRecordError, DecryptionError
from langgraph_durable.protect import Encryption, LocalKeyring
from tests.dynamodb.helpers import make_client, raw_items, table_dump
from tests.encryption_helpers import (
    Canaries,
    arun_canary_graph,
    build_canary_graph,
    canary_forms,
    canary_hits,
    flip_bit,
    local_encryption,
    meta_identity,
    run_canary_graph,
    state_has_canaries,
)
from tests.helpers import cfg, make_cp, put_chain, versioned_cp

MakeAsync = Callable[..., Awaitable[AsyncDynamoDBSaver]]


@pytest.fixture
def client(dynamodb_endpoint: str) -> Any:
    return make_client(dynamodb_endpoint)


def _saver(
    client: Any, table: str, encryption: Encryption | None = None, **settings: Any
) -> DynamoDBSaver:
    """A set-up sync saver on ``table``."""
    saver = DynamoDBSaver(client, table=table, encryption=encryption, **settings)
    saver.setup()
    return saver


@pytest.fixture
async def make_async(client: Any, dynamodb_table: str) -> AsyncIterator[MakeAsync]:
    """Makes set-up async savers on the test's table; closes them afterwards."""
    made: list[AsyncDynamoDBSaver] = []

    async def make(encryption: Encryption | None = None, **settings: Any) -> AsyncDynamoDBSaver:
        saver = AsyncDynamoDBSaver(client, table=dynamodb_table, encryption=encryption, **settings)
        await saver.setup()
        made.append(saver)
        return saver

    yield make
    for saver in made:
        await saver.close()


# ---- raw items -------------------------------------------------------------------


def _thread_items(client: Any, table: str, thread: str, kind: str) -> list[dict[str, Any]]:
    """A thread's (default tenant) pointer, blob or write items, sorted by sort key."""
    chosen = {
        "pointer": is_pointer_sk,
        "blob": lambda sk: sk.startswith("b#"),
        "write": lambda sk: "#w#" in sk,
    }[kind]
    items = [
        i
        for i in raw_items(client, table)
        if i["pk"]["S"] == f"default#{thread}" and chosen(i["sk"]["S"])
    ]
    return sorted(items, key=lambda i: i["sk"]["S"])


def _key_items(client: Any, table: str, tenant: str) -> list[dict[str, Any]]:
    """The data-key items of one tenant."""
    return [i for i in raw_items(client, table) if i["pk"]["S"] == f"{tenant}##keys"]


def _put_items(client: Any, table: str, *items: dict[str, Any]) -> None:
    for item in items:
        client.put_item(TableName=table, Item=item)


def _swap(
    client: Any, table: str, first: dict[str, Any], second: dict[str, Any], name: str
) -> None:
    """Exchange attribute ``name`` of two items."""
    first[name], second[name] = second[name], first[name]
    _put_items(client, table, first, second)


def _edit(
    client: Any, table: str, item: dict[str, Any], name: str, change: Callable[[bytes], bytes]
) -> None:
    """Rewrite binary attribute ``name`` of an item."""
    item[name] = {"B": change(bytes(item[name]["B"]))}
    _put_items(client, table, item)


def _edit_index(
    client: Any, table: str, item: dict[str, Any], change: Callable[[dict], None]
) -> None:
    """Rewrite the clear metadata index (``mi``) of a checkpoint pointer."""
    index = json.loads(item["mi"]["S"])
    change(index)
    item["mi"] = {"S": json.dumps(index, separators=(",", ":"))}
    _put_items(client, table, item)


def _pointer(c: Any, t: str, thread: str = "a", index: int = -1) -> dict[str, Any]:
    return _thread_items(c, t, thread, "pointer")[index]


def _blob(c: Any, t: str, thread: str = "a") -> dict[str, Any]:
    return _thread_items(c, t, thread, "blob")[-1]


def _write(c: Any, t: str, thread: str = "a") -> dict[str, Any]:
    return _thread_items(c, t, thread, "write")[-1]


def _drop_index(c: Any, t: str) -> None:
    item = _pointer(c, t)
    del item["mi"]
    _put_items(c, t, item)


#: Ways to alter thread "a" (threads "a" and "b" hold two checkpoints each, the
#: latest with a pending write); every one must make reading "a" fail.
TAMPERING: dict[str, Callable[[Any, str], None]] = {
    "swap body across threads": lambda c, t: _swap(c, t, _pointer(c, t), _pointer(c, t, "b"), "b"),
    "swap blob across threads": lambda c, t: _swap(c, t, _blob(c, t), _blob(c, t, "b"), "d"),
    "swap write across threads": lambda c, t: _swap(c, t, _write(c, t), _write(c, t, "b"), "v"),
    "swap metadata across checkpoints": lambda c, t: _swap(
        c, t, _pointer(c, t), _pointer(c, t, "a", 0), "m"
    ),
    "swap body across checkpoints": lambda c, t: _swap(
        c, t, _pointer(c, t), _pointer(c, t, "a", 0), "b"
    ),
    "swap clear metadata across checkpoints": lambda c, t: _swap(
        c, t, _pointer(c, t), _pointer(c, t, "a", 0), "mi"
    ),
    "truncate body": lambda c, t: _edit(c, t, _pointer(c, t), "b", lambda d: d[:-1]),
    "truncate body to its header": lambda c, t: _edit(c, t, _pointer(c, t), "b", lambda d: d[:12]),
    "truncate metadata": lambda c, t: _edit(c, t, _pointer(c, t), "m", lambda d: d[:-5]),
    "truncate blob": lambda c, t: _edit(c, t, _blob(c, t), "d", lambda d: d[: len(d) // 2]),
    "truncate write": lambda c, t: _edit(c, t, _write(c, t), "v", lambda d: d[:-1]),
    "flip a bit of the body": lambda c, t: _edit(c, t, _pointer(c, t), "b", flip_bit),
    "flip a bit of the metadata": lambda c, t: _edit(
        c, t, _pointer(c, t), "m", lambda d: flip_bit(d, len(d) // 2)
    ),
    "flip a bit of a blob": lambda c, t: _edit(c, t, _blob(c, t), "d", flip_bit),
    "flip a bit of a write": lambda c, t: _edit(
        c, t, _write(c, t), "v", lambda d: flip_bit(d, len(d) // 2)
    ),
    "flip a bit of the key id": lambda c, t: _edit(
        c, t, _pointer(c, t), "b", lambda d: flip_bit(d, 9)
    ),
    "flip a bit of the data-key version": lambda c, t: _edit(
        c, t, _pointer(c, t), "b", lambda d: flip_bit(d, 7)
    ),
    "edit the clear metadata": lambda c, t: _edit_index(
        c, t, _pointer(c, t), lambda mi: mi.update(step=42)
    ),
    "add to the clear metadata": lambda c, t: _edit_index(
        c, t, _pointer(c, t), lambda mi: mi.update(run_id="forged")
    ),
    "drop the clear metadata": _drop_index,
}


def _fill(saver: Any, thread: str, **extra: Any) -> list[dict[str, Any]]:
    """Two chained checkpoints (a blob each) and a pending write on the latest (sync API)."""
    configs = put_chain(saver, thread, 2, **extra)
    saver.put_writes(configs[-1], [("out", {"secret": thread})], "task")
    return configs


def _signature(tuples: list[Any]) -> list[tuple[Any, ...]]:
    """What a listing holds, comparable across threads (ids, values, metadata, writes)."""
    return [
        (
            t.config["configurable"]["checkpoint_id"],
            (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            t.checkpoint["channel_values"],
            t.checkpoint["channel_versions"],
            t.metadata,
            list(t.pending_writes or []),
        )
        for t in tuples
    ]


# ---- canary scan -------------------------------------------------------------------


def test_no_canary_reaches_the_table_when_encrypted(client: Any, dynamodb_table: str) -> None:
    canaries = Canaries()
    saver = _saver(client, dynamodb_table, local_encryption())
    state = run_canary_graph(saver, canaries)
    assert state_has_canaries(state, canaries)
    dump = table_dump(client, dynamodb_table)
    assert b"default##keys" in dump  # the data keys are in the dump too
    assert canary_hits(dump, canaries) == []
    # the same run unencrypted: the scan finds every canary
    plain = _saver(client, dynamodb_table)
    assert state_has_canaries(run_canary_graph(plain, canaries, "plain"), canaries)
    assert canary_hits(table_dump(client, dynamodb_table), canaries) == canaries.all()


async def test_no_canary_reaches_the_table_when_encrypted_async(
    client: Any, dynamodb_table: str, make_async: MakeAsync
) -> None:
    canaries = Canaries()
    saver = await make_async(local_encryption())
    state = await arun_canary_graph(saver, canaries)
    assert state_has_canaries(state, canaries)
    assert canary_hits(table_dump(client, dynamodb_table), canaries) == []
    plain = await make_async()
    assert state_has_canaries(await arun_canary_graph(plain, canaries, "plain"), canaries)
    assert canary_hits(table_dump(client, dynamodb_table), canaries) == canaries.all()


# ---- tampering -----------------------------------------------------------------------


@pytest.mark.parametrize("tamper", sorted(TAMPERING))
def test_tampering_fails_the_read(client: Any, dynamodb_table: str, tamper: str) -> None:
    saver = _saver(client, dynamodb_table, local_encryption())
    configs = _fill(saver, "a")
    _fill(saver, "b")
    assert saver.get_tuple(cfg("a")) is not None
    TAMPERING[tamper](client, dynamodb_table)
    with pytest.raises(DecryptionError):
        saver.get_tuple(cfg("a"))
    with pytest.raises(DecryptionError):
        saver.get_tuple(configs[-1])
    with pytest.raises(DecryptionError):
        list(saver.list(cfg("a")))
    with pytest.raises(DecryptionError):
        list(saver.list(None))  # across threads: the tenant's Scan
    fresh = _saver(client, dynamodb_table, saver.encryption)  # nothing cached
    with pytest.raises(DecryptionError):
        fresh.get_tuple(cfg("a"))


@pytest.mark.parametrize("tamper", sorted(TAMPERING))
async def test_tampering_fails_the_read_async(
    client: Any, dynamodb_table: str, make_async: MakeAsync, tamper: str
) -> None:
    saver = await make_async(local_encryption())
    configs = await asyncio.to_thread(_fill, saver, "a")
    await asyncio.to_thread(_fill, saver, "b")
    assert await saver.aget_tuple(cfg("a")) is not None
    TAMPERING[tamper](client, dynamodb_table)
    with pytest.raises(DecryptionError):
        await saver.aget_tuple(cfg("a"))
    with pytest.raises(DecryptionError):
        await saver.aget_tuple(configs[-1])
    with pytest.raises(DecryptionError):
        [t async for t in saver.alist(cfg("a"))]
    with pytest.raises(DecryptionError):
        [t async for t in saver.alist(None)]


def test_tampering_fails_get_state(client: Any, dynamodb_table: str) -> None:
    canaries = Canaries()
    saver = _saver(client, dynamodb_table, local_encryption())
    run_canary_graph(saver, canaries, "a")
    _edit(client, dynamodb_table, _blob(client, dynamodb_table), "d", flip_bit)
    graph = build_canary_graph(canaries, saver)
    with pytest.raises(DecryptionError, match="failed authentication"):
        graph.get_state({"configurable": {"thread_id": "a"}})


async def test_tampering_fails_get_state_async(
    client: Any, dynamodb_table: str, make_async: MakeAsync
) -> None:
    canaries = Canaries()
    saver = await make_async(local_encryption())
    await arun_canary_graph(saver, canaries, "a")
    _edit_index(client, dynamodb_table, _pointer(client, dynamodb_table), lambda mi: mi.pop("step"))
    graph = build_canary_graph(canaries, saver)
    with pytest.raises(DecryptionError, match="clear metadata"):
        await graph.aget_state({"configurable": {"thread_id": "a"}})


def test_the_clear_index_round_trips_as_the_pipeline_made_it(
    client: Any, dynamodb_table: str
) -> None:
    encryption = local_encryption(
        clear_metadata=("source", "step", "parents", "score", "tags"),
        searchable_metadata=("user_email",),
    )
    saver = _saver(client, dynamodb_table, encryption)
    metadata = {
        "source": "loop",
        "step": 3,
        "score": 0.25,
        "tags": ["x", {"y": None}],
        "user_email": "who@example.com",
        "secret": "hidden",
    }
    stored = saver.put(cfg("a"), make_cp(), metadata, {})
    tup = saver.get_tuple(stored)
    assert tup is not None and tup.metadata == metadata
    expected = saver.pipeline.metadata_index(meta_identity("default"), dict(tup.metadata))
    assert json.loads(_pointer(client, dynamodb_table)["mi"]["S"]) == expected
    assert expected["user_email"].startswith("bi1:") and "secret" not in expected


# ---- plaintext records -----------------------------------------------------------------


def test_plaintext_records_fail_unless_migrating(client: Any, dynamodb_table: str) -> None:
    plain = _saver(client, dynamodb_table)
    _fill(plain, "old")
    expected = _signature(list(plain.list(cfg("old"))))
    strict = _saver(client, dynamodb_table, local_encryption())
    with pytest.raises(DecryptionError, match="not encrypted"):
        strict.get_tuple(cfg("old"))
    with pytest.raises(DecryptionError, match="allow_plaintext"):
        list(strict.list(cfg("old")))
    migrating = _saver(client, dynamodb_table, local_encryption(allow_plaintext=True))
    assert _signature(list(migrating.list(cfg("old")))) == expected
    # new records of a migrating saver are encrypted
    put_chain(migrating, "old", 1)
    newest = _pointer(client, dynamodb_table, "old")
    assert newest["bt"]["S"] == newest["mt"]["S"] == "lgd-enc"
    assert len(list(migrating.list(cfg("old")))) == 3


async def test_plaintext_records_fail_unless_migrating_async(
    make_async: MakeAsync,
) -> None:
    plain = await make_async()
    await asyncio.to_thread(_fill, plain, "old")
    expected = _signature([t async for t in plain.alist(cfg("old"))])
    strict = await make_async(local_encryption())
    with pytest.raises(DecryptionError, match="not encrypted"):
        await strict.aget_tuple(cfg("old"))
    migrating = await make_async(local_encryption(allow_plaintext=True))
    assert _signature([t async for t in migrating.alist(cfg("old"))]) == expected


# ---- key rotation ----------------------------------------------------------------------


def _keyrings() -> tuple[Encryption, Encryption, Encryption, Encryption]:
    """Encryption under key A; A and B with B active; B alone; A alone."""
    a, b = os.urandom(32), os.urandom(32)
    return (
        Encryption(LocalKeyring({"A": a}, "A")),
        Encryption(LocalKeyring({"A": a, "B": b}, "B")),
        Encryption(LocalKeyring({"B": b}, "B")),
        Encryption(LocalKeyring({"A": a}, "A")),
    )


def _check_rotated(client: Any, table: str, only_b: Any) -> None:
    for tenant in ("default", "org"):
        assert [i["key_id"]["S"] for i in _key_items(client, table, tenant)] == ["B"]
    for extra in ({}, {"tenant_id": "org"}):
        for thread in ("t1", "t2"):
            tuples = list(only_b.list(cfg(thread, **extra)))
            assert [t.checkpoint["channel_values"]["step"] for t in tuples] == [1, 0]
            assert tuples[0].pending_writes == [("task", "out", {"secret": thread})]


def test_rotate_keys_then_read_with_the_new_key_only(client: Any, dynamodb_table: str) -> None:
    under_a, a_and_b, only_b, only_a = _keyrings()
    first = _saver(client, dynamodb_table, under_a)
    _fill(first, "t1")
    _fill(first, "t1", tenant_id="org")
    second = _saver(client, dynamodb_table, a_and_b)
    _fill(second, "t2")
    _fill(second, "t2", tenant_id="org")
    assert second.rotate_keys() == {"tenants": 2, "rewrapped": 2, "current": 0}
    assert second.rotate_keys() == {"tenants": 2, "rewrapped": 0, "current": 2}
    _check_rotated(client, dynamodb_table, _saver(client, dynamodb_table, only_b))
    with pytest.raises(DecryptionError, match="not in the keyring"):
        _saver(client, dynamodb_table, only_a).get_tuple(cfg("t1"))


async def test_rotate_keys_then_read_with_the_new_key_only_async(
    client: Any, dynamodb_table: str, make_async: MakeAsync
) -> None:
    under_a, a_and_b, only_b, _only_a = _keyrings()
    first = await make_async(under_a)
    await asyncio.to_thread(_fill, first, "t1")
    await asyncio.to_thread(_fill, first, "t1", tenant_id="org")
    second = await make_async(a_and_b)
    await asyncio.to_thread(_fill, second, "t2")
    await asyncio.to_thread(_fill, second, "t2", tenant_id="org")
    assert await second.arotate_keys("org") == {"tenants": 1, "rewrapped": 1, "current": 0}
    assert await second.arotate_keys() == {"tenants": 2, "rewrapped": 1, "current": 1}
    reader = await make_async(only_b)
    await asyncio.to_thread(_check_rotated, client, dynamodb_table, reader)


def test_a_reader_loads_data_key_versions_made_after_its_cache(
    client: Any, dynamodb_table: str
) -> None:
    keyring = LocalKeyring({"k": os.urandom(32)}, "k")
    reader = _saver(client, dynamodb_table, Encryption(keyring))
    writer = _saver(client, dynamodb_table, Encryption(keyring, max_key_uses=2))
    put_chain(writer, "t", 1)
    assert reader.get_tuple(cfg("t")) is not None  # caches version 1
    put_chain(writer, "u", 3)  # each put moves to a new version
    versions = [int(i["sk"]["S"]) for i in _key_items(client, dynamodb_table, "default")]
    assert versions == list(range(1, len(versions) + 1)) and len(versions) >= 3
    assert [t.checkpoint["channel_values"]["step"] for t in reader.list(cfg("u"))] == [2, 1, 0]
    assert len(list(reader.list(None))) == 4


# ---- shredding ---------------------------------------------------------------------


def test_shred_tenant_makes_its_records_unreadable(client: Any, dynamodb_table: str) -> None:
    encryption = local_encryption()
    saver = _saver(client, dynamodb_table, encryption)
    _fill(saver, "x", tenant_id="t1")
    _fill(saver, "x", tenant_id="t2")
    assert saver.shred_tenant("t1") == 1
    assert saver.shred_tenant("t1") == 0
    (tombstone,) = _key_items(client, dynamodb_table, "t1")
    assert "wrapped" not in tombstone and tombstone["key_id"]["S"] == ""
    fresh = _saver(client, dynamodb_table, encryption)
    for reader in (fresh, saver):
        with pytest.raises(DecryptionError, match="shredded"):
            reader.get_tuple(cfg("x", tenant_id="t1"))
        with pytest.raises(DecryptionError, match="shredded"):
            list(reader.list(cfg("x", tenant_id="t1")))
        tup = reader.get_tuple(cfg("x", tenant_id="t2"))
        assert tup is not None and tup.pending_writes == [("task", "out", {"secret": "x"})]
    assert fresh.rotate_keys() == {"tenants": 2, "rewrapped": 0, "current": 1}


async def test_shred_tenant_makes_its_records_unreadable_async(make_async: MakeAsync) -> None:
    encryption = local_encryption()
    saver = await make_async(encryption)
    await asyncio.to_thread(_fill, saver, "x", tenant_id="t1")
    await asyncio.to_thread(_fill, saver, "x", tenant_id="t2")
    assert await saver.ashred_tenant("t1") == 1
    fresh = await make_async(encryption)
    with pytest.raises(DecryptionError, match="shredded"):
        await fresh.aget_tuple(cfg("x", tenant_id="t1"))
    with pytest.raises(DecryptionError, match="shredded"):
        [t async for t in fresh.alist(cfg("x", tenant_id="t1"))]
    assert len([t async for t in fresh.alist(cfg("x", tenant_id="t2"))]) == 2


# ---- data-key items ------------------------------------------------------------------


def test_key_store_operations(client: Any, dynamodb_table: str) -> None:
    saver = _saver(client, dynamodb_table)
    run, ops = saver._run, saver._ops
    first = StoredDataKey(1, "A", b"wrapped-1", 100.5)
    assert run(ops.data_keys("t")) == [] and run(ops.data_key_tenants()) == []
    assert run(ops.add_data_key("t", first)) is True
    assert run(ops.add_data_key("t", StoredDataKey(1, "A", b"other", 1.0))) is False
    for version in range(2, 13):  # past 9: versions sort as numbers
        assert run(ops.add_data_key("t", StoredDataKey(version, "A", b"w", 200.0)))
    odd = "u#%x\x01é"
    assert run(ops.add_data_key(odd, StoredDataKey(1, "A", b"u", 1.0)))
    assert run(ops.data_keys("t"))[0] == first
    assert [k.version for k in run(ops.data_keys("t"))] == list(range(1, 13))
    assert run(ops.data_key_tenants()) == sorted(["t", odd])
    assert run(ops.rewrap_data_key("t", 1, b"stale", "B", b"new")) is False
    assert run(ops.rewrap_data_key("t", 1, b"wrapped-1", "B", b"new")) is True
    assert run(ops.data_keys("t"))[0] == StoredDataKey(1, "B", b"new", 100.5)
    assert run(ops.shred_data_keys("t")) == 12
    assert run(ops.shred_data_keys("t")) == 0
    assert {(k.key_id, k.wrapped) for k in run(ops.data_keys("t"))} == {("", None)}
    assert run(ops.rewrap_data_key("t", 1, b"new", "C", b"again")) is False
    assert run(ops.data_keys(odd)) == [StoredDataKey(1, "A", b"u", 1.0)]
    assert run(ops.data_key_tenants()) == sorted(["t", odd])


def test_data_keys_outlive_thread_deletes_and_carry_no_ttl(
    client: Any, dynamodb_table: str
) -> None:
    encryption = local_encryption()
    saver = _saver(client, dynamodb_table, encryption, ttl=3600)
    put_chain(saver, "runs", 2, run_id="r1")
    put_chain(saver, "pruned", 3)
    put_chain(saver, "deleted", 1)
    put_chain(saver, "#keys", 1)  # a thread spelled like the key partition
    put_chain(saver, "t", 1, tenant_id="org")
    keys = _key_items(client, dynamodb_table, "default")
    assert len(keys) == 1 and TTL_ATTRIBUTE not in keys[0]
    saver.delete_for_runs(["r1"])
    saver.prune(["pruned"], strategy="keep_latest")
    saver.prune(["pruned"], strategy="delete")
    saver.delete_thread("deleted")
    saver.delete_thread("#keys")
    saver.delete_thread("#keys", tenant_id="org")
    saver.prune(["t", "#keys"], strategy="delete", tenant_id="org")
    assert _key_items(client, dynamodb_table, "default") == keys
    assert len(_key_items(client, dynamodb_table, "org")) == 1
    assert list(saver.list(None)) == []
    assert saver.rotate_keys() == {"tenants": 2, "rewrapped": 0, "current": 2}
    fresh = _saver(client, dynamodb_table, encryption, ttl=3600)
    put_chain(fresh, "again", 1)
    assert fresh.get_tuple(cfg("again")) is not None
    assert _key_items(client, dynamodb_table, "default") == keys  # same version reused


# ---- copy_thread ---------------------------------------------------------------------


def test_copy_thread_reseals_for_the_target(client: Any, dynamodb_table: str) -> None:
    canaries = Canaries()
    saver = _saver(client, dynamodb_table, local_encryption())
    state = run_canary_graph(saver, canaries, "src")
    source = _signature(list(saver.list(cfg("src"))))
    assert any(entry[5] for entry in source)  # some checkpoints carry pending writes
    saver.copy_thread("src", "dst")
    assert _signature(list(saver.list(cfg("dst")))) == source
    assert _signature(list(saver.list(cfg("src")))) == source
    graph = build_canary_graph(canaries, saver)
    assert graph.get_state({"configurable": {"thread_id": "dst"}}).values == state.values
    assert canary_hits(table_dump(client, dynamodb_table), canaries) == []


async def test_copy_thread_reseals_for_the_target_async(make_async: MakeAsync) -> None:
    canaries = Canaries()
    saver = await make_async(local_encryption())
    await arun_canary_graph(saver, canaries, "src")
    source = _signature([t async for t in saver.alist(cfg("src"))])
    await saver.acopy_thread("src", "dst")
    assert _signature([t async for t in saver.alist(cfg("dst"))]) == source
    assert _signature([t async for t in saver.alist(cfg("src"))]) == source


# ---- filters on encrypted metadata ----------------------------------------------------------


def _put_emails(saver: DynamoDBSaver, thread: str, emails: list[str]) -> list[str]:
    """A chain of checkpoints whose metadata names ``emails`` in turn; their ids."""
    ids: list[str] = []
    for step, email in enumerate(emails):
        parent = ids[-1] if ids else None
        stored = saver.put(
            cfg(thread, checkpoint_id=parent),
            make_cp(),
            {"source": "loop", "step": step, "user_email": email},
            {},
        )
        ids.append(stored["configurable"]["checkpoint_id"])
    return ids


def _check_email_filters(saver: DynamoDBSaver, e1: str, e2: str) -> None:
    ids = _put_emails(saver, "f", [e1, e2, e1])
    _put_emails(saver, "g", [e2])

    def listed(config: Any, **kwargs: Any) -> list[str]:
        return [t.config["configurable"]["checkpoint_id"] for t in saver.list(config, **kwargs)]

    assert listed(cfg("f"), filter={"user_email": e1}) == [ids[2], ids[0]]
    assert listed(cfg("f"), filter={"user_email": e1}, limit=1) == [ids[2]]
    assert listed(cfg("f"), filter={"user_email": e1, "source": "loop", "step": 0}) == [ids[0]]
    assert listed(cfg("f"), filter={"user_email": "nobody@example.com"}) == []
    assert len(listed(None, filter={"user_email": e2})) == 2  # across threads
    assert listed({"configurable": {"thread_id": "f"}}, filter={"user_email": e2}) == [ids[1]]


def test_filter_on_encrypted_metadata(client: Any, dynamodb_table: str) -> None:
    e1, e2 = Canaries().email, Canaries().email
    saver = _saver(client, dynamodb_table, local_encryption())
    _check_email_filters(saver, e1, e2)
    dump = table_dump(client, dynamodb_table)
    assert e1.encode() not in dump and e2.encode() not in dump


def test_filter_on_searchable_metadata(client: Any, dynamodb_table: str) -> None:
    e1, e2 = Canaries().email, Canaries().email
    saver = _saver(client, dynamodb_table, local_encryption(searchable_metadata=("user_email",)))
    _check_email_filters(saver, e1, e2)
    blinds = [
        json.loads(p["mi"]["S"])["user_email"]
        for p in _thread_items(client, dynamodb_table, "f", "pointer")
    ]
    assert all(b.startswith("bi1:") for b in blinds)
    assert blinds[0] == blinds[2] != blinds[1]
    dump = table_dump(client, dynamodb_table)
    assert not [form for email in (e1, e2) for form in canary_forms(email) if form in dump]


async def test_filter_on_searchable_metadata_async(make_async: MakeAsync) -> None:
    e1, e2 = Canaries().email, Canaries().email
    saver = await make_async(local_encryption(searchable_metadata=("user_email",)))
    for email in (e1, e2, e1):
        await saver.aput(cfg("f"), make_cp(), {"user_email": email}, {})
    found = [t async for t in saver.alist(cfg("f"), filter={"user_email": e1})]
    assert [t.metadata["user_email"] for t in found] == [e1, e1]
    assert len([t async for t in saver.alist(None, filter={"user_email": e2}, limit=5)]) == 1


# ---- large payloads --------------------------------------------------------------------


def _big(canaries: Canaries, size: int) -> str:
    return canaries.message + os.urandom(size // 2).hex()


def test_large_encrypted_payloads_are_chunked(client: Any, dynamodb_table: str) -> None:
    canaries = Canaries()
    saver = _saver(client, dynamodb_table, local_encryption())
    cp = make_cp(note=_big(canaries, 500_000), blob=[_big(canaries, 700_000)])
    cp["channel_versions"] = {"note": "1", "blob": "1"}
    stored = saver.put(cfg("big"), cp, {"source": "input", "note": canaries.note}, {"blob": "1"})
    value = {"tool": _big(canaries, 450_000)}
    saver.put_writes(stored, [("out", value)], "task")
    tup = saver.get_tuple(cfg("big"))
    assert tup is not None and tup.checkpoint["channel_values"] == cp["channel_values"]
    assert tup.pending_writes == [("task", "out", value)]
    assert _signature(list(saver.list(cfg("big")))) == _signature([tup])
    chunks = [i for i in raw_items(client, dynamodb_table) if "#k#" in i["sk"]["S"]]
    assert {i["sk"]["S"].split("#k#")[1][0] for i in chunks} == {"b", "d", "v"}
    assert canary_hits(table_dump(client, dynamodb_table), canaries) == []
    _edit(client, dynamodb_table, chunks[0], "d", flip_bit)
    with pytest.raises((CorruptRecordError, DecryptionError)):  # the chunk's hash, or the AEAD
        saver.get_tuple(cfg("big"))


async def test_large_encrypted_payloads_are_chunked_async(make_async: MakeAsync) -> None:
    canaries = Canaries()
    saver = await make_async(local_encryption())
    cp = make_cp(blob=[_big(canaries, 900_000)])
    cp["channel_versions"] = {"blob": "1"}
    stored = await saver.aput(cfg("big"), cp, {}, {"blob": "1"})
    await saver.aput_writes(stored, [("out", _big(canaries, 420_000))], "task")
    tup = await saver.aget_tuple(cfg("big"))
    assert tup is not None and tup.checkpoint["channel_values"] == cp["channel_values"]
    assert len(tup.pending_writes[0][2]) > 400_000


# ---- construction ------------------------------------------------------------------


async def test_from_conn_string_passes_encryption_on(
    client: Any, dynamodb_endpoint: str, dynamodb_table: str
) -> None:
    url = f"dynamodb://{dynamodb_table}?region=us-east-1&endpoint={dynamodb_endpoint}"
    encryption = local_encryption()
    async with AsyncDynamoDBSaver.from_conn_string(url, encryption=encryption) as saver:
        assert saver.encryption is encryption
        await saver.setup()
        cp = versioned_cp(secret=["hidden"])
        await saver.aput(cfg("a"), cp, {}, cp["channel_versions"])
    with DynamoDBSaver.from_conn_string(url, encryption=encryption) as sync_saver:
        assert sync_saver.encryption is encryption
        tup = sync_saver.get_tuple(cfg("a"))
        assert tup is not None and tup.checkpoint["channel_values"] == {"secret": ["hidden"]}
    assert b"hidden" not in table_dump(client, dynamodb_table)
