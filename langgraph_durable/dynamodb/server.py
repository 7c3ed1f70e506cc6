"""A checkpointer factory for LangGraph's Agent Server (``langgraph.json``).

::

    {
      "checkpointer": {"path": "langgraph_durable.dynamodb.server:checkpointer"}
    }

Settings come from the environment:

======================== =========================================================
``LGD_DYNAMODB_URL``     ``dynamodb://TABLE?region=...`` (``&endpoint=...`` for a
                         local server) (required)
``LGD_DYNAMODB_SETUP``   ``off`` skips ``setup()`` (table creation or checks) at start
======================== =========================================================

AWS credentials come from boto3's usual chain (environment, profile, instance role).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from .._server import env_flag, env_required, set_up_saver
from .saver import AsyncDynamoDBSaver

__all__ = ["checkpointer", "settings_from_env"]


def settings_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The saver's connection string and whether to run ``setup()``, read from ``env``.

    Raises:
        ConfigurationError: ``LGD_DYNAMODB_URL`` is missing or a value is malformed.
    """
    env = os.environ if env is None else env
    return {
        "url": env_required(env, "LGD_DYNAMODB_URL", "dynamodb://TABLE?region=REGION"),
        "setup": env_flag(env, "LGD_DYNAMODB_SETUP", True),
    }


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncDynamoDBSaver]:
    """An ``AsyncDynamoDBSaver`` configured from the environment, set up and closed."""
    settings = settings_from_env()
    async with set_up_saver(
        AsyncDynamoDBSaver.from_conn_string(settings["url"]), settings["setup"]
    ) as saver:
        yield saver
