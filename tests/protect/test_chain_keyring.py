"""``integrity=`` given a keyring: the chain key survives KEK rotation, on every backend.

A store is written through a saver with ``encryption=Encryption(keyring)`` and
``integrity=keyring``; the keyring is then rotated (a new active KEK, the chain key's
KEK kept) and the store read and verified through the rotated keyring, sync and async.
KMS runs on the rig's moto server (an HMAC KMS key for the chain, ``GenerateMac``).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest

from langgraph_durable.errors import ConfigurationError, IntegrityError, KeyringError
from langgraph_durable.protect import Encryption, KmsKeyring, LocalKeyring
from langgraph_durable.protect.integrity import resolve_integrity
from tests.effects.conftest import BACKENDS, make_spec
from tests.integrity_helpers import _config, abuild_store, build_store
from tests.redaction_helpers import SaverSpec, _classes

K1 = hashlib.sha256(b"lgd chain keyring tests: k1").digest()
K2 = hashlib.sha256(b"lgd chain keyring tests: k2").digest()


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


def _open(spec: SaverSpec, keyring: Any, *, aio: bool = False) -> Any:
    cls = _classes(spec.backend)[1 if aio else 0]
    return cls.from_conn_string(
        spec.conn, encryption=Encryption(keyring), integrity=keyring, **spec.kwargs
    )


# ---- LocalKeyring --------------------------------------------------------------------------


def test_local_chain_key_is_stable_across_rotation_and_not_a_kek() -> None:
    before = LocalKeyring({"k1": K1}, active="k1", chain="k1")
    after = LocalKeyring({"k2": K2, "k1": K1}, active="k2", chain="k1")
    assert before.chain_key() == after.chain_key()
    assert len(before.chain_key()) == 32 and before.chain_key() not in (K1, K2)
    assert LocalKeyring({"k2": K2, "k1": K1}, active="k2", chain="k2").chain_key() != (
        before.chain_key()
    )
    text = f"k2={base64.b64encode(K2).decode()},k1={base64.b64encode(K1).decode()}"
    assert LocalKeyring.from_text(text, chain="k1").chain_key() == before.chain_key()


def test_keyring_without_chain_key_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="chain="):
        resolve_integrity(LocalKeyring({"k1": K1}, active="k1"))
    with pytest.raises(ConfigurationError, match="not one of its keys"):
        LocalKeyring({"k1": K1}, active="k1", chain="k0")
    with pytest.raises(ConfigurationError, match="chain_key_id"):
        resolve_integrity(KmsKeyring("alias/x", client=object()))
    with pytest.raises(ConfigurationError, match="keyring with a chain key"):
        resolve_integrity(object())


def test_sync_store_verifies_after_rotation(spec: SaverSpec) -> None:
    first = LocalKeyring({"k1": K1}, active="k1", chain="k1")
    with _open(spec, first) as saver:
        saver.setup()
        built = build_store(saver)
        assert saver.verify(thread_id=built.a).ok
    rotated = LocalKeyring({"k2": K2, "k1": K1}, active="k2", chain="k1")
    with _open(spec, rotated) as saver:
        saver.rotate_keys()
        report = saver.verify()
        assert report.ok and report.threads == 2, report
        state = saver.get_tuple(_config(built.a))
        assert state is not None and state.checkpoint["id"] == built.ids[0]
        assert len(list(saver.list(_config(built.a)))) == len(built.ids)
    # a keyring whose chain key comes from another KEK: every record is refused
    other = LocalKeyring({"k2": K2, "k1": K1}, active="k2", chain="k2")
    with _open(spec, other) as saver:
        assert not saver.verify(thread_id=built.a).ok
        with pytest.raises(IntegrityError):
            saver.get_tuple(_config(built.a))


async def test_async_store_verifies_after_rotation(spec: SaverSpec) -> None:
    first = LocalKeyring({"k1": K1}, active="k1", chain="k1")
    async with _open(spec, first, aio=True) as saver:
        await saver.setup()
        built = await abuild_store(saver)
    rotated = LocalKeyring({"k2": K2, "k1": K1}, active="k2", chain="k1")
    async with _open(spec, rotated, aio=True) as saver:
        report = await saver.averify()
        assert report.ok and report.threads == 2, report
        state = await saver.aget_tuple(_config(built.a))
        assert state is not None and state.checkpoint["id"] == built.ids[0]


# ---- KmsKeyring ----------------------------------------------------------------------------


@pytest.fixture
def kms_keys(kms_client: Any) -> tuple[str, str]:
    """(a symmetric KMS key for the data keys, an HMAC KMS key for the chain)."""
    kek = kms_client.create_key(Description="lgd kek")["KeyMetadata"]["KeyId"]
    mac = kms_client.create_key(
        Description="lgd chain", KeySpec="HMAC_256", KeyUsage="GENERATE_VERIFY_MAC"
    )["KeyMetadata"]["KeyId"]
    return kek, mac


def test_kms_chain_key_is_the_hmac_keys_mac(kms_client: Any, kms_keys: tuple[str, str]) -> None:
    kek, mac = kms_keys
    one = KmsKeyring(kek, client=kms_client, chain_key_id=mac).chain_key()
    assert len(one) == 32
    # another keyring object (another process) on the same HMAC key: the same chain key
    assert KmsKeyring(lambda tenant: kek, client=kms_client, chain_key_id=mac).chain_key() == one
    other = kms_client.create_key(KeySpec="HMAC_256", KeyUsage="GENERATE_VERIFY_MAC")
    assert (
        KmsKeyring(kek, client=kms_client, chain_key_id=other["KeyMetadata"]["KeyId"]).chain_key()
        != one
    )
    # a symmetric encryption key cannot make MACs: a clear error of ours
    with pytest.raises(KeyringError, match="GenerateMac"):
        KmsKeyring(kek, client=kms_client, chain_key_id=kek).chain_key()


def test_kms_keyring_signs_and_verifies_on_every_backend(
    spec: SaverSpec, kms_client: Any, kms_keys: tuple[str, str]
) -> None:
    kek, mac = kms_keys
    with _open(spec, KmsKeyring(kek, client=kms_client, chain_key_id=mac)) as saver:
        saver.setup()
        built = build_store(saver)
    new_kek = kms_client.create_key(Description="lgd kek 2")["KeyMetadata"]["KeyId"]
    with _open(spec, KmsKeyring(new_kek, client=kms_client, chain_key_id=mac)) as saver:
        report = saver.verify()
        assert report.ok and report.threads == 2, report
        assert saver.get_tuple(_config(built.b)).pending_writes
