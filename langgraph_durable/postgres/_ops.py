"""The saver's PostgreSQL operations, one class, and a map of where each part lives.

:class:`PostgresOps` is what ``PostgresSaver`` and ``AsyncPostgresSaver`` use:
each of its operations is a generator that yields :class:`Query` requests and
receives their rows (see ``langgraph_durable._core.sansio``); the savers run
the same generators through a sync or async driver (``_driver``). It puts
together groups of operations, one module each, all pure (no psycopg import,
no I/O); the SQL of an operation is in its group's module:

- ``_schema``: the tables (described in its docstring), the migrations, the
  schema name check.
- ``_query``: :class:`Query`, the one request an operation yields.
- ``_base``: the state and helpers all groups share (schema, codec, the
  epochs this process knows, partition names).
- ``_writes`` (put, put_writes), ``_reads`` (get_tuple, list),
  ``_effects`` (the effect journal), ``_data_keys`` (envelope encryption),
  ``_admin`` (setup, deletes, copy, prune, the stored retention policy,
  thread_page).
- ``_rls``: row-level security (its migration, the tenant each statement sends).
- The pruner: ``_prune`` (the run and its row phase), ``_partitions`` (whole
  partitions dropped, live threads moved forward), ``_trim`` (``keep_latest``
  trims and chain tombstones), ``_prune_plan`` (what they share).
"""

from __future__ import annotations

from collections.abc import Callable

from .._core.codec import CheckpointCodec
from .._core.retention import Retention
from ._admin import AdminOps
from ._data_keys import DataKeyOps
from ._effects import EffectOps
from ._query import Query
from ._reads import ReadOps
from ._schema import MIGRATIONS, validate_schema_name
from ._writes import WriteOps

__all__ = ["Query", "PostgresOps", "MIGRATIONS", "validate_schema_name"]


class PostgresOps(WriteOps, ReadOps, EffectOps, DataKeyOps, AdminOps):
    """The saver's operations on one schema, as sans-IO generators.

    Args:
        schema: Schema that holds the tables (validated identifier).
        codec: The checkpoint codec (owns the record pipeline).
        retention: The retention policy of a tenant, for the expiry writes store.
        row_level_security: Send each tenant operation's tenant with its
            statements (see ``_rls``); ``setup()`` also turns it on when the
            schema has row-level security on.
    """

    def __init__(
        self,
        schema: str,
        codec: CheckpointCodec,
        retention: Callable[[str], Retention | None] | None = None,
        row_level_security: bool = False,
    ) -> None:
        super().__init__(schema, codec, retention, row_level_security)
        self._init_writes()
        self._init_reads()
        self._init_effects()
        self._init_admin()
