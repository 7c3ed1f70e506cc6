"""What a read may trust: the clear fields beside a checkpoint body are checked against it.

Each case edits one field a backend stores in clear beside the sealed payloads (a
channel-version reference, a value's presence or type marker, a delta's base and
length, a write's channel and task path, the parent pointer) and reads the checkpoint
back through the codec. With encryption the read raises ``DecryptionError``, with
integrity ``IntegrityError``; without either, nothing is authenticated and the edits
are not detected (shown by the plain cases, so the test can tell the modes apart).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_durable._core.chain import ChainKey
from langgraph_durable._core.codec import CheckpointCodec, StoredCheckpoint, ThreadKey
from langgraph_durable._core.records import (
    BlobDelta,
    CheckpointRecord,
    RecordIdentity,
    RecordKind,
    Sealed,
)
from langgraph_durable.errors import DecryptionError, IntegrityError
from langgraph_durable.protect.integrity import IntegrityPipeline
from langgraph_durable.protect.pipeline import IdentityPipeline
from tests.protect.test_encryption import make_pipeline

KEY = ThreadKey("t", "thread", "", False)


def make_codec(mode: str) -> CheckpointCodec:
    if mode == "plain":
        return CheckpointCodec(IdentityPipeline(JsonPlusSerializer()), delta_chain=4)
    if mode == "encryption":
        return CheckpointCodec(make_pipeline()[0], delta_chain=4)
    pipeline = IntegrityPipeline(IdentityPipeline(JsonPlusSerializer()), ChainKey(os.urandom(32)))
    return CheckpointCodec(pipeline, delta_chain=4)


ERRORS = {"encryption": DecryptionError, "integrity": IntegrityError}


class Stored:
    """Two checkpoints of one thread as a backend holds them, in editable pieces."""

    def __init__(self, codec: CheckpointCodec) -> None:
        self.codec = codec
        cp1 = dict(empty_checkpoint())
        cp1["id"] = "cp1"
        cp1["channel_values"] = {"messages": ["a", "b"], "notes": {"k": 1}, "n": 1}
        cp1["channel_versions"] = {"messages": "1", "notes": "1", "n": "1"}
        r1 = codec.encode_checkpoint(
            KEY, {"configurable": {}}, cp1, {"step": 1}, cp1["channel_versions"]
        )
        codec.written(r1)
        cp2 = dict(cp1)
        cp2["id"] = "cp2"
        cp2["channel_values"] = {"messages": ["a", "b", "c"], "notes": {"k": 2}, "n": 2}
        cp2["channel_versions"] = {"messages": "2", "notes": "2", "n": "2"}
        r2 = codec.encode_checkpoint(
            KEY, {"configurable": {"checkpoint_id": "cp1"}}, cp2, {"step": 2}, {
                "messages": "2", "notes": "2"
            }
        )  # fmt: skip
        writes, _ = codec.encode_writes(KEY, "cp2", [("notes", {"w": 1}), ("n", 5)], "task", "p1")
        self.records = {"cp1": r1, "cp2": r2}
        self.blobs: dict[tuple[str, str], Sealed | BlobDelta | None] = {}
        for rec in (r1, r2):
            for b in rec.blobs:
                assert b.sealed is not None
                self.blobs[(b.channel, b.version)] = (
                    b.sealed if b.base is None else BlobDelta(b.base, b.prefix, b.sealed)
                )
        self.refs = {cid: list(rec.blob_refs) for cid, rec in self.records.items()}
        self.parent = {"cp1": None, "cp2": "cp1"}
        self.writes = [(w.task_id, w.task_path, w.idx, w.channel, w.sealed) for w in writes]

    def stored(self, cid: str) -> StoredCheckpoint:
        rec: CheckpointRecord = self.records[cid]
        return StoredCheckpoint(
            thread=KEY.thread,
            ns="",
            checkpoint_id=cid,
            parent_checkpoint_id=self.parent[cid],
            body=rec.body,
            metadata=rec.metadata,
            blobs=[(ch, v, self.blobs.get((ch, v))) for ch, v in self.refs[cid]],
            bases=dict(self.blobs),
            writes=self.writes if cid == "cp2" else [],
        )

    def read(self, cid: str = "cp2") -> Any:
        return self.codec.decode(KEY, self.stored(cid))


def rolled_back(s: Stored) -> None:
    s.refs["cp2"] = [(ch, "1") if ch == "notes" else (ch, v) for ch, v in s.refs["cp2"]]


def dropped(s: Stored) -> None:
    s.refs["cp2"] = [(ch, v) for ch, v in s.refs["cp2"] if ch != "notes"]


def added(s: Stored) -> None:
    s.refs["cp1"] = [*s.refs["cp1"], ("extra", "1")]
    s.blobs[("extra", "1")] = s.blobs[("notes", "1")]


def deleted_value(s: Stored) -> None:
    del s.blobs[("notes", "2")]


def blanked_value(s: Stored) -> None:
    s.blobs[("notes", "2")] = Sealed("empty", b"")


def delta_recounted(s: Stored) -> None:
    delta = s.blobs[("messages", "2")]
    assert isinstance(delta, BlobDelta)
    s.blobs[("messages", "2")] = dataclasses.replace(delta, prefix=delta.prefix - 1)


def delta_rebased(s: Stored) -> None:
    delta = s.blobs[("messages", "2")]
    assert isinstance(delta, BlobDelta)
    s.blobs[("messages", "0")] = s.blobs[("messages", "1")]
    s.blobs[("messages", "2")] = dataclasses.replace(delta, base="0")


def relinked_parent(s: Stored) -> None:
    s.parent["cp2"] = None


def write_channel(s: Stored) -> None:
    task, path, idx, _channel, sealed = s.writes[0]
    s.writes[0] = (task, path, idx, "messages", sealed)


def write_task_path(s: Stored) -> None:
    task, _path, idx, channel, sealed = s.writes[0]
    s.writes[0] = (task, "p0", idx, channel, sealed)


EDITS: dict[str, Callable[[Stored], None]] = {
    f.__name__: f
    for f in (
        rolled_back,
        dropped,
        added,
        deleted_value,
        blanked_value,
        delta_recounted,
        delta_rebased,
        relinked_parent,
        write_channel,
        write_task_path,
    )
}


@pytest.mark.parametrize("mode", ["encryption", "integrity"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_clear_field_fails_the_read(mode: str, edit: str) -> None:
    s = Stored(make_codec(mode))
    assert s.read().checkpoint["channel_values"]["notes"] == {"k": 2}
    EDITS[edit](s)
    cid = "cp1" if edit == "added" else "cp2"
    with pytest.raises(ERRORS[mode]):
        s.read(cid)


def test_plain_mode_authenticates_nothing() -> None:
    """Without encryption or integrity the same edits change what a read returns."""
    s = Stored(make_codec("plain"))
    rolled_back(s)
    assert s.read().checkpoint["channel_values"]["notes"] == {"k": 1}
    s = Stored(make_codec("plain"))
    dropped(s)
    assert "notes" not in s.read().checkpoint["channel_values"]
    s = Stored(make_codec("plain"))
    relinked_parent(s)
    assert s.read().parent_config is None


@pytest.mark.parametrize("mode", ["plain", "encryption", "integrity"])
def test_the_reference_block_is_not_returned(mode: str) -> None:
    s = Stored(make_codec(mode))
    tup = s.read()
    assert set(tup.checkpoint) == set(empty_checkpoint()) | {"id"}
    assert tup.checkpoint["channel_values"] == {
        "messages": ["a", "b", "c"],
        "notes": {"k": 2},
        "n": 2,
    }
    assert tup.parent_config is not None
    assert [(w[0], w[1], w[2]) for w in tup.pending_writes] == [
        ("task", "notes", {"w": 1}),
        ("task", "n", 5),
    ]


def test_an_empty_value_sealed_like_any_other_reads_as_absent() -> None:
    """A value that opens to None (redaction's drop) reads back as an empty channel."""
    s = Stored(make_codec("encryption"))
    s.blobs[("notes", "2")] = s.codec.pipeline.seal(
        RecordIdentity("t", "thread", "", RecordKind.BLOB, "", "notes", "2", "notes"), None
    )
    assert "notes" not in s.read().checkpoint["channel_values"]
