"""The Agent Server checkpointer factory for DynamoDB reads its settings from the environment."""

from __future__ import annotations

import base64
import os

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable.dynamodb import AsyncDynamoDBSaver
from langgraph_durable.dynamodb.server import checkpointer, settings_from_env
from langgraph_durable.errors import ConfigurationError
from langgraph_durable.protect import Encryption, LocalKeyring


def test_settings_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="LGD_DYNAMODB_URL"):
        settings_from_env({})
    with pytest.raises(ConfigurationError, match="on or off"):
        settings_from_env({"LGD_DYNAMODB_URL": "dynamodb://t", "LGD_DYNAMODB_SETUP": "maybe"})
    assert settings_from_env({"LGD_DYNAMODB_URL": "dynamodb://t"}) == {
        "url": "dynamodb://t",
        "encryption": None,
        "setup": True,
    }


def test_settings_read_the_keyring() -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    s = settings_from_env(
        {
            "LGD_DYNAMODB_URL": "dynamodb://t",
            "LGD_KEYRING": f"k1={key}",
            "LGD_ENCRYPTION_CLEAR_METADATA": "source,step",
        }
    )
    encryption = s["encryption"]
    assert isinstance(encryption, Encryption) and isinstance(encryption.keyring, LocalKeyring)
    assert encryption.clear_metadata == ("source", "step")
    with pytest.raises(ConfigurationError, match="encryption is off"):
        settings_from_env(
            {"LGD_DYNAMODB_URL": "dynamodb://t", "LGD_ENCRYPTION_CLEAR_METADATA": "source"}
        )


async def test_factory_creates_the_table_and_yields_a_saver(
    dynamodb_endpoint: str, dynamodb_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "LGD_DYNAMODB_URL",
        f"dynamodb://{dynamodb_table}?region=us-east-1&endpoint={dynamodb_endpoint}",
    )
    async with checkpointer() as saver:
        assert isinstance(saver, AsyncDynamoDBSaver)
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        cp = empty_checkpoint()
        await saver.aput(config, cp, {}, {})
        tup = await saver.aget_tuple(config)
        assert tup is not None and tup.checkpoint["id"] == cp["id"]


async def test_factory_encrypts_with_the_keyring_from_the_environment(
    dynamodb_endpoint: str, dynamodb_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "LGD_DYNAMODB_URL",
        f"dynamodb://{dynamodb_table}?region=us-east-1&endpoint={dynamodb_endpoint}",
    )
    monkeypatch.setenv("LGD_KEYRING", f"k1={base64.b64encode(os.urandom(32)).decode()}")
    async with checkpointer() as saver:
        assert isinstance(saver.encryption, Encryption)
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        cp = empty_checkpoint()
        await saver.aput(config, cp, {}, {})
        tup = await saver.aget_tuple(config)
        assert tup is not None and tup.checkpoint["id"] == cp["id"]


def test_settings_read_the_shared_retention_variables() -> None:
    from datetime import timedelta

    from langgraph_durable import Retention

    s = settings_from_env({"LGD_DYNAMODB_URL": "dynamodb://t", "LGD_RETENTION_IDLE": "30d"})
    assert s["retention"] == Retention(idle=timedelta(days=30))
