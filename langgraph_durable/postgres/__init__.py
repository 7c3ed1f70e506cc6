"""PostgreSQL savers and stores (extra ``postgres``: psycopg 3 and psycopg_pool)."""

from typing import Any

from .saver import AsyncPostgresSaver, PostgresOptions, PostgresSaver

__all__ = [
    "PostgresSaver",
    "AsyncPostgresSaver",
    "PostgresOptions",
    "PostgresStore",
    "AsyncPostgresStore",
]

#: Names imported on first use (the store module loads LangGraph's store interface).
_LAZY = {"PostgresStore": ".store", "AsyncPostgresStore": ".store"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)
