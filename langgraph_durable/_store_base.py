"""What the stores of every backend share: settings, tenant, embedding, the public methods.

A backend's store holds its saver (connection handling, record pipeline: redaction,
then encryption and the ``integrity=`` tag, both bound to tenant, namespace and key,
data keys) and builds sans-IO operations; everything else is here, written once:

* :class:`DurableStoreBase`: the constructor checks (``ttl=``, ``index=``,
  ``clock=``, ``max_search_items=``, ``tenant=``), the ``tenant`` property, what a
  batch needs embedded, the checks before a ``delete_namespace``;
* :class:`SyncStoreMethods` and :class:`AsyncStoreMethods`: ``from_conn_string``,
  ``setup``, ``close``, ``batch``/``abatch``, ``delete_namespace``, the sweeps; they
  differ only in how they embed (the embedding function's own sync or async call)
  and hand the operation to the saver's driver. The async store's sync methods run
  on its event loop from another thread (:func:`run_on_loop`).

A backend class provides ``_saver_class``, its constructor (its own options, then
:meth:`DurableStoreBase._init_store`), ``_batch_op``, ``_delete_namespace_steps``,
``_sweep_steps`` and ``_sweep_all_steps``.

The sweep API is the same on every store: ``sweep_expired()`` /
``asweep_expired()`` delete the current tenant's expired items and return how many,
``sweep_all_expired()`` / ``asweep_all_expired()`` every tenant's, as
``{tenant: count}`` for the tenants that had any (where the backend can: see
``supports_sweep_all``; DynamoDB raises ``UnsupportedOperationError``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.runnables.config import var_child_runnable_config
from langgraph.store.base import BaseStore, Op, Result, ensure_embeddings

from ._core import store as core
from ._core.ids import tenant_from_config
from ._core.sansio import Operation
from ._core.store_settings import check_clock, check_index, check_max_search_items, check_ttl
from .errors import ConfigurationError, InvalidNamespaceError, WrongEventLoopError

__all__ = [
    "StoreTenant",
    "StoreBatch",
    "DurableStoreBase",
    "SyncStoreMethods",
    "AsyncStoreMethods",
    "tenant_resolver",
    "run_on_loop",
]

StoreTenant = Callable[[], "str | None"]
S = TypeVar("S", bound="DurableStoreBase")


def tenant_of_run() -> str | None:
    """The ``tenant_id`` of the graph run this call is part of (``configurable``), if any."""
    return tenant_from_config(var_child_runnable_config.get())


def tenant_resolver(tenant: Any) -> StoreTenant:
    """The tenant of a call: None (the graph run's ``tenant_id``), a fixed id, a callable."""
    if tenant is None:
        return tenant_of_run
    if isinstance(tenant, str) and tenant:
        fixed = tenant
        return lambda: fixed
    if callable(tenant):
        return tenant  # type: ignore[no-any-return]
    raise ConfigurationError(
        f"tenant must be None, a non-empty string or a callable() -> str, got {tenant!r}"
    )


def run_on_loop(loop: asyncio.AbstractEventLoop | None, coro: Any, store: str) -> Any:
    """Run ``coro`` on ``loop`` (the async store's) from another thread and wait for it.

    Raises:
        WrongEventLoopError: there is no loop yet, or the caller is on it (waiting
            there would block the loop the coroutine needs).
    """
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is None or running is loop:
        coro.close()
        raise WrongEventLoopError(
            f"the sync methods of {store} run on the store's event loop from another "
            "thread: call the async methods (abatch, aget, ...) on the loop"
        )
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


@dataclass(frozen=True, slots=True)
class StoreBatch:
    """A batch as a backend's operation gets it: its tenant, its plan, the time it
    runs at, the query vectors by query and the put vectors by item (None: none)."""

    tenant: str
    plan: core.BatchPlan
    now: float
    by_query: dict[str, Sequence[float]]
    by_item: Any


class DurableStoreBase(BaseStore):
    """Settings, tenant and the operations' common checks, for every backend's stores."""

    supports_ttl = True
    #: Whether ``sweep_all_expired`` can find every tenant's expired items cheaply.
    supports_sweep_all = True
    _saver_class: type[Any]
    _saver: Any
    _store_ops: Any
    #: The batch as one operation (each backend's: read, decide with the core, write).
    _batch_steps: Callable[[StoreBatch], Operation[list[Result]]]

    def _init_store(
        self,
        *,
        tenant: Any,
        ttl: Any,
        index: Any,
        clock: Any,
        max_search_items: Any,
    ) -> None:
        """Check and keep the settings every store takes (before its saver is made)."""
        self.ttl_config = check_ttl(ttl)  # type: ignore[assignment]
        self.index_config = check_index(index)
        self.embeddings = (
            ensure_embeddings(self.index_config["embed"]) if self.index_config else None
        )
        self._fields = core.index_fields(self.index_config)
        self._dims = self.index_config.get("dims") if self.index_config else None
        self._clock: Callable[[], float] = check_clock(clock) or time.time
        self._tenant = tenant_resolver(tenant)
        self.max_search_items = check_max_search_items(max_search_items)

    @property
    def tenant(self) -> str:
        """The tenant this store's calls read and write now."""
        found = self._tenant()
        return str(found) if found else self._saver.default_tenant  # type: ignore[no-any-return]

    def _now(self) -> float:
        return float(self._clock())

    def _to_embed(self, plan: core.BatchPlan) -> tuple[list[str], list[core.EmbedTask]]:
        """The search queries and the put texts a batch needs embedded (none without index)."""
        if self.embeddings is None:
            return [], []
        return plan.queries(), core.texts_to_embed(plan.writes(), self._fields)

    # ---- what a backend provides ----------------------------------------------------

    def _delete_namespace_steps(self, tenant: str, prefix: tuple[str, ...]) -> Operation[int]:
        raise NotImplementedError

    def _sweep_steps(self, tenant: str, now: float) -> Operation[int]:
        raise NotImplementedError

    def _sweep_all_steps(self, now: float) -> Operation[dict[str, int]]:
        raise NotImplementedError

    @classmethod
    def _from_url(cls: type[S], conn_string: str, options: dict[str, Any]) -> S:
        """The store ``from_conn_string`` makes (a backend may read the URL itself)."""
        return cls(conn_string, **options)  # type: ignore[call-arg]

    @classmethod
    async def _afrom_url(cls: type[S], conn_string: str, options: dict[str, Any]) -> S:
        return cls._from_url(conn_string, options)  # type: ignore[attr-defined, no-any-return]

    def _setup_op(self) -> Operation[Any] | None:
        """The setup as an operation, or None: the saver's own ``setup()``."""
        return None

    # ---- the operations -------------------------------------------------------------

    def _batch_op(
        self,
        plan: core.BatchPlan,
        queries: Sequence[str],
        query_vectors: Sequence[Sequence[float]],
        tasks: Sequence[core.EmbedTask],
        vectors: Sequence[Sequence[float]],
    ) -> Operation[list[Result]]:
        """The batch as one operation, its queries and put texts embedded."""
        by_query = dict(zip(queries, query_vectors, strict=True))
        by_item = core.vectors_by_item(tasks, vectors, self._dims) if tasks else None
        return self._batch_steps(StoreBatch(self.tenant, plan, self._now(), by_query, by_item))

    def _delete_namespace_op(self, prefix: tuple[str, ...]) -> Operation[int]:
        core.check_labels(prefix, "namespace prefix")
        if not prefix:
            raise InvalidNamespaceError(
                "delete_namespace needs a non-empty prefix (one label at least)"
            )
        return self._delete_namespace_steps(self.tenant, prefix)

    def _sweep_op(self) -> Operation[int]:
        return self._sweep_steps(self.tenant, self._now())

    def _sweep_all_op(self) -> Operation[dict[str, int]]:
        return self._sweep_all_steps(self._now())


class SyncStoreMethods(DurableStoreBase):
    """The public methods of a sync store (its async ones run them in a worker thread)."""

    @classmethod
    @contextmanager
    def from_conn_string(cls: type[S], conn_string: str, **options: Any) -> Iterator[S]:
        """A store on its own connection (pool, client) for ``conn_string``, closed on exit."""
        store = cls._from_url(conn_string, options)  # type: ignore[attr-defined]
        try:
            yield store
        finally:
            store.close()  # type: ignore[attr-defined]

    def _run(self, op: Operation[Any]) -> Any:
        return self._saver._run(op)

    def close(self) -> None:
        """Close what the store opened (a caller's connection or client stays open)."""
        self._saver.close()

    def setup(self) -> Any:
        """Create or check what the store needs (the saver's setup, the store's part with it)."""
        op = self._setup_op()
        return self._saver.setup() if op is None else self._run(op)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        plan = core.plan_batch(ops)
        queries, tasks = self._to_embed(plan)
        emb = self.embeddings
        qv = [emb.embed_query(q) for q in queries] if emb and queries else []
        dv = emb.embed_documents([t.text for t in tasks]) if emb and tasks else []
        return self._run(self._batch_op(plan, queries, qv, tasks, dv))  # type: ignore[no-any-return]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs :meth:`batch` in a worker thread (use the async store on a loop)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, list(ops))

    def delete_namespace(self, prefix: tuple[str, ...]) -> int:
        """Delete every item of the current tenant under ``prefix``; the number deleted."""
        return self._run(self._delete_namespace_op(prefix))  # type: ignore[no-any-return]

    async def adelete_namespace(self, prefix: tuple[str, ...]) -> int:
        """Runs :meth:`delete_namespace` in a worker thread."""
        return await asyncio.to_thread(self.delete_namespace, prefix)

    def sweep_expired(self) -> int:
        """Delete the current tenant's expired items now; the number deleted.

        Expired items are never returned whether swept or not; sweeping frees their space.
        """
        return self._run(self._sweep_op())  # type: ignore[no-any-return]

    async def asweep_expired(self) -> int:
        """Runs :meth:`sweep_expired` in a worker thread."""
        return await asyncio.to_thread(self.sweep_expired)

    def sweep_all_expired(self) -> dict[str, int]:
        """Delete every tenant's expired items now (the pruner's sweep): the number
        deleted per tenant, for the tenants that had any.

        Raises:
            UnsupportedOperationError: The backend cannot find every tenant's expired
                items without a Scan (DynamoDB, whose native TTL deletes them; see
                ``supports_sweep_all``).
        """
        return self._run(self._sweep_all_op())  # type: ignore[no-any-return]

    async def asweep_all_expired(self) -> dict[str, int]:
        """Runs :meth:`sweep_all_expired` in a worker thread."""
        return await asyncio.to_thread(self.sweep_all_expired)


class AsyncStoreMethods(DurableStoreBase):
    """The public methods of an async store; its sync ones run them on the store's loop,
    from another thread only."""

    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls: type[S], conn_string: str, **options: Any) -> AsyncIterator[S]:
        """A store on its own connection (pool, client) for ``conn_string``, closed on exit."""
        store = await cls._afrom_url(conn_string, options)  # type: ignore[attr-defined]
        store._bind_loop()  # type: ignore[attr-defined]
        try:
            await store._open()  # type: ignore[attr-defined]
            yield store
        finally:
            await store.close()  # type: ignore[attr-defined]

    async def _open(self) -> None:
        """Open what ``from_conn_string`` made (nothing by default)."""

    def _bind_loop(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._saver._bind_loop()

    async def _arun(self, op: Operation[Any]) -> Any:
        self._bind_loop()
        return await self._saver._arun(op)

    def _on_loop(self, coro: Any) -> Any:
        return run_on_loop(self._loop, coro, type(self).__name__)

    async def close(self) -> None:
        """Close what the store opened (a caller's connection or client stays open)."""
        await self._saver.close()

    async def setup(self) -> Any:
        """Create or check what the store needs (see the sync store's ``setup``)."""
        self._bind_loop()
        op = self._setup_op()
        return await (self._saver.setup() if op is None else self._arun(op))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        self._bind_loop()
        plan = core.plan_batch(ops)
        queries, tasks = self._to_embed(plan)
        emb = self.embeddings
        qv = [await emb.aembed_query(q) for q in queries] if emb and queries else []
        dv = await emb.aembed_documents([t.text for t in tasks]) if emb and tasks else []
        return await self._arun(self._batch_op(plan, queries, qv, tasks, dv))  # type: ignore[no-any-return]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs :meth:`abatch` on the store's event loop (from another thread only)."""
        return self._on_loop(self.abatch(list(ops)))  # type: ignore[no-any-return]

    async def adelete_namespace(self, prefix: tuple[str, ...]) -> int:
        """Delete every item of the current tenant under ``prefix``; the number deleted."""
        return await self._arun(self._delete_namespace_op(prefix))  # type: ignore[no-any-return]

    def delete_namespace(self, prefix: tuple[str, ...]) -> int:
        """:meth:`adelete_namespace` from another thread than the store's loop."""
        return self._on_loop(self.adelete_namespace(prefix))  # type: ignore[no-any-return]

    async def asweep_expired(self) -> int:
        """Delete the current tenant's expired items now; the number deleted."""
        return await self._arun(self._sweep_op())  # type: ignore[no-any-return]

    def sweep_expired(self) -> int:
        """:meth:`asweep_expired` from another thread than the store's loop."""
        return self._on_loop(self.asweep_expired())  # type: ignore[no-any-return]

    async def asweep_all_expired(self) -> dict[str, int]:
        """Delete every tenant's expired items now (see the sync store's
        ``sweep_all_expired``): the number deleted per tenant that had any."""
        return await self._arun(self._sweep_all_op())  # type: ignore[no-any-return]

    def sweep_all_expired(self) -> dict[str, int]:
        """:meth:`asweep_all_expired` from another thread than the store's loop."""
        return self._on_loop(self.asweep_all_expired())  # type: ignore[no-any-return]
