"""``langgraph-durable prune`` sweeps the long-term memory store's expired items.

Items are put with a one-minute TTL by a store whose injected clock says ten minutes
ago, so they are expired by the real clock the pruner reads (and, on Redis, still held:
its native expiry is an hour after the item's own); others have no TTL. Checked against
a raw scan of the backend's storage:

* ``--dry-run`` deletes nothing and says the store was not swept;
* ``--tenant`` sweeps that tenant's expired items only, on every backend;
* a run deletes every expired item of every tenant and reports how many
  (``store_items``); the live items stay;
* DynamoDB, without ``--tenant``, leaves them to the table's native TTL and says so
  (``store_items`` null).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from langgraph.store.base import PutOp

from langgraph_durable.cli import main
from tests.cli.store_helpers import open_spec_store, raw_items
from tests.effects.conftest import BACKENDS, make_spec
from tests.helpers import cli_target
from tests.redaction_helpers import SaverSpec

TENANTS = ("acme", "beta")
EXPIRED, LIVE = 4, 3


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LGD_POSTGRES_URL", "LGD_REDIS_URL", "LGD_DYNAMODB_URL", "LGD_INTEGRITY_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("LGD_TENANT_SIGNING_KEY", raising=False)


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


def _populate(spec: SaverSpec) -> None:
    past = time.time() - 600
    current = {"tenant": TENANTS[0]}
    with open_spec_store(
        spec, lambda: current["tenant"], ttl={"default_ttl": 1}, clock=lambda: past
    ) as store:
        for tenant in TENANTS:
            current["tenant"] = tenant
            ops: list[Any] = [PutOp(("mem",), f"old{i}", {"i": i}, ttl=1) for i in range(EXPIRED)]
            ops += [PutOp(("mem",), f"new{i}", {"i": i}, ttl=None) for i in range(LIVE)]
            store.batch(ops)


def _prune(spec: SaverSpec, capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    capsys.readouterr()
    code = main(["prune", *cli_target(spec), "--idle", "30d", "--json", *flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def _keys(spec: SaverSpec) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {tenant: set() for tenant in TENANTS}
    for tenant, _ns, key in raw_items(spec):
        found[tenant].add(key)
    return found


def test_prune_sweeps_expired_store_items(
    spec: SaverSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    _populate(spec)
    stored = _keys(spec)
    old = {f"old{i}" for i in range(EXPIRED)}
    new = {f"new{i}" for i in range(LIVE)}
    assert stored == {tenant: old | new for tenant in TENANTS}

    dry = _prune(spec, capsys, "--dry-run")
    assert dry["store_items"] is None and "dry run" in dry["store_sweep"]
    assert _keys(spec) == stored

    one = _prune(spec, capsys, "--tenant", "beta")  # every store sweeps one tenant's
    assert one["store_items"] == EXPIRED and one["store_sweep"] is None
    assert _keys(spec) == {"acme": old | new, "beta": new}
    if spec.backend == "dynamodb":  # every tenant's: left to the table's native TTL
        done = _prune(spec, capsys)
        assert done["store_items"] is None and "native TTL" in done["store_sweep"]
        assert _keys(spec) == {"acme": old | new, "beta": new}
        return
    done = _prune(spec, capsys)
    assert done["store_items"] == EXPIRED and done["store_sweep"] is None
    assert _keys(spec) == {tenant: new for tenant in TENANTS}
    assert _prune(spec, capsys)["store_items"] == 0
