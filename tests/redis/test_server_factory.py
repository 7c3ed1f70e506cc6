"""The Agent Server checkpointer factory reads its settings from the environment."""

from __future__ import annotations

import base64
import os

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable.errors import ConfigurationError
from langgraph_durable.protect import Encryption, KmsKeyring
from langgraph_durable.redis import AsyncRedisSaver
from langgraph_durable.redis.server import checkpointer, settings_from_env


def test_settings_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="LGD_REDIS_URL"):
        settings_from_env({})
    with pytest.raises(ConfigurationError, match="LGD_REDIS_TTL"):
        settings_from_env({"LGD_REDIS_URL": "redis://x", "LGD_REDIS_TTL": "soon"})
    with pytest.raises(ConfigurationError, match="REFRESH"):
        settings_from_env({"LGD_REDIS_URL": "redis://x", "LGD_REDIS_REFRESH_TTL_ON_READ": "?"})
    s = settings_from_env({"LGD_REDIS_URL": "redis://x", "LGD_REDIS_TTL": "3600"})
    assert s == {
        "conn": "redis://x",
        "prefix": "lgd",
        "ttl": 3600.0,
        "refresh_ttl_on_read": False,
        "encryption": None,
        "setup": True,
    }


def test_settings_read_the_keyring() -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    s = settings_from_env({"LGD_REDIS_URL": "redis://x", "LGD_KEYRING": f"k1={key}"})
    assert isinstance(s["encryption"], Encryption)
    assert s["encryption"].keyring.active_key_id("t") == "k1"
    s = settings_from_env(
        {
            "LGD_REDIS_URL": "redis://x",
            "LGD_KMS_KEY_ID": "alias/agents",
            "LGD_ENCRYPTION_ALLOW_PLAINTEXT": "yes",
        }
    )
    assert isinstance(s["encryption"].keyring, KmsKeyring)
    assert s["encryption"].allow_plaintext is True
    with pytest.raises(ConfigurationError, match="LGD_KEYRING"):
        settings_from_env({"LGD_REDIS_URL": "redis://x", "LGD_KEYRING": "k1"})


async def test_factory_yields_a_set_up_saver(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LGD_REDIS_URL", redis_url)
    monkeypatch.setenv("LGD_REDIS_PREFIX", redis_prefix)
    monkeypatch.setenv("LGD_REDIS_TTL", "60")
    async with checkpointer() as saver:
        assert isinstance(saver, AsyncRedisSaver) and saver.prefix == redis_prefix
        assert saver.options.ttl == 60.0
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        cp = empty_checkpoint()
        await saver.aput(config, cp, {}, {})
        tup = await saver.aget_tuple(config)
        assert tup is not None and tup.checkpoint["id"] == cp["id"]


async def test_factory_encrypts_with_the_keyring_from_the_environment(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LGD_REDIS_URL", redis_url)
    monkeypatch.setenv("LGD_REDIS_PREFIX", redis_prefix)
    monkeypatch.setenv("LGD_KEYRING", f"k1={base64.b64encode(os.urandom(32)).decode()}")
    async with checkpointer() as saver:
        assert isinstance(saver.encryption, Encryption)
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        cp = empty_checkpoint()
        await saver.aput(config, cp, {}, {})
        tup = await saver.aget_tuple(config)
        assert tup is not None and tup.checkpoint["id"] == cp["id"]


def test_settings_read_wait_and_pool_options() -> None:
    base = {"LGD_REDIS_URL": "redis://x"}
    s = settings_from_env(
        {
            **base,
            "LGD_REDIS_WAIT_REPLICAS": "1",
            "LGD_REDIS_WAIT_TIMEOUT": "0.5",
            "LGD_REDIS_POOL_SIZE": "64",
            "LGD_REDIS_POOL_TIMEOUT": "5",
        }
    )
    assert (s["wait_replicas"], s["wait_timeout"], s["pool_size"], s["pool_timeout"]) == (
        1,
        0.5,
        64,
        5.0,
    )
    for name, value in (
        ("LGD_REDIS_WAIT_REPLICAS", "one"),
        ("LGD_REDIS_WAIT_REPLICAS", "99"),
        ("LGD_REDIS_WAIT_TIMEOUT", "0"),
        ("LGD_REDIS_POOL_SIZE", "1.5"),
        ("LGD_REDIS_POOL_TIMEOUT", "-1"),
    ):
        with pytest.raises(ConfigurationError, match=name):
            settings_from_env({**base, name: value})


async def test_factory_passes_pool_options_to_the_saver(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LGD_REDIS_URL", redis_url)
    monkeypatch.setenv("LGD_REDIS_PREFIX", redis_prefix)
    monkeypatch.setenv("LGD_REDIS_POOL_SIZE", "3")
    monkeypatch.setenv("LGD_REDIS_WAIT_TIMEOUT", "0.25")
    async with checkpointer() as saver:
        assert saver.options.pool_size == 3 and saver.options.wait_timeout == 0.25
