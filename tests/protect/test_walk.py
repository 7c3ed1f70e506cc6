"""The string walker (protect/walk.py): every path of a value, and a memo never stale."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, ToolMessage

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


def _mask(text: str) -> str:
    return text.replace(EMAIL, "<EMAIL>")


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
