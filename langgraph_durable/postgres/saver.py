"""``PostgresSaver`` and ``AsyncPostgresSaver``.

Both run the same pure operations (``_ops.PostgresOps``) through a sync or an
async driver (``_driver``); a saver method only resolves the call's tenant and
thread and hands the operation to its driver.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from .._core.codec import CheckpointCodec
from .._core.delta import DEFAULT_MAX_CHAIN
from .._core.retention import Retention, RetentionPolicy
from .._core.sansio import Operation
from .._saver import AsyncSaverMethods, DurableSaverBase, SyncSaverMethods, TenantResolver
from ..errors import ConfigurationError
from ..protect.encryption import Encryption
from ..protect.redaction import Redaction
from . import _driver
from ._ops import PostgresOps, validate_schema_name
from ._rls import TenantSigner

__all__ = ["PostgresSaver", "AsyncPostgresSaver", "PostgresOptions"]


@dataclass(frozen=True)
class PostgresOptions:
    """Validated settings of a Postgres saver.

    Attributes:
        schema: Schema holding the saver's tables (created by ``setup()``).
        default_tenant: Tenant used when a call names none.
        partition_days: Width of a partition's time bucket, fixed at the first
            ``setup()`` of a schema.
        prepare: Use server-side prepared statements for hot-path statements.
            Turn off (``prepare_threshold=None``) behind PgBouncer in
            transaction mode.
        pool_size: Size of the pool the saver opens when given a URL.
        pool_timeout: Seconds to wait for a connection from that pool.
        delta_chain: A list channel that grows by appending (``messages``) is
            stored as the items added since the previous version, with a full
            copy after at most this many deltas (0-1000; 0 stores every
            version in full). See ``docs/postgres.md``.
        row_level_security: Send each call's tenant with its statements, for a
            schema whose tables enforce tenant isolation by row-level security
            (``setup()`` turns it on for the schema). See ``docs/security.md``.
        lock_timeout: Seconds a statement on a pool the saver opens waits for a
            lock another session holds before ``StorageUnavailableError``
            (PostgreSQL's ``lock_timeout``); None waits as the server is set.
            Not sent with ``prepare=False`` (PgBouncer refuses startup options).
    """

    schema: str = "langgraph_durable"
    default_tenant: str = "default"
    partition_days: int = 7
    prepare: bool = True
    pool_size: int = 4
    pool_timeout: float = 30.0
    delta_chain: int = DEFAULT_MAX_CHAIN
    row_level_security: bool = False
    lock_timeout: float | None = 30.0

    def __post_init__(self) -> None:
        validate_schema_name(self.schema)
        if not isinstance(self.default_tenant, str) or not self.default_tenant:
            raise ConfigurationError(
                f"default_tenant must be a non-empty string, got {self.default_tenant!r}"
            )
        if not isinstance(self.partition_days, int) or not 1 <= self.partition_days <= 3660:
            raise ConfigurationError(
                f"partition_days must be an integer from 1 to 3660, got {self.partition_days!r}"
            )
        if not isinstance(self.pool_size, int) or self.pool_size < 1:
            raise ConfigurationError(
                f"pool_size must be a positive integer, got {self.pool_size!r}"
            )
        if (
            isinstance(self.delta_chain, bool)
            or not isinstance(self.delta_chain, int)
            or not 0 <= self.delta_chain <= 1000
        ):
            raise ConfigurationError(
                "delta_chain must be an integer from 0 to 1000 (0: no deltas), "
                f"got {self.delta_chain!r}"
            )
        if not isinstance(self.pool_timeout, (int, float)) or self.pool_timeout <= 0:
            raise ConfigurationError(
                f"pool_timeout must be a positive number of seconds, got {self.pool_timeout!r}"
            )
        if not isinstance(self.row_level_security, bool):
            raise ConfigurationError(
                f"row_level_security must be True or False, got {self.row_level_security!r}"
            )
        if self.lock_timeout is not None and (
            isinstance(self.lock_timeout, bool)
            or not isinstance(self.lock_timeout, (int, float))
            or not 0.001 <= self.lock_timeout <= 86400
        ):
            raise ConfigurationError(
                "lock_timeout must be None or a number of seconds from 0.001 to 86400, "
                f"got {self.lock_timeout!r}"
            )


def _options(
    schema: str,
    default_tenant: str,
    partition_days: int,
    prepare_threshold: int | None,
    pool_size: int,
    pool_timeout: float,
    delta_chain: int = DEFAULT_MAX_CHAIN,
    row_level_security: bool = False,
    lock_timeout: float | None = 30.0,
) -> PostgresOptions:
    if prepare_threshold is not None and (
        not isinstance(prepare_threshold, int) or prepare_threshold < 0
    ):
        raise ConfigurationError(
            f"prepare_threshold must be None (no prepared statements) or an integer >= 0, "
            f"got {prepare_threshold!r}"
        )
    return PostgresOptions(
        schema=schema,
        default_tenant=default_tenant,
        partition_days=partition_days,
        prepare=prepare_threshold is not None,
        pool_size=pool_size,
        pool_timeout=pool_timeout,
        delta_chain=delta_chain,
        row_level_security=row_level_security,
        lock_timeout=lock_timeout,
    )


def _signer(key: str | bytes | None, options: PostgresOptions) -> TenantSigner | None:
    if key is None:
        return None
    if not options.row_level_security:
        raise ConfigurationError(
            "tenant_signing_key signs the tenant that row-level security checks: "
            "pass row_level_security=True with it"
        )
    return TenantSigner(key, options.schema)


class _PostgresSaverBase(DurableSaverBase):
    """What the sync and async Postgres savers share: options, operations, connector."""

    options: PostgresOptions
    _ops: PostgresOps
    _connector: Any
    _schema_rls: bool = False  # setup() found the schema's row-level security on
    _tenant_signer: TenantSigner | None = None

    def __init__(
        self,
        conn: Any,
        *,
        schema: str = "langgraph_durable",
        serde: SerializerProtocol | None = None,
        tenant: str | TenantResolver | None = None,
        default_tenant: str = "default",
        partition_days: int = 7,
        prepare_threshold: int | None = 5,
        pool_size: int = 4,
        pool_timeout: float = 30.0,
        encryption: Encryption | None = None,
        redaction: Redaction | None = None,
        retention: Retention | RetentionPolicy | None = None,
        delta_chain: int = DEFAULT_MAX_CHAIN,
        row_level_security: bool = False,
        integrity: Any = None,
        tenant_signing_key: str | bytes | None = None,
        lock_timeout: float | None = 30.0,
    ) -> None:
        self.options = _options(
            schema,
            default_tenant,
            partition_days,
            prepare_threshold,
            pool_size,
            pool_timeout,
            delta_chain,
            row_level_security,
            lock_timeout,
        )
        self._tenant_signer = _signer(tenant_signing_key, self.options)
        self._init_base(serde, tenant, default_tenant, encryption, redaction, retention, integrity)
        self._conn = self._connector(conn, self.options)

    def _delta_chain(self) -> int:
        return self.options.delta_chain

    def _make_ops(self, codec: CheckpointCodec) -> PostgresOps:
        rls = self.options.row_level_security or self._schema_rls
        ops = PostgresOps(self.options.schema, codec, self._retention_for, rls)
        ops.tenant_signer = self._tenant_signer
        return ops

    @property
    def row_level_security(self) -> bool:
        """Whether this saver sends each call's tenant for row-level security.

        True with ``row_level_security=True``, and after a ``setup()`` that
        found the schema's row-level security on.
        """
        return self._ops.row_level_security

    @property
    def schema(self) -> str:
        """The schema holding this saver's tables."""
        return self.options.schema

    def _setup_op(self) -> Operation[list[int]]:
        stored = self.retention.to_json() if isinstance(self.retention, Retention) else None
        return self._ops.setup(
            self.options.partition_days,
            stored,
            self.options.row_level_security,
            self._tenant_signer,
        )

    def _after_setup(self, applied: list[int]) -> list[int]:
        # A clone (with_allowlist) rebuilds its operations: keep what setup learned.
        self._schema_rls = self._ops.row_level_security
        return applied


class PostgresSaver(SyncSaverMethods, _PostgresSaverBase):
    """A LangGraph checkpoint saver on PostgreSQL (sync).

    Args:
        conn: A ``psycopg.Connection``, a ``psycopg_pool.ConnectionPool`` (a plain
            ``ConnectionPool(url)`` works: no row factory or autocommit needed),
            or a URL, for which the saver opens and owns a pool.
        schema: Schema for the saver's tables.
        serde: LangGraph serializer (default: ``AllowlistSerializer`` of
            ``langgraph_durable.protect.allowlist``: LangGraph's format, and reads
            rebuild only allowlisted types; a serializer given here is used as is).
        tenant: None (read ``config["configurable"]["tenant_id"]``), a fixed
            tenant id, or a callable ``(config) -> tenant id``.
        default_tenant: Tenant used when a call names none.
        partition_days: Partition width in days (fixed at the first setup).
        prepare_threshold: None to never use prepared statements (PgBouncer in
            transaction mode); otherwise hot-path statements are prepared.
        pool_size: Pool size when ``conn`` is a URL.
        pool_timeout: Seconds to wait for a connection from that pool.
        encryption: Envelope encryption of every stored payload
            (:class:`~langgraph_durable.protect.Encryption`); None stores
            payloads serialized only.
        redaction: PII redaction before anything is stored
            (:class:`~langgraph_durable.protect.Redaction`); None stores values
            as they are.
        retention: A :class:`~langgraph_durable.Retention` (or a callable
            tenant -> Retention) that ``prune_expired`` and the ``prune``
            command apply; with ``strategy="delete"`` each write also stores
            the thread's expiry. ``setup()`` stores a plain ``Retention`` as
            the schema's policy (``docs/operations.md``).
        delta_chain: Store list channels that grow by appending (``messages``)
            as the items added since the previous version, with a full copy
            after at most this many deltas (0: every version in full).
        row_level_security: Tenant isolation enforced by PostgreSQL: ``setup()``
            enables and forces row-level security on every table (partitions
            included), and each statement carries its call's tenant as a
            transaction-local setting, in the same round trip. Connect as a
            role that does not own the tables (``docs/security.md``).
        tenant_signing_key: With ``row_level_security=True``: a secret (str or
            bytes, at least 32 bytes) from which each statement's tenant is
            signed. ``setup()`` (as the owner) stores a secret derived from it,
            which the application role cannot read, and the policies then
            admit a tenant only with a valid signature: SQL run as the
            application role without the key sees no tenant's rows
            (``docs/postgres.md``).
        lock_timeout: Seconds a statement waits for a lock another session holds
            (a stuck transaction on the thread's registry row, a migration)
            before ``StorageUnavailableError``; None: as the server is set.
            Applied to the pool the saver opens from a URL (a pool of yours
            keeps its own settings), not with ``prepare_threshold=None``.

    Example:
        >>> with PostgresSaver.from_conn_string("postgresql://localhost/db") as saver:
        ...     saver.setup()
        ...     graph = builder.compile(checkpointer=saver)
    """

    _connector = _driver.SyncConnector

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Iterator[PostgresSaver]:
        """A saver on its own pool for ``conn_string``, closed on exit.

        Keyword arguments are those of the constructor.
        """
        saver = cls(conn_string, **kwargs)
        try:
            yield saver
        finally:
            saver.close()

    def close(self) -> None:
        """Close the pool the saver opened (a caller's connection or pool stays open)."""
        self._conn.close()

    def setup(self) -> list[int]:
        """Create or migrate the schema (safe from many processes at once).

        Returns:
            What this call changed in the store's schema, as every saver's
            ``setup()`` does (empty when there was nothing to do): here the
            migration versions it applied, in order.
        """
        return self._after_setup(self._run(self._setup_op()))

    def _run(self, op: Operation[Any]) -> Any:
        return _driver.run(self._conn, op)

    def _iterate(self, op: Operation[Any]) -> Iterator[Any]:
        return _driver.iterate(self._conn, op)

    def _effect_transaction(self) -> AbstractContextManager[_driver.Transaction]:
        """A connection inside a transaction, for effects that write with the journal.

        The block's ``.connection`` and ``.run(op)`` share the transaction;
        leaving the block commits, an exception rolls back and propagates.
        """
        return _driver.Transaction.open(self._conn)


class AsyncPostgresSaver(AsyncSaverMethods, _PostgresSaverBase):
    """A LangGraph checkpoint saver on PostgreSQL (asyncio).

    Takes a ``psycopg.AsyncConnection``, a ``psycopg_pool.AsyncConnectionPool``
    or a URL; other arguments as :class:`PostgresSaver`. Its sync methods work
    from other threads (they run on the saver's event loop), not from the
    loop's own thread.
    """

    _connector = _driver.AsyncConnector

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, **kwargs: Any
    ) -> AsyncIterator[AsyncPostgresSaver]:
        """A saver on its own pool for ``conn_string``, closed on exit."""
        saver = cls(conn_string, **kwargs)
        saver._bind_loop()
        try:
            await saver._conn.open()
            yield saver
        finally:
            await saver.close()

    async def close(self) -> None:
        """Close the pool the saver opened (a caller's connection or pool stays open)."""
        await self._conn.close()

    async def setup(self) -> list[int]:
        """Create or migrate the schema; returns the migration versions applied
        (see ``PostgresSaver.setup``)."""
        self._bind_loop()
        return self._after_setup(await self._arun(self._setup_op()))

    async def _arun(self, op: Operation[Any]) -> Any:
        return await _driver.arun(self._conn, op)

    def _aiterate(self, op: Operation[Any]) -> AsyncIterator[Any]:
        return _driver.aiterate(self._conn, op)

    def _aeffect_transaction(self) -> AbstractAsyncContextManager[_driver.AsyncTransaction]:
        """A connection inside a transaction (see ``PostgresSaver._effect_transaction``).

        Use as ``async with``; ``await tx.arun(op)`` runs an operation in it.
        """
        return _driver.AsyncTransaction.open(self._conn)
