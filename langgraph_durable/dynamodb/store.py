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
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langgraph.store.base import BaseStore, Op, Result, ensure_embeddings

from .._core import store as core
from .._core.sansio import Operation
from .._saver_base import _Call
from .._store_loop import run_on_loop
from ..errors import ConfigurationError, InvalidNamespaceError
from ._store import DEFAULT_MAX_SEARCH_ITEMS, StoreOps
from ._store_settings import check_clock, check_index, check_ttl, tenant_resolver
from .saver import AsyncDynamoDBSaver, DynamoDBSaver, parse_conn_string

__all__ = ["DynamoDBStore", "AsyncDynamoDBStore"]


class _DynamoDBStoreBase(BaseStore):
    """What the sync and async stores share: settings, tenant, the operations."""

    supports_ttl = True
    _saver_class: type[DynamoDBSaver] | type[AsyncDynamoDBSaver]

    def __init__(
        self,
        client: Any = None,
        *,
        tenant: Any = None,
        encryption: Any = None,
        redaction: Any = None,
        serde: Any = None,
        ttl: Any = None,
        index: Any = None,
        clock: Callable[[], float] | None = None,
        max_search_items: int = DEFAULT_MAX_SEARCH_ITEMS,
        options: Any = None,
        **settings: Any,
    ) -> None:
        self.ttl_config = check_ttl(ttl)  # type: ignore[assignment]
        self.index_config = check_index(index)
        self.embeddings = (
            ensure_embeddings(self.index_config["embed"]) if self.index_config else None
        )
        self._fields = core.index_fields(self.index_config)
        self._dims = self.index_config.get("dims") if self.index_config else None
        self._clock: Callable[[], float] = check_clock(clock) or time.time
        self._tenant = tenant_resolver(tenant)
        if (
            isinstance(max_search_items, bool)
            or not isinstance(max_search_items, int)
            or max_search_items < 1
        ):
            raise ConfigurationError(
                f"max_search_items must be a positive integer, got {max_search_items!r}"
            )
        self._saver: Any = self._saver_class(
            client,
            options=options,
            serde=serde,
            clock=self._clock,
            encryption=encryption,
            redaction=redaction,
            **settings,
        )
        if self.ttl_config is not None:
            # setup() enables the table's native TTL (or, without create_table, demands it)
            self._saver._ops.ttl_needed = True
        self._store_ops = StoreOps(self._saver._ops, max_search_items)

    @property
    def table(self) -> str:
        """The table holding the store's items (the saver's)."""
        return self._saver.table  # type: ignore[no-any-return]

    @property
    def tenant(self) -> str:
        """The tenant this store's calls read and write now."""
        found = self._tenant()
        return str(found) if found else self._saver.default_tenant

    def _to_embed(self, plan: core.BatchPlan) -> tuple[list[str], list[core.EmbedTask]]:
        """The search queries and the put texts a batch needs embedded (none without index)."""
        if self.embeddings is None:
            return [], []
        return plan.queries(), core.texts_to_embed(plan.writes(), self._fields)

    def _batch_op(
        self,
        plan: core.BatchPlan,
        queries: Sequence[str],
        query_vectors: Sequence[Sequence[float]],
        tasks: Sequence[core.EmbedTask],
        vectors: Sequence[Sequence[float]],
    ) -> Operation[list[Result]]:
        """The batch as one operation: read, decide (the core), write."""
        tenant = self.tenant
        now = float(self._clock())
        by_query = dict(zip(queries, query_vectors, strict=True))
        by_item = core.vectors_by_item(tasks, vectors, self._dims) if tasks else None
        ops, saver = self._store_ops, self._saver

        def steps() -> Generator[Any, Any, list[Result]]:
            pipeline = saver.pipeline
            read = yield from ops.read(tenant, plan, now, pipeline.open)
            results, refreshes = core.answer(
                plan, read.found, read.searched, read.namespaces, now, by_query
            )
            writes = core.item_writes(plan, now, by_item)
            if writes or refreshes:
                yield from ops.write(tenant, now, writes, refreshes, read.stamps, pipeline.seal)
            if read.stale:  # entries of expired items the reads saw (DynamoDB's TTL keeps them)
                yield from ops.drop_stale(read.stale)
            return results

        call = _Call(tenant, lambda: Operation(steps()), write=bool(plan.puts), opens=plan.reads)
        return saver._keyed(call)  # type: ignore[no-any-return]

    def _delete_namespace_op(self, prefix: tuple[str, ...]) -> Operation[int]:
        core.check_labels(prefix, "namespace prefix")
        if not prefix:
            raise InvalidNamespaceError(
                "delete_namespace needs a non-empty prefix (one label at least)"
            )
        return Operation(self._store_ops.delete_namespace(self.tenant, prefix))


def _settings(conn_string: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    settings = {**parse_conn_string(conn_string), **kwargs}
    if "ttl" in settings and not isinstance(settings["ttl"], dict | None):
        raise ConfigurationError(
            "a store's ttl is LangGraph's TTLConfig (ttl={'default_ttl': minutes, ...}), "
            "not the URL's ttl parameter (the saver's deprecated thread TTL in seconds)"
        )
    return settings


class DynamoDBStore(_DynamoDBStoreBase):
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
        serde: The serializer (default: the savers' allowlisting serializer).
        ttl: LangGraph's ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``):
            expired items are never returned (checked at read); their native TTL
            attribute ``expires_at`` lets DynamoDB delete them later (``setup()``
            enables the table's TTL).
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

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Iterator[DynamoDBStore]:
        """A store with its own client for ``dynamodb://TABLE?region=...&endpoint=...``."""
        store = cls(**_settings(conn_string, kwargs))
        try:
            yield store
        finally:
            store.close()

    def close(self) -> None:
        """Close the client the store made (a caller's client stays open)."""
        self._saver.close()

    def __enter__(self) -> DynamoDBStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def setup(self) -> list[str]:
        """Create the table (and enable its TTL when the store has a ``ttl``), or check them."""
        return self._saver.setup()  # type: ignore[no-any-return]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        plan = core.plan_batch(ops)
        queries, tasks = self._to_embed(plan)
        emb = self.embeddings
        qv = [emb.embed_query(q) for q in queries] if emb and queries else []
        dv = emb.embed_documents([t.text for t in tasks]) if emb and tasks else []
        return self._saver._run(self._batch_op(plan, queries, qv, tasks, dv))  # type: ignore[no-any-return]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs :meth:`batch` in a worker thread (use ``AsyncDynamoDBStore`` on a loop)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, list(ops))

    def delete_namespace(self, prefix: tuple[str, ...]) -> int:
        """Delete every item of the current tenant under ``prefix``; the number deleted."""
        return self._saver._run(self._delete_namespace_op(prefix))  # type: ignore[no-any-return]


class AsyncDynamoDBStore(_DynamoDBStoreBase):
    """A LangGraph store on DynamoDB (asyncio); arguments as :class:`DynamoDBStore`.

    boto3 calls run in the saver's bounded thread pool (``max_workers``), so the
    loop keeps running. Its sync methods work from other threads (they run on the
    store's event loop), not from the loop's own thread.
    """

    _saver_class = AsyncDynamoDBSaver
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, **kwargs: Any
    ) -> AsyncIterator[AsyncDynamoDBStore]:
        """A store with its own client for ``dynamodb://TABLE?...``, closed on exit
        (made in a worker thread: boto3 reads files while making a client)."""
        settings = _settings(conn_string, kwargs)
        store = await asyncio.to_thread(lambda: cls(**settings))
        store._bind_loop()
        try:
            yield store
        finally:
            await store.close()

    def _bind_loop(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._saver._bind_loop()

    async def close(self) -> None:
        """Stop the thread pool and close the client the store made."""
        await self._saver.close()

    async def __aenter__(self) -> AsyncDynamoDBStore:
        self._bind_loop()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def setup(self) -> list[str]:
        """Create the table (and its TTL when asked), or check them (see ``DynamoDBStore``)."""
        self._bind_loop()
        return await self._saver.setup()  # type: ignore[no-any-return]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        self._bind_loop()
        plan = core.plan_batch(ops)
        queries, tasks = self._to_embed(plan)
        emb = self.embeddings
        qv = [await emb.aembed_query(q) for q in queries] if emb and queries else []
        dv = await emb.aembed_documents([t.text for t in tasks]) if emb and tasks else []
        return await self._saver._arun(self._batch_op(plan, queries, qv, tasks, dv))  # type: ignore[no-any-return]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs :meth:`abatch` on the store's event loop (from another thread only)."""
        return self._on_loop(self.abatch(list(ops)))  # type: ignore[no-any-return]

    async def adelete_namespace(self, prefix: tuple[str, ...]) -> int:
        """Delete every item of the current tenant under ``prefix``; the number deleted."""
        self._bind_loop()
        return await self._saver._arun(self._delete_namespace_op(prefix))  # type: ignore[no-any-return]

    def delete_namespace(self, prefix: tuple[str, ...]) -> int:
        """:meth:`adelete_namespace` from another thread than the store's loop."""
        return self._on_loop(self.adelete_namespace(prefix))  # type: ignore[no-any-return]

    def _on_loop(self, coro: Any) -> Any:
        return run_on_loop(self._loop, coro, "AsyncDynamoDBStore")
