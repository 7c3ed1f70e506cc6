"""The string walker (protect/walk.py): every path of a value, and a memo never stale."""

from __future__ import annotations

import dataclasses
import ipaddress
import pathlib
import re
from collections import deque

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Interrupt, Send
from pydantic import BaseModel, ConfigDict, SecretStr

from langgraph_durable.errors import InvalidInputError
from langgraph_durable.protect.walk import BoundedCache, StringRewriter


def test_a_message_whose_id_is_set_in_place_after_a_walk_is_walked_again() -> None:
    # LangGraph's add_messages gives a message returned without an id its id in place,
    # after the pending write holding that very object was stored: a later walk of the
    # same object must not return the copy made before the id was set.
    message = ToolMessage(content="result for a query", name="search", tool_call_id="c1")
    rewriter = StringRewriter(str.upper, memo=BoundedCache(16), scope="t")
    first = rewriter(message)
    assert first.content == "RESULT FOR A QUERY" and first.id is None

    message.id = "set-later"
    second = rewriter(message)
    assert second.id == "set-later"
    assert second.content == "RESULT FOR A QUERY" and second.tool_call_id == "c1"


def test_an_unchanged_message_is_still_served_from_the_memo() -> None:
    calls: list[str] = []

    def rewrite(text: str) -> str:
        calls.append(text)
        return text.upper()

    message = AIMessage(content="hello", id="m1")
    rewriter = StringRewriter(rewrite, memo=BoundedCache(16), scope="t")
    first = rewriter(message)
    walked = len(calls)
    assert rewriter(message) is first
    assert len(calls) == walked  # no second walk


EMAIL = "ann.lee@example.com"


def test_a_message_with_a_field_replaced_or_grown_in_place_is_walked_again() -> None:
    rewriter = StringRewriter(lambda t: t.replace(EMAIL, "<EMAIL>"), BoundedCache(16), "t")
    message = AIMessage(content="nothing to hide", id="m1")
    assert rewriter(message) is message
    message.content = f"write to {EMAIL}"  # a new string in the same message object
    assert rewriter(message).content == "write to <EMAIL>"
    message.additional_kwargs["note"] = f"cc {EMAIL}"  # the same dict, grown in place
    assert rewriter(message).additional_kwargs["note"] == "cc <EMAIL>"


class _NoCompare:
    """An object whose ``==`` raises: the memo compares field objects by identity only."""

    def __eq__(self, other: object) -> bool:
        raise AssertionError("compared")

    __hash__ = object.__hash__


def test_the_memo_never_calls_a_fields_eq() -> None:
    rewriter = StringRewriter(str.upper, BoundedCache(16), "t")
    message = AIMessage(content="hi", id="m1", response_metadata={"raw": _NoCompare()})
    first = rewriter(message)
    message.response_metadata = {"raw": _NoCompare()}  # replaced by another such object
    second = rewriter(message)
    assert first.content == second.content == "HI"


_EMAILS = re.compile(r"[\w.]+@[\w.]+")


def _mask(text: str) -> str:
    return _EMAILS.sub("<EMAIL>", text)


def test_sets_bytes_and_a_messages_name_are_walked() -> None:
    walk = StringRewriter(_mask)
    assert walk({f"to {EMAIL}", "x"}) == {"to <EMAIL>", "x"}
    out = walk(frozenset({EMAIL}))
    assert type(out) is frozenset and out == frozenset({"<EMAIL>"})
    assert walk(f"from {EMAIL}".encode()) == b"from <EMAIL>"
    binary = bytes(range(256))
    assert walk(binary) is binary  # not UTF-8 text: kept as it is
    unchanged = {"a", "b"}
    assert walk(unchanged) is unchanged
    named = AIMessage(content="hi", name=EMAIL, id="m1")
    assert walk(named).name == "<EMAIL>" and walk(named).id == "m1"


def test_a_value_nested_past_the_limit_is_refused_not_skipped() -> None:
    def nested(levels: int) -> list[object]:
        value: list[object] = [EMAIL]
        for _ in range(levels):
            value = [value]
        return value

    walk = StringRewriter(_mask)
    inner = walk(nested(150))
    for _ in range(150):
        inner = inner[0]
    assert inner == ["<EMAIL>"]
    with pytest.raises(InvalidInputError, match="nested deeper"):
        walk(nested(250))


# ---- every path of a value ---------------------------------------------------------


def test_every_dict_key_and_value_is_walked_ids_of_any_dict_included() -> None:
    walk = StringRewriter(_mask)
    out = walk({EMAIL: 1, "id": EMAIL, "type": f"t {EMAIL}", "n": {"name": EMAIL}})
    assert out == {"<EMAIL>": 1, "id": "<EMAIL>", "type": "t <EMAIL>", "n": {"name": "<EMAIL>"}}
    # keys that become the same are kept apart, none lost
    both = walk({"a@x.io": 1, "b@x.io": 2, "<EMAIL>": 3})
    assert both == {"<EMAIL>": 1, "<EMAIL>#2": 2, "<EMAIL>#3": 3}
    assert walk({(EMAIL, 1): "v"}) == {("<EMAIL>", 1): "v"}
    assert walk({EMAIL.encode(): "v"}) == {b"<EMAIL>": "v"}


def test_only_message_and_tool_call_ids_and_a_messages_type_are_kept() -> None:
    walk = StringRewriter(_mask)
    message = AIMessage(
        content=[{"type": "tool_use", "id": EMAIL, "input": {"to": EMAIL}}],
        id=EMAIL,
        name=EMAIL,
        tool_calls=[{"name": "mail", "args": {"to": EMAIL}, "id": EMAIL, "type": "tool_call"}],
        additional_kwargs={"tool_calls": [{"id": EMAIL, "function": {"arguments": EMAIL}}]},
        response_metadata={"logprobs": [{"token": EMAIL}]},
    )
    out = walk(message)
    assert (out.id, out.type, out.tool_calls[0]["id"], out.content[0]["id"]) == (
        EMAIL,
        "ai",
        EMAIL,
        EMAIL,
    )
    assert out.additional_kwargs["tool_calls"][0]["id"] == EMAIL
    assert EMAIL not in repr((out.content[0]["input"], out.name, out.tool_calls[0]["args"]))
    assert out.additional_kwargs["tool_calls"][0]["function"] == {"arguments": "<EMAIL>"}
    assert out.response_metadata == {"logprobs": [{"token": "<EMAIL>"}]}
    tool = walk(ToolMessage(content=EMAIL, tool_call_id=EMAIL, artifact={"id": EMAIL}))
    assert (tool.tool_call_id, tool.content, tool.artifact) == (EMAIL, "<EMAIL>", {"id": "<EMAIL>"})
    # LangGraph's interrupt id (named by a resume) is kept, its value walked
    assert walk(Interrupt(value=EMAIL, id="abc")) == Interrupt(value="<EMAIL>", id="abc")


class Failure(Exception):
    def __init__(self, user: str) -> None:
        super().__init__("cannot reach the user")
        self.user = user

    def __repr__(self) -> str:
        return f"Failure(user={self.user!r})"


class Stubborn(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)

    def __str__(self) -> str:
        return f"failed for {EMAIL}"  # text the walker cannot reach


def test_exceptions_are_rebuilt_redacted_or_become_their_redacted_repr() -> None:
    walk = StringRewriter(_mask)
    error = ValueError(f"no mailbox {EMAIL}", 3)
    out = walk(error)
    assert type(out) is ValueError and out.args == ("no mailbox <EMAIL>", 3)
    assert error.args[0] == f"no mailbox {EMAIL}"  # the graph's own object is untouched
    clean = KeyError("k")
    assert walk(clean) is clean
    custom = walk(Failure(EMAIL))  # PII in an attribute that repr shows
    assert type(custom) is Failure and custom.user == "<EMAIL>"
    assert EMAIL not in repr(custom) + str(custom)
    noted = ValueError("x")
    noted.add_note(f"for {EMAIL}")
    assert walk(noted).__notes__ == ["for <EMAIL>"]
    # str() shows PII no field holds: stored as the redacted repr, as LangGraph stores it
    assert walk(Stubborn(7)) == "Stubborn(7)"


@dataclasses.dataclass(frozen=True)
class Frozen:
    text: str
    derived: str = dataclasses.field(init=False, default="")
    id: str = "x"

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", self.text.upper())


class Loose(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str


def test_dataclasses_models_and_value_types_are_walked_whole() -> None:
    walk = StringRewriter(_mask)
    frozen = walk(Frozen(EMAIL, id=EMAIL))
    assert (frozen.text, frozen.id) == ("<EMAIL>", "<EMAIL>")
    assert frozen.derived == "<EMAIL>"  # a field __init__ does not set is walked too
    loose = walk(Loose(id=EMAIL, note=EMAIL))
    assert loose.id == "<EMAIL>" and loose.model_extra == {"note": "<EMAIL>"}
    assert walk(SecretStr(EMAIL)).get_secret_value() == "<EMAIL>"
    assert walk(pathlib.PurePosixPath(f"/home/{EMAIL}/x")) == pathlib.PurePosixPath(
        "/home/<EMAIL>/x"
    )
    queue = walk(deque([EMAIL], maxlen=4))
    assert list(queue) == ["<EMAIL>"] and queue.maxlen == 4
    address = ipaddress.ip_address("192.0.2.10")
    ip_mask = StringRewriter(lambda t: t.replace("192.0.2.10", "<IP>"))
    assert ip_mask(address) == "<IP>" and ip_mask([address]) == ["<IP>"]
    assert walk(address) is address
    sent = walk(Send("node", {"to": EMAIL}, timeout=5.0))
    assert sent.arg == {"to": "<EMAIL>"} and sent.timeout == Send("n", 1, timeout=5.0).timeout
    assert walk(HumanMessage) is HumanMessage  # a class is not walked


def test_the_savers_and_the_cli_load_without_langgraph_types() -> None:
    # The walker looks LangGraph's Send and Interrupt up only once langgraph.types is
    # loaded (no value of theirs exists before): importing that module loads
    # langchain-core's tracers, a third of a second every CLI command paid.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import langgraph_durable.cli, langgraph_durable.protect\n"
        "import langgraph_durable.postgres, langgraph_durable.redis, langgraph_durable.dynamodb\n"
        "print(sorted(m for m in sys.modules if m == 'langgraph.types'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
