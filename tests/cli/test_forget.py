"""``langgraph-durable forget`` on real PostgreSQL, Redis and DynamoDB.

A tenant holds items across namespaces (``make test``: 300 items over 30 namespaces,
30 over 6 on DynamoDB; with ``LGD_FORGET_FULL=1``, as ``make soak`` should set: 10,000
items over 1,000 on every backend),
another tenant holds items in the same namespaces, and both have a thread of the same
id. Checked against a raw scan of the backend's storage (not through the store):

* ``--dry-run`` reports what a run removes and changes nothing;
* ``--namespace users/u1`` removes exactly the tenant's items under that prefix
  (``users/u1`` and ``users/u1/memories``, not ``users/u10``) and reports them per
  namespace;
* without ``--namespace`` every item of the tenant goes, with ``--thread`` its
  thread too; the other tenant's items and thread are untouched;
* bad input (an empty tenant, a namespace with an empty label or a ``.``) exits 2 with
  one line of ours;
* on DynamoDB, where a pass is one Query of the tenant's namespace index and then
  transactions of 100 actions: the calls do not grow with the namespaces, expired items
  still stored go too, an item already gone is not counted, a put made meanwhile goes in
  the next pass, an index item of many keys is split over transactions, and encrypted
  items are counted and deleted without the keyring.
"""

from __future__ import annotations

import base64
import json
import os
from collections import Counter
from types import SimpleNamespace
from typing import Any, cast

import pytest
from langgraph.store.base import PutOp

from langgraph_durable.cli import main
from langgraph_durable.cli._forget import forget
from tests.cli.store_helpers import Item, open_spec_store, raw_items
from tests.effects.conftest import BACKENDS, make_spec
from tests.helpers import cfg, cli_target, put_chain
from tests.redaction_helpers import SaverSpec, open_saver

FULL = os.environ.get("LGD_FORGET_FULL") == "1"
#: Namespaces and items per namespace of the tenant: the issue's figures under
#: LGD_FORGET_FULL=1; else 300 items, and on DynamoDB 30 (moto spends ~3 ms of CPU on
#: each action of a put's transaction), which keeps each backend's run to a few seconds.
#: At full size on moto most of the DynamoDB run is the setup's puts and the raw scans
#: (moto sorts the whole table for every Query and Scan page): forget itself is a few
#: Queries of the tenant's namespace index and ~200 transactions.
SIZES = {
    backend: (1000, 10) if FULL else (6, 5) if backend == "dynamodb" else (30, 10)
    for backend in BACKENDS
}
TENANT, OTHER = "acme", "beta"
URL_VARS = ("LGD_POSTGRES_URL", "LGD_REDIS_URL", "LGD_DYNAMODB_URL")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*URL_VARS, "LGD_POSTGRES_SCHEMA", "LGD_REDIS_PREFIX", "LGD_INTEGRITY_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name in ("LGD_KEYRING", "LGD_KMS_KEY_ID", "LGD_TENANT_SIGNING_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


def namespaces(count: int) -> list[tuple[str, ...]]:
    """``count`` namespaces: ``users/uI``, ``users/uI/memories``, ``prefs/uI`` (I is 1,
    then 10, 11...: ``users/u1`` and ``users/u10`` both exist), then ``misc/mJ``."""
    groups = count // 3
    found = []
    for i in [1, *range(10, 10 + groups - 1)]:
        found += [("users", f"u{i}"), ("users", f"u{i}", "memories"), ("prefs", f"u{i}")]
    found += [("misc", f"m{j}") for j in range(count - len(found))]
    return found


def _populate(spec: SaverSpec, saver: Any) -> None:
    count, per = SIZES[spec.backend]
    ops: list[Any] = []
    for ns in namespaces(count):
        ops += [
            PutOp(ns, f"k{j}", {"text": f"fact {j} of {'/'.join(ns)}", "n": j}, index=False)
            for j in range(per)
        ]
    current = {"tenant": TENANT}
    with open_spec_store(spec, lambda: current["tenant"]) as store:
        for start in range(0, len(ops), 50):
            store.batch(ops[start : start + 50])
        current["tenant"] = OTHER  # the same namespaces and keys, fewer
        other = [op for op in ops if op.key == "k0"]
        for start in range(0, len(other), 50):
            store.batch(other[start : start + 50])
    for tenant in (TENANT, OTHER):
        put_chain(saver, "t1", 2, tenant_id=tenant)


def _thread_stored(saver: Any, tenant: str) -> bool:
    return saver.get_tuple(cfg("t1", tenant_id=tenant)) is not None


def _forget(spec: SaverSpec, capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    capsys.readouterr()
    code = main(["forget", *cli_target(spec), "--tenant", TENANT, "--json", *flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def _per_namespace(items: set[Item], tenant: str) -> dict[tuple[str, ...], int]:
    return dict(Counter(ns for t, ns, _key in items if t == tenant))


def _reported(report: dict[str, Any]) -> dict[tuple[str, ...], int]:
    return {tuple(entry["namespace"]): entry["items"] for entry in report["namespaces"]}


def test_forget_removes_exactly_the_asked_items_and_threads(
    spec: SaverSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_saver(spec) as saver:
        _check_forget(spec, saver, capsys)


def _check_forget(spec: SaverSpec, saver: Any, capsys: pytest.CaptureFixture[str]) -> None:
    _populate(spec, saver)
    count, per = SIZES[spec.backend]
    before = raw_items(spec)
    assert len(before) == count * (per + 1)  # the raw scan sees every item

    # A namespace prefix: exactly users/u1 and users/u1/memories, not users/u10.
    under = {item for item in before if item[0] == TENANT and item[1][:2] == ("users", "u1")}
    assert {ns for _t, ns, _k in under} == {("users", "u1"), ("users", "u1", "memories")}
    dry = _forget(spec, capsys, "--namespace", "users/u1", "--dry-run")
    assert raw_items(spec) == before  # nothing changed
    assert dry["dry_run"] is True and dry["items"] == len(under)
    assert _reported(dry) == _per_namespace(under, TENANT)
    done = _forget(spec, capsys, "--namespace", "users/u1")
    assert done["dry_run"] is False and done["namespace"] == ["users", "u1"]
    assert _reported(done) == _reported(dry)
    after = raw_items(spec)
    assert after == before - under

    # The whole tenant, and a thread (and one the tenant never had).
    left = {item for item in after if item[0] == TENANT}
    dry = _forget(spec, capsys, "--thread", "t1", "--thread", "nope", "--dry-run")
    assert raw_items(spec) == after and _thread_stored(saver, TENANT)
    assert dry["items"] == len(left) and _reported(dry) == _per_namespace(left, TENANT)
    assert dry["threads"] == [
        {"thread_id": "t1", "found": True},
        {"thread_id": "nope", "found": False},
    ]
    done = _forget(spec, capsys, "--thread", "t1", "--thread", "nope")
    assert _reported(done) == _per_namespace(left, TENANT)
    assert done["items"] == len(left) and done["threads_removed"] == 1
    final = raw_items(spec)
    assert final == after - left  # only the other tenant's items are left
    assert {t for t, _ns, _k in final} == {OTHER} and len(final) == count
    assert not _thread_stored(saver, TENANT)
    assert _thread_stored(saver, OTHER)

    # Nothing left: a run reports nothing; the text report says so in words.
    capsys.readouterr()
    assert main(["forget", *cli_target(spec), "--tenant", TENANT]) == 0
    assert "removed 0 items in 0 namespaces" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tenant", ""], "--tenant must not be empty"),
        (["--tenant", "  "], "--tenant must not be empty"),
        (["--tenant", "a", "--namespace", "users//u1"], "has an empty label"),
        (["--tenant", "a", "--namespace", "/users"], "has an empty label"),
        (["--tenant", "a", "--namespace", "users/"], "has an empty label"),
        (["--tenant", "a", "--namespace", ""], "--namespace must not be empty"),
        (["--tenant", "a", "--namespace", "users/u.1"], "holds a period"),
        (["--tenant", "a", "--thread", ""], "--thread must not be empty"),
        (["--namespace", "a"], "the following arguments are required: --tenant"),
        (["--tenant", "a", "--prefix", "p"], "--prefix applies to Redis URLs only"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "postgresql://postgres@127.0.0.1:1/nowhere"  # never reached: input is checked first
    assert main(["forget", "--url", url, *flags]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and len(err.strip().splitlines()) == 1


def test_a_dry_run_over_encrypted_values_reads_them_with_the_keyring(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from langgraph_durable._server import encryption_from_env

    spec = make_spec(request, "redis")
    keyring = f"k1={base64.b64encode(os.urandom(32)).decode()}"
    encryption = encryption_from_env({"LGD_KEYRING": keyring})
    with open_spec_store(spec, TENANT, encryption=encryption) as store:
        store.put(("users", "u1"), "k", {"text": "secret"})
    flags = ["forget", *cli_target(spec), "--tenant", TENANT, "--dry-run"]
    assert main(flags) == 1  # no keyring: the count cannot read the items
    assert "needs the keyring: set $LGD_KEYRING" in capsys.readouterr().err
    monkeypatch.setenv("LGD_KEYRING", keyring)
    assert main([*flags, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == 1
    monkeypatch.delenv("LGD_KEYRING")
    assert main(flags[:-1]) == 0  # deleting needs no keys
    assert raw_items(spec) == set()


# ---- DynamoDB: a pass is one Query of the tenant's namespace index, then transactions ----


@pytest.fixture
def dynamo(dynamodb_endpoint: str, dynamodb_table: str) -> Any:
    """A client of the rig's DynamoDB, and stores of ``dynamodb_table`` on it (set up)."""
    from langgraph_durable.dynamodb import DynamoDBStore
    from tests.dynamodb.helpers import make_client

    client = make_client(dynamodb_endpoint)

    def store(tenant: str = TENANT, **options: Any) -> Any:
        made = DynamoDBStore(client, table=dynamodb_table, tenant=tenant, **options)
        made.setup()
        return made

    return SimpleNamespace(client=client, table=dynamodb_table, store=store)


def _tenant_rows(dynamo: Any, tenant: str = TENANT) -> list[dict[str, Any]]:
    """The raw rows of a tenant's store: its items (``<tenant>##s#...``) and index items."""
    from tests.dynamodb.helpers import raw_items as table_rows

    rows = table_rows(dynamo.client, dynamo.table)
    return [r for r in rows if r["pk"]["S"].startswith((f"{tenant}##s#", f"{tenant}##n"))]


def test_dynamodb_forget_calls_do_not_grow_with_the_namespaces(dynamo: Any) -> None:
    from tests.dynamodb.helpers import CallCounter

    store, other = dynamo.store(), dynamo.store(OTHER)
    spaces = [("a", str(i)) for i in range(12)] + [("b",)]
    store.batch([PutOp(ns, f"k{j}", {"n": j}, index=False) for ns in spaces for j in range(3)])
    other.put(("a", "1"), "k0", {"n": 0})
    counter = CallCounter(dynamo.client)
    dry = forget(store, None, TENANT, None, [], dry_run=True)
    assert dry.namespaces == {ns: 3 for ns in spaces}
    assert counter.reset() == {"Query": 1}  # the index alone: no item read, whatever the count
    done = forget(store, None, TENANT, ("a",), [])
    assert done.namespaces == {ns: 3 for ns in spaces[:-1]}
    # a pass: one Query, then 36 items with their index items (up to 36) in 100-action
    # transactions; the second pass's Query finds nothing
    calls = counter.reset()
    assert calls["Query"] == 2 and 1 <= calls["TransactWriteItems"] <= 1 + 72 // 100
    assert {row["pk"]["S"] for row in _tenant_rows(dynamo)} == {
        f"{TENANT}##s#b#",
        f"{TENANT}##n",
    }  # ("b",) and its index items are left; every index item of ("a", ...) went
    assert {
        row["sk"]["S"].split("!")[0]
        for row in _tenant_rows(dynamo)
        if row["pk"]["S"].endswith("##n")
    } == {"n#b#"}
    assert forget(store, None, TENANT, None, []).namespaces == {("b",): 3}
    assert _tenant_rows(dynamo) == [] and len(_tenant_rows(dynamo, OTHER)) == 2
    assert counter.failed == {}


def test_dynamodb_forget_takes_expired_items_still_stored_and_counts_only_what_it_deleted(
    dynamo: Any,
) -> None:
    from tests.store.differential import FakeClock

    clock = FakeClock()
    store = dynamo.store(ttl={"default_ttl": 1.0}, clock=clock)
    store.put(("a",), "old", {"n": 1})
    store.put(("b",), "gone", {"n": 1})
    clock.advance(61)
    # a read drops the entry of a's expired item, which stays stored until DynamoDB's TTL
    # deletes it; that TTL deleted b's already (its entry is left)
    assert store.list_namespaces(prefix=("a",)) == []
    pk = {"pk": {"S": f"{TENANT}##s#b#"}, "sk": {"S": "k#gone"}}
    dynamo.client.delete_item(TableName=dynamo.table, Key=pk)
    store.put(("a",), "new", {"n": 2})
    stored = {(row["pk"]["S"], row["sk"]["S"]) for row in _tenant_rows(dynamo)}
    assert (f"{TENANT}##s#a#", "k#old") in stored
    assert forget(store, None, TENANT, None, [], dry_run=True).namespaces == {("a",): 1}
    assert forget(store, None, TENANT, None, []).namespaces == {("a",): 2}  # old and new
    assert _tenant_rows(dynamo) == []


def test_dynamodb_forget_takes_a_put_made_meanwhile_in_its_next_pass(dynamo: Any) -> None:
    from langgraph_durable.dynamodb._store_keys import shard_of

    store, writer = dynamo.store(), dynamo.store()
    store.put(("a",), "k0", {"n": 0})
    late = next(f"k{i}" for i in range(1, 10_000) if shard_of(f"k{i}") == shard_of("k0"))
    fired: list[int] = []

    def put_meanwhile(**_: Any) -> None:
        if not fired:  # after the pass's Query, before its transaction: the same index item
            fired.append(1)
            writer.put(("a",), late, {"n": 1})

    dynamo.client.meta.events.register("before-call.dynamodb.TransactWriteItems", put_meanwhile)
    try:
        report = forget(store, None, TENANT, ("a",), [])
    finally:
        dynamo.client.meta.events.unregister(
            "before-call.dynamodb.TransactWriteItems", put_meanwhile
        )
    assert fired and report.namespaces == {("a",): 2}
    assert _tenant_rows(dynamo) == []


def test_dynamodb_forget_splits_an_index_item_of_many_keys_over_transactions() -> None:
    from langgraph_durable.dynamodb._store import StoreOps, _forget_transactions
    from langgraph_durable.dynamodb._store_keys import entry_name, index_pk, index_sk

    def index_item(ns: tuple[str, ...], shard: int, keys: list[str], ver: int) -> dict[str, Any]:
        entries = {entry_name(k): {"N": "-1"} for k in keys}
        return {
            "pk": {"S": index_pk("t")},
            "sk": {"S": index_sk(ns, shard)},
            "ver": {"N": str(ver)},
            **entries,
        }

    big = [f"k{i}" for i in range(250)]
    index = [index_item(("a",), 5, big, 7), index_item(("b",), 1, ["x", "y"], 3)]
    ops = StoreOps(cast(Any, SimpleNamespace(table="tbl")))
    steps = ops._forget_parts("t", index)
    with pytest.raises(StopIteration) as stop:  # no entry dropped: nothing to read
        next(steps)
    parts = stop.value.value
    assert [(p.namespace, len(p.keys), p.last, p.expect) for p in parts] == [
        (("a",), 99, False, None),
        (("a",), 99, False, None),
        (("a",), 52, True, 9),  # deleted while its ver is 7 plus this pass's two updates
        (("b",), 2, True, 3),
    ]
    chunks = _forget_transactions(parts)
    assert [[len(p.keys) for p in chunk] for chunk in chunks] == [[99], [99], [52, 2]]
    for chunk in chunks:
        actions, owners = ops._forget_actions("t", chunk)
        assert len(actions) == len(owners) <= 100
        kinds = [next(iter(a)) for a in actions]
        index_actions = [a for a, (_p, key) in zip(actions, owners, strict=True) if key is None]
        assert kinds.count("Delete") >= sum(len(p.keys) for p in chunk)
        for action in index_actions:
            if "Update" in action:  # not the last part: its entries go, ver goes up
                assert action["Update"]["UpdateExpression"].endswith("ADD #ver :one")
                assert len(action["Update"]["ExpressionAttributeNames"]) == 100
            else:
                assert action["Delete"]["ConditionExpression"] == "#ver = :ver"
    assert sorted(k for p in parts if p.namespace == ("a",) for k in p.keys) == sorted(big)


def test_dynamodb_counts_and_deletes_encrypted_items_without_the_keyring(dynamo: Any) -> None:
    from tests.encryption_helpers import local_encryption

    dynamo.store(encryption=local_encryption()).put(("users", "u1"), "k", {"text": "secret"})
    keyless = dynamo.store()  # the index alone is read: no value is opened
    assert forget(keyless, None, TENANT, None, [], dry_run=True).namespaces == {("users", "u1"): 1}
    assert forget(keyless, None, TENANT, ("users",), []).namespaces == {("users", "u1"): 1}
    assert _tenant_rows(dynamo) == []
