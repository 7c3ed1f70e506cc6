"""Redaction without a backend: the walker, modes, rules, the vault and composition."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, NamedTuple

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Interrupt, Send
from pydantic import BaseModel

from langgraph_durable._core.records import RecordIdentity, RecordKind
from langgraph_durable.errors import ConfigurationError, DecryptionError
from langgraph_durable.protect import IdentityPipeline, Redaction, RedactionPipeline, Rule
from langgraph_durable.protect.walk import StringRewriter

EMAIL = "ann.lee@example.com"
CARD = "4111 1111 1111 1111"
KEY = os.urandom(32)


def blob(channel: str, tenant: str = "t", thread: str = "th") -> RecordIdentity:
    return RecordIdentity(tenant, thread, "", RecordKind.BLOB, "", channel, "1", channel)


def pipeline(**kwargs: Any) -> RedactionPipeline:
    return RedactionPipeline(IdentityPipeline(JsonPlusSerializer()), Redaction(**kwargs))


def roundtrip(p: RedactionPipeline, identity: RecordIdentity, value: Any) -> Any:
    return p.open(identity, p.seal(identity, value))


# ---- the walker ----------------------------------------------------------------------


class Point(NamedTuple):
    label: str
    n: int


@dataclasses.dataclass
class Note:
    text: str
    id: str


class Profile(BaseModel):
    email: str
    age: int


def test_walker_keeps_types_ids_and_unchanged_objects() -> None:
    upper = StringRewriter(lambda s: s.upper() if s.startswith("x") else s)
    msg = AIMessage(
        content=[{"type": "text", "text": "x1"}],
        id="x-msg",
        tool_calls=[{"name": "x_tool", "args": {"q": "x2"}, "id": "x-call", "type": "tool_call"}],
        additional_kwargs={"extra": "x3"},
    )
    out = upper(msg)
    assert isinstance(out, AIMessage) and out.id == "x-msg"
    assert out.content == [{"type": "text", "text": "X1"}]
    assert out.tool_calls[0]["args"] == {"q": "X2"}
    # a tool call's id is kept; its name is text like the rest
    assert out.tool_calls[0]["name"] == "X_TOOL" and out.tool_calls[0]["id"] == "x-call"
    assert out.additional_kwargs == {"extra": "X3"}
    assert msg.content == [{"type": "text", "text": "x1"}]  # the input is not mutated
    tool = ToolMessage(content="x4", tool_call_id="x-call", artifact={"raw": "x5"})
    new_tool = upper(tool)
    assert (new_tool.content, new_tool.artifact, new_tool.tool_call_id) == (
        "X4",
        {"raw": "X5"},
        "x-call",
    )
    assert upper(Point("x", 1)) == Point("X", 1) and isinstance(upper(Point("x", 1)), Point)
    assert upper(Note("x", "x-id")) == Note("X", "X-ID")  # only messages' ids are kept
    assert upper(Profile(email="x", age=3)) == Profile(email="X", age=3)
    assert upper(("x", ["x", {"k": "x"}])) == ("X", ["X", {"k": "X"}])
    assert upper(Send("node", {"q": "x"})) == Send("node", {"q": "X"})
    assert upper(Interrupt(value="x", id="x-id")) == Interrupt(value="X", id="x-id")
    same = {"a": ["no change"], "b": 1}
    assert upper(same) is same


# ---- modes -----------------------------------------------------------------------------


def test_mask_by_default_everywhere() -> None:
    p = pipeline()
    text = f"mail {EMAIL} card {CARD}"
    stored = p.seal(blob("messages"), [HumanMessage(text, id="h1")])
    assert EMAIL.encode() not in stored.data and b"4111" not in stored.data
    back = p.open(blob("messages"), stored)
    assert back[0].content == "mail <EMAIL> card <CARD>" and back[0].id == "h1"


def test_pseudonyms_are_stable_within_a_tenant_only() -> None:
    p = pipeline(rules=[Rule(mode="pseudonymize")], key=KEY)
    a1 = roundtrip(p, blob("c", tenant="a"), EMAIL)
    a2 = roundtrip(p, blob("c", tenant="a", thread="other"), f"again {EMAIL}")
    b1 = roundtrip(p, blob("c", tenant="b"), EMAIL)
    assert a1.startswith("<EMAIL:") and EMAIL not in a1
    assert a2 == f"again {a1}" and b1 != a1


def test_tokens_restore_only_when_asked() -> None:
    identity = blob("messages")
    stored = pipeline(rules=[Rule(mode="tokenize")], key=KEY).seal(identity, f"to {EMAIL}")
    assert stored.type == "lgd-vault" and EMAIL.encode() not in stored.data
    hidden = pipeline(rules=[Rule(mode="tokenize")], key=KEY).open(identity, stored)
    assert hidden.startswith("to <EMAIL:tok_")
    shown = pipeline(rules=[Rule(mode="tokenize")], key=KEY, restore=True).open(identity, stored)
    assert shown == f"to {EMAIL}"
    with pytest.raises(DecryptionError, match="vault"):
        pipeline(rules=[Rule(mode="tokenize")], key=os.urandom(32), restore=True).open(
            identity, stored
        )


def test_tokens_read_back_keep_their_originals_in_new_records() -> None:
    p = pipeline(rules=[Rule(mode="tokenize")], key=KEY)
    first = p.open(blob("m"), p.seal(blob("m"), EMAIL))  # a token, not restored
    again = p.seal(blob("m", thread="th"), [first, "new"])
    restoring = pipeline(rules=[Rule(mode="tokenize")], key=KEY, restore=True)
    assert restoring.open(blob("m"), again) == [EMAIL, "new"]


def test_rules_first_match_wins_and_drop_and_keep() -> None:
    p = pipeline(
        rules=[
            Rule(channels="scratch*", mode="drop"),
            Rule(channels=("notes",), mode="keep"),
            Rule(channels="*", mode="mask", detectors=("email",)),
        ]
    )
    dropped = p.seal(blob("scratch_pad"), {"x": EMAIL})
    # sealed and tagged like any value (None), never an unsealed "empty" marker
    assert dropped.type != "empty" and dropped == p.seal(blob("scratch_pad"), None)
    assert p.open(blob("scratch_pad"), dropped) is None
    assert roundtrip(p, blob("notes"), EMAIL) == EMAIL
    assert roundtrip(p, blob("messages"), f"{EMAIL} {CARD}") == f"<EMAIL> {CARD}"
    write = RecordIdentity("t", "th", "", RecordKind.WRITE, "cp", "task", "0", "scratch_pad")
    assert roundtrip(p, write, EMAIL) is None  # a dropped channel's write keeps no value


def test_checkpoint_body_redacts_inline_values_only() -> None:
    p = pipeline(rules=[Rule(channels="secret", mode="drop"), Rule()])
    body = {
        "v": 4,
        "id": "1ef-00",
        "channel_values": {"note": f"call 415-555-0132 {EMAIL}", "secret": "s", "n": 3},
        "channel_versions": {"note": "00000000000000000000000000000002.0.2735194"},
        "versions_seen": {},
    }
    identity = RecordIdentity("t", "th", "", RecordKind.CHECKPOINT, "1ef-00")
    out = roundtrip(p, identity, body)
    assert out["channel_values"] == {"note": "call <PHONE> <EMAIL>", "n": 3}
    assert out["channel_versions"] == body["channel_versions"]


def test_metadata_index_and_filters() -> None:
    p = pipeline(rules=[Rule(mode="pseudonymize")], key=KEY)
    meta = RecordIdentity("t", "th", "", RecordKind.METADATA, "cp")
    index = p.metadata_index(meta, {"source": "loop", "user_email": EMAIL})
    assert index["source"] == "loop" and EMAIL not in str(index)
    server, client = p.split_filter("t", {"user_email": EMAIL})
    assert server == {"user_email": index["user_email"]} and client is None
    masked = pipeline()
    assert masked.split_filter("t", {"user_email": EMAIL}) == ({"user_email": EMAIL}, None)


def test_custom_detectors_by_name() -> None:
    p = pipeline(
        rules=[Rule(detectors=("employee",))],
        detectors={
            "employee": r"EMP-\d{6}",
            "ticket": lambda s: [(0, 3)] if s[:3] == "TK-" else [],
        },
    )
    assert roundtrip(p, blob("c"), f"EMP-123456 {EMAIL}") == f"<EMPLOYEE> {EMAIL}"
    q = pipeline(detectors={"ticket": lambda s: [(0, 3)] if s.startswith("TK-") else []})
    assert roundtrip(q, blob("c"), "TK-9") == "<TICKET>9"


def test_settings_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="key"):
        Redaction([Rule(mode="tokenize")])
    with pytest.raises(ConfigurationError, match="mode"):
        Rule(mode="hide")
    with pytest.raises(ConfigurationError):
        Redaction([Rule(detectors=("nope",))])
    with pytest.raises(ConfigurationError, match="16 bytes"):
        Redaction(key=b"short")
    with pytest.raises(ConfigurationError):
        Redaction(rules=["*"])  # type: ignore[list-item]


def test_messages_seen_before_are_not_walked_again_unless_changed() -> None:
    p = pipeline(rules=[Rule(mode="tokenize")], key=KEY, restore=True)
    msg = HumanMessage(f"write to {EMAIL}", id="m1")
    first = p.serialize(blob("messages"), [msg])
    again = p.serialize(blob("messages"), [msg, HumanMessage("next", id="m2")])
    assert first.vault == again.vault and len(first.vault) == 1  # the memo replays the vault
    msg.content = "now call +1 415 555 0132"  # replaced in place: walked again
    changed = p.open(blob("messages"), p.seal(blob("messages"), [msg]))
    assert changed[0].content == "now call +1 415 555 0132"
    stored = p.serialize(blob("messages"), [msg])
    assert "+1 415" not in str(stored[1]) and list(stored.vault.values()) == ["+1 415 555 0132"]


def test_an_error_write_is_stored_redacted_and_reads_back_as_langgraph_stores_it() -> None:
    # LangGraph records a failed task as a pending write to "__error__" holding the
    # exception; its serializer stores an exception as its repr() text
    p = pipeline()
    write = RecordIdentity("t", "th", "", RecordKind.WRITE, "cp", "task", "0", "__error__")
    stored = p.seal(write, ValueError(f"no mailbox {EMAIL}", {"card": CARD}))
    assert EMAIL.encode() not in stored.data and b"4111" not in stored.data
    assert p.open(write, stored) == "ValueError('no mailbox <EMAIL>', {'card': '<CARD>'})"
    plain = RedactionPipeline(IdentityPipeline(JsonPlusSerializer()), Redaction([]))
    assert plain.open(write, plain.seal(write, ValueError("x"))) == "ValueError('x')"


def test_dict_keys_are_tokenized_and_restored() -> None:
    p = pipeline(rules=[Rule(mode="tokenize")], key=KEY, restore=True)
    value = {EMAIL: {"id": CARD, "type": "x"}, "b.o@example.org": 2}
    stored = p.seal(blob("c"), value)
    assert EMAIL.encode() not in stored.data and b"b.o@" not in stored.data
    assert p.open(blob("c"), stored) == value
