"""A reader with other encryption settings than the writer is told so, not told "altered".

The clear metadata index is checked against the decrypted metadata on every read. The
settings that decided it (``clear_metadata``, ``searchable_metadata``) are sealed with
the metadata, so a saver opened with other settings gets a ``SettingsMismatchError``
naming both, while an edited index under the same settings is still tampering.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from langgraph_durable.errors import DecryptionError, SettingsMismatchError
from langgraph_durable.protect import Encryption, LocalKeyring
from tests.effects.conftest import BACKENDS, make_spec
from tests.helpers import cfg, put_chain
from tests.redaction_helpers import SaverSpec, _classes

KEYRING = LocalKeyring({"k1": os.urandom(32)}, "k1")
WRITER = Encryption(KEYRING, clear_metadata=("source", "step"))
READER = Encryption(KEYRING)  # the default clear_metadata has "parents" and "run_id" too


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


def _open(spec: SaverSpec, encryption: Encryption) -> Any:
    return _classes(spec.backend)[0].from_conn_string(
        spec.conn, encryption=encryption, **spec.kwargs
    )


def test_other_settings_are_named_not_reported_as_tampering(spec: SaverSpec) -> None:
    with _open(spec, WRITER) as saver:
        saver.setup()
        put_chain(saver, "t1", 2, tenant_id="acme", run_id="run-1")
        assert saver.get_tuple(cfg("t1", tenant_id="acme")) is not None
    with _open(spec, READER) as saver:
        with pytest.raises(SettingsMismatchError) as err:
            saver.get_tuple(cfg("t1", tenant_id="acme"))
        message = str(err.value)
        assert "'source', 'step']" in message and "'run_id'" in message
        assert "altered" not in message
    with _open(spec, WRITER) as saver:  # the writer's settings still read it
        assert saver.get_tuple(cfg("t1", tenant_id="acme")) is not None


async def test_async_reader_with_other_settings(spec: SaverSpec) -> None:
    cls = _classes(spec.backend)[1]
    async with cls.from_conn_string(spec.conn, encryption=WRITER, **spec.kwargs) as saver:
        await saver.setup()
        config = cfg("t2", tenant_id="acme")
        cp = {"v": 4, "id": "1f0", "ts": "", "channel_values": {"x": 1}, "channel_versions": {}}
        cp |= {"versions_seen": {}, "updated_channels": None}
        await saver.aput(config, cp, {"source": "input", "step": 1, "run_id": "r"}, {})
    async with cls.from_conn_string(spec.conn, encryption=READER, **spec.kwargs) as saver:
        with pytest.raises(SettingsMismatchError):
            await saver.aget_tuple(config)


def test_same_settings_and_an_edited_index_is_still_tampering() -> None:
    """The check itself, without a backend: same settings, index edited -> DecryptionError."""
    from langgraph_durable._core.codec import CheckpointCodec, StoredCheckpoint, ThreadKey
    from langgraph_durable.protect.encryption import EncryptionPipeline
    from tests.protect.test_encryption import drive

    keys = WRITER.key_manager()
    drive(keys.ensure(_MemoryStore(), "acme", (), True))
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    codec = CheckpointCodec(EncryptionPipeline(JsonPlusSerializer(), WRITER, keys.cache))
    key = ThreadKey("acme", "t", "", False)
    cp = {"v": 4, "id": "c1", "ts": "", "channel_values": {}, "channel_versions": {}}
    rec = codec.encode_checkpoint(key, {"configurable": {}}, cp, {"source": "loop", "step": 3}, {})
    stored = StoredCheckpoint(
        thread="t", ns="", checkpoint_id="c1", parent_checkpoint_id=None, body=rec.body,
        metadata=rec.metadata, metadata_index={**rec.metadata_index, "step": 4},
    )  # fmt: skip
    with pytest.raises(DecryptionError, match="altered"):
        codec.decode(key, stored)
    stored.metadata_index = dict(rec.metadata_index)
    assert codec.decode(key, stored).metadata == {"source": "loop", "step": 3}


class _MemoryStore:
    def __new__(cls) -> Any:
        from tests.protect.test_encryption import MemoryKeyStore

        return MemoryKeyStore()
