"""A checkpointer factory for LangGraph's Agent Server (``langgraph.json``).

::

    {
      "checkpointer": {"path": "langgraph_durable.dynamodb.server.checkpointer"}
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

Store factory (``"store": {"path": "langgraph_durable.dynamodb.server.store"}``): an
``AsyncDynamoDBStore`` on the same table (the variables above, retention aside: it is
the checkpoints'; ``LGD_INTEGRITY_KEY`` also tags the store's values), set up unless
``LGD_DYNAMODB_SETUP`` is ``off``, with the store's own settings:

====================================== ============================================
``LGD_STORE_TENANT``                   a fixed tenant (default: the run's
                                       ``configurable["tenant_id"]``, else ``default``)
``LGD_STORE_TTL_MINUTES``              items expire this many minutes after their
                                       last write (default: never)
``LGD_STORE_REFRESH_ON_READ``          ``off``: reads do not extend TTLs (default ``on``)
``LGD_STORE_SWEEP_MINUTES``            refused: the table's native TTL deletes expired
                                       items (``setup()`` enables it when a TTL is set)
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
    env_required,
    retention_from_env,
    set_up_saver,
)
from .._store_server import store_options_from_env, sweep_minutes_from_env
from ..errors import ConfigurationError
from ..protect.integrity import integrity_from_env
from .saver import AsyncDynamoDBSaver

if TYPE_CHECKING:
    from .store import AsyncDynamoDBStore

__all__ = ["checkpointer", "store", "settings_from_env"]


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


@asynccontextmanager
async def store() -> AsyncIterator[AsyncDynamoDBStore]:
    """An ``AsyncDynamoDBStore`` configured from the environment, set up and closed."""
    from .store import AsyncDynamoDBStore

    env = os.environ
    settings = settings_from_env(env)
    if sweep_minutes_from_env(env) is not None:
        raise ConfigurationError(
            "LGD_STORE_SWEEP_MINUTES is set, but DynamoDB deletes a store's expired items "
            "by the table's native TTL (setup() enables it): unset it"
        )
    options = store_options_from_env(env)
    if "integrity" in settings:
        options["integrity"] = settings["integrity"]
    async with AsyncDynamoDBStore.from_conn_string(
        settings["url"], encryption=settings["encryption"], **options
    ) as opened:
        if settings["setup"]:
            await opened.setup()
        yield opened
