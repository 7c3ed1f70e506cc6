"""A checkpointer factory for LangGraph's Agent Server (``langgraph.json``).

::

    {
      "checkpointer": {"path": "langgraph_durable.dynamodb.server:checkpointer"}
    }

Settings come from the environment:

====================================== ============================================
``LGD_DYNAMODB_URL``                   ``dynamodb://TABLE?region=...``
                                       (``&endpoint=...`` for a local server;
                                       ``&retention_idle=30d``,
                                       ``&retention_absolute=90d``,
                                       ``&retention_strategy=keep_latest``,
                                       ``&retention_keep=N`` for retention;
                                       ``&delta_chain=N``, 0 for no deltas)
                                       (required)
``LGD_RETENTION_IDLE``                 retention, as for the other backends (also
                                       ``LGD_RETENTION_ABSOLUTE``, ``_STRATEGY``,
                                       ``_KEEP``); the URL's ``retention_*``
                                       parameters win over them
``LGD_DYNAMODB_SETUP``                 ``off`` skips ``setup()`` (table creation or
                                       checks) at start
``LGD_INTEGRITY_KEY``                  chain key (hex, 32 bytes): tamper-evident
                                       history (``integrity=``), checked by
                                       ``langgraph-durable verify``
``LGD_KEYRING``                        envelope encryption with a local keyring, or
                                       ``LGD_KMS_KEY_ID`` with AWS KMS; the
                                       ``LGD_ENCRYPTION_*`` options: see
                                       ``langgraph_durable._server.encryption_from_env``
====================================== ============================================

Without ``LGD_KEYRING`` and ``LGD_KMS_KEY_ID`` payloads are stored unencrypted.
AWS credentials come from boto3's usual chain (environment, profile, instance role).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from .._server import (
    encryption_from_env,
    env_flag,
    env_required,
    retention_from_env,
    set_up_saver,
)
from ..protect.integrity import integrity_from_env
from .saver import AsyncDynamoDBSaver

__all__ = ["checkpointer", "settings_from_env"]


def settings_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The saver's connection string, encryption and whether to run ``setup()``.

    Args:
        env: The environment to read (default: ``os.environ``).

    Returns:
        ``{"url": ..., "encryption": Encryption | None, "setup": bool}``.

    Raises:
        ConfigurationError: ``LGD_DYNAMODB_URL`` is missing or a value is malformed.
    """
    env = os.environ if env is None else env
    settings: dict[str, Any] = {
        "url": env_required(env, "LGD_DYNAMODB_URL", "dynamodb://TABLE?region=REGION"),
        "encryption": encryption_from_env(env),
        "setup": env_flag(env, "LGD_DYNAMODB_SETUP", True),
    }
    retention = retention_from_env(env)
    if retention is not None:
        settings["retention"] = retention
    integrity = integrity_from_env(env)
    if integrity is not None:
        settings["integrity"] = integrity
    return settings


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncDynamoDBSaver]:
    """An ``AsyncDynamoDBSaver`` configured from the environment, set up and closed."""
    settings = settings_from_env()
    extra: dict[str, Any] = {}
    if "retention" in settings and "retention_" not in settings["url"]:
        extra["retention"] = settings["retention"]
    if "integrity" in settings:
        extra["integrity"] = settings["integrity"]
    opened = AsyncDynamoDBSaver.from_conn_string(
        settings["url"], encryption=settings["encryption"], **extra
    )
    async with set_up_saver(opened, settings["setup"]) as saver:
        yield saver
