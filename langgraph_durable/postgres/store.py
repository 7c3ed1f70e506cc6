"""``PostgresStore`` and ``AsyncPostgresStore``: LangGraph long-term memory on PostgreSQL.

Both stores run one pure operation per batch (``_store.StoreOps`` for the SQL,
``langgraph_durable._core.store`` for every decision) through the driver of the
saver they hold: the saver's connection handling, record pipeline (redaction,
then encryption bound to tenant, namespace and key), data keys, row-level
security and migrations. A store method only resolves the tenant, embeds what the
batch needs (the one part that differs between sync and async: the embedding
function's own call) and hands the operation to the driver.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Generator
from typing import Any

from langgraph.store.base import Result

from .._core import store as core
from .._core.sansio import Operation
from .._core.store_settings import DEFAULT_MAX_SEARCH_ITEMS
from .._saver_base import _Call
from .._store_base import (
    AsyncStoreMethods,
    DurableStoreBase,
    StoreBatch,
    StoreTenant,
    SyncStoreMethods,
)
from ..errors import ConfigurationError, DurableError
from . import _rls
from ._store import StoreOps
from ._store_vectors import EXACT, VectorMode, index_settings
from .saver import AsyncPostgresSaver, PostgresSaver

__all__ = ["PostgresStore", "AsyncPostgresStore"]

_log = logging.getLogger("langgraph_durable.store")


def _interval(minutes: float | None, ttl: Any) -> float | None:
    """The sweeper's interval in seconds (None: no sweeper)."""
    if minutes is None and ttl:
        minutes = ttl.get("sweep_interval_minutes")
    if minutes is None:
        return None
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or minutes <= 0:
        raise ConfigurationError(f"sweep_interval_minutes must be > 0, got {minutes!r}")
    return float(minutes) * 60.0


class _PostgresStoreBase(DurableStoreBase):
    """What the sync and async stores share: their saver, the batch operation."""

    _saver_class: type[PostgresSaver] | type[AsyncPostgresSaver]

    def __init__(
        self,
        conn: Any,
        *,
        schema: str = "langgraph_durable",
        tenant: str | StoreTenant | None = None,
        default_tenant: str = "default",
        encryption: Any = None,
        redaction: Any = None,
        integrity: Any = None,
        serde: Any = None,
        ttl: Any = None,
        index: Any = None,
        clock: Callable[[], float] | None = None,
        max_search_items: int = DEFAULT_MAX_SEARCH_ITEMS,
        prepare_threshold: int | None = 5,
        pool_size: int = 4,
        pool_timeout: float = 30.0,
        row_level_security: bool = False,
        tenant_signing_key: str | bytes | None = None,
        clear_vectors: bool = False,
    ) -> None:
        self._init_store(
            tenant=tenant, ttl=ttl, index=index, clock=clock, max_search_items=max_search_items
        )
        _interval(None, self.ttl_config)  # a bad sweep interval fails here, not in a sweeper
        self._saver: Any = self._saver_class(
            conn,
            schema=schema,
            serde=serde,
            default_tenant=default_tenant,
            prepare_threshold=prepare_threshold,
            pool_size=pool_size,
            pool_timeout=pool_timeout,
            encryption=encryption,
            redaction=redaction,
            integrity=integrity,
            row_level_security=row_level_security,
            tenant_signing_key=tenant_signing_key,
        )
        self._store_ops = StoreOps(schema, self.max_search_items)
        self._vector_index = index_settings(
            self.index_config, self._saver.encryption is not None, clear_vectors
        )
        # setup() finds the vector table; a store that did not run it (setup() ran once,
        # elsewhere, or by another role under row-level security) looks it up with the
        # first batch that puts or searches by meaning (one catalog query per store)
        self._vector_mode: VectorMode | None = EXACT
        if self._vector_index and self._vector_index.wants_table:
            self._vector_mode = None

    def _vector_setup_op(self) -> Operation[VectorMode]:
        return Operation(self._store_ops.vectors.setup(self._vector_index), transaction=True)

    def _after_setup(self, mode: VectorMode) -> None:
        self._vector_mode = mode

    @property
    def schema(self) -> str:
        """The schema holding the store's table (the saver's)."""
        return self._saver.schema  # type: ignore[no-any-return]

    def _scoped(self, tenant: str, steps: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
        if not self._saver._ops.row_level_security:
            return steps
        return _rls.with_settings(steps, _rls.tenant_settings(self._saver._ops, tenant))

    def _batch_steps(self, batch: StoreBatch) -> Operation[list[Result]]:
        """The batch as one operation: read, decide (the core), write."""
        tenant, plan, now = batch.tenant, batch.plan, batch.now
        ops, saver = self._store_ops, self._saver
        indexed = self.embeddings is not None
        distance = self._vector_index.distance_type if self._vector_index else "cosine"
        # the index's settings go with the tenant's (row-level security), not instead
        rls = _rls.tenant_settings(saver._ops, tenant) if saver._ops.row_level_security else ()
        fetched: list[Any] = []  # the read's rows, kept if opening them needs a key reload

        def steps() -> Generator[Any, Any, list[Result]]:
            mode = self._vector_mode
            if mode is None and (plan.puts or plan.queries()):
                mode = yield from ops.vectors.detect(self._vector_index)
                self._after_setup(mode)
            mode = mode or EXACT
            pipeline = saver.pipeline
            writes = core.item_writes(plan, now, batch.by_item)
            # One statement for reads and writes, except under row-level security: there
            # the driver sends a statement with payload parameters and settings as an
            # EXECUTE in the simple protocol, whose rows (the payloads read) would come
            # back hex-encoded; two statements keep the reads binary.
            along = () if saver._ops.row_level_security else writes
            read = yield from ops.read(
                tenant,
                plan,
                now,
                pipeline.open,
                indexed,
                along,
                pipeline.seal,
                fetched,
                mode,
                batch.by_query,
                rls,
            )
            results, refreshes = core.answer(
                plan, read.found, read.searched, read.namespaces, now, batch.by_query, distance
            )
            left = () if read.wrote else writes
            query = ops.write_query(tenant, now, left, refreshes, pipeline.seal, mode)
            if query is not None:
                yield query
            return results

        call = _Call(
            tenant,
            lambda: Operation(self._scoped(tenant, steps())),
            write=bool(plan.puts),
            opens=plan.reads,
        )
        return saver._keyed(call)  # type: ignore[no-any-return]

    def _sweep_steps(self, tenant: str, now: float, batch: int = 1000) -> Operation[int]:
        steps = self._store_ops.sweep(now, _batch(batch), tenant)
        return Operation(self._scoped(tenant, _total(steps)))

    def _sweep_all_steps(self, now: float, batch: int = 1000) -> Operation[dict[str, int]]:
        return Operation(self._store_ops.sweep(now, _batch(batch)))

    def _delete_namespace_steps(self, tenant: str, prefix: tuple[str, ...]) -> Operation[int]:
        query = self._store_ops.delete_namespace_query(tenant, prefix)

        def steps() -> Generator[Any, Any, int]:
            return int((yield query))

        return Operation(self._scoped(tenant, steps()))


def _batch(batch: Any) -> int:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ConfigurationError(f"batch must be a positive integer, got {batch!r}")
    return batch


def _total(steps: Generator[Any, Any, dict[str, int]]) -> Generator[Any, Any, int]:
    return sum((yield from steps).values())


class PostgresStore(SyncStoreMethods, _PostgresStoreBase):
    """A LangGraph store (``BaseStore``) on PostgreSQL, protected like the checkpoints.

    Args:
        conn: A ``psycopg.Connection``, a ``psycopg_pool.ConnectionPool`` or a URL
            (the same as ``PostgresSaver``'s).
        schema: The schema of the store's table (``store_items``, created by
            ``setup()`` beside the saver's tables, apart from them).
        tenant: None (the graph run's ``config["configurable"]["tenant_id"]``, as
            the savers read it, else ``default_tenant``), a fixed tenant id, or a
            callable returning the tenant of the current call (None: the default).
        default_tenant: The tenant when ``tenant`` gives none.
        encryption: :class:`~langgraph_durable.protect.Encryption`: values and
            embeddings are stored encrypted, bound to tenant, namespace and key;
            filters are applied after decryption, ``limit``/``offset`` after the filter.
        redaction: :class:`~langgraph_durable.protect.Redaction` applied to values
            before they are stored.
        integrity: The chain key (as ``PostgresSaver``'s ``integrity=``): every value
            and its embeddings carry a keyed tag bound to tenant, namespace, key and
            the clear fields a read trusts; a row altered or moved is refused on read
            (``IntegrityError``), with or without encryption.
        serde: The serializer (default: the savers' allowlisting serializer).
        ttl: LangGraph's ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``,
            ``sweep_interval_minutes``); expired items are never returned, whether
            swept or not.
        index: LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``) with
            ``PostgresIndexConfig``'s ``distance_type`` (``cosine``, ``l2``,
            ``inner_product``) and ``ann_index_config`` (``kind`` ``hnsw`` or ``flat``,
            ``m``, ``ef_construction``, ``vector_type``): search by meaning. Where
            ``setup()`` finds or creates pgvector, the nearest items come from an HNSW
            index; elsewhere (and with encryption on, unless ``clear_vectors``) every
            item under the search prefix is scored exactly (``_store_vectors``).
        clear_vectors: With encryption on, also store the embeddings in the clear in
            the vector table, for index search (a vector is a value: the text it
            embeds can be approximated from it). Off: they stay sealed, search is exact.
        clock: Unix seconds now (tests inject one; default ``time.time``).
        max_search_items: Most items one search that reads every item under its
            prefix (a filter, a query) may read (default 10,000); a search over more
            raises ``InvalidInputError`` and nothing of its batch is written. A page
            with neither filter nor query reads only ``offset + limit`` items.
        prepare_threshold, pool_size, pool_timeout, row_level_security,
        tenant_signing_key: As ``PostgresSaver``'s.

    Example:
        >>> with PostgresStore.from_conn_string("postgresql://localhost/db") as store:
        ...     store.setup()
        ...     graph = builder.compile(store=store)
    """

    _saver_class = PostgresSaver
    _sweeper: tuple[threading.Thread, threading.Event, concurrent.futures.Future[None]] | None = (
        None
    )

    def close(self) -> None:
        """Stop the TTL sweeper; close the pool the store opened (a caller's stays open)."""
        self.stop_ttl_sweeper()
        self._saver.close()

    def setup(self) -> list[int]:
        """Create or migrate the schema (the saver's migrations, the store's table included),
        and the vector table and index where pgvector is (see ``index``)."""
        applied = self._saver.setup()
        self._after_setup(self._saver._run(self._vector_setup_op()))
        return applied  # type: ignore[no-any-return]

    def sweep_expired(self, *, batch: int = 1000) -> int:
        """Delete the current tenant's expired items, ``batch`` rows per statement; the
        number deleted (under row-level security, as the application role)."""
        return self._run(self._sweep_steps(self.tenant, self._now(), batch))  # type: ignore[no-any-return]

    def sweep_all_expired(self, *, batch: int = 1000) -> dict[str, int]:
        """Delete every tenant's expired items, ``batch`` rows per statement (short
        statements, so writers are not held up): the number deleted per tenant that
        had any. With row-level security on, run it as a role with BYPASSRLS (the
        pruner role of ``docs/security.md``)."""
        return self._run(self._sweep_all_steps(self._now(), batch))  # type: ignore[no-any-return]

    def sweep_ttl(self, *, batch: int = 1000) -> int:
        """Delete the expired items of every tenant; the number deleted.

        The earlier name of :meth:`sweep_all_expired`, kept: its total.
        """
        return sum(self.sweep_all_expired(batch=batch).values())

    def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Sweep expired items (:meth:`sweep_all_expired`) every ``sweep_interval_minutes``
        (default: the ``ttl`` setting's), in a daemon thread, until
        :meth:`stop_ttl_sweeper` or :meth:`close`. A failed sweep is logged and the
        next one runs on time. Returns a future that is done when the sweeper stops.
        """
        interval = _interval(sweep_interval_minutes, self.ttl_config)
        running = self._sweeper
        if running is not None and not running[2].done():
            return running[2]
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if interval is None:
            future.set_result(None)
            return future
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(interval):
                try:
                    self.sweep_all_expired()
                except DurableError as exc:
                    _log.warning("the store's TTL sweep failed (next in %ss): %s", interval, exc)
            future.set_result(None)

        thread = threading.Thread(target=loop, name="langgraph-durable-ttl-sweeper", daemon=True)
        self._sweeper = (thread, stop, future)
        thread.start()
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; False if it was still running after ``timeout`` seconds."""
        running = self._sweeper
        if running is None:
            return True
        thread, stop, _future = running
        stop.set()
        thread.join(timeout)
        if thread.is_alive():
            return False
        self._sweeper = None
        return True


class AsyncPostgresStore(AsyncStoreMethods, _PostgresStoreBase):
    """A LangGraph store on PostgreSQL (asyncio); arguments as :class:`PostgresStore`.

    Takes a ``psycopg.AsyncConnection``, a ``psycopg_pool.AsyncConnectionPool`` or a
    URL. Its sync methods work from other threads (they run on the store's event
    loop), not from the loop's own thread.
    """

    _saver_class = AsyncPostgresSaver
    _sweep_task: asyncio.Task[None] | None = None

    async def _open(self) -> None:
        await self._saver._conn.open()

    async def close(self) -> None:
        """Stop the TTL sweeper; close the pool the store opened (a caller's stays open)."""
        await self.stop_ttl_sweeper()
        await self._saver.close()

    async def setup(self) -> list[int]:
        """Create or migrate the schema (see ``PostgresStore.setup``)."""
        self._bind_loop()
        applied = await self._saver.setup()
        self._after_setup(await self._saver._arun(self._vector_setup_op()))
        return applied  # type: ignore[no-any-return]

    async def asweep_expired(self, *, batch: int = 1000) -> int:
        """Delete the current tenant's expired items (see ``PostgresStore.sweep_expired``)."""
        return await self._arun(self._sweep_steps(self.tenant, self._now(), batch))  # type: ignore[no-any-return]

    async def asweep_all_expired(self, *, batch: int = 1000) -> dict[str, int]:
        """Delete every tenant's expired items (see ``PostgresStore.sweep_all_expired``)."""
        return await self._arun(self._sweep_all_steps(self._now(), batch))  # type: ignore[no-any-return]

    async def asweep_ttl(self, *, batch: int = 1000) -> int:
        """The earlier name of :meth:`asweep_all_expired`, kept: its total."""
        return sum((await self.asweep_all_expired(batch=batch)).values())

    async def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Task[None]:
        """Sweep expired items (:meth:`asweep_all_expired`) every ``sweep_interval_minutes``
        (default: the ``ttl`` setting's) in a task on the store's loop, until
        :meth:`stop_ttl_sweeper` or :meth:`close` (see ``PostgresStore``)."""
        self._bind_loop()
        interval = _interval(sweep_interval_minutes, self.ttl_config)
        if self._sweep_task is not None and not self._sweep_task.done():
            return self._sweep_task

        async def loop() -> None:
            if interval is None:
                return
            while True:
                await asyncio.sleep(interval)
                try:
                    await self.asweep_all_expired()
                except DurableError as exc:
                    _log.warning("the store's TTL sweep failed (next in %ss): %s", interval, exc)

        self._sweep_task = asyncio.get_running_loop().create_task(loop())
        return self._sweep_task

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper task; False if it had not stopped after ``timeout`` seconds."""
        task = self._sweep_task
        if task is None:
            return True
        task.cancel()
        done, _pending = await asyncio.wait({task}, timeout=timeout)
        if not done:
            return False
        self._sweep_task = None
        return True
