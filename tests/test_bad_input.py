"""Bad input gets our own error and alters nothing stored, on every backend.

A value the serializer cannot take (an int past 64 bits, nesting past its limit, an object
of an unknown type) and an id that is not valid Unicode text (a lone surrogate) raise
``InvalidInputError``, never a builtin error, and the thread's latest checkpoint stays
what it was. Plain and with encryption (whose pipeline wraps the same serializer).
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from langgraph_durable.errors import InvalidInputError
from langgraph_durable.protect import Encryption, LocalKeyring
from tests.effects.conftest import BACKENDS, make_spec
from tests.helpers import cfg, put_chain, versioned_cp
from tests.redaction_helpers import SaverSpec, aopen_saver, open_saver


class Unknown:
    pass


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


#: (name, channel value) pairs no serializer step can store; a blob channel and an
#: inline one (an int is kept in the checkpoint body).
VALUES = [
    ("int past 64 bits", 2**70),
    ("nested 5,000 deep", _deep(5000)),
    ("an unknown type", Unknown()),
]


@pytest.fixture(params=[(b, m) for b in BACKENDS for m in ("plain", "encrypted")], ids=str)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    backend, mode = request.param
    spec = make_spec(request, backend)
    if mode == "encrypted":
        keyring = LocalKeyring({"k1": secrets.token_bytes(32)}, "k1")
        spec.kwargs["encryption"] = Encryption(keyring)
    return spec


def _latest(saver: Any, thread: str) -> str:
    stored = saver.get_tuple(cfg(thread))
    assert stored is not None
    return str(stored.config["configurable"]["checkpoint_id"])


@pytest.mark.parametrize("name,value", VALUES, ids=[n for n, _ in VALUES])
def test_an_unstorable_value_raises_ours_and_stores_nothing(
    spec: SaverSpec, name: str, value: Any
) -> None:
    with open_saver(spec) as saver:
        configs = put_chain(saver, "t", 2)
        before = _latest(saver, "t")
        with pytest.raises(InvalidInputError, match="cannot store"):
            saver.put(configs[-1], versioned_cp(payload=value), {"step": 3}, {"payload": "9"})
        with pytest.raises(InvalidInputError, match="cannot store"):
            saver.put_writes(configs[-1], [("payload", value)], "task-1")
        assert _latest(saver, "t") == before
        stored = saver.get_tuple(configs[-1])
        assert stored is not None and stored.pending_writes == []


@pytest.mark.parametrize("field", ["thread_id", "checkpoint_ns", "checkpoint_id"])
def test_a_lone_surrogate_in_an_id_raises_ours(spec: SaverSpec, field: str) -> None:
    with open_saver(spec) as saver:
        configs = put_chain(saver, "t", 1)
        bad = dict(configs[-1]["configurable"])
        bad[field] = "x\ud800"
        config = {"configurable": bad}
        with pytest.raises(InvalidInputError, match=f"{field} is not valid Unicode"):
            saver.put(config, versioned_cp(step=1), {"step": 1}, {"step": "2"})
        with pytest.raises(InvalidInputError, match=f"{field} is not valid Unicode"):
            saver.get_tuple(config)
        assert _latest(saver, "t") == configs[-1]["configurable"]["checkpoint_id"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_async_savers_raise_ours_too(request: pytest.FixtureRequest, backend: str) -> None:
    spec = make_spec(request, backend)
    async with aopen_saver(spec) as saver:
        config = cfg("t")
        with pytest.raises(InvalidInputError, match="cannot store"):
            await saver.aput(config, versioned_cp(payload=2**70), {"step": 0}, {"payload": "1"})
        with pytest.raises(InvalidInputError, match="thread_id is not valid Unicode"):
            await saver.aget_tuple(cfg("x\ud800"))
        assert await saver.aget_tuple(config) is None


#: A lone surrogate where LangGraph's serializer would store "?" in its place: a string
#: kept inline in the checkpoint body, in a blob, in a message, as a dict key.
SURROGATES = [
    ("inline string", "a\ud800b"),
    ("in a blob", {"text": "a\udfffb"}),
    ("in a message", [HumanMessage("why?"), HumanMessage("a\ud83db")]),
    ("in a dict key", {"k\ud800": 1}),
]


@pytest.mark.parametrize("name,value", SURROGATES, ids=[n for n, _ in SURROGATES])
def test_a_lone_surrogate_in_a_value_is_refused_not_altered(
    spec: SaverSpec, name: str, value: Any
) -> None:
    with open_saver(spec) as saver:
        configs = put_chain(saver, "t", 2)
        before = _latest(saver, "t")
        cp = versioned_cp(payload=value)
        with pytest.raises(InvalidInputError, match="lone surrogate"):
            saver.put(configs[-1], cp, {"step": 3}, cp["channel_versions"])
        with pytest.raises(InvalidInputError, match="lone surrogate"):
            saver.put_writes(configs[-1], [("payload", value)], "task-1")
        with pytest.raises(InvalidInputError, match="lone surrogate"):
            saver.put(configs[-1], versioned_cp(step=3), {"note": value}, {})
        assert _latest(saver, "t") == before
        stored = saver.get_tuple(configs[-1])
        assert stored is not None and stored.pending_writes == []
        assert stored.checkpoint["channel_values"]["payload"] == {"i": 1}


def test_question_marks_and_astral_characters_round_trip_exactly(spec: SaverSpec) -> None:
    """The surrogate check costs nothing it should not: valid text is stored as given."""
    value = {"text": "why? \U0001f600 \u00e9\u4e2d", "messages": [HumanMessage("ok?")]}
    with open_saver(spec) as saver:
        cp = versioned_cp(payload=value, inline="what?\U0001f600")
        config = saver.put(cfg("t"), cp, {"note": "so?"}, cp["channel_versions"])
        saver.put_writes(config, [("payload", value)], "task-1")
        stored = saver.get_tuple(config)
        assert stored is not None
        assert stored.checkpoint["channel_values"] == {
            "payload": value,
            "inline": "what?\U0001f600",
        }
        assert stored.pending_writes == [("task-1", "payload", value)]
        assert stored.metadata["note"] == "so?"


def _messages(bad: Any) -> list[Any]:
    return [HumanMessage("a"), HumanMessage("b"), HumanMessage("c"), HumanMessage(bad)]


#: (value, the path the error names): found by walking the value on the error path only.
PATHS = [
    (_messages([{"type": "text", "text": "x", "n": 2**70}]), r"payload\[3\]\.content\[0\]\['n'\]"),
    ({"a": [1, {"b": Unknown()}]}, r"payload\['a'\]\[1\]\['b'\] .*Unknown"),
    (_deep(5000), r"payload\[0\]\[0\].*\.\.\..*levels deep"),
]


@pytest.mark.parametrize("value,path", PATHS, ids=["message content", "unknown type", "deep"])
def test_the_error_names_the_path_in_the_value(spec: SaverSpec, value: Any, path: str) -> None:
    with open_saver(spec) as saver:
        configs = put_chain(saver, "t", 1)
        cp = versioned_cp(payload=value)
        with pytest.raises(InvalidInputError, match=path):
            saver.put(configs[-1], cp, {"step": 1}, cp["channel_versions"])
        with pytest.raises(InvalidInputError, match=path):
            saver.put_writes(configs[-1], [("payload", value)], "task-1")
        assert _latest(saver, "t") == configs[-1]["configurable"]["checkpoint_id"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_async_savers_refuse_a_lone_surrogate(
    request: pytest.FixtureRequest, backend: str
) -> None:
    spec = make_spec(request, backend)
    async with aopen_saver(spec) as saver:
        cp = versioned_cp(payload="ok")
        config = await saver.aput(cfg("t"), cp, {}, cp["channel_versions"])
        bad = versioned_cp(payload={"text": "a\ud800b"})
        with pytest.raises(InvalidInputError, match=r"payload\['text'\].*lone surrogate"):
            await saver.aput(config, bad, {}, bad["channel_versions"])
        with pytest.raises(InvalidInputError, match="lone surrogate"):
            await saver.aput_writes(config, [("payload", ["a\ud800"])], "task-1")
        stored = await saver.aget_tuple(cfg("t"))
        assert stored is not None and stored.checkpoint["channel_values"] == {"payload": "ok"}
        assert stored.pending_writes == []
