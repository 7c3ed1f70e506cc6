"""A dict-backed ``BaseStore`` made only of the pure core's decisions (a test subject).

It checks the core (and the differential harness itself) against ``InMemoryStore``
before any backend is involved: every rule a backend's store applies through the
core shows here first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langgraph.store.base import BaseStore, Op, Result, ensure_embeddings

from langgraph_durable._core import store as core


class CoreStore(BaseStore):
    supports_ttl = True

    def __init__(
        self,
        *,
        index: dict[str, Any] | None = None,
        ttl: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.items: dict[tuple[tuple[str, ...], str], core.StoredItem] = {}
        self.index = index
        self.fields = core.index_fields(index)
        self.embeddings = ensure_embeddings(index["embed"]) if index else None
        self.ttl_config = ttl  # type: ignore[assignment]
        self.clock = clock

    def _read(
        self, plan: core.BatchPlan, now: float, queries: dict[str, list[float]]
    ) -> list[Result]:
        searched = [
            c
            for c in self.items.values()
            if any(core.under(c.namespace, p) for p in plan.search_prefixes)
        ]
        live = {c.namespace for c in self.items.values() if core.is_live(c.expires_at, now)}
        results, refreshes = core.answer(plan, self.items, searched, live, now, queries)
        for r in refreshes:
            self.items[(r.namespace, r.key)].expires_at = r.expires_at
        return results

    def _write(self, plan: core.BatchPlan, now: float, vectors: Any) -> None:
        for w in core.item_writes(plan, now, vectors):
            place = (w.namespace, w.key)
            if w.value is None:
                self.items.pop(place, None)
                continue
            old = self.items.get(place)
            created = (
                now if old is None or not core.is_live(old.expires_at, now) else old.created_at
            )
            self.items[place] = core.StoredItem(
                w.namespace, w.key, w.value, created, now, w.expires_at, w.ttl_minutes, w.vectors
            )

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        plan = core.plan_batch(ops)
        now = self.clock()
        queries: dict[str, list[float]] = {}
        vectors = None
        if self.embeddings is not None:
            texts = plan.queries()
            queries = dict(zip(texts, [self.embeddings.embed_query(t) for t in texts], strict=True))
            tasks = core.texts_to_embed(plan.writes(), self.fields)
            if tasks:
                found = self.embeddings.embed_documents([t.text for t in tasks])
                vectors = core.vectors_by_item(tasks, found)
        results = self._read(plan, now, queries)
        self._write(plan, now, vectors)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self.batch(ops)


@contextmanager
def open_core_store(**options: Any) -> Iterator[CoreStore]:
    yield CoreStore(**options)


@asynccontextmanager
async def aopen_core_store(**options: Any) -> Any:
    yield CoreStore(**options)
