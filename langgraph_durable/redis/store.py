"""``RedisStore`` and ``AsyncRedisStore``: LangGraph long-term memory on Redis or Valkey.

Plain Redis >= 7 or Valkey, no modules (no RedisJSON, no RediSearch), single server
or cluster. Both stores run the same pure operations (``_store.StoreOps`` for the
keys and scripts, ``langgraph_durable._core.store`` for every decision) through the
driver of the saver they hold: its client handling (the same URLs as ``RedisSaver``),
record pipeline (redaction, then encryption and the ``integrity=`` tag, bound to
tenant, namespace, key and the clear fields a read trusts: ``core.item_identity``) and
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
from ._requests import Command
from ._store import STORE_SCRIPTS, StoreOps
from .saver import AsyncRedisSaver, RedisSaver

__all__ = ["RedisStore", "AsyncRedisStore"]


class _RedisStoreBase(DurableStoreBase):
    """What the sync and async stores share: their saver, the operations."""

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
        integrity: Any = None,
        serde: Any = None,
        ttl: Any = None,
        index: Any = None,
        clock: Callable[[], float] | None = None,
        max_search_items: int = DEFAULT_MAX_SEARCH_ITEMS,
    ) -> None:
        self._init_store(
            tenant=tenant, ttl=ttl, index=index, clock=clock, max_search_items=max_search_items
        )
        self._saver: Any = self._saver_class(
            conn,
            prefix=prefix,
            serde=serde,
            default_tenant=default_tenant,
            encryption=encryption,
            redaction=redaction,
            integrity=integrity,
        )
        self._store_ops = StoreOps(prefix, self.max_search_items)

    @property
    def prefix(self) -> str:
        """The prefix of the store's keys (the saver's)."""
        return self._saver.prefix  # type: ignore[no-any-return]

    @property
    def client(self) -> Any:
        """The redis-py client the store uses."""
        return self._saver.client

    def _batch_steps(self, batch: StoreBatch) -> Operation[list[Result]]:
        """The batch as one operation: one script (reads, then writes), the core decides."""
        tenant, plan, now = batch.tenant, batch.plan, batch.now
        writes = core.item_writes(plan, now, batch.by_item)
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
            results, refreshes = core.answer(plan, found, searched, names, now, batch.by_query)
            refresh = ops.refresh_script(tenant, plan, now, refreshes) if refreshes else None
            if refresh is not None:
                yield refresh
            return results

        call = _Call(tenant, lambda: Operation(steps()), write=bool(plan.puts), opens=plan.reads)
        return saver._keyed(call)  # type: ignore[no-any-return]

    def _delete_namespace_steps(self, tenant: str, prefix: tuple[str, ...]) -> Operation[int]:
        return Operation(self._store_ops.delete_namespace(tenant, prefix))

    def _sweep_steps(self, tenant: str, now: float) -> Operation[int]:
        return Operation(self._store_ops.sweep(tenant, now))

    def _sweep_all_steps(self, now: float) -> Operation[dict[str, int]]:
        return Operation(self._store_ops.sweep_all(now))

    def _setup_op(self) -> Operation[Any]:
        return Operation(self._setup_steps())

    def _setup_steps(self) -> Generator[Any, Any, Any]:
        """The saver's setup (server checks, its scripts), then the store's scripts."""
        result = yield from self._saver._setup_op().steps
        for script in STORE_SCRIPTS:
            yield Command(("SCRIPT", "LOAD", script.source), every_primary=True)
        return result


class RedisStore(SyncStoreMethods, _RedisStoreBase):
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
        integrity: The chain key (as ``RedisSaver``'s ``integrity=``): every value and
            its embeddings carry a keyed tag bound to tenant, namespace, key, TTL, the
            write's time and whether embeddings go with the value; an item altered or
            moved is refused on read (``IntegrityError``), with or without encryption.
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


class AsyncRedisStore(AsyncStoreMethods, _RedisStoreBase):
    """A LangGraph store on Redis or Valkey (asyncio); arguments as :class:`RedisStore`.

    Takes a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster`` client or
    a URL. Its sync methods work from other threads (they run on the store's event
    loop), not from the loop's own thread.
    """

    _saver_class = AsyncRedisSaver
