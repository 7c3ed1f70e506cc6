"""A checkpointer factory for LangGraph's Agent Server (``langgraph.json``).

The Agent Server accepts a custom checkpointer as the import path of an async
context manager that yields a ``BaseCheckpointSaver``::

    {
      "checkpointer": {"path": "langgraph_durable.redis.server.checkpointer"}
    }

Settings come from the environment:

====================================== ============================================
``LGD_REDIS_URL``                      ``redis://``, ``rediss://`` or
                                       ``redis+cluster://`` URL (required)
``LGD_REDIS_PREFIX``                   key prefix (default ``lgd``)
``LGD_RETENTION_IDLE``                 retention: ``30d`` etc.; also
                                       ``LGD_RETENTION_ABSOLUTE``,
                                       ``LGD_RETENTION_STRATEGY`` (``delete`` or
                                       ``keep-latest``), ``LGD_RETENTION_KEEP``
                                       (see ``langgraph_durable._server.retention_from_env``)
``LGD_REDIS_TTL``                      deprecated (``LGD_RETENTION_IDLE``): seconds a
                                       thread lives after its last write
``LGD_REDIS_REFRESH_TTL_ON_READ``      ``on`` makes reads count as writes for
                                       retention
``LGD_REDIS_SETUP``                    ``off`` skips ``setup()`` at start
``LGD_REDIS_WAIT_REPLICAS``            replicas each write waits for (``WAIT``;
                                       default 0: none), within
                                       ``LGD_REDIS_WAIT_TIMEOUT`` seconds (default 1)
``LGD_REDIS_POOL_SIZE``                connections of the client (default 16); a call
                                       waits ``LGD_REDIS_POOL_TIMEOUT`` seconds
                                       (default 30) for a free one
``LGD_INTEGRITY_KEY``                  chain key (hex, 32 bytes): tamper-evident
                                       history (``integrity=``), checked by
                                       ``langgraph-durable verify``
``LGD_KEYRING``                        envelope encryption with a local keyring, or
                                       ``LGD_KMS_KEY_ID`` with AWS KMS; the
                                       ``LGD_ENCRYPTION_*`` options: see
                                       ``langgraph_durable._server.encryption_from_env``
====================================== ============================================

Without ``LGD_KEYRING`` and ``LGD_KMS_KEY_ID`` payloads are stored unencrypted.

Store factory (``"store": {"path": "langgraph_durable.redis.server.store"}``): an
``AsyncRedisStore`` on the same server and prefix (the variables above, retention aside:
it is the checkpoints'; ``LGD_INTEGRITY_KEY`` also tags the store's values), set up
unless ``LGD_REDIS_SETUP`` is ``off``, with the store's own settings:

====================================== ============================================
``LGD_STORE_TENANT``                   a fixed tenant (default: the run's
                                       ``configurable["tenant_id"]``, else ``default``)
``LGD_STORE_TTL_MINUTES``              items expire this many minutes after their
                                       last write (default: never)
``LGD_STORE_REFRESH_ON_READ``          ``off``: reads do not extend TTLs (default ``on``)
``LGD_STORE_SWEEP_MINUTES``            delete expired items (every tenant's) every this
                                       many minutes; or run ``prune``
``LGD_STORE_INDEX_DIMS``               search by meaning: dimensions of the
                                       embeddings, with ``LGD_STORE_INDEX_EMBED``
``LGD_STORE_INDEX_EMBED``              ``provider:model`` for LangGraph's
                                       ``init_embeddings`` (``openai:text-embedding-3-small``)
                                       or ``package.module:attribute`` /
                                       ``./file.py:attribute``
``LGD_STORE_INDEX_FIELDS``             comma-separated paths embedded (default ``$``)
====================================== ============================================

Encryption (``LGD_KEYRING`` / ``LGD_KMS_KEY_ID``) covers the store's values and
embeddings as it covers checkpoints (see ``langgraph_durable._store_server``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from .._server import (
    encryption_from_env,
    env_flag,
    env_number,
    env_required,
    retention_from_env,
    set_up_saver,
)
from .._store_server import store_options_from_env, sweep_minutes_from_env, sweeping
from ..errors import ConfigurationError
from ..protect.integrity import integrity_from_env
from .saver import AsyncRedisSaver, RedisOptions

if TYPE_CHECKING:
    from .store import AsyncRedisStore

__all__ = ["checkpointer", "store", "settings_from_env"]


def settings_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The saver's constructor arguments (and ``setup``) read from ``env``.

    Raises:
        ConfigurationError: ``LGD_REDIS_URL`` is missing or a value is malformed.
    """
    env = os.environ if env is None else env
    url = env_required(
        env,
        "LGD_REDIS_URL",
        "the Redis URL the checkpointer should use (redis+cluster://host:port for a cluster)",
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
    settings: dict[str, Any] = {
        "conn": url,
        "prefix": env.get("LGD_REDIS_PREFIX", "lgd").strip() or "lgd",
        "ttl": ttl,
        "refresh_ttl_on_read": env_flag(env, "LGD_REDIS_REFRESH_TTL_ON_READ", False),
        "encryption": encryption_from_env(env),
        "setup": env_flag(env, "LGD_REDIS_SETUP", True),
    }
    retention = retention_from_env(env)
    if retention is not None:
        if ttl is not None:
            raise ConfigurationError(
                "set LGD_RETENTION_IDLE (e.g. 30d) or the deprecated LGD_REDIS_TTL, not both"
            )
        settings["retention"] = retention
    integrity = integrity_from_env(env)
    if integrity is not None:
        settings["integrity"] = integrity
    settings.update(_connection_settings(env))
    return settings


#: The saver options read from the environment for durability and the client's pool.
_CONNECTION_VARS = {
    "wait_replicas": ("LGD_REDIS_WAIT_REPLICAS", True),
    "wait_timeout": ("LGD_REDIS_WAIT_TIMEOUT", False),
    "pool_size": ("LGD_REDIS_POOL_SIZE", True),
    "pool_timeout": ("LGD_REDIS_POOL_TIMEOUT", False),
}


def _connection_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The ``LGD_REDIS_WAIT_*`` / ``LGD_REDIS_POOL_*`` options given, checked now."""
    found: dict[str, Any] = {}
    for option, (name, integer) in _CONNECTION_VARS.items():
        value = env_number(env, name, integer)
        if value is None:
            continue
        try:
            RedisOptions(**{option: value})  # type: ignore[arg-type]
        except ConfigurationError as exc:
            raise ConfigurationError(f"{name}: {exc}") from None
        found[option] = value
    return found


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncRedisSaver]:
    """An ``AsyncRedisSaver`` configured from the environment, set up and closed."""
    settings = settings_from_env()
    run_setup = settings.pop("setup")
    url = settings.pop("conn")
    async with set_up_saver(AsyncRedisSaver.from_conn_string(url, **settings), run_setup) as saver:
        yield saver


@asynccontextmanager
async def store() -> AsyncIterator[AsyncRedisStore]:
    """An ``AsyncRedisStore`` configured from the environment, set up and closed."""
    from .store import AsyncRedisStore

    env = os.environ
    settings = settings_from_env(env)
    options = store_options_from_env(env)
    options["prefix"] = settings["prefix"]
    options["encryption"] = settings["encryption"]
    if "integrity" in settings:
        options["integrity"] = settings["integrity"]
    async with AsyncRedisStore.from_conn_string(settings["conn"], **options) as opened:
        if settings["setup"]:
            await opened.setup()
        async with sweeping(opened, sweep_minutes_from_env(env)):
            yield opened
