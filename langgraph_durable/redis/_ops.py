"""The saver's Redis operations, one class, and a map of where each part lives.

:class:`RedisOps` is what ``RedisSaver`` and ``AsyncRedisSaver`` use: each of
its operations is a generator that yields requests (:class:`Command`,
:class:`Script`, :class:`Batch`, :class:`ScanKeys`) and receives their results
(see ``langgraph_durable._core.sansio``); the savers run the same generators
through a sync or async driver (``_driver``). It puts together groups of
operations, one module each, all pure (no redis import, no I/O):

- ``_keys``: every key name, the shapes of hash fields, identifier checks,
  Redis URLs (the key layout is in its docstring).
- ``_records``: how checkpoints, blobs, write frames, data keys and
  effect-journal entries are packed for Redis and read back.
- ``_requests``: the requests above and :class:`LuaScript`.
- ``_scripts``: every Lua script, loaded from ``lua/<name>.lua`` (shared Lua
  helpers are in ``lua/lib/``; see its docstring).
- ``_base``: the state and helpers all groups share (expiry specs, the
  tenant index).
- ``_writes`` (put, put_writes), ``_reads`` (get_tuple, list),
  ``_effects`` (the effect journal), ``_data_keys`` (envelope encryption),
  ``_admin`` (setup, deletes, copy, prune, the stored retention policy).
- ``_prune``: the pruner run that ``prune`` and ``prune_expired`` use.
"""

from __future__ import annotations

from ._admin import AdminOps, SetupResult
from ._base import expiry_spec
from ._data_keys import DataKeyOps
from ._effects import EffectOps
from ._keys import (
    CREATED_FIELD,
    EFFECT_FIELDS,
    MARK,
    SEP,
    TOUCHED_FIELD,
    KeyLayout,
    split_cluster_url,
    validate_prefix,
)
from ._reads import LIST_PAGE_SIZE, ReadOps
from ._records import DELTA_MARK
from ._requests import Batch, Command, LuaScript, ScanKeys, Script
from ._scripts import SCRIPTS
from ._writes import WriteOps

__all__ = [
    "Command",
    "Script",
    "Batch",
    "ScanKeys",
    "LuaScript",
    "KeyLayout",
    "RedisOps",
    "SetupResult",
    "SCRIPTS",
    "validate_prefix",
    "split_cluster_url",
    "expiry_spec",
    "CREATED_FIELD",
    "TOUCHED_FIELD",
    "DELTA_MARK",
    "EFFECT_FIELDS",
    "LIST_PAGE_SIZE",
    "MARK",
    "SEP",
]


class RedisOps(WriteOps, ReadOps, EffectOps, DataKeyOps, AdminOps):
    """The saver's operations on one key prefix, as sans-IO generators.

    Args:
        prefix: Key prefix of every key the saver writes.
        refresh_ttl_on_read: Whether reads also count as writes for retention
            (they restart the thread's idle time).
        page_size: Checkpoints per ``list`` round trip.
        codec: The checkpoint codec (owns the record pipeline).
        index_in_script: Whether ``put`` may touch the tenant's index in its
            script (one server, not a cluster, where the index is in another
            slot): a thread's first write is then one round trip too.
        retention: The retention policy of a tenant (asked on every write), or
            None: threads never expire by themselves.
    """
