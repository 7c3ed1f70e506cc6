"""The Agent Server checkpointer factory reads its settings from the environment."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable.errors import ConfigurationError
from langgraph_durable.postgres import AsyncPostgresSaver
from langgraph_durable.postgres.server import checkpointer, settings_from_env


def test_settings_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="LGD_POSTGRES_URL"):
        settings_from_env({})
    with pytest.raises(ConfigurationError, match="POOL_SIZE"):
        settings_from_env({"LGD_POSTGRES_URL": "postgresql://x", "LGD_POSTGRES_POOL_SIZE": "0"})
    s = settings_from_env({"LGD_POSTGRES_URL": "postgresql://x", "LGD_POSTGRES_PREPARE": "off"})
    assert s["prepare_threshold"] is None and s["setup"] is True and s["pool_size"] == 4


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
