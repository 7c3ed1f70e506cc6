"""What every group of the saver's PostgreSQL operations shares.

:class:`OpsBase` holds an operation set's state (schema, codec, retention
policy, the epochs this process knows) and the helpers the writes, the reads
and the admin operations use: a partition's name, the statement that creates
the current epoch's partitions. ``_ops.PostgresOps`` puts the groups together;
the pruner (``_prune`` and its modules) takes an ``OpsBase``. Pure: no psycopg
import, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from .._core.codec import CheckpointCodec
from .._core.epochs import EpochCache
from .._core.retention import Retention
from ._query import Query
from ._schema import validate_schema_name

__all__ = ["OpsBase"]


class OpsBase:
    """The state and helpers of an operation set (see ``_ops.PostgresOps`` for the arguments)."""

    #: Signs each statement's tenant (``_rls.TenantSigner``; the saver sets it), or None.
    tenant_signer: Callable[[str], str] | None = None

    def __init__(
        self,
        schema: str,
        codec: CheckpointCodec,
        retention: Callable[[str], Retention | None] | None = None,
        row_level_security: bool = False,
    ) -> None:
        self.schema = validate_schema_name(schema)
        self.row_level_security = bool(row_level_security)
        self.codec = codec
        self.retention = retention
        self.epochs = EpochCache()
        s = f'"{self.schema}"'
        self._s = s
        self._lock_key = f"langgraph_durable:{self.schema}"
        thread_epoch = (
            f"(SELECT epoch FROM {s}.threads "
            "WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s)"
        )
        self._thread_epoch = thread_epoch

    def _leaf(self, table: str, epoch: int) -> str:
        """The partition of ``table`` that holds ``epoch`` (see ``ensure_partitions``)."""
        return f'{self._s}."{table}_e{int(epoch)}"'

    def _ensure_current_partitions(self) -> Query:
        s = self._s
        return Query(f"SELECT {s}.ensure_partitions({s}.current_epoch())", (), "one", False)
