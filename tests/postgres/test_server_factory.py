"""The Agent Server checkpointer factory reads its settings from the environment."""

from __future__ import annotations

import base64
import os

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable.errors import ConfigurationError, DecryptionError
from langgraph_durable.postgres import AsyncPostgresSaver
from langgraph_durable.postgres.server import checkpointer, settings_from_env
from langgraph_durable.protect import Encryption, LocalKeyring


def test_settings_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="LGD_POSTGRES_URL"):
        settings_from_env({})
    with pytest.raises(ConfigurationError, match="POOL_SIZE"):
        settings_from_env({"LGD_POSTGRES_URL": "postgresql://x", "LGD_POSTGRES_POOL_SIZE": "0"})
    s = settings_from_env({"LGD_POSTGRES_URL": "postgresql://x", "LGD_POSTGRES_PREPARE": "off"})
    assert s["prepare_threshold"] is None and s["setup"] is True and s["pool_size"] == 4
    assert s["encryption"] is None


def test_settings_read_the_keyring() -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    s = settings_from_env(
        {
            "LGD_POSTGRES_URL": "postgresql://x",
            "LGD_KEYRING": f"k2={key},k1={key}",
            "LGD_ENCRYPTION_SEARCHABLE_METADATA": "user_id",
        }
    )
    encryption = s["encryption"]
    assert isinstance(encryption, Encryption) and isinstance(encryption.keyring, LocalKeyring)
    assert encryption.keyring.active_key_id("t") == "k2"
    assert encryption.searchable_metadata == ("user_id",)
    with pytest.raises(ConfigurationError, match="both LGD_KEYRING and LGD_KMS_KEY_ID"):
        settings_from_env(
            {"LGD_POSTGRES_URL": "postgresql://x", "LGD_KEYRING": f"k={key}", "LGD_KMS_KEY_ID": "k"}
        )


async def test_factory_yields_a_set_up_saver(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LGD_POSTGRES_URL", pg_url)
    monkeypatch.setenv("LGD_POSTGRES_SCHEMA", pg_schema)
    monkeypatch.setenv("LGD_POSTGRES_POOL_SIZE", "2")
    async with checkpointer() as saver:
        assert isinstance(saver, AsyncPostgresSaver) and saver.schema == pg_schema
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        cp = empty_checkpoint()
        await saver.aput(config, cp, {}, {})
        tup = await saver.aget_tuple(config)
        assert tup is not None and tup.checkpoint["id"] == cp["id"]


async def test_factory_encrypts_with_the_keyring_from_the_environment(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = os.urandom(32)
    monkeypatch.setenv("LGD_POSTGRES_URL", pg_url)
    monkeypatch.setenv("LGD_POSTGRES_SCHEMA", pg_schema)
    monkeypatch.setenv("LGD_KEYRING", f"k1={base64.b64encode(key).decode()}")
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = empty_checkpoint()
    async with checkpointer() as saver:
        assert isinstance(saver.encryption, Encryption)
        await saver.aput(config, cp, {}, {})
        tup = await saver.aget_tuple(config)
        assert tup is not None and tup.checkpoint["id"] == cp["id"]

    other = Encryption(LocalKeyring({"k2": os.urandom(32)}, "k2"))
    async with AsyncPostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, encryption=other
    ) as stranger:
        with pytest.raises(DecryptionError, match="'k1'"):
            await stranger.aget_tuple(config)


def test_settings_read_the_retention_policy() -> None:
    from datetime import timedelta

    from langgraph_durable import Retention

    base = {"LGD_POSTGRES_URL": "postgresql://x"}
    assert settings_from_env(base)["retention"] is None
    s = settings_from_env({**base, "LGD_RETENTION_IDLE": "30d", "LGD_RETENTION_ABSOLUTE": "12w"})
    assert s["retention"] == Retention(idle=timedelta(days=30), absolute=timedelta(weeks=12))
    s = settings_from_env(
        {**base, "LGD_RETENTION_STRATEGY": "keep-latest", "LGD_RETENTION_KEEP": "3"}
    )
    assert s["retention"] == Retention(strategy="keep_latest", keep=3)
    for bad in (
        {"LGD_RETENTION_IDLE": "soon"},
        {"LGD_RETENTION_KEEP": "x"},
        {"LGD_RETENTION_STRATEGY": "delete"},
    ):
        with pytest.raises(ConfigurationError, match="LGD_RETENTION"):
            settings_from_env({**base, **bad})
