"""Redis and Valkey savers and stores (extra ``redis``: redis-py 5 or later).

Plain Redis 7+ or Valkey, no modules; Redis Cluster through hash-tagged keys.
"""

from typing import Any

from ._admin import SetupResult
from .saver import AsyncRedisSaver, RedisOptions, RedisSaver

__all__ = [
    "RedisSaver",
    "AsyncRedisSaver",
    "RedisOptions",
    "SetupResult",
    "RedisStore",
    "AsyncRedisStore",
]

#: Names imported on first use (the store module loads LangGraph's store interface).
_LAZY = {"RedisStore": ".store", "AsyncRedisStore": ".store"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)
