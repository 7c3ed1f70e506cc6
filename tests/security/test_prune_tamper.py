"""Attacks on the pruner and on the head of a thread (``integrity=``).

A writer of the storage alters a record in the region a ``keep_latest`` trim
would remove (a body byte, a metadata byte, a pending write, a parent pointer,
a blanked channel value, a checkpoint deleted from the middle). A pruner that
signed tombstones over that region would make ``verify`` pass afterwards: the
pruner must check what it trims first. Each test asserts, on every backend:
the tampered thread is not trimmed, the run reports the broken link (API
report, ``IntegrityError`` of ``prune()``, the CLI's ``BROKEN`` lines and exit
code 1), ``verify`` still fails, and an unaltered thread of the same run is
trimmed and verifies.

Truncation: removing a thread's newest checkpoints leaves a chain that holds
(the documented limit); a head exported with ``verify --print-heads --json``
and checked with ``--heads`` / ``--expect-head`` detects it.

Stores are built through real LangGraph graphs (``tests.integrity_helpers``)
and altered with the backends' own clients (psycopg, redis-py, boto3).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ormsgpack
import pytest

from langgraph_durable import Retention
from langgraph_durable._core.audit import Head
from langgraph_durable.cli import main
from langgraph_durable.errors import IntegrityError
from tests.effects.conftest import BACKENDS, make_spec
from tests.helpers import cli_target
from tests.integrity_helpers import (
    LONG,
    TENANT,
    Built,
    Raw,
    _config,
    build_store,
    chat_graph,
    flip,
    flip_body,
    open_raw,
)
from tests.redaction_helpers import SaverSpec, _classes

KEY = hashlib.sha256(b"lgd prune tamper tests: the chain key").digest()
KEEP_LATEST = Retention(strategy="keep_latest", keep=1)


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


@contextmanager
def saver_of(spec: SaverSpec) -> Iterator[Any]:
    cls = _classes(spec.backend)[0]
    with cls.from_conn_string(spec.conn, integrity=KEY, **spec.kwargs) as saver:
        saver.setup()
        yield saver


@pytest.fixture
def built(spec: SaverSpec) -> Built:
    """Thread A (a chat with a fork) and thread B (paused), written with the chain key."""
    with saver_of(spec) as saver:
        return build_store(saver)


def cli(
    spec: SaverSpec, capsys: pytest.CaptureFixture[str], monkeypatch: Any, *args: str
) -> tuple[int, str, str]:
    monkeypatch.setenv("LGD_INTEGRITY_KEY", KEY.hex())
    capsys.readouterr()
    code = main([args[0], *cli_target(spec), *args[1:]])
    out, err = capsys.readouterr()
    return code, out, err


def ids_of(saver: Any, thread: str) -> set[str]:
    return {t.config["configurable"]["checkpoint_id"] for t in saver.list(_config(thread))}


def stored(spec: SaverSpec, thread: str, ids: list[str]) -> set[str]:
    """Which of ``ids`` are stored (raw: a tampered thread does not read back)."""
    with open_raw(spec, thread) as raw:
        return {c for c in ids if raw.checkpoint_exists(c)}


# ---- the edits: each in the region keep_latest (1) removes --------------------------------


def _relink(spec: SaverSpec, raw: Raw, cid: str, parent: str) -> None:
    """Point ``cid``'s stored parent at ``parent`` (the clear pointer each backend keeps)."""
    if spec.backend == "postgres":
        raw._update(  # type: ignore[attr-defined]
            f"UPDATE {raw.s}.checkpoints SET parent_checkpoint_id = %s "  # type: ignore[attr-defined]
            "WHERE tenant_id = %s AND thread_id = %s AND checkpoint_ns = %s "
            "AND checkpoint_id = %s",
            parent,
            raw.tenant,
            raw.thread,
            raw.ns,
            cid,
        )
    elif spec.backend == "redis":
        field = raw._field(cid)  # type: ignore[attr-defined]
        header = list(ormsgpack.unpackb(raw.r.hget(raw.h, field)))  # type: ignore[attr-defined]
        header[1] = parent
        raw.r.hset(raw.h, field, ormsgpack.packb(header))  # type: ignore[attr-defined]
    else:
        item = raw._get(raw._pointer(cid))  # type: ignore[attr-defined]
        item["p"] = {"S": parent}
        raw.client.put_item(TableName=raw.table, Item=item)  # type: ignore[attr-defined]


def _blank(spec: SaverSpec, raw: Raw, channel: str, version: str) -> None:
    """Blank a channel value: type marker "empty", payload removed (DynamoDB: keys only)."""
    if spec.backend == "postgres":
        raw._update(  # type: ignore[attr-defined]
            f"UPDATE {raw.s}.blobs SET type = 'empty', blob = NULL "  # type: ignore[attr-defined]
            "WHERE tenant_id = %s AND thread_id = %s AND checkpoint_ns = %s "
            "AND channel = %s AND version = %s",
            raw.tenant,
            raw.thread,
            raw.ns,
            channel,
            version,
        )
    elif spec.backend == "redis":
        field = raw._blob_field(channel, version)  # type: ignore[attr-defined]
        assert raw.r.hexists(raw.b, field)  # type: ignore[attr-defined]
        raw.r.hset(raw.b, field, ormsgpack.packb(["empty", None]))  # type: ignore[attr-defined]
    else:
        sk = raw.items.blob_sk(raw.ns, channel, version)  # type: ignore[attr-defined]
        item = raw._get(sk)  # type: ignore[attr-defined]
        raw.client.put_item(  # type: ignore[attr-defined]
            TableName=raw.table,  # type: ignore[attr-defined]
            Item={"pk": item["pk"], "sk": item["sk"]},
        )


EDITS = ("body", "metadata", "write", "relink", "blank", "deleted")


def tamper(spec: SaverSpec, built: Built, what: str) -> str:
    """Alter thread A in the region a keep_latest trim removes; the checkpoint a
    broken-link report must name."""
    newest = built.ids[0]
    with open_raw(spec, built.a) as raw:
        if what == "write":
            cid = built.with_writes()
            assert cid != newest
            task, idx = raw.write_keys(cid)[0]
            raw.set_write(cid, task, idx, flip(raw.write(cid, task, idx)))
            return cid
        cid = built.middle()
        assert cid != newest
        if what == "body":
            raw.set_body(cid, flip_body(raw.body(cid)))
        elif what == "metadata":
            raw.set_metadata(cid, flip(raw.metadata(cid)))
        elif what == "relink":
            oldest = built.ids[-1]
            assert built.parent(cid) != oldest
            _relink(spec, raw, cid, oldest)
        elif what == "blank":
            version = built.tuple(cid).checkpoint["channel_versions"]["messages"]
            _blank(spec, raw, "messages", str(version))
        else:
            assert what == "deleted"
            (child,) = built.children(cid)
            raw.delete_checkpoint(cid)
            return child  # the child names its missing parent
        return cid


def _named(broken: list[Any], thread: str, cid: str) -> None:
    assert broken, "no broken link reported"
    assert {(b.tenant, b.thread) for b in broken} == {(TENANT, thread)}, broken
    assert cid in {b.checkpoint_id for b in broken}, (cid, broken)
    assert all(b.reason for b in broken)


# ---- 1. the pruner refuses to sign over a broken link ------------------------------------


@pytest.mark.parametrize("what", EDITS)
def test_trim_refuses_to_sign_over_tampering(
    spec: SaverSpec, built: Built, what: str, capsys: Any, monkeypatch: Any
) -> None:
    victim = tamper(spec, built, what)
    with saver_of(spec) as saver:
        before_a = stored(spec, built.a, built.ids)
        assert len(before_a) >= len(built.ids) - 1
        before_b = ids_of(saver, built.b)
        assert len(before_b) > 1
        assert not saver.verify(thread_id=built.a).ok  # the tampering is there to be seen
        # the API: the pruner's report names the broken link; the other thread is trimmed
        report = saver.prune_expired(KEEP_LATEST)
        assert report.refused == 1 and report.trimmed == 1, report
        _named(report.broken, built.a, victim)
        assert report.as_dict()["refused"] == 1
        assert stored(spec, built.a, built.ids) == before_a  # not trimmed, nothing signed
        after_b = ids_of(saver, built.b)
        assert 0 < len(after_b) < len(before_b)
        assert saver.verify(thread_id=built.b).ok
        assert not saver.verify(thread_id=built.a).ok
        # prune(thread_ids) raises, naming it
        with pytest.raises(IntegrityError, match="not trimmed") as info:
            saver.prune([built.a], strategy="keep_latest")
        assert victim in str(info.value) and built.a in str(info.value)
        assert stored(spec, built.a, built.ids) == before_a
    if what != "body":  # the command line runs the same check: one edit shows it (time)
        return
    # the command line: exit 1, the broken link on stderr (and in the JSON summary)
    code, out, err = cli(spec, capsys, monkeypatch, "prune", "--keep", "1")
    assert code == 1, out + err
    lines = [line for line in err.splitlines() if line.startswith("BROKEN ")]
    assert any(f"thread='{built.a}'" in ln and f"checkpoint={victim}" in ln for ln in lines), err
    assert "not trimmed" in err, err
    code, out, err = cli(spec, capsys, monkeypatch, "prune", "--keep", "1", "--json")
    assert code == 1, out + err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["refused"] == 1, summary
    assert victim in {b["checkpoint_id"] for b in summary["broken"]}, summary
    code, out, err = cli(spec, capsys, monkeypatch, "verify", "--thread", built.a)
    assert code == 1 and f"checkpoint={victim}" in out, out + err
    code, out, err = cli(spec, capsys, monkeypatch, "verify", "--thread", built.b)
    assert code == 0, out + err
    assert stored(spec, built.a, built.ids) == before_a


async def test_async_trim_refuses_to_sign_over_tampering(spec: SaverSpec, built: Built) -> None:
    victim = tamper(spec, built, "body")
    cls = _classes(spec.backend)[1]
    before = stored(spec, built.a, built.ids)
    async with cls.from_conn_string(spec.conn, integrity=KEY, **spec.kwargs) as saver:
        report = await saver.aprune_expired(KEEP_LATEST)
        assert report.refused == 1 and report.trimmed == 1, report
        _named(report.broken, built.a, victim)
        with pytest.raises(IntegrityError, match="not trimmed"):
            await saver.aprune([built.a], strategy="keep_latest")
        assert stored(spec, built.a, built.ids) == before
        assert not (await saver.averify(thread_id=built.a)).ok
        assert (await saver.averify(thread_id=built.b)).ok


def test_untampered_trim_still_signs(
    spec: SaverSpec, built: Built, capsys: Any, monkeypatch: Any
) -> None:
    """The check passes an intact history: both threads trimmed, exit 0, verify holds."""
    code, out, err = cli(spec, capsys, monkeypatch, "prune", "--keep", "1", "--json")
    assert code == 0, out + err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["trimmed"] == 2 and summary["refused"] == 0, summary
    assert summary["broken"] == []
    code, out, err = cli(spec, capsys, monkeypatch, "verify")
    assert code == 0, out + err
    # a second trim over a region that now starts at a tombstone checks and signs too
    with saver_of(spec) as saver:
        chat_graph(saver).invoke({"messages": [("user", f"more: {LONG}")]}, _config(built.a))
        report = saver.prune_expired(KEEP_LATEST)
        assert report.refused == 0 and report.trimmed >= 1, report
        assert saver.verify().ok


# ---- 2. verify: a blanked value under a chained checkpoint ---------------------------------


def test_verify_names_a_blanked_value(
    spec: SaverSpec, built: Built, capsys: Any, monkeypatch: Any
) -> None:
    """The digest binds the (channel, version) a checkpoint references: a value whose
    type marker was set to "empty" and payload removed is no value for it."""
    cid = tamper(spec, built, "blank")
    code, out, err = cli(spec, capsys, monkeypatch, "verify", "--thread", built.a)
    assert code == 1, out + err
    line = next(ln for ln in out.splitlines() if f"checkpoint={cid}" in ln)
    assert "channel 'messages'" in line and "missing or blanked" in line, line


# ---- 3. truncation and anchored heads -------------------------------------------------------


def test_truncation_is_caught_by_an_anchored_head(
    spec: SaverSpec, built: Built, capsys: Any, monkeypatch: Any, tmp_path: Path
) -> None:
    heads = tmp_path / "heads.jsonl"
    code, out, err = cli(
        spec, capsys, monkeypatch, "verify", "--thread", built.a, "--print-heads", "--json"
    )
    assert code == 0, out + err
    heads.write_text(out)
    (head,) = [json.loads(ln)["head"] for ln in out.splitlines() if '"head"' in ln]
    newest = built.ids[0]
    assert head["checkpoint_id"] == newest and head["thread"] == built.a, head
    # the text form prints the same digest
    code, out, err = cli(spec, capsys, monkeypatch, "verify", "--thread", built.a, "--print-heads")
    assert code == 0 and f"checkpoint={newest} digest={head['digest']}" in out, out
    # the thread goes on, and is trimmed by a signed trim: the anchor still holds
    with saver_of(spec) as saver:
        chat_graph(saver).invoke({"messages": [("user", f"later: {LONG}")]}, _config(built.a))
        assert saver.verify(heads=[Head.from_json(head)]).ok
    code, out, err = cli(spec, capsys, monkeypatch, "verify", "--heads", str(heads))
    assert code == 0, out + err
    code, out, err = cli(spec, capsys, monkeypatch, "prune", "--keep", "1")
    assert code == 0, out + err
    with saver_of(spec) as saver:
        assert newest not in ids_of(saver, built.a)
    code, out, err = cli(spec, capsys, monkeypatch, "verify", "--heads", str(heads))
    assert code == 0, out + err
    # now the attack: the checkpoints from the anchored head on are removed
    with saver_of(spec) as saver:
        chat_graph(saver).invoke({"messages": [("user", f"again: {LONG}")]}, _config(built.a))
        left = sorted(ids_of(saver, built.a))
    latest = left[-1]
    assert len(left) >= 2
    code, out, err = cli(
        spec, capsys, monkeypatch, "verify", "--thread", built.a, "--print-heads", "--json"
    )
    heads.write_text(out)
    (head,) = [json.loads(ln)["head"] for ln in out.splitlines() if '"head"' in ln]
    assert head["checkpoint_id"] == latest
    with open_raw(spec, built.a) as raw:
        raw.delete_checkpoint(latest)
    code, out, err = cli(spec, capsys, monkeypatch, "verify")
    assert code == 0, out + err  # the documented limit: the chain alone cannot tell
    code, out, err = cli(spec, capsys, monkeypatch, "verify", "--heads", str(heads))
    assert code == 1, out + err
    line = next(ln for ln in out.splitlines() if ln.startswith("BROKEN "))
    assert f"thread='{built.a}'" in line and f"checkpoint={latest}" in line, line
    assert "truncated" in line, line
    code, out, err = cli(
        spec, capsys, monkeypatch, "verify", "--thread", built.a, "--expect-head", head["digest"]
    )
    assert code == 1 and "anchored head digest" in out, out + err
    # a head of a thread removed whole is reported too
    code, out, err = cli(
        spec, capsys, monkeypatch, "verify", "--thread", built.b, "--print-heads", "--json"
    )
    b_heads = tmp_path / "b.jsonl"
    b_heads.write_text(out)
    with saver_of(spec) as saver:
        saver.delete_thread(built.b)
    code, out, err = cli(spec, capsys, monkeypatch, "verify", "--heads", str(b_heads))
    assert code == 1 and "removed whole" in out, out + err


def test_expect_head_passes_while_the_head_is_there(
    spec: SaverSpec, built: Built, capsys: Any, monkeypatch: Any
) -> None:
    with saver_of(spec) as saver:
        got: list[Head] = []
        assert saver.verify(thread_id=built.a, on_head=got.append).ok
    (head,) = got
    code, out, err = cli(
        spec, capsys, monkeypatch, "verify", "--thread", built.a, "--expect-head", head.digest.hex()
    )
    assert code == 0, out + err
    wrong = bytes(32).hex()
    code, out, err = cli(
        spec, capsys, monkeypatch, "verify", "--thread", built.a, "--expect-head", wrong
    )
    assert code == 1, out + err


def test_head_flags_are_checked(
    spec: SaverSpec, capsys: Any, monkeypatch: Any, tmp_path: Path
) -> None:
    for args in (
        ("--expect-head", "ab" * 32),  # no --thread
        ("--thread", "t", "--expect-head", "zz"),
        ("--thread", "t", "--expect-head", "ab"),
        ("--heads", str(tmp_path / "missing.jsonl")),
    ):
        code, out, err = cli(spec, capsys, monkeypatch, "verify", *args)
        assert code == 2, (args, out, err)
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"command":"verify"}\n')
    code, out, err = cli(spec, capsys, monkeypatch, "verify", "--heads", str(empty))
    assert code == 2 and "no head" in err, out + err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"head":{"tenant":"t"}}\n')
    code, out, err = cli(spec, capsys, monkeypatch, "verify", "--heads", str(bad))
    assert code == 2 and "line 1" in err, out + err
