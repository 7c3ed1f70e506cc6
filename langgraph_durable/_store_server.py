"""Shared pieces of the Agent Server store factories (``<backend>.server.store``).

The factories read the checkpointer factory's variables (URL, schema or prefix,
keyring, ...) and these, for the store only:

====================================== ============================================
``LGD_STORE_TENANT``                   a fixed tenant for every call (default: the
                                       run's ``configurable["tenant_id"]``, else
                                       ``default``)
``LGD_STORE_TTL_MINUTES``              items expire this many minutes after their
                                       last write (``TTLConfig.default_ttl``;
                                       default: never)
``LGD_STORE_REFRESH_ON_READ``          ``off``: reads do not extend an item's TTL
                                       (default ``on``, LangGraph's)
``LGD_STORE_SWEEP_MINUTES``            delete expired items every this many
                                       minutes in the server (PostgreSQL, Redis;
                                       DynamoDB's native TTL deletes them);
                                       ``langgraph-durable prune`` does it from cron
``LGD_STORE_INDEX_DIMS``               search by meaning: the embeddings' dimensions,
                                       with ``LGD_STORE_INDEX_EMBED``
``LGD_STORE_INDEX_EMBED``              ``provider:model`` as LangGraph's
                                       ``init_embeddings`` takes it
                                       (``openai:text-embedding-3-small``), or an
                                       import path ``package.module:attribute`` or
                                       ``./file.py:attribute`` (an ``Embeddings``
                                       or a function embedding a list of texts)
``LGD_STORE_INDEX_FIELDS``             comma-separated JSON paths embedded (default
                                       ``$``: the whole value)
====================================== ============================================

Nothing here imports a driver or LangGraph at module import time.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from ._server import env_flag, env_list
from .errors import ConfigurationError, DurableError

__all__ = ["embed_from_text", "store_options_from_env", "sweeping", "sweep_minutes_from_env"]

_log = logging.getLogger("langgraph_durable.store")

TENANT_ENV = "LGD_STORE_TENANT"
TTL_ENV = "LGD_STORE_TTL_MINUTES"
REFRESH_ENV = "LGD_STORE_REFRESH_ON_READ"
SWEEP_ENV = "LGD_STORE_SWEEP_MINUTES"
DIMS_ENV = "LGD_STORE_INDEX_DIMS"
EMBED_ENV = "LGD_STORE_INDEX_EMBED"
FIELDS_ENV = "LGD_STORE_INDEX_FIELDS"


def _minutes(env: Mapping[str, str], name: str) -> float | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ConfigurationError(f"{name} must be a number of minutes > 0, got {text!r}")
    return value


def sweep_minutes_from_env(env: Mapping[str, str]) -> float | None:
    """``LGD_STORE_SWEEP_MINUTES``, or None when unset."""
    return _minutes(env, SWEEP_ENV)


def embed_from_text(text: str) -> Any:
    """What ``LGD_STORE_INDEX_EMBED`` names, as ``IndexConfig["embed"]``.

    A ``provider:model`` string (no ``.`` or ``/`` before the colon) is returned as
    is, for LangGraph's ``init_embeddings``; ``package.module:attribute`` is
    imported and ``./file.py:attribute`` loaded from the file.

    Raises:
        ConfigurationError: The module or file cannot be loaded, or has no such attribute.
    """
    head, sep, attribute = text.rpartition(":")
    if not sep or not head or not attribute:
        raise ConfigurationError(
            f"{EMBED_ENV} must be provider:model (openai:text-embedding-3-small) or "
            f"module.path:attribute, got {text!r}"
        )
    if "." not in head and "/" not in head and "\\" not in head:
        return text  # provider:model, for init_embeddings
    try:
        if head.endswith(".py") or "/" in head or "\\" in head:
            path = Path(head).resolve()
            spec = importlib.util.spec_from_file_location(f"_lgd_embed_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {path}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(head)
    except (ImportError, OSError) as exc:
        raise ConfigurationError(f"{EMBED_ENV}={text!r}: cannot import {head!r}: {exc}") from exc
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ConfigurationError(f"{EMBED_ENV}={text!r}: {head!r} has no {attribute!r}")
        found = getattr(found, part)
    return found


def store_options_from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """The store-only constructor arguments: ``tenant``, ``ttl``, ``index``.

    Raises:
        ConfigurationError: A value is malformed, or only one of
            ``LGD_STORE_INDEX_DIMS`` and ``LGD_STORE_INDEX_EMBED`` is set.
    """
    options: dict[str, Any] = {}
    tenant = env.get(TENANT_ENV, "").strip()
    if tenant:
        options["tenant"] = tenant
    default_ttl = _minutes(env, TTL_ENV)
    refresh = env.get(REFRESH_ENV, "").strip()
    sweep = sweep_minutes_from_env(env)
    if default_ttl is not None or refresh or sweep is not None:
        ttl: dict[str, Any] = {"refresh_on_read": env_flag(env, REFRESH_ENV, True)}
        if default_ttl is not None:
            ttl["default_ttl"] = default_ttl
        if sweep is not None:
            ttl["sweep_interval_minutes"] = sweep
        options["ttl"] = ttl
    dims_text = env.get(DIMS_ENV, "").strip()
    embed_text = env.get(EMBED_ENV, "").strip()
    fields = env_list(env, FIELDS_ENV)
    if dims_text or embed_text or fields is not None:
        if not dims_text or not embed_text:
            raise ConfigurationError(
                f"search by meaning needs both {DIMS_ENV} (e.g. 1536) and {EMBED_ENV} "
                "(e.g. openai:text-embedding-3-small)"
            )
        if not dims_text.isdigit() or int(dims_text) < 1:
            raise ConfigurationError(f"{DIMS_ENV} must be a positive integer, got {dims_text!r}")
        index: dict[str, Any] = {"dims": int(dims_text), "embed": embed_from_text(embed_text)}
        if fields:
            index["fields"] = list(fields)
        options["index"] = index
    return options


@asynccontextmanager
async def sweeping(store: Any, minutes: float | None) -> AsyncIterator[None]:
    """Sweep ``store``'s expired items every ``minutes`` while the block runs.

    The store's own ``start_ttl_sweeper`` when it has one, else a task on the
    running loop calling its ``asweep_all_expired`` (a failed sweep is logged; the
    next runs on time).

    Raises:
        ConfigurationError: ``minutes`` is set and the store cannot sweep every tenant
            (DynamoDB: the table's native TTL deletes expired items).
    """
    if minutes is None:
        yield
        return
    if not getattr(store, "supports_sweep_all", True):
        raise ConfigurationError(
            f"{SWEEP_ENV} is set but this store does not sweep every tenant: its table's "
            "native TTL deletes expired items (unset it)"
        )
    if hasattr(store, "start_ttl_sweeper"):
        await store.start_ttl_sweeper(minutes)
        try:
            yield
        finally:
            await store.stop_ttl_sweeper()
        return
    sweep = store.asweep_all_expired
    interval = minutes * 60.0

    async def loop() -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await sweep()
            except DurableError as exc:
                _log.warning("the store's TTL sweep failed (next in %ss): %s", interval, exc)

    task = asyncio.get_running_loop().create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
