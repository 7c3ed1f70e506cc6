"""Tamper-evident history: ``langgraph-durable verify`` finds every kind of tampering.

The Done-when of the feature, on every backend: "altering one byte of a stored
checkpoint, deleting one from the middle of a thread, inserting a forged one,
or swapping two makes ``verify`` exit 1 and name the right checkpoint; an
untouched store (forks, pending writes, pruned threads included) exits 0".

Each test builds its store through real LangGraph graphs on a saver with
``integrity=`` (``tests.integrity_helpers.build_store``: a forked chat thread
with pending writes and blobs, and a thread paused on ``interrupt()``),
tampers with the raw records where the case asks (psycopg / redis-py / boto3,
``integrity_helpers.Raw``), and runs the CLI in-process (``cli.main``) with
the chain key in ``LGD_INTEGRITY_KEY``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from langgraph_durable import Retention
from langgraph_durable._core.chain import split_block
from langgraph_durable._core.records import Sealed
from langgraph_durable.cli import main
from langgraph_durable.errors import ChainKeyRequiredError, IntegrityError
from tests.effects.conftest import BACKENDS, make_spec
from tests.helpers import cli_target
from tests.integrity_helpers import (
    LONG,
    TENANT,
    Built,
    Raw,
    _config,
    abuild_store,
    build_store,
    chat_graph,
    flip,
    flip_body,
    open_raw,
)
from tests.redaction_helpers import SaverSpec, _classes

KEY = hashlib.sha256(b"lgd integrity tests: the chain key").digest()
WRONG_KEY = hashlib.sha256(b"lgd integrity tests: another key").digest()

_BROKEN = re.compile(
    r"^BROKEN tenant='(?P<tenant>[^']*)' thread='(?P<thread>[^']*)' ns='(?P<ns>[^']*)' "
    r"checkpoint=(?P<checkpoint>\S+): (?P<reason>.*)$"
)


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


# ---- savers and the CLI ---------------------------------------------------------------


@contextmanager
def saver_of(spec: SaverSpec, integrity: bytes | None = KEY) -> Iterator[Any]:
    cls = _classes(spec.backend)[0]
    with cls.from_conn_string(spec.conn, integrity=integrity, **spec.kwargs) as saver:
        saver.setup()
        yield saver


@pytest.fixture
def built(spec: SaverSpec) -> Built:
    """The store of every test: two threads written with the chain key."""
    with saver_of(spec) as saver:
        return build_store(saver)


def verify(
    spec: SaverSpec,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    *extra: str,
    key: bytes | None = KEY,
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``langgraph-durable verify`` on ``spec``'s store."""
    if key is None:
        monkeypatch.delenv("LGD_INTEGRITY_KEY", raising=False)
    else:
        monkeypatch.setenv("LGD_INTEGRITY_KEY", key.hex())
    capsys.readouterr()
    code = main(["verify", *cli_target(spec), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def broken_lines(out: str) -> list[dict[str, str]]:
    """The BROKEN lines of verify's text output, parsed."""
    found = []
    for line in out.splitlines():
        m = _BROKEN.match(line)
        if m:
            found.append(m.groupdict())
    return found


def broken_ids(out: str, thread: str) -> set[str]:
    lines = broken_lines(out)
    assert lines, f"no BROKEN line in:\n{out}"
    assert {(b["tenant"], b["thread"]) for b in lines} == {(TENANT, thread)}, out
    return {b["checkpoint"] for b in lines}


def verify_thread(
    spec: SaverSpec,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    thread: str,
) -> tuple[int, str]:
    code, out, err = verify(spec, capsys, monkeypatch, "--thread", thread)
    return code, out + err


# ---- 1. an untouched store ----------------------------------------------------------------


def test_untouched_store_verifies(
    spec: SaverSpec, built: Built, capsys: Any, monkeypatch: Any
) -> None:
    for thread in (built.a, built.b):
        code, out, err = verify(spec, capsys, monkeypatch, "--thread", thread)
        assert code == 0, out + err
        assert not broken_lines(out)
        assert "every chain holds" in out, out
    code, out, err = verify(spec, capsys, monkeypatch, "--thread", built.a, "--json")
    assert code == 0, out + err
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    summary = json.loads(lines[0])
    assert summary["ok"] is True and summary["broken"] == 0, summary
    assert summary["threads"] == 1 and summary["checkpoints"] == len(built.ids), summary
    # the whole store: no --thread
    code, out, err = verify(spec, capsys, monkeypatch, "--json")
    assert code == 0, out + err
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    summary = json.loads(lines[0])
    assert summary["ok"] is True and summary["threads"] == 2, summary
    assert summary["checkpoints"] > len(built.ids), summary
    code, out, err = verify(spec, capsys, monkeypatch)
    assert code == 0, out + err
    assert "every chain holds" in out and "in 2 threads" in out, out


# ---- 2. one byte altered ------------------------------------------------------------------

ALTERED = ("body", "blob", "write", "metadata")


def _alter(raw: Raw, built: Built, what: str) -> tuple[str, set[str], Callable[[], None]]:
    """Alter one byte of ``what`` of a checkpoint in the middle of thread A.

    Returns:
        The checkpoint, those verify must name (every checkpoint that
        references an altered blob), and a function that puts the byte back.
    """
    if what == "body":
        cid = built.middle()
        old = raw.body(cid)
        raw.set_body(cid, flip_body(old))
        return cid, {cid}, lambda: raw.set_body(cid, old)
    if what == "metadata":
        cid = built.middle()
        old = raw.metadata(cid)
        raw.set_metadata(cid, flip(old))
        return cid, {cid}, lambda: raw.set_metadata(cid, old)
    if what == "blob":
        cid = built.middle()
        version = built.tuple(cid).checkpoint["channel_versions"]["messages"]
        old = raw.blob("messages", version)
        raw.set_blob("messages", version, flip(old))
        users = {
            c
            for c in built.ids
            if built.tuple(c).checkpoint["channel_versions"].get("messages") == version
        }
        assert cid in users
        return cid, users, lambda: raw.set_blob("messages", version, old)
    assert what == "write"
    cid = built.with_writes()
    keys = raw.write_keys(cid)
    assert keys, cid
    task, idx = keys[0]
    old = raw.write(cid, task, idx)
    raw.set_write(cid, task, idx, flip(old))
    return cid, {cid}, lambda: raw.set_write(cid, task, idx, old)


def test_one_altered_byte_is_named(
    spec: SaverSpec, built: Built, capsys: Any, monkeypatch: Any
) -> None:
    """A checkpoint body, a channel blob, a pending write, metadata: one at a time."""
    with open_raw(spec, built.a) as raw, saver_of(spec) as saver:
        for what in ALTERED:
            cid, expected, undo = _alter(raw, built, what)
            code, out = verify_thread(spec, capsys, monkeypatch, built.a)
            assert code == 1, (what, out)
            named = broken_ids(out, built.a)
            assert cid in named, (what, out)
            if what == "blob":
                # every checkpoint that references the version, or a delta built on it
                assert expected <= named, out
                assert all("channel 'messages'" in b["reason"] for b in broken_lines(out)), out
            else:
                assert named == expected, (what, out)
            undo()
            report = saver.verify(thread_id=built.a)
            assert report.ok, (what, report)


# ---- 3. a checkpoint deleted from the middle ----------------------------------------------------


def test_deleted_checkpoint_names_child_and_missing_parent(
    spec: SaverSpec, built: Built, capsys: Any, monkeypatch: Any
) -> None:
    victim = built.middle()
    (child,) = built.children(victim)
    with open_raw(spec, built.a) as raw:
        raw.delete_checkpoint(victim)
        assert not raw.checkpoint_exists(victim)
    code, out = verify_thread(spec, capsys, monkeypatch, built.a)
    assert code == 1, out
    lines = broken_lines(out)
    assert {b["checkpoint"] for b in lines} == {child}, out
    assert victim in lines[0]["reason"] and "missing" in lines[0]["reason"], out
    # the same in JSON: one object per broken link, then the summary
    code, out, err = verify(spec, capsys, monkeypatch, "--thread", built.a, "--json")
    assert code == 1, out + err
    *found, summary = [json.loads(line) for line in out.strip().splitlines()]
    assert [f["broken"]["checkpoint_id"] for f in found] == [child], out
    assert found[0]["broken"]["thread"] == built.a and victim in found[0]["broken"]["reason"]
    assert summary["ok"] is False and summary["broken"] == 1, summary


def test_deleted_pending_write_names_the_checkpoint_that_covers_it(
    spec: SaverSpec, capsys: Any, monkeypatch: Any
) -> None:
    """Not in the list of the issue: a pending write removed under a checkpoint whose
    child was put after the write was stored (so the child's chain block covers it).

    Direct saver calls, in order: a LangGraph graph submits ``put_writes`` to its
    background executor and does not wait for it before the next ``put``, so
    whether a graph's child covers its parent's writes is a race.
    """
    thread = "covered"
    with saver_of(spec) as saver:
        first = saver.put(
            {"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
            {**empty_checkpoint(), "channel_values": {"note": LONG}},
            {"source": "input", "step": -1},
            {},
        )
        saver.put_writes(first, [("inbox", LONG), ("outbox", LONG)], "task-1")
        second = saver.put(
            first,
            {**empty_checkpoint(), "channel_values": {"note": LONG + "!"}},
            {"source": "loop", "step": 0},
            {},
        )
        assert saver.verify(thread_id=thread).ok
    cid, child = first["configurable"]["checkpoint_id"], second["configurable"]["checkpoint_id"]
    with open_raw(spec, thread) as raw:
        keys = raw.write_keys(cid)
        assert keys == [("task-1", 0), ("task-1", 1)], keys
        raw.delete_write(cid, "task-1", 1)
        assert raw.write_keys(cid) == [("task-1", 0)]
    code, out = verify_thread(spec, capsys, monkeypatch, thread)
    assert code == 1, out
    assert broken_ids(out, thread) == {child}, out
    assert "pending writes" in out and cid in out, out


def test_writes_stored_after_the_child_are_covered_by_the_grandchild(
    spec: SaverSpec, capsys: Any, monkeypatch: Any
) -> None:
    """LangGraph stores a step's writes after the checkpoint that follows it (``put``
    of the child, then ``put_writes`` of the parent): the grandchild's chain covers
    them, so deleting one is named."""
    thread = "grand"
    with saver_of(spec) as saver:
        cp = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        first = saver.put(cp, {**empty_checkpoint(), "id": str(uuid6())}, {"step": -1}, {})
        second = saver.put(first, {**empty_checkpoint(), "id": str(uuid6())}, {"step": 0}, {})
        saver.put_writes(first, [("inbox", LONG), ("outbox", LONG)], "task-1")
        third = saver.put(second, {**empty_checkpoint(), "id": str(uuid6())}, {"step": 1}, {})
        assert saver.verify(thread_id=thread).ok
    cid = first["configurable"]["checkpoint_id"]
    with open_raw(spec, thread) as raw:
        raw.delete_write(cid, "task-1", 0)
    code, out = verify_thread(spec, capsys, monkeypatch, thread)
    assert code == 1, out
    assert broken_ids(out, thread) == {third["configurable"]["checkpoint_id"]}, out
    assert "grandparent" in out and cid in out, out


@pytest.mark.parametrize("durability", ["sync", "async"])
async def test_a_graphs_concurrent_writes_keep_every_chain_whole(
    spec: SaverSpec, capsys: Any, monkeypatch: Any, durability: str
) -> None:
    """A graph writes a step's pending writes in the background, next to the next
    checkpoint's put: whatever a child covers is among its parent's stored writes
    (covered writes stored before the parent's own put ended included), and the
    thread verifies."""
    thread = f"graph-{durability}"
    cls = _classes(spec.backend)[1]
    async with cls.from_conn_string(spec.conn, integrity=KEY, **spec.kwargs) as saver:
        await saver.setup()
        chat = chat_graph(saver)
        for turn in range(3):
            await chat.ainvoke(
                {"messages": [HumanMessage(content=f"turn {turn}: {LONG}")]},
                _config(thread),
                durability=durability,
            )
        history = [t async for t in saver.alist(_config(thread))]
    assert len(history) >= 6
    with open_raw(spec, thread) as raw:
        for t in history:
            if not t.parent_config:
                continue
            parent = t.parent_config["configurable"]["checkpoint_id"]
            _inner, block = split_block(
                Sealed("x", raw.body(t.config["configurable"]["checkpoint_id"]))
            )
            assert block is not None
            assert set(block.covers) <= set(raw.write_keys(parent)), (block.covers, parent)
    code, out = verify_thread(spec, capsys, monkeypatch, thread)
    assert code == 0, out


# ---- 4. a forged checkpoint inserted -----------------------------------------------------------


@pytest.mark.parametrize("forgery", ["copy", "random"])
def test_inserted_forgery_is_named(
    spec: SaverSpec, built: Built, capsys: Any, monkeypatch: Any, forgery: str
) -> None:
    source = built.middle()
    forged = str(uuid6())
    with open_raw(spec, built.a) as raw:
        raw.copy_checkpoint(source, forged)
        if forgery == "random":
            raw.set_body(forged, os.urandom(len(raw.body(source))))
        assert raw.checkpoint_exists(forged)
    code, out = verify_thread(spec, capsys, monkeypatch, built.a)
    assert code == 1, out
    assert broken_ids(out, built.a) == {forged}, out


# ---- 5. two checkpoints swapped ----------------------------------------------------------------


@pytest.mark.parametrize("swap", ["bodies", "records"])
def test_swapped_checkpoints_are_both_named(
    spec: SaverSpec, built: Built, capsys: Any, monkeypatch: Any, swap: str
) -> None:
    a = built.middle()
    (b,) = built.children(a)
    with open_raw(spec, built.a) as raw:
        if swap == "bodies":
            raw.swap_bodies(a, b)
        else:
            raw.swap_records(a, b)
    code, out = verify_thread(spec, capsys, monkeypatch, built.a)
    assert code == 1, out
    named = broken_ids(out, built.a)
    assert {a, b} <= named, out
    # nothing far from the swap is blamed
    assert named <= {a, b, *built.children(b)}, out


# ---- 6. pruned and deleted threads -------------------------------------------------------------


def test_pruned_thread_still_verifies(
    spec: SaverSpec, built: Built, capsys: Any, monkeypatch: Any
) -> None:
    with saver_of(spec) as saver:
        saver.prune([built.a], strategy="keep_latest")
        left = list(saver.list({"configurable": {"thread_id": built.a}}))
    assert 0 < len(left) < len(built.ids)
    # the survivors whose parent was trimmed carry a tombstone naming it
    kept = {t.config["configurable"]["checkpoint_id"] for t in left}
    orphans = {
        t.config["configurable"]["checkpoint_id"]: t.parent_config["configurable"]["checkpoint_id"]
        for t in left
        if t.parent_config and t.parent_config["configurable"]["checkpoint_id"] not in kept
    }
    assert orphans, "keep_latest removed no parent of a survivor"
    with open_raw(spec, built.a) as raw:
        for cid, parent in orphans.items():
            _inner, block = split_block(Sealed("msgpack", raw.body(cid)))
            assert block is not None and block.tombstone is not None, cid
            assert block.tombstone.parent == parent
    code, out = verify_thread(spec, capsys, monkeypatch, built.a)
    assert code == 0, out
    code, out, err = verify(spec, capsys, monkeypatch)
    assert code == 0, out + err


def test_trim_without_the_chain_key_is_refused_and_removes_nothing(
    spec: SaverSpec, built: Built, capsys: Any, monkeypatch: Any
) -> None:
    """A pruner without the key would trim without tombstones and break the chain for good."""
    a = {"configurable": {"thread_id": built.a}}
    with saver_of(spec, integrity=None) as saver:
        with pytest.raises(ChainKeyRequiredError, match="chain key"):
            saver.prune([built.a], strategy="keep_latest")
        with pytest.raises(ChainKeyRequiredError):
            saver.prune_expired(
                Retention(idle=timedelta(seconds=1), strategy="keep_latest"),
                now=time.time() + 3600,
            )
    # the cron job without LGD_INTEGRITY_KEY: bad usage, says why, removes nothing
    monkeypatch.delenv("LGD_INTEGRITY_KEY", raising=False)
    time.sleep(1.1)
    capsys.readouterr()
    code = main(["prune", *cli_target(spec), "--idle", "1s", "--strategy", "keep-latest"])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "LGD_INTEGRITY_KEY" in out + err, out + err
    with saver_of(spec) as saver:
        assert len(list(saver.list(a))) == len(built.ids)
    code, out = verify_thread(spec, capsys, monkeypatch, built.a)
    assert code == 0, out
    # with the key the same command trims, and the thread still verifies
    monkeypatch.setenv("LGD_INTEGRITY_KEY", KEY.hex())
    code = main(["prune", *cli_target(spec), "--idle", "1s", "--strategy", "keep-latest"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    with saver_of(spec) as saver:
        assert 0 < len(list(saver.list(a))) < len(built.ids)
    code, out = verify_thread(spec, capsys, monkeypatch, built.a)
    assert code == 0, out


async def test_async_trim_without_the_chain_key_is_refused(spec: SaverSpec, built: Built) -> None:
    cls = _classes(spec.backend)[1]
    a = {"configurable": {"thread_id": built.a}}
    async with cls.from_conn_string(spec.conn, **spec.kwargs) as saver:
        with pytest.raises(ChainKeyRequiredError):
            await saver.aprune([built.a], strategy="keep_latest")
        with pytest.raises(ChainKeyRequiredError):
            await saver.aprune_expired(
                Retention(idle=timedelta(seconds=1), strategy="keep_latest"),
                now=time.time() + 3600,
            )
    async with cls.from_conn_string(spec.conn, integrity=KEY, **spec.kwargs) as saver:
        assert len([t async for t in saver.alist(a)]) == len(built.ids)
        await saver.aprune([built.a], strategy="keep_latest")
        assert 0 < len([t async for t in saver.alist(a)]) < len(built.ids)
        assert (await saver.averify(thread_id=built.a)).ok


def test_deleted_thread_verifies_and_is_gone(
    spec: SaverSpec, built: Built, capsys: Any, monkeypatch: Any
) -> None:
    with saver_of(spec) as saver:
        saver.delete_thread(built.a)
        assert saver.get_tuple({"configurable": {"thread_id": built.a}}) is None
    code, out = verify_thread(spec, capsys, monkeypatch, built.a)
    assert code == 0, out
    assert "Verified 0 checkpoints" in out, out
    code, out, err = verify(spec, capsys, monkeypatch, "--json")
    assert code == 0, out + err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["ok"] is True and summary["threads"] == 1, summary


# ---- 6b. delete_for_runs --------------------------------------------------------------------


def _put_runs(saver: Any, thread: str) -> dict[str, list[str]]:
    """Three runs of two checkpoints each, in one parent chain, a blob channel and a
    pending write on each: run id -> its checkpoint ids, oldest first."""
    made: dict[str, list[str]] = {}
    parent: str | None = None
    i = 0
    for r in ("r1", "r2", "r3"):
        for _k in range(2):
            cp = dict(empty_checkpoint())
            cp["channel_values"] = {"step": i, "payload": {"i": i, "text": LONG}}
            cp["channel_versions"] = {"step": f"{i + 1:032}.0", "payload": f"{i + 1:032}.0"}
            config: dict[str, Any] = {
                "configurable": {"thread_id": thread, "checkpoint_ns": "", "run_id": r}
            }
            if parent:
                config["configurable"]["checkpoint_id"] = parent
            stored = saver.put(config, cp, {"run_id": r, "step": i}, dict(cp["channel_versions"]))
            parent = stored["configurable"]["checkpoint_id"]
            saver.put_writes(stored, [("payload", {"w": i})], f"task-{i}")
            made.setdefault(r, []).append(parent)
            i += 1
    return made


def _runs_thread(spec: SaverSpec) -> tuple[str, dict[str, Any], dict[str, list[str]]]:
    """A new thread of :func:`_put_runs` (written with the chain key): (id, config, runs)."""
    thread = "runs-" + uuid6().hex[:8]
    with saver_of(spec) as saver:
        made = _put_runs(saver, thread)
    return thread, {"configurable": {"thread_id": thread}}, made


def test_deleting_a_middle_run_leaves_a_tombstone_and_verifies(
    spec: SaverSpec, capsys: Any, monkeypatch: Any
) -> None:
    """The first checkpoint of run r3 loses its parent (r2's last): it gets a tombstone."""
    thread, a, made = _runs_thread(spec)
    with saver_of(spec) as saver:
        saver.delete_for_runs(["r2"])
        left = [t.config["configurable"]["checkpoint_id"] for t in saver.list(a)]
        assert sorted(left) == sorted(made["r1"] + made["r3"])
        # the thread still reads and resumes from its latest checkpoint
        latest = saver.get_tuple(a)
        assert latest is not None and latest.checkpoint["channel_values"]["step"] == 5
        assert latest.pending_writes and latest.pending_writes[0][2] == {"w": 5}
        orphan = saver.get_tuple(
            {"configurable": {"thread_id": thread, "checkpoint_id": made["r3"][0]}}
        )
        assert orphan is not None and orphan.checkpoint["channel_values"]["step"] == 4
    with open_raw(spec, thread) as raw:
        _inner, block = split_block(Sealed("msgpack", raw.body(made["r3"][0])))
        assert block is not None and block.tombstone is not None
        assert block.tombstone.parent == made["r2"][1]
        assert block.tombstone.count == 2
        assert {block.tombstone.first, block.tombstone.last} == set(made["r2"])
        # the first run's checkpoints lost no parent: no tombstone
        _inner, block = split_block(Sealed("msgpack", raw.body(made["r1"][1])))
        assert block is not None and block.tombstone is None
    code, out = verify_thread(spec, capsys, monkeypatch, thread)
    assert code == 0, out
    # deleting the last run removes no parent of a survivor: nothing to sign
    with saver_of(spec) as saver:
        saver.delete_for_runs(["r3"])
        assert len(list(saver.list(a))) == 2
    code, out = verify_thread(spec, capsys, monkeypatch, thread)
    assert code == 0, out


def test_deleting_a_middle_run_without_the_chain_key_is_refused(
    spec: SaverSpec, capsys: Any, monkeypatch: Any
) -> None:
    """Without the key no tombstone can be signed: nothing is deleted, the chain holds."""
    thread, a, made = _runs_thread(spec)
    with saver_of(spec, integrity=None) as saver:
        with pytest.raises(ChainKeyRequiredError, match="chain key"):
            saver.delete_for_runs(["r2"])
        assert len(list(saver.list(a))) == 6
        # the last run leaves no survivor without its parent: deleted as before
        saver.delete_for_runs(["r3"])
        assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(a)] == [
            *reversed(made["r2"]),
            *reversed(made["r1"]),
        ]
    code, out = verify_thread(spec, capsys, monkeypatch, thread)
    assert code == 0, out


async def test_async_delete_for_runs_keeps_the_chain(spec: SaverSpec) -> None:
    thread, a, made = _runs_thread(spec)
    cls = _classes(spec.backend)[1]
    async with cls.from_conn_string(spec.conn, integrity=KEY, **spec.kwargs) as saver:
        await saver.adelete_for_runs(["r1", "r2"])
        left = [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(a)]
        assert sorted(left) == sorted(made["r3"])
        report = await saver.averify(thread_id=thread)
        assert report.ok and report.checkpoints == 2, report


# ---- 7. no chain, no key, wrong key -------------------------------------------------------------


def test_store_written_without_integrity_fails(
    spec: SaverSpec, capsys: Any, monkeypatch: Any
) -> None:
    with saver_of(spec, integrity=None) as saver:
        built = build_store(saver)
    code, out = verify_thread(spec, capsys, monkeypatch, built.a)
    assert code == 1, out
    assert broken_ids(out, built.a) == set(built.ids), out
    assert "no chain digest" in out


def test_no_key_is_bad_usage(spec: SaverSpec, capsys: Any, monkeypatch: Any) -> None:
    code, out, err = verify(spec, capsys, monkeypatch, "--thread", "thread-a", key=None)
    assert code == 2, out + err
    assert "LGD_INTEGRITY_KEY" in err


def test_wrong_key_fails(spec: SaverSpec, built: Built, capsys: Any, monkeypatch: Any) -> None:
    code, out, err = verify(spec, capsys, monkeypatch, "--thread", built.a, key=WRONG_KEY)
    assert code == 1, out + err
    assert broken_ids(out, built.a) == set(built.ids), out


# ---- 8. async savers -----------------------------------------------------------------------


async def test_async_saver_history_verifies_and_tampering_is_reported(
    spec: SaverSpec, capsys: Any, monkeypatch: Any
) -> None:
    cls = _classes(spec.backend)[1]
    async with cls.from_conn_string(spec.conn, integrity=KEY, **spec.kwargs) as saver:
        await saver.setup()
        built = await abuild_store(saver)
        report = await saver.averify(thread_id=built.a)
        assert report.ok and report.checkpoints == len(built.ids), report
        code, out = verify_thread(spec, capsys, monkeypatch, built.a)
        assert code == 0, out
        code, out = verify_thread(spec, capsys, monkeypatch, built.b)
        assert code == 0, out

        victim = built.middle()
        with open_raw(spec, built.a) as raw:
            raw.set_body(victim, flip_body(raw.body(victim)))
        found: list[Any] = []
        report = await saver.averify(thread_id=built.a, on_broken=found.append)
    assert not report.ok and report.broken == 1, report
    assert [(b.tenant, b.thread, b.checkpoint_id) for b in found] == [(TENANT, built.a, victim)]


# ---- 9. reads refuse tampered records --------------------------------------------------------


def test_reads_refuse_tampered_records(spec: SaverSpec, built: Built) -> None:
    """After each alteration of case 2, reading the checkpoint raises IntegrityError."""
    base = {"thread_id": built.a, "checkpoint_ns": ""}
    with open_raw(spec, built.a) as raw, saver_of(spec) as saver:
        for what in ALTERED:
            cid, named, undo = _alter(raw, built, what)
            with pytest.raises(IntegrityError):
                saver.get_tuple({"configurable": {**base, "checkpoint_id": cid}})
            # an untouched checkpoint of the same thread still reads
            other = next(c for c in built.ids if c not in named and c != cid)
            assert saver.get_tuple({"configurable": {**base, "checkpoint_id": other}})
            undo()
            assert saver.get_tuple({"configurable": {**base, "checkpoint_id": cid}})
