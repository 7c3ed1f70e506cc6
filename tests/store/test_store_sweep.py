"""The one sweep API of the six store classes, against each backend's raw storage.

Two tenants put items with a one-minute TTL and items without one (an injected clock);
a minute later:

* ``sweep_expired()`` / ``asweep_expired()`` (and the async store's sync method, from
  another thread) delete the current tenant's expired items only, and say how many;
* ``sweep_all_expired()`` / ``asweep_all_expired()`` delete every tenant's and return
  ``{tenant: count}`` for the tenants that had any (PostgreSQL, Redis); on DynamoDB they
  raise ``UnsupportedOperationError`` (its native TTL deletes them; ``--tenant`` sweeps);
* a second sweep finds nothing; the items without a TTL stay.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from langgraph.store.base import PutOp

from langgraph_durable.errors import UnsupportedOperationError
from tests.cli.store_helpers import aopen_spec_store, open_spec_store, raw_items
from tests.effects.conftest import BACKENDS, make_spec
from tests.redaction_helpers import SaverSpec
from tests.store.differential import FakeClock

EXPIRED = {"a": 3, "b": 2}


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


def _put(store: Any, current: dict[str, str], tenants: dict[str, str]) -> None:
    for name, tenant in tenants.items():
        current["now"] = tenant
        ops: list[Any] = [PutOp(("m",), f"old{i}", {"i": i}, ttl=1) for i in range(EXPIRED[name])]
        store.batch([*ops, PutOp(("m",), "kept", {"i": -1}, ttl=None)])
    current["now"] = tenants["a"]


def _left(spec: SaverSpec, tenants: dict[str, str]) -> dict[str, int]:
    mine = [t for t, _ns, _key in raw_items(spec) if t in tenants.values()]
    return {name: mine.count(tenant) for name, tenant in tenants.items()}


def test_sweep_sync(spec: SaverSpec) -> None:
    tenants = {name: uuid.uuid4().hex for name in EXPIRED}
    current = {"now": tenants["a"]}
    clock = FakeClock()
    with open_spec_store(spec, lambda: current["now"], clock=clock) as store:
        _put(store, current, tenants)
        assert store.sweep_expired() == 0
        clock.advance(61)
        assert store.sweep_expired() == EXPIRED["a"]
        assert _left(spec, tenants) == {"a": 1, "b": EXPIRED["b"] + 1}
        assert store.sweep_expired() == 0
        if not store.supports_sweep_all:
            with pytest.raises(UnsupportedOperationError, match="native TTL"):
                store.sweep_all_expired()
            return
        swept = store.sweep_all_expired()
        assert {t: n for t, n in swept.items() if t in tenants.values()} == {
            tenants["b"]: EXPIRED["b"]
        }
        assert _left(spec, tenants) == {"a": 1, "b": 1}
        assert asyncio.run(store.asweep_expired()) == 0  # the sync store's async methods


def test_sweep_async(spec: SaverSpec) -> None:
    tenants = {name: uuid.uuid4().hex for name in EXPIRED}
    current = {"now": tenants["a"]}
    clock = FakeClock()

    async def run() -> None:
        async with aopen_spec_store(spec, lambda: current["now"], clock=clock) as store:
            await asyncio.to_thread(_put, store, current, tenants)
            clock.advance(61)
            current["now"] = tenants["b"]
            assert await asyncio.to_thread(store.sweep_expired) == EXPIRED["b"]
            current["now"] = tenants["a"]
            if not store.supports_sweep_all:
                assert await store.asweep_expired() == EXPIRED["a"]
                with pytest.raises(UnsupportedOperationError):
                    await store.asweep_all_expired()
            else:
                swept = await store.asweep_all_expired()
                assert {t: n for t, n in swept.items() if t in tenants.values()} == {
                    tenants["a"]: EXPIRED["a"]
                }
                assert await asyncio.to_thread(store.sweep_all_expired) == {}
            assert await store.asweep_expired() == 0
            assert _left(spec, tenants) == {"a": 1, "b": 1}

    asyncio.run(run())
