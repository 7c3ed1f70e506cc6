"""``DynamoDBStore`` and ``AsyncDynamoDBStore``: LangGraph long-term memory on DynamoDB.

Both stores run one pure operation per batch (``_store.StoreOps`` for the calls,
``langgraph_durable._core.store`` for every decision) through the driver of the
saver they hold: the saver's client, retries and error translation, record
pipeline (redaction, then encryption bound to tenant, namespace and key) and
data keys. The store's items live in the saver's table, in partitions of their
own (see ``_store_keys``), so one ``setup()``, one IAM policy (the tenant's
``<tenant>#`` key prefix covers its store items too) and one tenant's data keys
serve checkpoints and memories alike. A store method only resolves the tenant,
embeds what the batch needs (the one part that differs between sync and async:
the embedding function's own call) and hands the operation to the driver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

from langgraph.store.base import Result

from .._core import store as core
from .._core.sansio import Operation
from .._core.store_settings import DEFAULT_MAX_SEARCH_ITEMS
from .._saver_base import _Call
from .._store_base import AsyncStoreMethods, DurableStoreBase, StoreBatch, SyncStoreMethods
from ..errors import ConfigurationError, UnsupportedOperationError
from ._store import StoreOps
from .saver import AsyncDynamoDBSaver, DynamoDBSaver, parse_conn_string

__all__ = ["DynamoDBStore", "AsyncDynamoDBStore"]


class _DynamoDBStoreBase(DurableStoreBase):
    """What the sync and async stores share: their saver, the operations."""

    supports_sweep_all = False  # no tenant list without a Scan: the native TTL deletes
    _saver_class: type[DynamoDBSaver] | type[AsyncDynamoDBSaver]

    def __init__(
        self,
        client: Any = None,
        *,
        tenant: Any = None,
        encryption: Any = None,
        redaction: Any = None,
        integrity: Any = None,
        serde: Any = None,
        ttl: Any = None,
        index: Any = None,
        clock: Callable[[], float] | None = None,
        max_search_items: int = DEFAULT_MAX_SEARCH_ITEMS,
        options: Any = None,
        **settings: Any,
    ) -> None:
        self._init_store(
            tenant=tenant, ttl=ttl, index=index, clock=clock, max_search_items=max_search_items
        )
        self._saver: Any = self._saver_class(
            client,
            options=options,
            serde=serde,
            clock=self._clock,
            encryption=encryption,
            redaction=redaction,
            integrity=integrity,
            **settings,
        )
        if self.ttl_config is not None:
            # setup() enables the table's native TTL (or, without create_table, demands it)
            self._saver._ops.ttl_needed = True
        self._store_ops = StoreOps(self._saver._ops, self.max_search_items)

    @classmethod
    def _from_url(cls, conn_string: str, options: dict[str, Any]) -> Any:
        return cls(**_settings(conn_string, options))

    @classmethod
    async def _afrom_url(cls, conn_string: str, options: dict[str, Any]) -> Any:
        # made in a worker thread: boto3 reads files while making a client
        settings = _settings(conn_string, options)
        return await asyncio.to_thread(lambda: cls(**settings))

    @property
    def table(self) -> str:
        """The table holding the store's items (the saver's)."""
        return self._saver.table  # type: ignore[no-any-return]

    def _batch_steps(self, batch: StoreBatch) -> Operation[list[Result]]:
        """The batch as one operation: read, decide (the core), write."""
        tenant, plan, now = batch.tenant, batch.plan, batch.now
        ops, saver = self._store_ops, self._saver

        def steps() -> Generator[Any, Any, list[Result]]:
            pipeline = saver.pipeline
            read = yield from ops.read(tenant, plan, now, pipeline.open)
            results, refreshes = core.answer(
                plan, read.found, read.searched, read.namespaces, now, batch.by_query
            )
            writes = core.item_writes(plan, now, batch.by_item)
            if writes or refreshes:
                yield from ops.write(tenant, now, writes, refreshes, read.stamps, pipeline.seal)
            if read.stale:  # entries of expired items the reads saw (DynamoDB's TTL keeps them)
                yield from ops.drop_stale(read.stale)
            return results

        call = _Call(tenant, lambda: Operation(steps()), write=bool(plan.puts), opens=plan.reads)
        return saver._keyed(call)  # type: ignore[no-any-return]

    def _delete_namespace_steps(self, tenant: str, prefix: tuple[str, ...]) -> Operation[int]:
        return Operation(self._store_ops.delete_namespace(tenant, prefix))

    def _sweep_steps(self, tenant: str, now: float) -> Operation[int]:
        """One Query of the tenant's namespace index (where every item's expiry is), then
        conditional deletes of the expired items it names (never a Scan)."""
        return Operation(self._store_ops.sweep(tenant, now))

    def _sweep_all_steps(self, now: float) -> Operation[dict[str, int]]:
        raise UnsupportedOperationError(
            "DynamoDB stores do not sweep every tenant: finding the tenants would Scan the "
            "whole table, and the table's native TTL deletes expired items anyway (expired "
            "items are never returned); sweep_expired() sweeps the current tenant's"
        )


def _settings(conn_string: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    settings = {**parse_conn_string(conn_string), **kwargs}
    if "ttl" in settings and not isinstance(settings["ttl"], dict | None):
        raise ConfigurationError(
            "a store's ttl is LangGraph's TTLConfig (ttl={'default_ttl': minutes, ...}), "
            "not the URL's ttl parameter (the saver's deprecated thread TTL in seconds)"
        )
    return settings


class DynamoDBStore(SyncStoreMethods, _DynamoDBStoreBase):
    """A LangGraph store (``BaseStore``) on DynamoDB, protected like the checkpoints.

    Args:
        client: A boto3 low-level DynamoDB client, or None to make one from the
            settings (as ``DynamoDBSaver``).
        tenant: None (the graph run's ``config["configurable"]["tenant_id"]``, as
            the savers read it, else ``default_tenant``), a fixed tenant id, or a
            callable returning the tenant of the current call (None: the default).
        encryption: :class:`~langgraph_durable.protect.Encryption`: values and
            embeddings are stored encrypted, bound to tenant, namespace and key;
            filters are applied after decryption, ``limit``/``offset`` after the filter.
        redaction: :class:`~langgraph_durable.protect.Redaction` applied to values
            before they are stored.
        integrity: The chain key (as ``DynamoDBSaver``'s ``integrity=``): every value
            and its embeddings carry a keyed tag bound to tenant, namespace, key and
            the clear attributes a read trusts; an item altered or moved is refused
            on read (``IntegrityError``), with or without encryption.
        serde: The serializer (default: the savers' allowlisting serializer).
        ttl: LangGraph's ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``):
            expired items are never returned (checked at read); their native TTL
            attribute ``expires_at`` lets DynamoDB delete them later (``setup()``
            enables the table's TTL). :meth:`sweep_expired` deletes the current
            tenant's at once (one Query of its namespace index, then deletes);
            :meth:`sweep_all_expired` raises ``UnsupportedOperationError``: finding
            every tenant would Scan the table, and the native TTL deletes them.
        index: LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``): search by
            meaning, scored exactly (cosine) in Python over the items under the
            search's namespace prefix (at most ``max_search_items`` of them).
        clock: Unix seconds now (tests inject one; default ``time.time``).
        max_search_items: Items the searches of one batch may read (default
            10,000); a search under a prefix holding more raises
            ``InvalidInputError`` instead of answering from part of them.
        options, **settings: The table and client settings, as ``DynamoDBSaver``'s
            (``table=``, ``region=``, ``endpoint_url=``, ``default_tenant=``,
            ``create_table=``, ``max_attempts=``, ...).

    Example:
        >>> with DynamoDBStore.from_conn_string("dynamodb://memories?region=eu-west-1") as store:
        ...     store.setup()
        ...     graph = builder.compile(store=store)
    """

    _saver_class = DynamoDBSaver

    def __enter__(self) -> DynamoDBStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def setup(self) -> list[str]:
        """Create the table (and enable its TTL when the store has a ``ttl``), or check them."""
        return self._saver.setup()  # type: ignore[no-any-return]

    def _count_under(self, prefix: tuple[str, ...]) -> dict[tuple[str, ...], int]:
        """The current tenant's live items under ``prefix`` (``()``: all) per namespace,
        from the namespace index alone (``forget --dry-run``; no item is opened)."""
        steps = self._store_ops.count_under(self.tenant, prefix, self._now())
        return self._run(Operation(steps))  # type: ignore[no-any-return]

    def _forget_under(
        self, prefix: tuple[str, ...], counts: dict[tuple[str, ...], int]
    ) -> dict[tuple[str, ...], int]:
        """Delete the current tenant's items under ``prefix`` (``()``: all) in one pass
        over its namespace index (``forget``); ``counts`` is filled as it goes."""
        steps = self._store_ops.forget_under(self.tenant, prefix, counts)
        return self._run(Operation(steps))  # type: ignore[no-any-return]


class AsyncDynamoDBStore(AsyncStoreMethods, _DynamoDBStoreBase):
    """A LangGraph store on DynamoDB (asyncio); arguments as :class:`DynamoDBStore`.

    boto3 calls run in the saver's bounded thread pool (``max_workers``), so the
    loop keeps running. Its sync methods work from other threads (they run on the
    store's event loop), not from the loop's own thread.
    """

    _saver_class = AsyncDynamoDBSaver

    async def __aenter__(self) -> AsyncDynamoDBStore:
        self._bind_loop()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()
