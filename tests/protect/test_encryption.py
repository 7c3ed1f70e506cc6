"""The encryption pipeline, keyrings and key manager, without a backend."""

from __future__ import annotations

import base64
import dataclasses
import multiprocessing
import os
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_durable._core.records import RecordIdentity, RecordKind, Sealed, StoredDataKey
from langgraph_durable._core.sansio import Blocking, Operation
from langgraph_durable.errors import ConfigurationError, DecryptionError
from langgraph_durable.protect import Encryption, EncryptionPipeline, LocalKeyring
from langgraph_durable.protect.keys import KeyManager, KeyMissing

KEY_A = os.urandom(32)


class MemoryKeyStore:
    """A KeyStoreOps over a dict, as sans-IO operations of one request (a callable)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[int, StoredDataKey]] = {}
        self.lose_next_add = False

    def _op(self, fn: Any) -> Operation[Any]:
        def steps() -> Generator[Any, Any, Any]:
            return (yield fn)

        return Operation(steps())

    def data_keys(self, tenant: str) -> Operation[list[StoredDataKey]]:
        return self._op(lambda: sorted(self.rows.get(tenant, {}).values(), key=lambda r: r.version))

    def add_data_key(self, tenant: str, key: StoredDataKey) -> Operation[bool]:
        def add() -> bool:
            rows = self.rows.setdefault(tenant, {})
            if self.lose_next_add:  # another process wins the race for this version
                self.lose_next_add = False
                rows[key.version] = dataclasses.replace(
                    key,
                    wrapped=LocalKeyring({"k1": KEY_A}, "k1").generate(tenant, key.version).wrapped,
                )
                return False
            if key.version in rows:
                return False
            rows[key.version] = key
            return True

        return self._op(add)

    def rewrap_data_key(self, tenant: str, version: int, old: bytes, kid: str, new: bytes) -> Any:
        raise NotImplementedError

    def shred_data_keys(self, tenant: str) -> Operation[int]:
        def shred() -> int:
            rows = self.rows.get(tenant, {})
            for v, r in rows.items():
                rows[v] = dataclasses.replace(r, wrapped=None, key_id="")
            return len(rows)

        return self._op(shred)

    def data_key_tenants(self) -> Any:
        raise NotImplementedError


def drive(steps: Generator[Any, Any, Any]) -> Any:
    """Run a key-manager generator: keyring calls, and the memory store's requests."""
    result: Any = None
    while True:
        try:
            step = steps.send(result)
        except StopIteration as stop:
            return stop.value
        result = step.fn(*step.args) if isinstance(step, Blocking) else step()


def make_pipeline(**kwargs: Any) -> tuple[EncryptionPipeline, KeyManager, MemoryKeyStore]:
    enc = Encryption(LocalKeyring({"k1": KEY_A}, "k1"), **kwargs)
    keys = enc.key_manager()
    store = MemoryKeyStore()
    drive(keys.ensure(store, "t", (), True))
    return EncryptionPipeline(JsonPlusSerializer(), enc, keys.cache), keys, store


META = RecordIdentity("t", "thread", "", RecordKind.METADATA, "cp")
IDENTITY = RecordIdentity("t", "thread", "", RecordKind.BLOB, "", "messages", "00001.5")


def test_round_trip_and_nothing_in_clear() -> None:
    pipeline, _, _ = make_pipeline()
    value = {"text": "secret value", "n": [1, 2, 3]}
    sealed = pipeline.seal(IDENTITY, value)
    assert sealed.type == "lgd-enc" and b"secret" not in sealed.data
    assert sealed.data[:3] == b"LGD" and sealed.data[3] == 2
    assert pipeline.open(IDENTITY, sealed) == value


def test_the_parts_of_a_delta_chain_are_opened_one_by_one() -> None:
    # each part is bound to its own identity, so a chain is never joined before opening
    assert make_pipeline()[0].joins_lists is False


def test_every_seal_has_a_fresh_nonce() -> None:
    """The same value under the same identity never gets the same nonce twice (a nonce
    reused under one key would break AES-GCM), from threads at once too."""
    pipeline, _, _ = make_pipeline()
    header = len(b"LGD") + 1 + 4 + 1 + len("k1")  # magic, format, version, key id

    def nonces(n: int) -> list[bytes]:
        out = []
        for _ in range(n):
            data = pipeline.seal(IDENTITY, "same value").data
            out.append(data[header : header + 12])
        return out

    with ThreadPoolExecutor(4) as pool:
        found = [nonce for batch in pool.map(nonces, [500] * 4) for nonce in batch]
    assert len(set(found)) == len(found) == 2000
    assert all(pipeline.open(IDENTITY, pipeline.seal(IDENTITY, "v")) == "v" for _ in range(3))


def _nonces_after_fork(pipeline: EncryptionPipeline, header: int, out: Any) -> None:
    out.send([pipeline.seal(IDENTITY, "v").data[header : header + 12] for _ in range(200)])
    out.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: POSIX only")
def test_a_forked_process_never_repeats_its_parents_nonces() -> None:
    """A worker forked from a process that already sealed records (a pre-fork server) seals
    under the same keys: its random generator must not replay its parent's nonces."""
    pipeline, _, _ = make_pipeline()
    header = len(b"LGD") + 1 + 4 + 1 + len("k1")
    pipeline.seal(IDENTITY, "before the fork")
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_nonces_after_fork, args=(pipeline, header, send))
    child.start()
    send.close()
    theirs = receive.recv()
    child.join(30)
    ours = [pipeline.seal(IDENTITY, "v").data[header : header + 12] for _ in range(200)]
    assert child.exitcode == 0 and len(theirs) == 200
    assert not set(ours) & set(theirs)
    assert len(set(ours)) == len(set(theirs)) == 200


def test_format_1_records_still_open_and_cannot_pose_as_format_2() -> None:
    """Records sealed before the channel and extra fields were bound still read back;
    rewriting a format-2 header's format byte to 1 fails authentication (it is bound)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from langgraph_durable.protect import encryption as enc_mod

    pipeline, _, _ = make_pipeline()
    version, key_id, aead = pipeline.cache.sealer("t", "thread")
    header = b"LGD" + bytes((1,)) + version.to_bytes(4, "big") + bytes((len(key_id),))
    header += key_id.encode()
    type_, data = JsonPlusSerializer().dumps_typed("old format")
    nonce = os.urandom(12)
    inner = bytes((len(type_),)) + type_.encode() + data
    body = aead.encrypt(nonce, inner, header + enc_mod.identity_aad(IDENTITY, 1))
    assert isinstance(aead, AESGCM)
    assert pipeline.open(IDENTITY, Sealed("lgd-enc", header + nonce + body)) == "old format"
    sealed = pipeline.seal(IDENTITY, "new format")
    downgraded = sealed.data[:3] + bytes((1,)) + sealed.data[4:]
    with pytest.raises(DecryptionError, match="failed authentication"):
        pipeline.open(IDENTITY, Sealed(sealed.type, downgraded))


@pytest.mark.parametrize(
    "field",
    ["tenant", "thread", "ns", "kind", "checkpoint_id", "key", "version", "channel", "extra"],
)
def test_every_part_of_the_identity_is_bound(field: str) -> None:
    pipeline, keys, store = make_pipeline()
    sealed = pipeline.seal(IDENTITY, "secret")
    other = IDENTITY._replace(**{field: getattr(IDENTITY, field) + "x"})
    if field == "tenant":  # the other tenant has keys of its own, version 1 too
        with pytest.raises(KeyMissing):
            pipeline.open(other, sealed)
        drive(keys.ensure(store, other.tenant, (), True))
    with pytest.raises(DecryptionError, match="failed authentication"):
        pipeline.open(other, sealed)


@pytest.mark.parametrize("cut", [1, 10, 30, -1])
def test_truncation_and_damage_fail_before_deserializing(cut: int) -> None:
    pipeline, _, _ = make_pipeline()
    sealed = pipeline.seal(IDENTITY, "secret")
    with pytest.raises(DecryptionError):
        pipeline.open(IDENTITY, Sealed(sealed.type, sealed.data[:cut]))
    damaged = bytearray(sealed.data)
    damaged[cut] ^= 0x80
    with pytest.raises(DecryptionError):
        pipeline.open(IDENTITY, Sealed(sealed.type, bytes(damaged)))


def test_plaintext_fails_closed_unless_migrating() -> None:
    plain = Sealed(*JsonPlusSerializer().dumps_typed("old"))
    pipeline, _, _ = make_pipeline()
    with pytest.raises(DecryptionError, match="not encrypted"):
        pipeline.open(IDENTITY, plain)
    migrating, _, _ = make_pipeline(allow_plaintext=True)
    assert migrating.open(IDENTITY, plain) == "old"


def test_metadata_index_keeps_only_allowed_keys_and_blinds_searchable_ones() -> None:
    pipeline, _, _ = make_pipeline(searchable_metadata=("user",))
    meta = {"source": "loop", "step": 2, "user": "ann@example.com", "email": "x@y.z"}
    index = pipeline.metadata_index(META, meta)
    assert index["source"] == "loop" and index["step"] == 2 and "email" not in index
    assert index["user"].startswith("bi1:") and "ann" not in index["user"]
    server, client = pipeline.split_filter("t", {"user": "ann@example.com", "email": "x@y.z"})
    assert server == {"user": index["user"]} and client == {"email": "x@y.z"}
    sealed = pipeline.seal(IDENTITY._replace(kind=RecordKind.METADATA), meta)
    pipeline.check_metadata(META, meta, index, sealed)
    with pytest.raises(DecryptionError, match="clear metadata"):
        pipeline.check_metadata(META, meta, {**index, "step": 3}, sealed)


def test_a_lost_race_to_create_a_version_uses_the_winners_key() -> None:
    enc = Encryption(LocalKeyring({"k1": KEY_A}, "k1"))
    keys = enc.key_manager()
    store = MemoryKeyStore()
    store.lose_next_add = True
    drive(keys.ensure(store, "t", (), True))
    pipeline = EncryptionPipeline(JsonPlusSerializer(), enc, keys.cache)
    sealed = pipeline.seal(IDENTITY, "v")
    assert sealed.data[4:8] == (1).to_bytes(4, "big")
    assert pipeline.open(IDENTITY, sealed) == "v"


def test_key_versions_by_age_and_uses() -> None:
    clock = [0.0]
    enc = Encryption(LocalKeyring({"k1": KEY_A}, "k1"), max_key_age=10, max_key_uses=2)
    keys = enc.key_manager()
    keys.now = lambda: clock[0]
    store = MemoryKeyStore()
    pipeline = EncryptionPipeline(JsonPlusSerializer(), enc, keys.cache)
    seen = []
    for t in (1.0, 2.0, 3.0, 20.0):
        clock[0] = t
        if not keys.fresh("t", True):
            drive(keys.ensure(store, "t", (), True))
        seen.append(int.from_bytes(pipeline.seal(IDENTITY, "v").data[4:8], "big"))
    assert seen == [1, 1, 2, 3]  # two uses, then by uses, then by age
    assert keys.fresh("t", False)


def test_shredded_versions_say_so() -> None:
    pipeline, keys, store = make_pipeline()
    sealed = pipeline.seal(IDENTITY, "v")
    drive(keys.shred(store, "t"))
    drive(keys.ensure(store, "t", (), False))
    with pytest.raises(DecryptionError, match="shredded"):
        pipeline.open(IDENTITY, sealed)


# ---- keyrings ------------------------------------------------------------------------


def test_local_keyring_text_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = os.urandom(32), os.urandom(32)
    text = f"new={base64.b64encode(b).decode()}, old={base64.b64encode(a).decode()}"
    monkeypatch.setenv("LGD_KEYRING", text)
    ring = LocalKeyring.from_env()
    assert ring.active == "new"
    old = LocalKeyring({"old": a}, "old")
    made = old.generate("t", 1)
    assert ring.unwrap("t", 1, "old", made.wrapped) == made.plaintext
    path = tmp_path / "keys"
    path.write_text(text)
    assert LocalKeyring.from_text(f"@{path}").active == "new"


@pytest.mark.parametrize(
    "text",
    ["", "k1", "k1=not base64!", f"k1={base64.b64encode(b'short').decode()}", "=abc"],
)
def test_local_keyring_rejects_bad_text(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LGD_KEYRING", text)
    with pytest.raises(ConfigurationError):
        LocalKeyring.from_env()


def test_wrapped_keys_are_bound_to_tenant_and_version() -> None:
    ring = LocalKeyring({"k1": KEY_A}, "k1")
    made = ring.generate("t1", 1)
    assert ring.unwrap("t1", 1, "k1", made.wrapped) == made.plaintext
    for tenant, version in (("t2", 1), ("t1", 2)):
        with pytest.raises(DecryptionError, match="does not unwrap"):
            ring.unwrap(tenant, version, "k1", made.wrapped)
    with pytest.raises(DecryptionError, match="not in the keyring"):
        ring.unwrap("t1", 1, "gone", made.wrapped)


def test_encryption_settings_are_validated() -> None:
    ring = LocalKeyring({"k1": KEY_A}, "k1")
    with pytest.raises(ConfigurationError, match="both"):
        Encryption(ring, clear_metadata=("a",), searchable_metadata=("a",))
    with pytest.raises(ConfigurationError, match="keyring"):
        Encryption(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="list or tuple"):
        Encryption(ring, clear_metadata="source")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="cache_ttl"):
        Encryption(ring, cache_ttl=0)
    with pytest.raises(ConfigurationError):
        LocalKeyring({"k1": b"short"}, "k1")
    with pytest.raises(ConfigurationError):
        LocalKeyring({"k1": KEY_A}, "k2")
