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
  one line of ours.
"""

from __future__ import annotations

import base64
import json
import os
from collections import Counter
from typing import Any

import pytest
from langgraph.store.base import PutOp

from langgraph_durable.cli import main
from tests.cli.store_helpers import Item, open_spec_store, raw_items
from tests.effects.conftest import BACKENDS, make_spec
from tests.helpers import cfg, cli_target, put_chain
from tests.redaction_helpers import SaverSpec, open_saver

FULL = os.environ.get("LGD_FORGET_FULL") == "1"
#: Namespaces and items per namespace of the tenant: the issue's figures under
#: LGD_FORGET_FULL=1; else 300 items, and on DynamoDB (moto: ~0.05 s a put, ~0.5 s a
#: namespace deleted) 30, which keeps each backend's run to a few seconds.
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
    assert raw_items(spec) == after - left  # only the other tenant's items are left
    assert {t for t, _ns, _k in raw_items(spec)} == {OTHER}
    assert len(raw_items(spec)) == count
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
