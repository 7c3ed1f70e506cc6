"""A checkpointer factory for LangGraph's Agent Server (``langgraph.json``).

The Agent Server accepts a custom checkpointer as the import path of an async
context manager that yields a ``BaseCheckpointSaver``::

    {
      "checkpointer": {"path": "langgraph_durable.postgres.server.checkpointer"}
    }

Settings come from the environment:

====================================== =============================================
``LGD_POSTGRES_URL``                   libpq URL (required)
``LGD_POSTGRES_SCHEMA``                schema of the saver's tables (default
                                       ``langgraph_durable``)
``LGD_POSTGRES_POOL_SIZE``             connections in the saver's pool (default 4)
``LGD_POSTGRES_PREPARE``               ``off`` disables prepared statements (PgBouncer)
``LGD_POSTGRES_SETUP``                 ``off`` skips ``setup()`` at start (run
                                       migrations elsewhere)
``LGD_POSTGRES_RLS``                   ``on`` (or ``1``): row-level security
                                       (``row_level_security=True``); connect as
                                       the application role of docs/security.md
``LGD_TENANT_SIGNING_KEY``             signed tenants (``tenant_signing_key=``, at
                                       least 32 characters); turns row-level
                                       security on (docs/postgres.md)
``LGD_RETENTION_IDLE``                 retention: ``30d`` etc.; also
                                       ``LGD_RETENTION_ABSOLUTE``,
                                       ``LGD_RETENTION_STRATEGY`` (``delete`` or
                                       ``keep-latest``), ``LGD_RETENTION_KEEP``
``LGD_INTEGRITY_KEY``                  chain key (hex, 32 bytes): tamper-evident
                                       history (``integrity=``), checked by
                                       ``langgraph-durable verify``
``LGD_KEYRING``                        envelope encryption with a local keyring, or
                                       ``LGD_KMS_KEY_ID`` with AWS KMS; the
                                       ``LGD_ENCRYPTION_*`` options: see
                                       ``langgraph_durable._server.encryption_from_env``
====================================== =============================================

Without ``LGD_KEYRING`` and ``LGD_KMS_KEY_ID`` payloads are stored unencrypted.

Store factory (``"store": {"path": "langgraph_durable.postgres.server.store"}``): an
``AsyncPostgresStore`` on the same database and schema (the variables above, retention
aside: it is the checkpoints'; ``LGD_INTEGRITY_KEY`` also tags the store's values), set
up unless ``LGD_POSTGRES_SETUP`` is ``off``, with the store's own settings:

====================================== ============================================
``LGD_STORE_TENANT``                   a fixed tenant (default: the run's
                                       ``configurable["tenant_id"]``, else ``default``)
``LGD_STORE_TTL_MINUTES``              items expire this many minutes after their
                                       last write (default: never)
``LGD_STORE_REFRESH_ON_READ``          ``off``: reads do not extend TTLs (default ``on``)
``LGD_STORE_SWEEP_MINUTES``            delete expired items every this many minutes
                                       (``start_ttl_sweeper``); or run ``prune``
``LGD_STORE_INDEX_DIMS``               search by meaning: dimensions of the
                                       embeddings, with ``LGD_STORE_INDEX_EMBED``
``LGD_STORE_INDEX_EMBED``              ``provider:model`` for LangGraph's
                                       ``init_embeddings`` (``openai:text-embedding-3-small``)
                                       or ``package.module:attribute`` /
                                       ``./file.py:attribute``
``LGD_STORE_INDEX_FIELDS``             comma-separated paths embedded (default ``$``)
``LGD_STORE_INDEX_DISTANCE``           ``cosine`` (default), ``l2`` or ``inner_product``
                                       (pgvector's index and the scores)
``LGD_STORE_CLEAR_VECTORS``            ``on``: with encryption, also store embeddings
                                       in the clear for the pgvector index (default ``off``)
====================================== ============================================

Encryption (``LGD_KEYRING`` / ``LGD_KMS_KEY_ID``) covers the store's values and
embeddings as it covers checkpoints (see ``langgraph_durable._store_server``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from .._core.store import DISTANCE_TYPES
from .._server import (
    encryption_from_env,
    env_flag,
    env_required,
    retention_from_env,
    set_up_saver,
)
from .._store_server import store_options_from_env, sweep_minutes_from_env, sweeping
from ..errors import ConfigurationError
from ..protect.integrity import integrity_from_env
from .saver import AsyncPostgresSaver

if TYPE_CHECKING:
    from .store import AsyncPostgresStore

__all__ = ["checkpointer", "store", "settings_from_env", "SIGNING_KEY_ENV"]

#: The environment variable that holds ``tenant_signing_key`` (the CLI reads it too).
SIGNING_KEY_ENV = "LGD_TENANT_SIGNING_KEY"


def settings_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The saver's constructor arguments (and ``setup``) read from ``env``.

    Raises:
        ConfigurationError: ``LGD_POSTGRES_URL`` is missing or a value is malformed.
    """
    env = os.environ if env is None else env
    url = env_required(env, "LGD_POSTGRES_URL", "the PostgreSQL URL the checkpointer should use")
    pool = env.get("LGD_POSTGRES_POOL_SIZE", "4").strip()
    if not pool.isdigit() or int(pool) < 1:
        raise ConfigurationError(f"LGD_POSTGRES_POOL_SIZE must be a positive integer, got {pool!r}")
    settings: dict[str, Any] = {
        "conn": url,
        "schema": env.get("LGD_POSTGRES_SCHEMA", "langgraph_durable").strip(),
        "pool_size": int(pool),
        "prepare_threshold": 5 if env_flag(env, "LGD_POSTGRES_PREPARE", True) else None,
        "encryption": encryption_from_env(env),
        "retention": retention_from_env(env),
        "row_level_security": env_flag(env, "LGD_POSTGRES_RLS", False),
        "setup": env_flag(env, "LGD_POSTGRES_SETUP", True),
    }
    signing_key = env.get(SIGNING_KEY_ENV, "").strip()
    if signing_key:
        if not env_flag(env, "LGD_POSTGRES_RLS", True):
            raise ConfigurationError(
                f"{SIGNING_KEY_ENV} signs the tenant row-level security checks: "
                "unset LGD_POSTGRES_RLS (or set it on) to use it"
            )
        settings["row_level_security"] = True
        settings["tenant_signing_key"] = signing_key
    integrity = integrity_from_env(env)
    if integrity is not None:
        settings["integrity"] = integrity
    return settings


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncPostgresSaver]:
    """An ``AsyncPostgresSaver`` configured from the environment, set up and closed."""
    settings = settings_from_env()
    run_setup = settings.pop("setup")
    url = settings.pop("conn")
    async with set_up_saver(
        AsyncPostgresSaver.from_conn_string(url, **settings), run_setup
    ) as saver:
        yield saver


def vector_options_from_env(env: Mapping[str, str], index: dict[str, Any] | None) -> dict[str, Any]:
    """``LGD_STORE_INDEX_DISTANCE`` (into ``index``) and ``LGD_STORE_CLEAR_VECTORS``.

    Raises:
        ConfigurationError: a value is malformed, or set without an index.
    """
    distance = env.get("LGD_STORE_INDEX_DISTANCE", "").strip()
    clear = env_flag(env, "LGD_STORE_CLEAR_VECTORS", False)
    if (distance or clear) and index is None:
        raise ConfigurationError(
            "LGD_STORE_INDEX_DISTANCE and LGD_STORE_CLEAR_VECTORS need search by meaning: "
            "set LGD_STORE_INDEX_DIMS and LGD_STORE_INDEX_EMBED"
        )
    if distance:
        if distance not in DISTANCE_TYPES:
            raise ConfigurationError(
                f"LGD_STORE_INDEX_DISTANCE must be one of {', '.join(DISTANCE_TYPES)}, "
                f"got {distance!r}"
            )
        assert index is not None
        index["distance_type"] = distance
    return {"clear_vectors": True} if clear else {}


@asynccontextmanager
async def store() -> AsyncIterator[AsyncPostgresStore]:
    """An ``AsyncPostgresStore`` configured from the environment, set up and closed."""
    from .store import AsyncPostgresStore

    env = os.environ
    settings = settings_from_env(env)
    options = store_options_from_env(env)
    for name in ("schema", "pool_size", "prepare_threshold", "encryption"):
        options[name] = settings[name]
    options["row_level_security"] = settings["row_level_security"]
    if "tenant_signing_key" in settings:
        options["tenant_signing_key"] = settings["tenant_signing_key"]
    if "integrity" in settings:
        options["integrity"] = settings["integrity"]
    options.update(vector_options_from_env(env, options.get("index")))
    async with AsyncPostgresStore.from_conn_string(settings["conn"], **options) as opened:
        if settings["setup"]:
            await opened.setup()
        async with sweeping(opened, sweep_minutes_from_env(env)):
            yield opened
