"""The effect journal under envelope encryption and PII redaction, on every backend.

A journal entry holds a call's arguments (the request ``{"name", "args_digest",
"args"}``) and its result, sealed by the saver's record pipeline like any
checkpoint payload (kind ``effect``, channel ``"__effect__"``). These tests run
a graph whose node calls an ``@idempotent`` mail sender with canary arguments
(an e-mail address and two unique texts) that answers with canaries of its own
(a receipt and a reply-to address). The graph's state never holds a canary, so
whatever the raw storage shows of them comes from the journal. Then they:

- dump the backend's raw storage (every Postgres row of the test's schema,
  every Redis key of its prefix, every DynamoDB item of its table) and look for
  the canaries raw, in hex and in base64: none with encryption, all of them
  without it (so the scan does see the entries);
- tamper with the stored results directly in the database (swap two entries'
  results, flip one bit, move an entry's result to another thread) and check
  that a replay raises ``DecryptionError`` instead of returning a wrong result,
  and that a later replay, once the bytes are restored, reuses the result;
- copy an encrypted thread (``copy_thread`` re-seals every entry for the
  target) and replay in the copy after the source is deleted;
- redact with ``mask``, ``pseudonymize`` and ``tokenize`` (alone and under
  encryption): no e-mail in storage, the function still gets the original,
  and the journal (entries and replays) gives back what the mode stores;
- crypto-shred the tenant: the entries no longer open.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from psycopg import sql
from typing_extensions import TypedDict

from langgraph_durable._core.effects import request_identity
from langgraph_durable.dynamodb._ops import EFFECT_PREFIX, thread_pk
from langgraph_durable.effects import idempotent
from langgraph_durable.errors import DecryptionError, DurableError
from langgraph_durable.protect import IdentityPipeline, RedactionPipeline
from langgraph_durable.redis._ops import KeyLayout
from tests.dynamodb.helpers import make_client, raw_items, table_dump
from tests.effects.runner import Runner
from tests.encryption_helpers import canary_forms, flip_bit, local_encryption
from tests.helpers import cfg
from tests.postgres.test_encryption import dump_schema
from tests.redaction_helpers import MODES, SaverSpec
from tests.redis.test_encryption import dump_prefix

TENANT = "default"


# ---- canaries and the graph that journals them ---------------------------------------


def _letters(hex_tag: str) -> str:
    """A hex tag with its digits turned into letters (``g``..``p``), so no number
    detector (card, phone, IBAN) can fire on a canary: only the e-mails are PII."""
    return "".join(chr(ord("g") + int(c)) if c.isdigit() else c for c in hex_tag)


class Canaries:
    """Unique strings of one test: the call's arguments and its result."""

    def __init__(self) -> None:
        tag = _letters(uuid.uuid4().hex[:12])
        self.email = f"canary.{tag}@example.com"  # argument ``to``
        self.bodies = (f"canary-text-{tag}-one", f"canary-text-{tag}-two")  # argument ``body``
        self.receipt = f"canary-receipt-{tag}"  # in the result
        self.reply_email = f"canary.reply.{tag}@example.org"  # in the result

    def reply(self, body: str) -> str:
        """What the mail sender returns for ``body`` (no argument canary in it)."""
        return f"{self.receipt}-{self.bodies.index(body) + 1} replies to {self.reply_email}"

    def all(self) -> list[str]:
        return [self.email, *self.bodies, self.receipt, self.reply_email]

    def hits(self, dump: bytes) -> list[str]:
        """The canaries ``dump`` holds in any form (raw, hex, base64)."""
        return [c for c in self.all() if any(form in dump for form in canary_forms(c))]


class Mailer:
    """An ``@idempotent`` mail sender; records what it received and what the node got back.

    Args:
        canaries: The test's canaries.
        use_async: Wrap an async function (the async wrapper) instead of a sync one.
    """

    def __init__(self, canaries: Canaries, use_async: bool = False, **options: Any) -> None:
        self.canaries = canaries
        self.received: list[tuple[str, str]] = []  # executions: the arguments it got
        self.runs: list[list[str]] = []  # node executions: what the calls returned

        def send_mail(to: str, body: str) -> str:
            self.received.append((to, body))
            return canaries.reply(body)

        async def asend_mail(to: str, body: str) -> str:
            return send_mail(to, body)

        wrap = idempotent(name="send_mail", **options)
        self.send = wrap(asend_mail if use_async else send_mail)

    def expected_received(self) -> list[tuple[str, str]]:
        return [(self.canaries.email, body) for body in self.canaries.bodies]

    def expected_run(self) -> list[str]:
        return [self.canaries.reply(body) for body in self.canaries.bodies]


class Flow(TypedDict, total=False):
    ready: bool
    sent: int


def mail_graph(mailer: Mailer, checkpointer: Any, use_async: bool = False) -> Any:
    """START -> prepare -> send -> END; ``send`` mails each body to the canary address.

    The state holds no canary: only the journal does.
    """
    c = mailer.canaries

    def send(state: Flow) -> dict[str, Any]:
        out = [mailer.send(c.email, body) for body in c.bodies]
        mailer.runs.append(out)
        return {"sent": len(out)}

    async def asend(state: Flow) -> dict[str, Any]:
        out = [await mailer.send(c.email, body) for body in c.bodies]
        mailer.runs.append(out)
        return {"sent": len(out)}

    builder = StateGraph(Flow)
    builder.add_node("prepare", lambda state: {"ready": True})
    builder.add_node("send", asend if use_async else send)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "send")
    builder.add_edge("send", END)
    return builder.compile(checkpointer=checkpointer)


def run_mail(runner: Runner, thread: str, **options: Any) -> tuple[Mailer, Any]:
    """A fresh mailer (``@idempotent`` options) and graph on ``runner``; the thread run
    to its end."""
    mailer = Mailer(runner_canaries(runner), runner.is_async, **options)
    graph = mail_graph(mailer, runner.saver, runner.is_async)
    assert runner.invoke(graph, {}, cfg(thread)) == {"ready": True, "sent": 2}
    assert mailer.received == mailer.expected_received()
    assert mailer.runs == [mailer.expected_run()]
    return mailer, graph


def runner_canaries(runner: Runner) -> Canaries:
    """One set of canaries per runner (every thread of a test shares them)."""
    canaries = getattr(runner, "_canaries", None)
    if canaries is None:
        canaries = Canaries()
        runner._canaries = canaries  # type: ignore[attr-defined]
    return canaries


def replay(runner: Runner, graph: Any, thread: str) -> Any:
    """Time travel: run ``thread`` again from the (latest) checkpoint before ``send``."""
    before = next(s for s in runner.history(graph, cfg(thread)) if s.next == ("send",))
    return runner.invoke(graph, None, before.config)


def views(entries: list[Any]) -> list[tuple[Any, ...]]:
    """What the journal shows of each entry, in a stable order."""
    return sorted(
        (e.name, e.state, e.outcome, e.arguments["body"], e.arguments["to"], e.result)
        for e in entries
    )


def expected_views(c: Canaries, to: str | None = None, reply: Any = None) -> list[tuple[Any, ...]]:
    """The two entries of one ``send`` run (``to``/``reply``: as the journal shows them)."""
    show = reply or (lambda text: text)
    return sorted(
        ("send_mail", "done", "ok", body, to or c.email, show(c.reply(body))) for body in c.bodies
    )


# ---- raw storage -------------------------------------------------------------------------


class RawStore:
    """A backend's storage read and edited directly, as someone with database access could.

    Entries are named by their storage key (Postgres: effect id; Redis: the
    entry's hash; DynamoDB: the item's sort key), which is the same in every
    thread for the same call.
    """

    def __init__(self, request: pytest.FixtureRequest, spec: SaverSpec) -> None:
        self.backend = spec.backend
        self.client: Any = None
        if spec.backend == "postgres":
            self.url = request.getfixturevalue("pg_url")
            self.schema = spec.kwargs["schema"]
        elif spec.backend == "redis":
            self.client = redis.Redis.from_url(spec.conn)
            self.prefix = spec.kwargs["prefix"]
            self.layout = KeyLayout(self.prefix)
        else:
            self.client = make_client(request.getfixturevalue("dynamodb_endpoint"))
            self.table = request.getfixturevalue("dynamodb_table")

    def close(self) -> None:
        if self.backend == "redis":
            self.client.close()

    def dump(self) -> bytes:
        """Every byte the backend stores for the test (the existing dump helpers)."""
        if self.backend == "postgres":
            return dump_schema(self.url, self.schema)
        if self.backend == "redis":
            return dump_prefix(self.client, self.prefix)
        return table_dump(self.client, self.table)

    def _pg(self, statement: str, params: Any) -> list[Any]:
        query = sql.SQL(statement).format(sql.Identifier(self.schema))
        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def results(self, thread: str) -> dict[str, bytes]:
        """The stored result bytes of every finished entry of ``thread``, by entry."""
        if self.backend == "postgres":
            rows = self._pg(
                "SELECT effect_id, result FROM {}.effects WHERE tenant_id = %s "
                "AND thread_id = %s AND result IS NOT NULL",
                (TENANT, thread),
            )
            return {effect_id: bytes(data) for effect_id, data in rows}
        if self.backend == "redis":
            ids = self.client.smembers(self.layout.effects(TENANT, thread))
            keys = [self.layout.effect(TENANT, thread, i.decode()) for i in ids]
            found = {key: self.client.hget(key, "result") for key in keys}
            return {key.rsplit(":", 1)[1]: bytes(v) for key, v in found.items() if v}
        pk = thread_pk(TENANT, thread)
        return {
            item["sk"]["S"]: bytes(item["res"]["B"])
            for item in raw_items(self.client, self.table)
            if item["pk"]["S"] == pk and item["sk"]["S"].startswith(EFFECT_PREFIX)
            if "res" in item
        }

    def set_result(self, thread: str, entry: str, data: bytes) -> None:
        """Overwrite the stored result bytes of one entry (nothing else changes)."""
        if self.backend == "postgres":
            done = self._pg(
                "UPDATE {}.effects SET result = %s WHERE tenant_id = %s AND thread_id = %s "
                "AND effect_id = %s RETURNING effect_id",
                (data, TENANT, thread, entry),
            )
            assert len(done) == 1
        elif self.backend == "redis":
            key = self.layout.effect(TENANT, thread, entry)
            assert self.client.exists(key)
            self.client.hset(key, "result", data)
        else:
            self.client.update_item(
                TableName=self.table,
                Key={"pk": {"S": thread_pk(TENANT, thread)}, "sk": {"S": entry}},
                UpdateExpression="SET res = :r",
                ConditionExpression="attribute_exists(res)",
                ExpressionAttributeValues={":r": {"B": data}},
            )


@pytest.fixture
def store(request: pytest.FixtureRequest, spec: SaverSpec) -> Iterator[RawStore]:
    raw = RawStore(request, spec)
    yield raw
    raw.close()


# ---- 1. encryption: nothing readable at rest, everything intact through the journal ----


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plain"])
def test_journal_canaries_at_rest(
    spec: SaverSpec, store: RawStore, flavour: str, encrypted: bool
) -> None:
    """With encryption, no argument or result of an effect is in raw storage (raw, hex,
    base64), while ``EffectJournal.entries`` shows them intact and a time-travel
    replay reuses the recorded results. Without it, the same scan finds every
    canary: the entries are what the scan sees (the state holds none)."""
    kwargs = {"encryption": local_encryption()} if encrypted else {}
    with Runner(flavour, spec, **kwargs) as runner:
        mailer, graph = run_mail(runner, "t1")
        c = mailer.canaries
        assert views(runner.entries("t1")) == expected_views(c)
        assert c.hits(store.dump()) == ([] if encrypted else c.all())

        assert replay(runner, graph, "t1") == {"ready": True, "sent": 2}
        assert mailer.received == mailer.expected_received()  # nothing executed again
        assert mailer.runs == [mailer.expected_run()] * 2  # the recorded results
        # the replay records the results again at its own step (one step later)
        assert views(runner.entries("t1")) == sorted(expected_views(c) * 2)
        assert c.hits(store.dump()) == ([] if encrypted else c.all())


# ---- 2. tampering ---------------------------------------------------------------------


def _swap(store: RawStore) -> None:
    (a, data_a), (b, data_b) = sorted(store.results("t1").items())
    assert data_a != data_b
    store.set_result("t1", a, data_b)
    store.set_result("t1", b, data_a)


def _flip(store: RawStore) -> None:
    entry, data = sorted(store.results("t1").items())[0]
    store.set_result("t1", entry, flip_bit(data, len(data) // 2))


def _other_thread(store: RawStore) -> None:
    # the same call in another thread has the same entry id (and here the same result)
    victim, donor = store.results("t1"), store.results("t2")
    assert sorted(victim) == sorted(donor)
    entry = sorted(donor)[0]
    assert donor[entry] != victim[entry]  # ciphertexts differ: fresh nonce, thread key
    store.set_result("t1", entry, donor[entry])


TAMPERING = {"swap-two-results": _swap, "flip-one-bit": _flip, "from-another-thread": _other_thread}


@pytest.mark.parametrize("tamper", sorted(TAMPERING))
def test_tampered_results_fail_authentication(
    spec: SaverSpec, store: RawStore, tamper: str
) -> None:
    """A result edited in the database (two entries' results swapped, one bit flipped,
    or the same entry's result taken from another thread) fails authentication:
    the replay raises ``DecryptionError`` (not wrapped: the journal lookup raises it
    as is) and neither returns a result nor runs the effect again; listing the
    entries raises it too."""
    with Runner("sync", spec, encryption=local_encryption()) as runner:
        mailer, graph = run_mail(runner, "t1")
        if tamper == "from-another-thread":
            run_mail(runner, "t2")
        TAMPERING[tamper](store)
        with pytest.raises(DecryptionError, match="failed authentication"):
            replay(runner, graph, "t1")
        assert mailer.received == mailer.expected_received()
        assert mailer.runs == [mailer.expected_run()]
        with pytest.raises(DecryptionError, match="failed authentication"):
            runner.entries("t1")
        assert issubclass(DecryptionError, DurableError)


def test_replay_after_a_failed_lookup_still_reuses_the_result(
    spec: SaverSpec, store: RawStore
) -> None:
    """A time-travel replay claims the call at its new step, then looks up the
    original entry one step earlier. When that lookup raises (here
    ``DecryptionError`` from a tampered result), the new claim is given back, so
    once the stored bytes are restored the next replay finds the original and
    reuses its result instead of running the effect again."""
    with Runner("sync", spec, encryption=local_encryption()) as runner:
        mailer, graph = run_mail(runner, "t1", lease=0.3)
        original = store.results("t1")
        _flip(store)
        with pytest.raises(DecryptionError):
            replay(runner, graph, "t1")
        for entry, data in original.items():  # an operator restores the bytes
            store.set_result("t1", entry, data)
        assert [e.state for e in runner.entries("t1")].count("claimed") == 0  # given back
        assert replay(runner, graph, "t1") == {"ready": True, "sent": 2}
        assert mailer.runs[-1] == mailer.expected_run()
        assert mailer.received == mailer.expected_received()  # not executed again


# ---- 3. encrypted copy_thread -------------------------------------------------------------


def test_encrypted_copy_thread_reseals_the_journal(
    spec: SaverSpec, store: RawStore, flavour: str
) -> None:
    """``copy_thread`` with encryption opens every entry of the source and seals it
    again for the target: the target's entries open (same ids, arguments and
    results), their ciphertexts differ from the source's, a replay in the target
    reuses the results without executing, and all of it still holds once the
    source is deleted."""
    with Runner(flavour, spec, encryption=local_encryption()) as runner:
        mailer, graph = run_mail(runner, "src")
        c = mailer.canaries
        runner.saver_call("copy_thread", "src", "dst")
        source, target = runner.entries("src"), runner.entries("dst")
        assert views(target) == views(source) == expected_views(c)
        assert sorted(e.effect_id for e in target) == sorted(e.effect_id for e in source)
        raw_src, raw_dst = store.results("src"), store.results("dst")
        assert sorted(raw_dst) == sorted(raw_src)
        assert all(raw_dst[k] != raw_src[k] for k in raw_src)  # sealed again, not copied

        assert replay(runner, graph, "dst") == {"ready": True, "sent": 2}
        assert mailer.received == mailer.expected_received()
        assert mailer.runs == [mailer.expected_run()] * 2

        runner.saver_call("delete_thread", "src")
        assert runner.entries("src") == []
        assert views(runner.entries("dst")) == sorted(expected_views(c) * 2)
        assert replay(runner, graph, "dst") == {"ready": True, "sent": 2}
        assert mailer.received == mailer.expected_received()
        assert mailer.runs == [mailer.expected_run()] * 3
        assert c.hits(store.dump()) == []


# ---- 4. redaction ---------------------------------------------------------------------------


def _pseudonym(spec: SaverSpec, email: str) -> str:
    """The pseudonym the journal stores for ``email`` (tenant ``default``)."""
    redaction = spec.redaction()
    assert redaction is not None
    pipeline = RedactionPipeline(IdentityPipeline(JsonPlusSerializer()), redaction)
    identity = request_identity(TENANT, "any", "any")
    out = pipeline.open(identity, pipeline.seal(identity, email))
    assert re.fullmatch(r"<EMAIL:[0-9a-f]{12}>", out), out
    return str(out)


def _shown(spec: SaverSpec, c: Canaries) -> dict[str, str]:
    """Each e-mail canary as the journal gives it back under the spec's mode."""
    if spec.mode == "tokenize":  # restore=True: tokens are put back on read
        return {c.email: c.email, c.reply_email: c.reply_email}
    if spec.mode == "mask":
        return {c.email: "<EMAIL>", c.reply_email: "<EMAIL>"}
    assert spec.mode == "pseudonymize"
    return {e: _pseudonym(spec, e) for e in (c.email, c.reply_email)}


def _stored_marks(mode: str, dump: bytes, shown: dict[str, str]) -> int:
    """How many e-mail replacements of ``mode`` the raw dump holds."""
    if mode == "tokenize":
        return len(re.findall(rb"<EMAIL:tok_[0-9a-f]{16}>", dump))
    if mode == "mask":
        return dump.count(b"<EMAIL>")
    return sum(dump.count(v.encode()) for v in set(shown.values()))


def _check_redacted_journal(
    runner: Runner, spec: SaverSpec, store: RawStore, encrypted: bool
) -> None:
    assert spec.mode is not None
    mailer, graph = run_mail(runner, "t1")
    c = mailer.canaries
    # the function got the original arguments, the node the original result
    assert mailer.received == mailer.expected_received()
    assert mailer.runs == [mailer.expected_run()]

    shown = _shown(spec, c)

    def reply(text: str) -> str:
        return text.replace(c.reply_email, shown[c.reply_email])

    assert views(runner.entries("t1")) == expected_views(c, shown[c.email], reply)
    dump = store.dump()
    pii = [c.email, c.reply_email]
    assert [e for e in pii if e in c.hits(dump)] == []
    if encrypted:
        assert c.hits(dump) == []
    else:
        # the texts are not PII: stored as they are, so the scan does see the entries
        assert c.hits(dump) == [*c.bodies, c.receipt]
        assert _stored_marks(spec.mode, dump, shown) >= 4  # 2 requests, 2 results

    # a replay returns the result the journal holds: the mode's view of it
    assert replay(runner, graph, "t1") == {"ready": True, "sent": 2}
    assert mailer.received == mailer.expected_received()
    assert mailer.runs == [mailer.expected_run(), [reply(r) for r in mailer.expected_run()]]
    assert views(runner.entries("t1")) == sorted(expected_views(c, shown[c.email], reply) * 2)
    assert [e for e in pii if e in c.hits(store.dump())] == []


@pytest.mark.parametrize("mode", MODES)
def test_redacted_journal(spec: SaverSpec, store: RawStore, mode: str) -> None:
    """Redaction rules match the journal's channel ``__effect__`` (here ``Rule(mode=...)``
    on every channel): no e-mail of the arguments or the result reaches storage,
    where the mode's replacement is stored instead; the non-PII texts are stored
    as they are. The wrapped function still receives the original arguments and
    the first execution's node gets the function's own result. What the journal
    gives back (``entries`` and a replay's result) is the stored value as the
    mode reads it:

    - ``mask``: ``<EMAIL>`` (irreversible): a replay returns the masked text, not
      what the first execution returned;
    - ``pseudonymize``: ``<EMAIL:xxxxxxxxxxxx>`` (keyed HMAC, the same for the same
      address): a replay returns the pseudonymized text;
    - ``tokenize`` (``restore=True``): the token is stored, the original is kept in
      the record's encrypted vault and put back on read: a replay returns exactly
      the original result.
    """
    with Runner("sync", spec.with_mode(mode)) as runner:
        _check_redacted_journal(runner, runner.spec, store, encrypted=False)


@pytest.mark.parametrize("mode", MODES)
def test_redacted_and_encrypted_journal(spec: SaverSpec, store: RawStore, mode: str) -> None:
    """Redaction and encryption together (redact, then serialize, then encrypt), from
    an async saver: no canary at all at rest, and the journal gives back the same
    views as with redaction alone (``tokenize`` restores the originals; ``mask``
    and ``pseudonymize`` return their replacements)."""
    with Runner("async", spec.with_mode(mode), encryption=local_encryption()) as runner:
        _check_redacted_journal(runner, runner.spec, store, encrypted=True)


# ---- 5. crypto-shredding ------------------------------------------------------------------


def test_shredded_tenant_journal_no_longer_opens(
    spec: SaverSpec, store: RawStore, flavour: str
) -> None:
    """After ``shred_tenant``, the tenant's data keys are gone: listing the journal
    raises ``DecryptionError`` (a ``DurableError``) naming the shredded keys, and
    the entries' stored bytes are still there (only unreadable)."""
    with Runner(flavour, spec, encryption=local_encryption()) as runner:
        mailer, _graph = run_mail(runner, "t1")
        assert len(runner.entries("t1")) == 2
        stored = store.results("t1")
        assert runner.saver_call("shred_tenant", TENANT) >= 1
        with pytest.raises(DecryptionError, match="shredded"):
            runner.entries("t1")
        assert store.results("t1") == stored
        assert mailer.canaries.hits(store.dump()) == []
