"""The string walker's message memo (protect/walk.py) never hands back a stale copy."""

from __future__ import annotations

from langchain_core.messages import AIMessage, ToolMessage

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
