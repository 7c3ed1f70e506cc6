"""Redis and Valkey savers (extra ``redis``: redis-py 5 or later).

Plain Redis 7+ or Valkey, no modules; Redis Cluster through hash-tagged keys.
"""

from ._admin import SetupResult
from .saver import AsyncRedisSaver, RedisOptions, RedisSaver

__all__ = ["RedisSaver", "AsyncRedisSaver", "RedisOptions", "SetupResult"]
