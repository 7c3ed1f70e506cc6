"""Envelope encryption on Redis: nothing readable at rest, tampering detected, keys managed.

Every test runs on a real Redis (and the rig's 3-node cluster where named) and
reads or edits the stored keys directly, as someone with access to the server
could.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import ormsgpack
import pytest
import redis
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from redis.cluster import RedisCluster

from langgraph_durable.errors import CorruptRecordError, DecryptionError
from langgraph_durable.protect import Encryption, LocalKeyring
from langgraph_durable.protect.keys import StoredDataKey
from langgraph_durable.redis import AsyncRedisSaver, RedisSaver
from langgraph_durable.redis._ops import DELTA_MARK
from tests.encryption_helpers import (
    Canaries,
    arun_canary_graph,
    build_canary_graph,
    canary_hits,
    flip_bit,
    local_encryption,
    meta_identity,
    run_canary_graph,
    state_has_canaries,
)
from tests.helpers import cfg, put_chain, versioned_cp

from .test_delta import blob_kinds, chat_graph, history, messages_dump, run_turns

# ---------------------------------------------------------------- helpers


@contextmanager
def sync_saver(url: str, prefix: str, encryption: Encryption | None, **kw: Any) -> Iterator[Any]:
    """A set-up ``RedisSaver`` on ``url`` (``redis+cluster://`` for the cluster)."""
    with RedisSaver.from_conn_string(url, prefix=prefix, encryption=encryption, **kw) as saver:
        saver.setup()
        yield saver


@asynccontextmanager
async def async_saver(
    url: str, prefix: str, encryption: Encryption | None, **kw: Any
) -> AsyncIterator[Any]:
    """A set-up ``AsyncRedisSaver`` on ``url``."""
    async with AsyncRedisSaver.from_conn_string(
        url, prefix=prefix, encryption=encryption, **kw
    ) as saver:
        await saver.setup()
        yield saver


def raw_client(url: str) -> Any:
    """A plain sync client (a ``RedisCluster`` for a ``redis+cluster://`` URL)."""
    if url.startswith("redis+cluster://"):
        return RedisCluster.from_url("redis://" + url.split("://", 1)[1])
    return redis.Redis.from_url(url)


def _key_parts(node: Any, key: bytes) -> list[bytes]:
    """Everything one key holds, whatever its type (field names and members included)."""
    kind = node.type(key).decode()
    if kind == "string":
        return [node.get(key)]
    if kind == "hash":
        return [part for pair in node.hgetall(key).items() for part in pair]
    if kind == "set":
        return sorted(node.smembers(key))
    if kind == "zset":
        return [b"%s %r" % (m, s) for m, s in node.zrange(key, 0, -1, withscores=True)]
    if kind == "list":
        return list(node.lrange(key, 0, -1))
    if kind == "stream":
        return [repr(entry).encode() for entry in node.xrange(key)]
    raise AssertionError(f"key {key!r} has a type the dump does not read: {kind}")


def dump_prefix(client: Any, prefix: str) -> bytes:
    """Every key of ``prefix`` (names, fields, values, members) as one blob.

    On a cluster each primary is scanned (SCAN only sees the node it runs on).
    """
    if isinstance(client, RedisCluster):
        nodes = [client.get_redis_connection(n) for n in client.get_primaries()]
    else:
        nodes = [client]
    out = bytearray()
    for node in nodes:
        for key in sorted(node.scan_iter(match=prefix + ":*", count=1000)):
            out += b"\n".join([key, *_key_parts(node, key)]) + b"\n"
    assert out, f"no key of prefix {prefix!r} was found"
    return bytes(out)


def field(checkpoint_id: str, ns: str = "") -> bytes:
    """The field of a checkpoint in a thread's hashes."""
    return f"{ns}\x00{checkpoint_id}".encode()


class Raw:
    """Direct access to one thread's stored records, as an attacker with Redis access has.

    Args:
        client: A plain sync client.
        saver: A saver on the same prefix (for its key layout).
        thread: The thread id.
        tenant: The tenant id.
    """

    BODY, METADATA = 2, 4  # positions in a stored checkpoint payload

    def __init__(self, client: Any, saver: Any, thread: str, tenant: str = "default") -> None:
        self.client = client
        self.h, self.c, self.b, self.w, _i, _n = saver.keys.thread(tenant, thread)

    def payload(self, cid: str) -> list[Any]:
        """[metadata index JSON, body type, body, metadata type, metadata]."""
        return list(ormsgpack.unpackb(self.client.hget(self.c, field(cid))))

    def set_payload(self, cid: str, payload: list[Any]) -> None:
        self.client.hset(self.c, field(cid), ormsgpack.packb(payload))

    def edit_payload(self, cid: str, part: int, change: Callable[[Any], Any]) -> None:
        payload = self.payload(cid)
        payload[part] = change(payload[part])
        self.set_payload(cid, payload)

    def edit_index(self, cid: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Change the clear metadata index of a checkpoint in place."""
        payload = self.payload(cid)
        index = json.loads(payload[0])
        change(index)
        payload[0] = json.dumps(index, separators=(",", ":"))
        self.set_payload(cid, payload)

    def edit(self, key: str, name: bytes, change: Callable[[bytes], bytes]) -> None:
        self.client.hset(key, name, change(self.client.hget(key, name)))

    def blob_fields(self, channel: str) -> list[bytes]:
        return sorted(f for f in self.client.hkeys(self.b) if f"\x00{channel}\x00".encode() in f)

    def write_fields(self) -> list[bytes]:
        """Fields that hold write frames ("<ns>\\0<id>\\0<task>")."""
        return [f for f in self.client.hkeys(self.w) if f.count(b"\x00") == 2]


def ids(saver: Any, thread: str, **extra: Any) -> list[str]:
    """Checkpoint ids of a thread, newest first."""
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg(thread, **extra))]


def comparable(tup: Any) -> tuple[Any, ...]:
    """A checkpoint tuple without the thread it was read from."""
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return (
        tup.config["configurable"]["checkpoint_id"],
        repr(tup.checkpoint),
        tup.metadata,
        parent,
        repr(list(tup.pending_writes or ())),
    )


def keyring(**keys: bytes) -> Callable[[str], Encryption]:
    """Encryption settings over named keys: ``keyring(A=a, B=b)("B")`` has B active."""
    return lambda active: Encryption(LocalKeyring(keys, active))


def seed_threads(saver: Any, **extra: Any) -> None:
    """Threads t1 and t2 of two checkpoints each; t1's latest gets a pending write."""
    for thread in ("t1", "t2"):
        put_chain(saver, thread, 2, **extra)
    latest = ids(saver, "t1", **extra)[0]
    saver.put_writes(cfg("t1", checkpoint_id=latest, **extra), [("payload", {"w": 1})], "task-1")


# ---------------------------------------------------------------- canaries


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plain"])
def test_canaries_not_stored_sync(redis_url: str, redis_prefix: str, encrypted: bool) -> None:
    c = Canaries()
    enc = local_encryption() if encrypted else None
    with sync_saver(redis_url, redis_prefix, enc) as saver:
        state = run_canary_graph(saver, c)
        dump = dump_prefix(saver.client, redis_prefix)
    assert state_has_canaries(state, c)
    if encrypted:
        assert canary_hits(dump, c) == []
        assert b"lgd-enc" in dump
    else:
        assert canary_hits(dump, c) == c.all()


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plain"])
async def test_canaries_not_stored_async(
    redis_url: str, redis_prefix: str, encrypted: bool
) -> None:
    c = Canaries()
    enc = local_encryption() if encrypted else None
    async with async_saver(redis_url, redis_prefix, enc) as saver:
        state = await arun_canary_graph(saver, c)
    client = raw_client(redis_url)
    try:
        dump = dump_prefix(client, redis_prefix)
    finally:
        client.close()
    assert state_has_canaries(state, c)
    assert canary_hits(dump, c) == ([] if encrypted else c.all())


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plain"])
def test_canaries_not_stored_cluster(
    redis_cluster_conn_string: str, redis_prefix: str, encrypted: bool
) -> None:
    c = Canaries()
    enc = local_encryption() if encrypted else None
    with sync_saver(redis_cluster_conn_string, redis_prefix, enc) as saver:
        assert isinstance(saver.client, RedisCluster)
        state = run_canary_graph(saver, c)
        dump = dump_prefix(saver.client, redis_prefix)
    assert state_has_canaries(state, c)
    assert canary_hits(dump, c) == ([] if encrypted else c.all())


async def test_canaries_not_stored_cluster_async(
    redis_cluster_conn_string: str, redis_prefix: str
) -> None:
    c = Canaries()
    async with async_saver(redis_cluster_conn_string, redis_prefix, local_encryption()) as saver:
        state = await arun_canary_graph(saver, c)
    client = raw_client(redis_cluster_conn_string)
    try:
        dump = dump_prefix(client, redis_prefix)
    finally:
        client.close()
    assert state_has_canaries(state, c)
    assert canary_hits(dump, c) == []


# ---------------------------------------------------------------- tampering


def _swap(raw_a: Raw, cid_a: str, raw_b: Raw, cid_b: str, part: int) -> None:
    a, b = raw_a.payload(cid_a), raw_b.payload(cid_b)
    a[part], b[part] = b[part], a[part]
    raw_a.set_payload(cid_a, a)
    raw_b.set_payload(cid_b, b)


def _swap_body_threads(client: Any, saver: Any) -> None:
    t1, t2 = Raw(client, saver, "t1"), Raw(client, saver, "t2")
    _swap(t1, ids(saver, "t1")[0], t2, ids(saver, "t2")[0], Raw.BODY)


def _swap_blob_threads(client: Any, saver: Any) -> None:
    t1, t2 = Raw(client, saver, "t1"), Raw(client, saver, "t2")
    name = t1.blob_fields("payload")[-1]
    one, two = client.hget(t1.b, name), client.hget(t2.b, name)
    assert one != two
    client.hset(t1.b, name, two)
    client.hset(t2.b, name, one)


def _swap_body_checkpoints(client: Any, saver: Any) -> None:
    t1 = Raw(client, saver, "t1")
    newest, oldest = ids(saver, "t1")
    _swap(t1, newest, t1, oldest, Raw.BODY)


def _swap_metadata_checkpoints(client: Any, saver: Any) -> None:
    t1 = Raw(client, saver, "t1")
    newest, oldest = ids(saver, "t1")
    _swap(t1, newest, t1, oldest, Raw.METADATA)


def _truncate_body(client: Any, saver: Any) -> None:
    Raw(client, saver, "t1").edit_payload(ids(saver, "t1")[0], Raw.BODY, lambda d: d[:-1])


def _shorter_blob(value: bytes) -> bytes:
    """A stored full blob (msgpack [type, data]) whose ciphertext lost its last byte."""
    type_, data = ormsgpack.unpackb(value)
    return ormsgpack.packb([type_, data[:-1]])


def _truncate_blob(client: Any, saver: Any) -> None:
    t1 = Raw(client, saver, "t1")
    t1.edit(t1.b, t1.blob_fields("payload")[-1], _shorter_blob)


def _flip_body(client: Any, saver: Any) -> None:
    Raw(client, saver, "t1").edit_payload(ids(saver, "t1")[0], Raw.BODY, flip_bit)


def _flip_body_key_version(client: Any, saver: Any) -> None:
    # byte 7 is the low byte of the data-key version in the header (1 -> 0)
    Raw(client, saver, "t1").edit_payload(ids(saver, "t1")[0], Raw.BODY, lambda d: flip_bit(d, 7))


def _flip_metadata(client: Any, saver: Any) -> None:
    Raw(client, saver, "t1").edit_payload(ids(saver, "t1")[0], Raw.METADATA, flip_bit)


def _flip_blob(client: Any, saver: Any) -> None:
    t1 = Raw(client, saver, "t1")
    t1.edit(t1.b, t1.blob_fields("payload")[-1], flip_bit)  # msgpack [type, data]: data last


def _flip_write(client: Any, saver: Any) -> None:
    t1 = Raw(client, saver, "t1")
    (name,) = t1.write_fields()
    t1.edit(t1.w, name, flip_bit)  # a frame ends with its data


def _index_value(client: Any, saver: Any) -> None:
    Raw(client, saver, "t1").edit_index(ids(saver, "t1")[0], lambda i: i.update(step=99))


def _index_added(client: Any, saver: Any) -> None:
    Raw(client, saver, "t1").edit_index(
        ids(saver, "t1")[0], lambda i: i.update(user_email="x@example.com")
    )


def _index_dropped(client: Any, saver: Any) -> None:
    Raw(client, saver, "t1").edit_index(ids(saver, "t1")[0], lambda i: i.pop("source"))


TAMPERS = {
    "swap-body-threads": _swap_body_threads,
    "swap-blob-threads": _swap_blob_threads,
    "swap-body-checkpoints": _swap_body_checkpoints,
    "swap-metadata-checkpoints": _swap_metadata_checkpoints,
    "truncate-body": _truncate_body,
    "truncate-blob": _truncate_blob,
    "flip-body": _flip_body,
    "flip-body-key-version": _flip_body_key_version,
    "flip-metadata": _flip_metadata,
    "flip-blob": _flip_blob,
    "flip-write": _flip_write,
    "index-value": _index_value,
    "index-added": _index_added,
    "index-dropped": _index_dropped,
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_tampering_is_detected_sync(redis_url: str, redis_prefix: str, tamper: str) -> None:
    client = raw_client(redis_url)
    try:
        with sync_saver(redis_url, redis_prefix, local_encryption()) as saver:
            seed_threads(saver)
            saver.get_tuple(cfg("t1"))  # reads before the change
            TAMPERS[tamper](client, saver)
            with pytest.raises(DecryptionError):
                saver.get_tuple(cfg("t1"))
            with pytest.raises(DecryptionError):
                list(saver.list(cfg("t1")))
            with pytest.raises(DecryptionError):
                list(saver.list(None))  # across the tenant's threads
    finally:
        client.close()


@pytest.mark.parametrize(
    "tamper", ["swap-body-threads", "truncate-blob", "flip-write", "index-value"]
)
async def test_tampering_is_detected_async(redis_url: str, redis_prefix: str, tamper: str) -> None:
    client = raw_client(redis_url)
    try:
        async with async_saver(redis_url, redis_prefix, local_encryption()) as saver:
            await saver.loop.run_in_executor(None, seed_threads, saver)
            await saver.loop.run_in_executor(None, TAMPERS[tamper], client, saver)
            with pytest.raises(DecryptionError):
                await saver.aget_tuple(cfg("t1"))
            with pytest.raises(DecryptionError):
                [t async for t in saver.alist(cfg("t1"))]
    finally:
        client.close()


def test_cut_blob_is_refused(redis_url: str, redis_prefix: str) -> None:
    """A blob cut short of its framing fails before any decryption is tried."""
    client = raw_client(redis_url)
    try:
        with sync_saver(redis_url, redis_prefix, local_encryption()) as saver:
            seed_threads(saver)
            t1 = Raw(client, saver, "t1")
            t1.edit(t1.b, t1.blob_fields("payload")[-1], lambda v: v[:-1])
            with pytest.raises(CorruptRecordError):
                saver.get_tuple(cfg("t1"))
    finally:
        client.close()


def test_tampered_graph_state_is_refused(redis_url: str, redis_prefix: str) -> None:
    c = Canaries()
    client = raw_client(redis_url)
    try:
        with sync_saver(redis_url, redis_prefix, local_encryption()) as saver:
            run_canary_graph(saver, c)
            graph = build_canary_graph(c, saver)
            config = {"configurable": {"thread_id": "canary"}}
            Raw(client, saver, "canary").edit_payload(ids(saver, "canary")[0], Raw.BODY, flip_bit)
            with pytest.raises(DecryptionError):
                graph.get_state(config)
            with pytest.raises(DecryptionError):
                list(graph.get_state_history(config))
    finally:
        client.close()


def test_tampered_cluster_record_is_refused(
    redis_cluster_conn_string: str, redis_prefix: str
) -> None:
    client = raw_client(redis_cluster_conn_string)
    try:
        with sync_saver(redis_cluster_conn_string, redis_prefix, local_encryption()) as saver:
            seed_threads(saver)
            _swap_body_threads(client, saver)
            with pytest.raises(DecryptionError):
                saver.get_tuple(cfg("t2"))
            with pytest.raises(DecryptionError):
                list(saver.list(None))
    finally:
        client.close()


def test_stored_index_is_the_pipeline_index(redis_url: str, redis_prefix: str) -> None:
    """The clear index read back equals what the pipeline made of the metadata."""
    enc = local_encryption(searchable_metadata=("user_email",))
    client = raw_client(redis_url)
    try:
        with sync_saver(redis_url, redis_prefix, enc) as saver:
            put_chain(saver, "t1", 2, tenant_id="acme", user_email="a@example.com")
            for tup in saver.list(cfg("t1", tenant_id="acme")):
                cid = tup.config["configurable"]["checkpoint_id"]
                stored = json.loads(Raw(client, saver, "t1", "acme").payload(cid)[0])
                assert stored == saver.pipeline.metadata_index(meta_identity("acme"), tup.metadata)
                assert stored["user_email"].startswith("bi1:")
                assert stored["source"] == "loop"
    finally:
        client.close()


# ---------------------------------------------------------------- plaintext migration


def test_plaintext_records_need_migration_mode(redis_url: str, redis_prefix: str) -> None:
    with sync_saver(redis_url, redis_prefix, None) as plain:
        seed_threads(plain)
        want = [comparable(t) for t in plain.list(cfg("t1"))]
    with sync_saver(redis_url, redis_prefix, local_encryption()) as strict:
        with pytest.raises(DecryptionError, match="not encrypted"):
            strict.get_tuple(cfg("t1"))
        with pytest.raises(DecryptionError):
            list(strict.list(cfg("t1")))
    with sync_saver(redis_url, redis_prefix, local_encryption(allow_plaintext=True)) as migrating:
        assert [comparable(t) for t in migrating.list(cfg("t1"))] == want
        put_chain(migrating, "t3", 1)  # new records are encrypted
        stored = Raw(migrating.client, migrating, "t3").payload(ids(migrating, "t3")[0])
        assert stored[1] == stored[3] == "lgd-enc"


async def test_plaintext_records_need_migration_mode_async(
    redis_url: str, redis_prefix: str
) -> None:
    with sync_saver(redis_url, redis_prefix, None) as plain:
        seed_threads(plain)
        want = comparable(plain.get_tuple(cfg("t1")))
    async with async_saver(redis_url, redis_prefix, local_encryption()) as strict:
        with pytest.raises(DecryptionError):
            await strict.aget_tuple(cfg("t1"))
    enc = local_encryption(allow_plaintext=True)
    async with async_saver(redis_url, redis_prefix, enc) as migrating:
        assert comparable(await migrating.aget_tuple(cfg("t1"))) == want


# ---------------------------------------------------------------- rotation


def test_rotate_keys_sync(redis_url: str, redis_prefix: str) -> None:
    a, b = os.urandom(32), os.urandom(32)
    kr = keyring(A=a, B=b)
    with sync_saver(redis_url, redis_prefix, kr("A")) as saver:
        put_chain(saver, "t1", 2)
        put_chain(saver, "t1", 1, tenant_id="acme")
    with sync_saver(redis_url, redis_prefix, kr("B")) as saver:
        put_chain(saver, "t2", 2)  # still under the data key A wrapped
        assert saver.rotate_keys() == {"tenants": 2, "rewrapped": 2, "current": 0}
        assert saver.rotate_keys() == {"tenants": 2, "rewrapped": 0, "current": 2}
        rows = saver._run(saver._ops.data_keys("default"))
        assert [r.key_id for r in rows] == ["B"]
    with sync_saver(redis_url, redis_prefix, keyring(B=b)("B")) as saver:
        assert len(ids(saver, "t1")) == 2
        assert len(ids(saver, "t2")) == 2
        assert saver.get_tuple(cfg("t1", tenant_id="acme")).checkpoint["channel_values"] == {
            "step": 0,
            "payload": {"i": 0},
        }


async def test_rotate_keys_async(redis_url: str, redis_prefix: str) -> None:
    a, b = os.urandom(32), os.urandom(32)
    async with async_saver(redis_url, redis_prefix, keyring(A=a)("A")) as saver:
        await saver.aput(cfg("t1"), *_one_checkpoint("first"))
    async with async_saver(redis_url, redis_prefix, keyring(A=a, B=b)("B")) as saver:
        await saver.aput(cfg("t2"), *_one_checkpoint("second"))
        assert await saver.arotate_keys("default") == {"tenants": 1, "rewrapped": 1, "current": 0}
    async with async_saver(redis_url, redis_prefix, keyring(B=b)("B")) as saver:
        for thread, value in (("t1", "first"), ("t2", "second")):
            tup = await saver.aget_tuple(cfg(thread))
            assert tup.checkpoint["channel_values"]["v"] == [value]
    async with async_saver(redis_url, redis_prefix, keyring(A=a)("A")) as saver:
        with pytest.raises(DecryptionError, match="not in the keyring"):
            await saver.aget_tuple(cfg("t1"))


def _one_checkpoint(value: str) -> tuple[Any, ...]:
    """(checkpoint, metadata, new versions) of a checkpoint holding ``v=[value]``."""
    cp = versioned_cp(v=[value])
    return cp, {"source": "input"}, cp["channel_versions"]


# ---------------------------------------------------------------- shredding


def test_shred_tenant_sync(redis_url: str, redis_prefix: str) -> None:
    enc = local_encryption()
    with sync_saver(redis_url, redis_prefix, enc) as saver:
        for tenant in ("t1", "t2"):
            put_chain(saver, "a", 2, tenant_id=tenant)
        assert saver.shred_tenant("t1") == 1
        assert saver.shred_tenant("t1") == 0
        with pytest.raises(DecryptionError, match="shredded"):
            saver.get_tuple(cfg("a", tenant_id="t1"))
    with sync_saver(redis_url, redis_prefix, enc) as fresh:
        with pytest.raises(DecryptionError, match="shredded"):
            fresh.get_tuple(cfg("a", tenant_id="t1"))
        with pytest.raises(DecryptionError, match="shredded"):
            list(fresh.list(cfg("a", tenant_id="t1")))
        with pytest.raises(DecryptionError, match="shredded"):
            list(fresh.list({"configurable": {"tenant_id": "t1"}}))
        assert len(ids(fresh, "a", tenant_id="t2")) == 2
        # the tenant can start over under a new version
        put_chain(fresh, "b", 1, tenant_id="t1")
        assert len(ids(fresh, "b", tenant_id="t1")) == 1
        rows = fresh._run(fresh._ops.data_keys("t1"))
        assert [(r.version, r.wrapped is None, r.key_id) for r in rows] == [
            (1, True, ""),
            (2, False, "k1"),
        ]


async def test_shred_tenant_async(redis_url: str, redis_prefix: str) -> None:
    enc = local_encryption()
    async with async_saver(redis_url, redis_prefix, enc) as saver:
        for tenant in ("t1", "t2"):
            cp, meta, versions = _one_checkpoint(tenant)
            await saver.aput(cfg("a", tenant_id=tenant), cp, meta, versions)
        assert await saver.ashred_tenant("t1") == 1
    async with async_saver(redis_url, redis_prefix, enc) as fresh:
        with pytest.raises(DecryptionError, match="shredded"):
            await fresh.aget_tuple(cfg("a", tenant_id="t1"))
        with pytest.raises(DecryptionError, match="shredded"):
            [t async for t in fresh.alist(cfg("a", tenant_id="t1"))]
        tup = await fresh.aget_tuple(cfg("a", tenant_id="t2"))
        assert tup.checkpoint["channel_values"]["v"] == ["t2"]


def test_rotate_and_shred_on_cluster(redis_cluster_conn_string: str, redis_prefix: str) -> None:
    a, b = os.urandom(32), os.urandom(32)
    url = redis_cluster_conn_string
    tenants = [f"tenant-{n}" for n in range(6)]  # spread over the cluster's slots
    with sync_saver(url, redis_prefix, keyring(A=a)("A")) as saver:
        for tenant in tenants:
            put_chain(saver, "a", 1, tenant_id=tenant)
    with sync_saver(url, redis_prefix, keyring(A=a, B=b)("B")) as saver:
        assert saver._run(saver._ops.data_key_tenants()) == sorted(tenants)
        assert saver.rotate_keys() == {"tenants": 6, "rewrapped": 6, "current": 0}
        assert saver.shred_tenant(tenants[0]) == 1
    with sync_saver(url, redis_prefix, keyring(B=b)("B")) as saver:
        with pytest.raises(DecryptionError, match="shredded"):
            saver.get_tuple(cfg("a", tenant_id=tenants[0]))
        for tenant in tenants[1:]:
            assert len(ids(saver, "a", tenant_id=tenant)) == 1


# ---------------------------------------------------------------- data-key storage


def test_data_key_operations(redis_url: str, redis_prefix: str) -> None:
    with sync_saver(redis_url, redis_prefix, local_encryption()) as saver:
        run, ops = saver._run, saver._ops
        first = StoredDataKey(1, "k1", b"wrapped-1", 1000.5)
        assert run(ops.add_data_key("x", first)) is True
        assert run(ops.add_data_key("x", StoredDataKey(1, "k9", b"other", 1.0))) is False
        assert run(ops.add_data_key("x", StoredDataKey(2, "k1", b"wrapped-2", 2000.0))) is True
        assert run(ops.data_keys("x")) == [first, StoredDataKey(2, "k1", b"wrapped-2", 2000.0)]
        assert run(ops.rewrap_data_key("x", 1, b"not-it", "k2", b"new")) is False
        assert run(ops.rewrap_data_key("x", 3, b"wrapped-1", "k2", b"new")) is False
        assert run(ops.rewrap_data_key("x", 1, b"wrapped-1", "k2", b"new")) is True
        assert run(ops.rewrap_data_key("x", 1, b"wrapped-1", "k3", b"newer")) is False
        assert run(ops.data_keys("x"))[0] == StoredDataKey(1, "k2", b"new", 1000.5)
        assert run(ops.shred_data_keys("x")) == 2
        assert run(ops.shred_data_keys("x")) == 0
        assert run(ops.data_keys("x")) == [
            StoredDataKey(1, "", None, 1000.5),
            StoredDataKey(2, "", None, 2000.0),
        ]
        assert run(ops.rewrap_data_key("x", 1, b"new", "k2", b"again")) is False
        assert run(ops.data_keys("nobody")) == []
        assert run(ops.shred_data_keys("nobody")) == 0
        run(ops.add_data_key("a{b}:c", first))
        assert run(ops.data_key_tenants()) == ["a{b}:c", "x"]
        key = saver.keys.data_keys("a{b}:c")
        assert key == f"{redis_prefix}:keys:{{a%7Bb%7D%3Ac}}"
        assert saver.client.type(key) == b"hash"


def test_data_keys_have_no_ttl_and_outlive_threads(redis_url: str, redis_prefix: str) -> None:
    with sync_saver(redis_url, redis_prefix, local_encryption(), ttl=60) as saver:
        for thread in ("a", "b", "c"):
            put_chain(saver, thread, 2)
        client = saver.client
        keys = saver.keys
        assert client.pttl(keys.thread("default", "a")[0]) > 0
        assert client.pttl(keys.data_keys("default")) == -1
        assert client.pttl(keys.key_tenants()) == -1
        saver.delete_thread("a")
        saver.prune(["b"], strategy="keep_latest")
        saver.prune(["c"], strategy="delete")
        assert client.hlen(keys.data_keys("default")) == 1
        assert client.smembers(keys.key_tenants()) == {b"default"}
        assert len(ids(saver, "b")) == 1
    with sync_saver(redis_url, redis_prefix, saver.encryption) as again:
        assert again.get_tuple(cfg("b")) is not None


# ---------------------------------------------------------------- keys made elsewhere


def test_reader_loads_versions_made_by_another_saver(redis_url: str, redis_prefix: str) -> None:
    """A reader with fresh cached keys meets records of newer versions (KeyMissing retries)."""
    kr = LocalKeyring({"k": os.urandom(32)}, "k")
    with (
        sync_saver(redis_url, redis_prefix, Encryption(kr, max_key_uses=3)) as writer,
        sync_saver(redis_url, redis_prefix, Encryption(kr)) as reader,
    ):
        put_chain(writer, "a", 1)
        assert len(ids(reader, "a")) == 1  # the reader caches version 1
        put_chain(writer, "a", 3)
        put_chain(writer, "b", 3)
        versions = writer._run(writer._ops.data_keys("default"))
        assert len(versions) >= 3
        assert reader.get_tuple(cfg("b")) is not None
        assert len(ids(reader, "a")) == 4
        assert len(list(reader.list(None))) == 7


async def test_async_reader_loads_versions_made_elsewhere(
    redis_url: str, redis_prefix: str
) -> None:
    kr = LocalKeyring({"k": os.urandom(32)}, "k")
    async with (
        async_saver(redis_url, redis_prefix, Encryption(kr, max_key_uses=2)) as writer,
        async_saver(redis_url, redis_prefix, Encryption(kr)) as reader,
    ):
        await writer.aput(cfg("a"), *_one_checkpoint("0"))
        assert await reader.aget_tuple(cfg("a")) is not None
        for n in range(1, 5):
            await writer.aput(cfg(f"t{n}"), *_one_checkpoint(str(n)))
        assert len([t async for t in reader.alist(None)]) == 5
        tup = await reader.aget_tuple(cfg("t4"))
        assert tup.checkpoint["channel_values"]["v"] == ["4"]


# ---------------------------------------------------------------- copy_thread


def test_copy_thread_reseals(redis_url: str, redis_prefix: str) -> None:
    c = Canaries()
    with sync_saver(redis_url, redis_prefix, local_encryption()) as saver:
        run_canary_graph(saver, c, thread="src")
        seed_threads(saver)
        for source, target in (("src", "dst"), ("t1", "t1-copy")):
            want = [comparable(t) for t in saver.list(cfg(source))]
            saver.copy_thread(source, target)
            assert [comparable(t) for t in saver.list(cfg(target))] == want
            assert [comparable(t) for t in saver.list(cfg(source))] == want
        assert any(t.pending_writes for t in saver.list(cfg("dst")))
        graph = build_canary_graph(c, saver)
        state = graph.get_state({"configurable": {"thread_id": "dst"}})
        assert state_has_canaries(state, c)
        assert canary_hits(dump_prefix(saver.client, redis_prefix), c) == []


async def test_copy_thread_reseals_async(redis_url: str, redis_prefix: str) -> None:
    c = Canaries()
    async with async_saver(redis_url, redis_prefix, local_encryption()) as saver:
        await arun_canary_graph(saver, c, thread="src")
        want = [comparable(t) async for t in saver.alist(cfg("src"))]
        await saver.acopy_thread("src", "dst")
        assert [comparable(t) async for t in saver.alist(cfg("dst"))] == want
        assert [comparable(t) async for t in saver.alist(cfg("src"))] == want


# ---------------------------------------------------------------- filters


def _emails_run(saver: Any) -> tuple[Canaries, Canaries]:
    first, second = Canaries(), Canaries()
    run_canary_graph(saver, first, thread="one")
    run_canary_graph(saver, second, thread="two")
    return first, second


def _filtered(saver: Any, config: Any, **filter: Any) -> list[tuple[str, str]]:
    return [
        (t.config["configurable"]["thread_id"], t.config["configurable"]["checkpoint_id"])
        for t in saver.list(config, filter=filter)
    ]


@pytest.mark.parametrize("searchable", [False, True], ids=["encrypted-key", "searchable"])
def test_filter_on_encrypted_metadata(redis_url: str, redis_prefix: str, searchable: bool) -> None:
    enc = local_encryption(searchable_metadata=("user_email",) if searchable else ())
    with sync_saver(redis_url, redis_prefix, enc) as saver:
        first, second = _emails_run(saver)
        one, two = ids(saver, "one"), ids(saver, "two")
        assert _filtered(saver, cfg("one"), user_email=first.email) == [("one", i) for i in one]
        assert _filtered(saver, cfg("one"), user_email=second.email) == []
        assert _filtered(saver, None, user_email=second.email) == [("two", i) for i in two]
        assert _filtered(saver, None, user_email=first.email, source="loop") == [
            ("one", t.config["configurable"]["checkpoint_id"])
            for t in saver.list(cfg("one"), filter={"source": "loop"})
        ]
        limited = list(saver.list(None, filter={"user_email": first.email}, limit=2))
        assert [t.config["configurable"]["checkpoint_id"] for t in limited] == one[:2]
        dump = dump_prefix(saver.client, redis_prefix)
    assert canary_hits(dump, first) == canary_hits(dump, second) == []


async def test_filter_on_searchable_metadata_async(redis_url: str, redis_prefix: str) -> None:
    enc = local_encryption(searchable_metadata=("user_email",))
    c = Canaries()
    async with async_saver(redis_url, redis_prefix, enc) as saver:
        await arun_canary_graph(saver, c, thread="one")
        every = [t async for t in saver.alist(cfg("one"))]
        hits = [t async for t in saver.alist(None, filter={"user_email": c.email})]
        misses = [t async for t in saver.alist(None, filter={"user_email": "no@example.com"})]
    assert len(hits) == len(every) > 0
    assert misses == []


# ---------------------------------------------------------------- delta encoding


def test_delta_encoding_with_encryption(redis_url: str, redis_prefix: str) -> None:
    client = raw_client(redis_url)
    try:
        with sync_saver(redis_url, redis_prefix, local_encryption(), delta_chain=3) as saver:
            memory = InMemorySaver()
            for s in (saver, memory):
                run_turns(chat_graph(s), "d", 8)
            want = [messages_dump(v) for _, v in history(memory, "d")]
            assert [messages_dump(v) for _, v in history(saver, "d")] == want
            deltas, full, _size = blob_kinds(saver, "d")
            assert deltas > 0 and full > 0
            with sync_saver(redis_url, redis_prefix, saver.encryption, delta_chain=3) as other:
                assert [messages_dump(v) for _, v in history(other, "d")] == want
                run_turns(chat_graph(other), "d", 2, start=8)
            raw = Raw(client, saver, "d")
            name = next(
                f for f in raw.blob_fields("messages") if client.hget(raw.b, f)[:1] == DELTA_MARK
            )
            raw.edit(raw.b, name, flip_bit)  # the sealed tail ends the delta
            with pytest.raises(DecryptionError):
                history(saver, "d")
    finally:
        client.close()


async def test_delta_encoding_with_encryption_async(redis_url: str, redis_prefix: str) -> None:
    async with async_saver(redis_url, redis_prefix, local_encryption(), delta_chain=2) as saver:
        graph = chat_graph(saver)
        for i in range(5):
            await graph.ainvoke(
                {"messages": [HumanMessage(content=f"q{i}", id=f"h{i}")]},
                {"configurable": {"thread_id": "d"}},
            )
        got = [
            messages_dump(t.checkpoint["channel_values"])
            async for t in saver.alist({"configurable": {"thread_id": "d"}})
        ]
    memory = InMemorySaver()
    graph = chat_graph(memory)
    for i in range(5):
        graph.invoke(
            {"messages": [HumanMessage(content=f"q{i}", id=f"h{i}")]},
            {"configurable": {"thread_id": "d"}},
        )
    assert got == [messages_dump(v) for _, v in history(memory, "d")]
