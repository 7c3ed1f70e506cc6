"""Attacks on the effect journal by someone who can write the storage.

A graph's node calls two ``@idempotent`` effects, ``charge("a")`` (returns a
receipt) and ``charge("b")`` (raises ``ValueError``, recorded as a terminal
error), then interrupts. The entries are then edited in raw storage (Postgres
rows, Redis hashes, DynamoDB items) and the thread resumed: the node runs
again and reaches both effects, whose entries the claim reads back.

For each backend, sync and async, and each mode (plain, encryption,
encryption + integrity), every edit below must make the resume raise the
mode's error (``CorruptRecordError`` / ``DecryptionError`` /
``IntegrityError``) where the mode can see it, and in every case the side
effect must not run again (a counter in the effect function). The untouched
control resumes and replays. Deleting a whole entry is the documented limit:
the effect runs again.

Recorded errors are data: a stored entry naming a class outside the allowlist
replays as ``EffectFailedError`` carrying the name; nothing is imported or built.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import redis
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from psycopg import sql
from typing_extensions import TypedDict

from langgraph_durable._core.effects import audit_entry
from langgraph_durable.dynamodb._effects import effect_sk
from langgraph_durable.dynamodb._items import thread_pk
from langgraph_durable.effects import idempotent
from langgraph_durable.errors import (
    CorruptRecordError,
    DecryptionError,
    EffectFailedError,
    IntegrityError,
)
from langgraph_durable.redis._ops import KeyLayout
from tests.dynamodb.helpers import make_client
from tests.effects.conftest import BACKENDS, make_spec
from tests.effects.runner import Runner
from tests.encryption_helpers import flip_bit, local_encryption
from tests.helpers import cfg
from tests.redaction_helpers import SaverSpec

TENANT = "default"
INTEGRITY = os.urandom(32)

#: mode -> (saver options, the error a detected edit raises)
MODES: dict[str, tuple[Callable[[], dict[str, Any]], type[Exception]]] = {
    "plain": (lambda: {}, CorruptRecordError),
    "encryption": (lambda: {"encryption": local_encryption()}, DecryptionError),
    "encryption+integrity": (
        lambda: {"encryption": local_encryption(), "integrity": INTEGRITY},
        IntegrityError,
    ),
}


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# ---- the graph -----------------------------------------------------------------------


class State(TypedDict, total=False):
    out: list[str]


class Planted(Exception):
    """A class a planted record names; it must never be built from the record."""

    built = 0

    def __init__(self, *args: Any) -> None:
        Planted.built += 1
        super().__init__(*args)


class Charges:
    """The side effect: counts its executions per argument."""

    def __init__(self, use_async: bool) -> None:
        self.runs: Counter[str] = Counter()

        def charge(what: str) -> str:
            self.runs[what] += 1
            if what == "b":
                raise ValueError("card declined")
            return f"receipt-{what}"

        async def acharge(what: str) -> str:
            return charge(what)

        self.charge = idempotent(name="charge")(acharge if use_async else charge)


def graph(charges: Charges, checkpointer: Any, use_async: bool) -> Any:
    def outcome(call: Callable[[], str]) -> str:
        try:
            return call()
        except ValueError as exc:
            return f"error: {exc}"

    def act(state: State) -> dict[str, Any]:
        out = [outcome(lambda w=w: charges.charge(w)) for w in ("a", "b")]
        interrupt("confirm")
        return {"out": out}

    async def aact(state: State) -> dict[str, Any]:
        out = []
        for what in ("a", "b"):
            try:
                out.append(await charges.charge(what))
            except ValueError as exc:
                out.append(f"error: {exc}")
        interrupt("confirm")
        return {"out": out}

    builder = StateGraph(State)
    builder.add_node("act", aact if use_async else act)
    builder.add_edge(START, "act")
    return builder.compile(checkpointer=checkpointer)


EXPECTED = {"out": ["receipt-a", "error: card declined"]}


# ---- raw storage ---------------------------------------------------------------------

#: logical field -> (Postgres column, Redis hash field, DynamoDB attribute, DynamoDB type)
FIELDS = {
    "state": ("state", "state", "state", "S"),
    "outcome": ("outcome", "outcome", "outcome", "S"),
    "token": ("token", "token", "token", "N"),
    "attempt": ("attempt", "attempt", "attempt", "N"),
    "lease_until": ("lease_until", "lease_until", "lease_until", "N"),
    "result_type": ("result_type", "result_type", "res_t", "S"),
    "result": ("result", "result", "res", "B"),
    "request_type": ("request_type", "request_type", "req_t", "S"),
    "request": ("request", "request", "req", "B"),
}


class RawJournal:
    """One backend's journal entries read and written directly (``None`` removes a field)."""

    def __init__(self, request: pytest.FixtureRequest, spec: SaverSpec) -> None:
        self.backend = spec.backend
        if spec.backend == "postgres":
            self.url = request.getfixturevalue("pg_url")
            self.schema = spec.kwargs["schema"]
        elif spec.backend == "redis":
            self.client: Any = redis.Redis.from_url(spec.conn)
            self.layout = KeyLayout(spec.kwargs["prefix"])
        else:
            self.client = make_client(request.getfixturevalue("dynamodb_endpoint"))
            self.table = request.getfixturevalue("dynamodb_table")

    def close(self) -> None:
        if self.backend == "redis":
            self.client.close()

    def _pg(self, statement: str, params: Any) -> list[Any]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(sql.SQL(statement).format(sql.Identifier(self.schema)), params)
            return cur.fetchall() if cur.description else []

    def _key(self, thread: str, effect_id: str) -> dict[str, Any]:
        return {"pk": {"S": thread_pk(TENANT, thread)}, "sk": {"S": effect_sk(effect_id)}}

    def get(self, thread: str, effect_id: str) -> dict[str, Any]:
        if self.backend == "postgres":
            cols = ", ".join(f[0] for f in FIELDS.values())
            (row,) = self._pg(
                f"SELECT {cols} FROM {{}}.effects WHERE tenant_id = %s AND thread_id = %s "
                "AND effect_id = %s",
                (TENANT, thread, effect_id),
            )
            return dict(zip(FIELDS, row, strict=True))
        if self.backend == "redis":
            key = self.layout.effect(TENANT, thread, effect_id)
            values = self.client.hmget(key, [f[1] for f in FIELDS.values()])
            return dict(zip(FIELDS, values, strict=True))
        item = self.client.get_item(TableName=self.table, Key=self._key(thread, effect_id))["Item"]
        return {name: (item[f[2]][f[3]] if f[2] in item else None) for name, f in FIELDS.items()}

    def set(self, thread: str, effect_id: str, **values: Any) -> None:
        if self.backend == "postgres":
            assigns = ", ".join(f"{FIELDS[name][0]} = %s" for name in values)
            done = self._pg(
                f"UPDATE {{}}.effects SET {assigns} WHERE tenant_id = %s AND thread_id = %s "
                "AND effect_id = %s RETURNING effect_id",
                (*[_pg_value(v) for v in values.values()], TENANT, thread, effect_id),
            )
            assert len(done) == 1
        elif self.backend == "redis":
            key = self.layout.effect(TENANT, thread, effect_id)
            assert self.client.exists(key)
            for name, value in values.items():
                field = FIELDS[name][1]
                if value is None:
                    self.client.hdel(key, field)
                else:
                    self.client.hset(key, field, value if isinstance(value, bytes) else str(value))
        else:
            sets, removes, attr_values, names = [], [], {}, {}
            for i, (name, value) in enumerate(values.items()):
                _, _, attr, kind = FIELDS[name]
                names[f"#f{i}"] = attr
                if value is None:
                    removes.append(f"#f{i}")
                else:
                    sets.append(f"#f{i} = :v{i}")
                    attr_values[f":v{i}"] = {kind: value if kind != "N" else str(value)}
            update = ""
            if sets:
                update += "SET " + ", ".join(sets) + " "
            if removes:
                update += "REMOVE " + ", ".join(removes)
            params: dict[str, Any] = {
                "TableName": self.table,
                "Key": self._key(thread, effect_id),
                "UpdateExpression": update,
                "ExpressionAttributeNames": names,
                "ConditionExpression": "attribute_exists(sk)",
            }
            if attr_values:
                params["ExpressionAttributeValues"] = attr_values
            self.client.update_item(**params)

    def delete(self, thread: str, effect_id: str) -> None:
        if self.backend == "postgres":
            self._pg(
                "DELETE FROM {}.effects WHERE tenant_id = %s AND thread_id = %s AND effect_id = %s",
                (TENANT, thread, effect_id),
            )
        elif self.backend == "redis":
            self.client.delete(self.layout.effect(TENANT, thread, effect_id))
            self.client.srem(self.layout.effects(TENANT, thread), effect_id)
        else:
            self.client.delete_item(TableName=self.table, Key=self._key(thread, effect_id))


def _pg_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, str) and value.replace(".", "", 1).isdigit():
        return float(value)
    return value


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@pytest.fixture
def raw(request: pytest.FixtureRequest, spec: SaverSpec) -> Iterator[RawJournal]:
    journal = RawJournal(request, spec)
    yield journal
    journal.close()


# ---- the edits -----------------------------------------------------------------------

Ids = dict[str, str]  # "a" / "b" -> effect id


def flip_ok_to_error(raw: RawJournal, thread: str, ids: Ids) -> None:
    raw.set(thread, ids["a"], outcome="error")


def flip_error_to_ok(raw: RawJournal, thread: str, ids: Ids) -> None:
    raw.set(thread, ids["b"], outcome="ok")


def reset_to_expired_claim(raw: RawJournal, thread: str, ids: Ids) -> None:
    """Done -> claimed with a lease that ended long ago (a crash's look): re-runnable."""
    raw.set(thread, ids["a"], state="claimed", outcome=None, lease_until="1.0")


def reset_to_expired_claim_without_record(raw: RawJournal, thread: str, ids: Ids) -> None:
    """The same, and the done record deleted too."""
    raw.set(
        thread,
        ids["a"],
        state="claimed",
        outcome=None,
        lease_until="1.0",
        result=None,
        result_type=None,
    )


def reset_to_expired_claim_with_request(raw: RawJournal, thread: str, ids: Ids) -> None:
    """Done -> claimed, the record replaced by the entry's own sealed request (the one
    sealed payload of the entry that a completion does not replace)."""
    stored = raw.get(thread, ids["a"])
    raw.set(
        thread,
        ids["a"],
        state="claimed",
        outcome=None,
        lease_until="1.0",
        result_type=_text(stored["request_type"]),
        result=bytes(stored["request"]),
    )


def move_request(raw: RawJournal, thread: str, ids: Ids) -> None:
    """b's request (its call, step and checkpoint) moved onto a."""
    b = raw.get(thread, ids["b"])
    raw.set(thread, ids["a"], request_type=_text(b["request_type"]), request=bytes(b["request"]))


def edit_result(raw: RawJournal, thread: str, ids: Ids) -> None:
    data = bytes(raw.get(thread, ids["a"])["result"])
    raw.set(thread, ids["a"], result=flip_bit(data, len(data) // 2))


def edit_error(raw: RawJournal, thread: str, ids: Ids) -> None:
    data = bytes(raw.get(thread, ids["b"])["result"])
    raw.set(thread, ids["b"], result=flip_bit(data, len(data) - 1))


def move_result(raw: RawJournal, thread: str, ids: Ids) -> None:
    """b's recorded error (type and bytes) moved onto a, outcome included."""
    b = raw.get(thread, ids["b"])
    raw.set(
        thread,
        ids["a"],
        outcome="error",
        result_type=_text(b["result_type"]),
        result=bytes(b["result"]),
    )


def delete_record(raw: RawJournal, thread: str, ids: Ids) -> None:
    raw.set(thread, ids["a"], result=None, result_type=None)


def rewrite_attempt(raw: RawJournal, thread: str, ids: Ids) -> None:
    raw.set(thread, ids["a"], token="7", attempt="7")


#: edit -> modes in which the read must raise (in the others the edit is not visible,
#: and only "not run again" is asserted)
EDITS: dict[str, tuple[Callable[[RawJournal, str, Ids], None], frozenset[str]]] = {
    "flip_ok_to_error": (flip_ok_to_error, frozenset({"encryption", "encryption+integrity"})),
    "flip_error_to_ok": (flip_error_to_ok, frozenset({"encryption", "encryption+integrity"})),
    "reset_to_expired_claim": (reset_to_expired_claim, frozenset(MODES)),
    "reset_to_expired_claim_without_record": (
        reset_to_expired_claim_without_record,
        frozenset(MODES),
    ),
    "reset_to_expired_claim_with_request": (
        reset_to_expired_claim_with_request,
        frozenset({"encryption", "encryption+integrity"}),
    ),
    "edit_result": (edit_result, frozenset({"encryption", "encryption+integrity"})),
    "edit_error": (edit_error, frozenset({"encryption", "encryption+integrity"})),
    "move_result": (move_result, frozenset({"encryption", "encryption+integrity"})),
    "move_request": (move_request, frozenset({"encryption", "encryption+integrity"})),
    "delete_record": (delete_record, frozenset(MODES)),
    "rewrite_attempt": (rewrite_attempt, frozenset({"encryption", "encryption+integrity"})),
}


def _ids(runner: Runner, thread: str) -> Ids:
    entries = runner.entries(thread)
    assert sorted((e.state, e.outcome) for e in entries) == [("done", "error"), ("done", "ok")]
    return {e.arguments["what"]: e.effect_id for e in entries}


def _resume(runner: Runner, app: Any, thread: str) -> Any:
    return runner.invoke(app, Command(resume=True), cfg(thread))


@pytest.mark.parametrize("mode", list(MODES))
def test_a_tampered_journal_entry_raises_and_the_effect_does_not_run_again(
    spec: SaverSpec, raw: RawJournal, flavour: str, mode: str
) -> None:
    options, error = MODES[mode]
    with Runner(flavour, spec, **options()) as runner:
        charges = Charges(runner.is_async)
        app = graph(charges, runner.saver, runner.is_async)
        tag = uuid.uuid4().hex[:8]

        # the control: untouched entries replay, nothing runs again
        runner.invoke(app, {}, cfg(f"control-{tag}"))
        assert _resume(runner, app, f"control-{tag}") == EXPECTED
        assert charges.runs == {"a": 1, "b": 1}

        problems: list[str] = []
        for name, (edit, detected_in) in EDITS.items():
            thread = f"{name}-{tag}"
            charges.runs.clear()
            runner.invoke(app, {}, cfg(thread))
            edit(raw, thread, _ids(runner, thread))
            try:
                got: Any = _resume(runner, app, thread)
            except Exception as exc:  # noqa: BLE001 - judged below
                got = exc
            if mode in detected_in and not isinstance(got, error):
                problems.append(f"{name}: expected {error.__name__}, got {got!r}")
            if charges.runs != {"a": 1, "b": 1}:
                problems.append(f"{name}: the effect ran again ({dict(charges.runs)})")
        assert problems == []


def test_deleting_a_whole_entry_runs_the_effect_again(
    spec: SaverSpec, raw: RawJournal, flavour: str
) -> None:
    """The documented limit, in every mode: an entry that is gone is an effect never run."""
    options, _ = MODES["encryption+integrity"]
    with Runner(flavour, spec, **options()) as runner:
        charges = Charges(runner.is_async)
        app = graph(charges, runner.saver, runner.is_async)
        thread = f"gone-{uuid.uuid4().hex[:8]}"
        runner.invoke(app, {}, cfg(thread))
        raw.delete(thread, _ids(runner, thread)["a"])
        assert _resume(runner, app, thread) == EXPECTED
        assert charges.runs == {"a": 2, "b": 1}


@pytest.mark.parametrize("mode", ["encryption", "encryption+integrity"])
def test_a_live_claim_whose_lease_was_shortened_is_not_taken_over(
    spec: SaverSpec, raw: RawJournal, flavour: str, mode: str
) -> None:
    """A claim still running, its clear lease cut short: the next claim would take it over
    (and run the effect a second time) but the claim's sealed record no longer opens."""
    options, error = MODES[mode]
    with Runner(flavour, spec, **options()) as runner:
        journal = runner.journal()
        saver = runner.saver
        thread = f"lease-{uuid.uuid4().hex[:8]}"
        held = journal.run(saver._effect_claim_op(TENANT, thread, b"m", {"x": 1}, 1e12, 1.0, True))
        assert held.entry.won and held.entry.token == 1
        raw.set(thread, held.entry.effect_id, lease_until="2.0")
        with pytest.raises(error):
            journal.run(saver._effect_claim_op(TENANT, thread, b"m", {"x": 1}, 1e12, 5.0, True))
        assert _text(raw.get(thread, held.entry.effect_id)["token"]) == "1"  # not taken over
        # the control: a claim whose lease really ended is taken over (crash recovery)
        thread = f"lease-ok-{uuid.uuid4().hex[:8]}"
        journal.run(saver._effect_claim_op(TENANT, thread, b"m", {"x": 1}, 2.0, 1.0, True))
        taken = journal.run(saver._effect_claim_op(TENANT, thread, b"m", {"x": 1}, 9.0, 5.0, True))
        assert taken.entry.won and (taken.entry.token, taken.entry.attempt) == (2, 2)
        again = journal.run(saver._effect_claim_op(TENANT, thread, b"m", {"x": 1}, 9.0, 6.0, True))
        assert not again.entry.won and again.entry.lease_until == 9.0  # its record opens


def test_the_chain_key_alone_finds_every_detected_edit(spec: SaverSpec, raw: RawJournal) -> None:
    """``audit_entry`` (for ``verify``: the chain key, no data key) finds each edit the
    reads find with ``integrity=``, and nothing in untouched entries."""
    options, _ = MODES["encryption+integrity"]
    with Runner("sync", spec, **options()) as runner:
        saver = runner.saver
        app = graph(Charges(False), saver, False)
        tag = uuid.uuid4().hex[:8]

        def audit(thread: str) -> list[str]:
            entries = saver._run(saver._ops.effect_list(TENANT, thread))
            found = [audit_entry(saver.integrity, TENANT, thread, e) for e in entries]
            return [f for f in found if f is not None]

        def verified(thread: str) -> list[Any]:
            broken: list[Any] = []
            report = saver.verify(tenant_id=TENANT, thread_id=thread, on_broken=broken.append)
            assert report.broken == len(broken)
            return [b for b in broken if b.checkpoint_id.startswith("effect:")]

        runner.invoke(app, {}, cfg(f"control-{tag}"))
        assert audit(f"control-{tag}") == []
        assert verified(f"control-{tag}") == []
        missed, unverified = [], []
        for name, (edit, _detected) in EDITS.items():
            thread = f"audit-{name}-{tag}"
            runner.invoke(app, {}, cfg(thread))
            edit(raw, thread, _ids(runner, thread))
            if not audit(thread):
                missed.append(name)
            if not verified(thread):  # verify runs the same check over each thread
                unverified.append(name)
        assert missed == [] and unverified == []


# ---- planted error types ---------------------------------------------------------------


def test_a_planted_error_type_replays_as_effect_failed_error(
    spec: SaverSpec, raw: RawJournal, flavour: str
) -> None:
    """Plain mode (the only one where a record can be planted): a recorded error naming a
    class of an imported module, a module not imported, or a function, replays as
    ``EffectFailedError`` carrying the name; nothing is imported, built or called."""
    planted_module = f"lgd_planted_{uuid.uuid4().hex}"
    names = [
        f"{Planted.__module__}.{Planted.__qualname__}",
        f"{planted_module}.Boom",
        "os.system",
        "builtins.print",  # a builtin that is not an exception type
    ]
    with Runner(flavour, spec) as runner:
        charges = Charges(runner.is_async)
        app = graph(charges, runner.saver, runner.is_async)
        for i, name in enumerate(names):
            thread = f"planted-{i}-{uuid.uuid4().hex[:8]}"
            charges.runs.clear()
            runner.invoke(app, {}, cfg(thread))
            record = {"type": name, "message": "planted", "args": ["echo planted"]}
            type_, data = runner.saver.serde.dumps_typed(record)
            raw.set(thread, _ids(runner, thread)["b"], result_type=type_, result=data)
            with pytest.raises(EffectFailedError) as caught:
                _resume(runner, app, thread)
            assert caught.value.error_type == name
            assert charges.runs == {"a": 1, "b": 1}
    assert Planted.built == 0
    assert planted_module not in sys.modules


def test_an_allowlisted_error_replays_as_itself(spec: SaverSpec, flavour: str) -> None:
    """The control of the test above: ``ValueError`` (a builtin) comes back as itself."""
    with Runner(flavour, spec, **MODES["encryption+integrity"][0]()) as runner:
        charges = Charges(runner.is_async)
        app = graph(charges, runner.saver, runner.is_async)
        thread = f"allowed-{uuid.uuid4().hex[:8]}"
        runner.invoke(app, {}, cfg(thread))
        assert _resume(runner, app, thread) == EXPECTED  # "error: card declined" again
        assert charges.runs == {"a": 1, "b": 1}
