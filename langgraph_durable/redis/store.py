"""``RedisStore`` and ``AsyncRedisStore``: LangGraph long-term memory on Redis or Valkey.

Plain Redis >= 7 or Valkey, no modules (no RedisJSON, no RediSearch), single server
or cluster. Both stores run the same pure operations (``_store.StoreOps`` for the
keys and scripts, ``langgraph_durable._core.store`` for every decision) through the
driver of the saver they hold: its client handling (the same URLs as ``RedisSaver``),
record pipeline (redaction, then encryption bound to tenant, namespace and key) and
data keys. A store method only resolves the tenant, embeds what the batch needs (the
one part that differs between sync and async: the embedding function's own call) and
hands the operation to the driver.

Round trips: a batch is one script call, whatever its ops (reads see the store
before the batch, then its puts and deletes apply, atomically: a tenant's items
share one cluster slot); the script also extends the TTL of the items a refreshing
get reads. A batch whose searches return items stored with a TTL under
``refresh_ttl`` sends a second call that extends them (which items a search returns
is decided after decryption). Loading a tenant's data keys (encryption, rarely) adds
its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langchain_core.runnables.config import var_child_runnable_config
from langgraph.store.base import BaseStore, Op, Result, ensure_embeddings

from .._core import store as core
from .._core.ids import tenant_from_config
from .._core.sansio import Operation
from .._core.store_settings import check_index, check_ttl
from .._saver_base import _Call
from .._store_loop import run_on_loop
from ..errors import ConfigurationError, InvalidNamespaceError
from ._requests import Command
from ._store import MAX_SEARCH_ITEMS, STORE_SCRIPTS, StoreOps
from .saver import AsyncRedisSaver, RedisSaver

__all__ = ["RedisStore", "AsyncRedisStore"]

StoreTenant = Callable[[], "str | None"]


def _tenant_of_run() -> str | None:
    """The ``tenant_id`` of the graph run this call is part of (``configurable``), if any."""
    return tenant_from_config(var_child_runnable_config.get())


class _RedisStoreBase(BaseStore):
    """What the sync and async stores share: settings, tenant, the batch operation."""

    supports_ttl = True
    _saver_class: type[RedisSaver] | type[AsyncRedisSaver]

    def __init__(
        self,
        conn: Any,
        *,
        prefix: str = "lgd",
        tenant: str | StoreTenant | None = None,
        default_tenant: str = "default",
        encryption: Any = None,
        redaction: Any = None,
        serde: Any = None,
        ttl: Any = None,
        index: Any = None,
        clock: Callable[[], float] | None = None,
        max_search_items: int = MAX_SEARCH_ITEMS,
    ) -> None:
        self.ttl_config = check_ttl(ttl)  # type: ignore[assignment]
        self.index_config = check_index(index)
        self.embeddings = (
            ensure_embeddings(self.index_config["embed"]) if self.index_config else None
        )
        self._fields = core.index_fields(self.index_config)
        self._dims = self.index_config.get("dims") if self.index_config else None
        if clock is not None and not callable(clock):
            raise ConfigurationError(
                f"clock must be a callable returning Unix seconds, got {clock!r}"
            )
        self._clock: Callable[[], float] = clock or time.time
        if (
            isinstance(max_search_items, bool)
            or not isinstance(max_search_items, int)
            or max_search_items < 1
        ):
            raise ConfigurationError(
                f"max_search_items must be a positive integer, got {max_search_items!r}"
            )
        if tenant is None:
            self._tenant: StoreTenant = _tenant_of_run
        elif isinstance(tenant, str) and tenant:
            fixed = tenant
            self._tenant = lambda: fixed
        elif callable(tenant):
            self._tenant = tenant
        else:
            raise ConfigurationError(
                f"tenant must be None, a non-empty string or a callable() -> str, got {tenant!r}"
            )
        self._saver: Any = self._saver_class(
            conn,
            prefix=prefix,
            serde=serde,
            default_tenant=default_tenant,
            encryption=encryption,
            redaction=redaction,
        )
        self._store_ops = StoreOps(prefix, max_search_items)

    @property
    def prefix(self) -> str:
        """The prefix of the store's keys (the saver's)."""
        return self._saver.prefix  # type: ignore[no-any-return]

    @property
    def client(self) -> Any:
        """The redis-py client the store uses."""
        return self._saver.client

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
        """The batch as one operation: one script (reads, then writes), the core decides."""
        tenant = self.tenant
        now = float(self._clock())
        by_query = dict(zip(queries, query_vectors, strict=True))
        by_item = core.vectors_by_item(tasks, vectors, self._dims) if tasks else None
        writes = core.item_writes(plan, now, by_item)
        ops, saver = self._store_ops, self._saver
        sent: list[Any] = []  # the script's reply, kept if opening needs other key versions

        def steps() -> Generator[Any, Any, list[Result]]:
            if not plan.ops:
                return []
            pipeline = saver.pipeline
            if not sent:
                # Sent once: run again (a data-key version was missing), the operation
                # opens the same reply, it does not write twice nor read its own writes.
                sent.append((yield ops.batch_script(tenant, plan, now, writes, pipeline.seal)))
            found, searched, names = ops.read_reply(tenant, plan, sent[0], pipeline.open)
            results, refreshes = core.answer(plan, found, searched, names, now, by_query)
            refresh = ops.refresh_script(tenant, plan, now, refreshes) if refreshes else None
            if refresh is not None:
                yield refresh
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

    def _sweep_op(self) -> Operation[int]:
        return Operation(self._store_ops.sweep(self.tenant, float(self._clock())))

    def _sweep_all_op(self) -> Operation[dict[str, int]]:
        return Operation(self._store_ops.sweep_all(float(self._clock())))

    def _setup_steps(self) -> Generator[Any, Any, Any]:
        """The saver's setup (server checks, its scripts), then the store's scripts."""
        result = yield from self._saver._setup_op().steps
        for script in STORE_SCRIPTS:
            yield Command(("SCRIPT", "LOAD", script.source), every_primary=True)
        return result


class RedisStore(_RedisStoreBase):
    """A LangGraph store (``BaseStore``) on Redis or Valkey, protected like the checkpoints.

    Args:
        conn: A ``redis.Redis`` or ``redis.cluster.RedisCluster`` client (with
            ``decode_responses=False``) or a URL, the same as ``RedisSaver``'s
            (``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://``,
            ``rediss+cluster://`` or ``?cluster=true``).
        prefix: First part of every key (the saver's; store keys are
            ``<prefix>:store:{<tenant>}:...``, apart from the saver's).
        tenant: None (the graph run's ``config["configurable"]["tenant_id"]``, as
            the savers read it, else ``default_tenant``), a fixed tenant id, or a
            callable returning the tenant of the current call (None: the default).
        default_tenant: The tenant when ``tenant`` gives none.
        encryption: :class:`~langgraph_durable.protect.Encryption`: values and
            embeddings are stored encrypted, bound to tenant, namespace and key;
            filters are applied after decryption, ``limit``/``offset`` after the filter.
        redaction: :class:`~langgraph_durable.protect.Redaction` applied to values
            before they are stored.
        serde: The serializer (default: the savers' allowlisting serializer).
        ttl: LangGraph's ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``);
            expired items are never returned (checked against their stored expiry
            at every read); Redis deletes an item's key on its own an hour after it
            expired (a backstop), :meth:`sweep_expired` at once.
        index: LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``): search by
            meaning, scored exactly (cosine) in Python over the items under the
            search prefix (no module needed).
        clock: Unix seconds now (tests inject one; default ``time.time``).
        max_search_items: Most items one search may read under its prefix
            (default 10,000); a search over more raises ``InvalidInputError``.

    Example:
        >>> with RedisStore.from_conn_string("redis://localhost:6379/0") as store:
        ...     store.setup()
        ...     graph = builder.compile(store=store)
    """

    _saver_class = RedisSaver

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Iterator[RedisStore]:
        """A store on its own client for ``conn_string``, closed on exit."""
        store = cls(conn_string, **kwargs)
        try:
            yield store
        finally:
            store.close()

    def close(self) -> None:
        """Close the client the store opened (a caller's client stays open)."""
        self._saver.close()

    def setup(self) -> Any:
        """Check the server (Redis >= 7.0 or Valkey) and load the scripts (as ``RedisSaver``)."""
        return self._saver._run(Operation(self._setup_steps()))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        plan = core.plan_batch(ops)
        queries, tasks = self._to_embed(plan)
        emb = self.embeddings
        qv = [emb.embed_query(q) for q in queries] if emb and queries else []
        dv = emb.embed_documents([t.text for t in tasks]) if emb and tasks else []
        return self._saver._run(self._batch_op(plan, queries, qv, tasks, dv))  # type: ignore[no-any-return]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs :meth:`batch` in a worker thread (use ``AsyncRedisStore`` on a loop)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, list(ops))

    def delete_namespace(self, prefix: tuple[str, ...]) -> int:
        """Delete every item of the current tenant under ``prefix``; the number deleted."""
        return self._saver._run(self._delete_namespace_op(prefix))  # type: ignore[no-any-return]

    def sweep_expired(self) -> int:
        """Delete the current tenant's expired items now; the number deleted."""
        return self._saver._run(self._sweep_op())  # type: ignore[no-any-return]

    def sweep_all_expired(self) -> dict[str, int]:
        """Delete every tenant's expired items now (the pruner's sweep): the number
        deleted per tenant that has items with a TTL."""
        return self._saver._run(self._sweep_all_op())  # type: ignore[no-any-return]


class AsyncRedisStore(_RedisStoreBase):
    """A LangGraph store on Redis or Valkey (asyncio); arguments as :class:`RedisStore`.

    Takes a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster`` client or
    a URL. Its sync methods work from other threads (they run on the store's event
    loop), not from the loop's own thread.
    """

    _saver_class = AsyncRedisSaver
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, **kwargs: Any
    ) -> AsyncIterator[AsyncRedisStore]:
        """A store on its own client for ``conn_string``, closed on exit."""
        store = cls(conn_string, **kwargs)
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
        """Close the client the store opened (a caller's client stays open)."""
        await self._saver.close()

    async def setup(self) -> Any:
        """Check the server and load the scripts (see ``RedisStore.setup``)."""
        self._bind_loop()
        return await self._saver._arun(Operation(self._setup_steps()))

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

    async def asweep_expired(self) -> int:
        """Delete the current tenant's expired items now; the number deleted."""
        self._bind_loop()
        return await self._saver._arun(self._sweep_op())  # type: ignore[no-any-return]

    async def asweep_all_expired(self) -> dict[str, int]:
        """Delete every tenant's expired items now (see ``RedisStore.sweep_all_expired``)."""
        self._bind_loop()
        return await self._saver._arun(self._sweep_all_op())  # type: ignore[no-any-return]

    def _on_loop(self, coro: Any) -> Any:
        return run_on_loop(self._loop, coro, "AsyncRedisStore")
