"""``integrity=`` on the stores: an item altered or moved in raw storage is refused.

On every backend, sync and async (the async store also encrypting), a store with the
chain key tags each value bound to tenant, namespace and key (and the clear fields a
read trusts). Behind the store's back (SQL, Redis commands, DynamoDB calls) a test

* flips one byte of an item's stored value,
* swaps the stored values of two items of one namespace,
* copies an item's value over an item of another namespace, and of another tenant,
* moves an item's stored write time (``updated_at``: the order of a search),

and each time a get and a search of the item raise ``IntegrityError`` (the savers'
error for a failed tag), never return another item's value; put back, it opens again.
With encryption alone (no tag) the same clear fields are bound to the ciphertext: a
moved write time, stripped embeddings or an older write's embeddings do not decrypt.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from langgraph_durable.errors import CorruptRecordError, DecryptionError, IntegrityError
from tests.cli.store_helpers import (
    aopen_spec_store,
    open_spec_store,
    raw_time,
    raw_value,
    raw_vectors,
    write_raw_time,
    write_raw_value,
    write_raw_vectors,
)
from tests.effects.conftest import BACKENDS, make_spec
from tests.encryption_helpers import local_encryption
from tests.redaction_helpers import SaverSpec
from tests.store.differential import index_config

NS, OTHER_NS = ("mem", "u1"), ("mem", "u2")


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


def _attacks(spec: SaverSpec, a: str, b: str) -> list[tuple[str, str, tuple[str, ...], str]]:
    """Each attack: its name, and the item it leaves altered (tenant, namespace, key)."""
    return [
        ("a byte flipped", a, NS, "x"),
        ("two values swapped", a, NS, "y"),
        ("moved to another namespace", a, OTHER_NS, "x"),
        ("moved to another tenant", b, NS, "x"),
        ("write time moved later", a, NS, "y"),
        ("write time moved earlier", a, NS, "x"),
    ]


def _attack(spec: SaverSpec, name: str, a: str, b: str) -> Callable[[], None]:
    """Carry out attack ``name``; returns what puts the stored values back."""
    saved = {
        where: raw_value(spec, *where) for where in [(a, NS, "x"), (a, NS, "y"), (a, OTHER_NS, "x")]
    }
    saved[(b, NS, "x")] = raw_value(spec, b, NS, "x")
    source = saved[(a, NS, "x")]
    if name.startswith("write time moved"):
        updated = raw_time(spec, a, NS, _time_victim(name), "updated")
        shift = 1000.0 if name.endswith("later") else -1000.0
        write_raw_time(spec, a, NS, _time_victim(name), "updated", updated + shift)

        def put_time_back() -> None:
            write_raw_time(spec, a, NS, _time_victim(name), "updated", updated)

        return put_time_back
    if name == "a byte flipped":
        flipped = bytearray(source)
        flipped[len(flipped) // 2] ^= 0x01
        write_raw_value(spec, a, NS, "x", bytes(flipped))
    elif name == "two values swapped":
        write_raw_value(spec, a, NS, "x", saved[(a, NS, "y")])
        write_raw_value(spec, a, NS, "y", source)
    elif name == "moved to another namespace":
        write_raw_value(spec, a, OTHER_NS, "x", source)
    else:
        write_raw_value(spec, b, NS, "x", source)

    def restore() -> None:
        for where, data in saved.items():
            write_raw_value(spec, *where, data)

    return restore


def _time_victim(name: str) -> str:
    """The item a write-time attack edits (the one ``_attacks`` names)."""
    return "y" if name.endswith("later") else "x"


def _populate(store: Any, tenant: dict[str, str], a: str, b: str) -> None:
    tenant["now"] = a
    store.put(NS, "x", {"text": "apple", "n": 1})
    store.put(NS, "y", {"text": "river", "n": 2})
    store.put(OTHER_NS, "x", {"text": "stone", "n": 3})
    tenant["now"] = b
    store.put(NS, "x", {"text": "cloud", "n": 4})


def test_altered_or_moved_items_are_refused_sync(spec: SaverSpec) -> None:
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    tenant = {"now": a}
    with open_spec_store(spec, lambda: tenant["now"], integrity=os.urandom(32)) as store:
        _populate(store, tenant, a, b)
        for name, victim, ns, key in _attacks(spec, a, b):
            restore = _attack(spec, name, a, b)
            tenant["now"] = victim
            with pytest.raises(IntegrityError):
                store.get(ns, key)
            with pytest.raises(IntegrityError):
                store.search(("mem",))
            restore()
            assert store.get(ns, key) is not None, name
        tenant["now"] = a
        assert store.get(NS, "x").value == {"text": "apple", "n": 1}  # type: ignore[union-attr]


def test_altered_or_moved_items_are_refused_async_and_encrypted(spec: SaverSpec) -> None:
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    tenant = {"now": a}

    async def run() -> None:
        async with aopen_spec_store(
            spec, lambda: tenant["now"], integrity=os.urandom(32), encryption=local_encryption()
        ) as store:
            await asyncio.to_thread(_populate, store, tenant, a, b)  # its sync methods, too
            for name, victim, ns, key in _attacks(spec, a, b):
                restore = _attack(spec, name, a, b)
                tenant["now"] = victim
                with pytest.raises(IntegrityError):
                    await store.aget(ns, key)
                with pytest.raises(IntegrityError):
                    await store.asearch(("mem",))
                restore()
                assert await store.aget(ns, key) is not None, name

    asyncio.run(run())


def test_items_stored_without_the_tag_are_refused(spec: SaverSpec) -> None:
    tenant = uuid.uuid4().hex
    with open_spec_store(spec, tenant) as plain:
        plain.put(NS, "x", {"text": "apple"})
    with open_spec_store(spec, tenant, integrity=os.urandom(32)) as store:
        with pytest.raises(IntegrityError):
            store.get(NS, "x")
        store.put(NS, "x", {"text": "apple"})
        assert store.get(NS, "x").value == {"text": "apple"}  # type: ignore[union-attr]


@pytest.mark.parametrize("attack", ["write time moved", "embeddings stripped", "older embeddings"])
def test_altered_clear_fields_do_not_decrypt(spec: SaverSpec, attack: str) -> None:
    """Encryption alone (no ``integrity=``) binds what a read trusts beside the
    ciphertext as the tag does: the write's time, the embeddings that go with it."""
    tenant = uuid.uuid4().hex
    with open_spec_store(
        spec, tenant, encryption=local_encryption(), index=index_config()
    ) as store:
        # no embeddings under a moved time: the value's own binding is what refuses it
        store.put(NS, "x", {"text": "apple"}, index=False if attack == "write time moved" else None)
        if attack == "write time moved":
            assert raw_vectors(spec, tenant, NS, "x") is None
            updated = raw_time(spec, tenant, NS, "x", "updated")
            write_raw_time(spec, tenant, NS, "x", "updated", updated + 1000.0)
        elif attack == "embeddings stripped":
            write_raw_vectors(spec, tenant, NS, "x", None)
        else:
            older = raw_vectors(spec, tenant, NS, "x")
            assert older is not None
            store.put(NS, "x", {"text": "river"})
            write_raw_vectors(spec, tenant, NS, "x", older)
        with pytest.raises(DecryptionError):
            store.get(NS, "x")
        with pytest.raises(DecryptionError):
            store.search(("mem",), query="apple")


def test_redis_items_of_the_first_format_are_refused_clearly(
    request: pytest.FixtureRequest,
) -> None:
    """A Redis item without its format field (written before its write time was bound)
    is refused with a message that says so, with or without ``integrity=``."""
    import redis

    from langgraph_durable.redis._keys import KeyLayout
    from langgraph_durable.redis._store import StoreKeys

    spec = make_spec(request, "redis")
    tenant = uuid.uuid4().hex
    for options in ({}, {"integrity": os.urandom(32)}):
        with open_spec_store(spec, tenant, **options) as store:
            store.put(NS, "x", {"text": "apple"})
            client = redis.Redis.from_url(spec.conn)
            try:
                name = StoreKeys(KeyLayout(spec.kwargs["prefix"]), tenant).item(NS, "x")
                assert client.hdel(name, "f") == 1
            finally:
                client.close()
            with pytest.raises(CorruptRecordError, match="another format"):
                store.get(NS, "x")
            with pytest.raises(CorruptRecordError, match="another format"):
                store.search(("mem",))
            store.put(NS, "x", {"text": "apple"})  # put again, it reads
            assert store.get(NS, "x").value == {"text": "apple"}  # type: ignore[union-attr]
