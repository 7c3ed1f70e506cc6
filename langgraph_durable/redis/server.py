"""A checkpointer factory for LangGraph's Agent Server (``langgraph.json``).

The Agent Server accepts a custom checkpointer as the import path of an async
context manager that yields a ``BaseCheckpointSaver``::

    {
      "checkpointer": {"path": "langgraph_durable.redis.server:checkpointer"}
    }

Settings come from the environment:

==================================== ==============================================
``LGD_REDIS_URL``                    ``redis://``, ``rediss://`` or ``redis+cluster://``
                                     URL (required)
``LGD_REDIS_PREFIX``                 key prefix (default ``lgd``)
``LGD_REDIS_TTL``                    seconds a thread lives after its last write
                                     (default: no expiry)
``LGD_REDIS_REFRESH_TTL_ON_READ``    ``on`` makes reads restart the TTL too
``LGD_REDIS_SETUP``                  ``off`` skips ``setup()`` at start
==================================== ==============================================
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from ..errors import ConfigurationError
from .saver import AsyncRedisSaver

__all__ = ["checkpointer", "settings_from_env"]

_OFF = {"0", "off", "false", "no"}
_ON = {"1", "on", "true", "yes"}


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ConfigurationError(f"{name} must be on or off, got {value!r}")


def settings_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The saver's constructor arguments (and ``setup``) read from ``env``.

    Raises:
        ConfigurationError: ``LGD_REDIS_URL`` is missing or a value is malformed.
    """
    env = os.environ if env is None else env
    url = env.get("LGD_REDIS_URL", "").strip()
    if not url:
        raise ConfigurationError(
            "LGD_REDIS_URL is not set: give the Redis URL the checkpointer should use "
            "(redis+cluster://host:port for a cluster)"
        )
    ttl_text = env.get("LGD_REDIS_TTL", "").strip()
    ttl: float | None = None
    if ttl_text:
        try:
            ttl = float(ttl_text)
        except ValueError:
            raise ConfigurationError(
                f"LGD_REDIS_TTL must be a number of seconds, got {ttl_text!r}"
            ) from None
    return {
        "conn": url,
        "prefix": env.get("LGD_REDIS_PREFIX", "lgd").strip() or "lgd",
        "ttl": ttl,
        "refresh_ttl_on_read": _flag(env, "LGD_REDIS_REFRESH_TTL_ON_READ", False),
        "setup": _flag(env, "LGD_REDIS_SETUP", True),
    }


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncRedisSaver]:
    """An ``AsyncRedisSaver`` configured from the environment, set up and closed."""
    settings = settings_from_env()
    run_setup = settings.pop("setup")
    url = settings.pop("conn")
    async with AsyncRedisSaver.from_conn_string(url, **settings) as saver:
        if run_setup:
            await saver.setup()
        yield saver
