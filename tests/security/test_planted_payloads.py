"""Planted payloads: a record written by an attacker never imports or calls what it names.

Every kind of payload LangGraph's serializer decodes (each msgpack extension that
names a module and a class, function or method; a ``json`` LangChain envelope; a
``pickle``) is planted in the storage of every backend, naming a canary: a module
in a temporary directory whose import leaves a mark, or a function of this module
that records its calls. The planted record is read back through the saver with
its default serializer in each mode: plain, ``Encryption(allow_plaintext=True)``
reading a plaintext record, and encryption reading a valid ciphertext made with
the test's own key (what an attacker holding the key could write). Every read
raises ``CorruptRecordError`` and the canary is untouched. The same payloads run
the canary under LangGraph's permissive serializer, which shows they are live.

On the positive side, a state of pydantic models, dataclasses and enums defined
here round-trips through a compiled ``StateGraph`` with no environment variable
set: ``compile`` hands the schema's classes to the saver's ``with_allowlist``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import secrets
import sys
import uuid
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any, TypedDict

import ormsgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, StateGraph
from pydantic import BaseModel

from langgraph_durable.errors import CorruptRecordError
from langgraph_durable.protect import Encryption, LocalKeyring
from tests.effects.conftest import BACKENDS, make_spec
from tests.helpers import cfg, versioned_cp
from tests.integrity_helpers import open_raw
from tests.redaction_helpers import SaverSpec, aopen_saver, open_saver

HERE = __name__
CALLS: list[Any] = []


def record_call(*args: Any, **kwargs: Any) -> str:
    """The function canary: a planted payload that names it would call it."""
    CALLS.append((args, kwargs))
    return "called"


class Recorder:
    """A class canary: its constructor and its ``record`` method record their calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        CALLS.append((args, kwargs))

    @classmethod
    def record(cls, *args: Any) -> str:
        CALLS.append(args)
        return "called"

    @classmethod
    def model_validate_json(cls, *args: Any) -> str:
        CALLS.append(args)
        return "called"


class _Pickled:
    def __reduce__(self) -> Any:
        return (record_call, ("unpickled",))


@dataclasses.dataclass
class Canary:
    """A module nobody imported (``module``) and the file its import writes (``mark``)."""

    module: str
    mark: Path

    def untouched(self) -> bool:
        return self.module not in sys.modules and not self.mark.exists() and not CALLS


@pytest.fixture
def canary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Canary]:
    name = f"lgd_planted_{uuid.uuid4().hex[:12]}"
    mark = tmp_path / "imported.mark"
    (tmp_path / f"{name}.py").write_text(
        f"open({str(mark)!r}, 'w').write('imported')\n"
        "class Boom:\n"
        "    def __init__(self, *args, **kwargs):\n"
        f"        open({str(mark)!r}, 'a').write('called')\n"
        "    @classmethod\n"
        "    def fromisoformat(cls, arg):\n"
        "        return cls(arg)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LGD_PLANTED_SECRET", "secret-from-the-environment")
    CALLS.clear()
    yield Canary(name, mark)
    sys.modules.pop(name, None)
    CALLS.clear()


def _ext(code: int, *parts: Any) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb(list(parts)))


def _msgpack(ext: ormsgpack.Ext) -> tuple[str, bytes]:
    return "msgpack", ormsgpack.packb({"planted": ext})


def payloads(module: str) -> dict[str, tuple[str, bytes]]:
    """Every planted payload kind: ``{name: (type tag, bytes)}`` naming the canaries."""
    return {
        "ext0-import": _msgpack(_ext(0, module, "Boom", 1)),
        "ext0-call": _msgpack(_ext(0, HERE, "record_call", 1)),
        "ext1-import": _msgpack(_ext(1, module, "Boom", [1, 2])),
        "ext1-call": _msgpack(_ext(1, HERE, "record_call", [1, 2])),
        "ext2-import": _msgpack(_ext(2, module, "Boom", {"a": 1})),
        "ext2-call": _msgpack(_ext(2, HERE, "record_call", {"a": 1})),
        "ext3-method": _msgpack(_ext(3, HERE, "Recorder", "x", "record")),
        "ext3-method-import": _msgpack(_ext(3, module, "Boom", "x", "fromisoformat")),
        "ext4-pydantic-v1": _msgpack(_ext(4, module, "Boom", {"a": 1})),
        "ext5-pydantic-v2": _msgpack(_ext(5, HERE, "Recorder", {"a": 1}, "model_validate_json")),
        "nested-in-a-set": _msgpack(_ext(0, "builtins", "set", [_ext(0, module, "Boom", 1)])),
        "delta-snapshot": _msgpack(
            ormsgpack.Ext(7, ormsgpack.packb([_ext(2, HERE, "record_call", {})]))
        ),
        "unknown-ext": _msgpack(ormsgpack.Ext(42, b"\x90")),
        "json-lc2-constructor": (
            "json",
            json.dumps(
                {"lc": 2, "type": "constructor", "id": [module, "Boom"], "kwargs": {"a": 1}}
            ).encode(),
        ),
        "json-lc1-secret": (
            "json",
            json.dumps({"lc": 1, "type": "secret", "id": ["LGD_PLANTED_SECRET"]}).encode(),
        ),
        "pickle": ("pickle", pickle.dumps(_Pickled())),
        "unknown-type": ("lgd-unknown", b"\x90"),
    }


#: Payloads LangGraph's permissive serializer runs (import or call) when reading them.
LIVE = [
    "ext0-import",
    "ext0-call",
    "ext1-import",
    "ext1-call",
    "ext2-import",
    "ext2-call",
    "ext4-pydantic-v1",
    "nested-in-a-set",
    "delta-snapshot",
    "json-lc2-constructor",
    "pickle",
]
KINDS = list(payloads("m"))
MODES = ["plain", "plaintext-migration", "encrypted"]


@pytest.mark.parametrize("kind", LIVE)
def test_the_planted_payloads_are_live(canary: Canary, kind: str) -> None:
    """Under LangGraph's permissive serializer each payload imports or calls its canary."""
    permissive = JsonPlusSerializer(
        pickle_fallback=True, allowed_msgpack_modules=True, allowed_json_modules=True
    )
    permissive.loads_typed(payloads(canary.module)[kind])
    assert not canary.untouched()


@dataclasses.dataclass
class Plant:
    """A value the writer's serializer stores as the planted payload."""

    payload: tuple[str, bytes]


class Planter(JsonPlusSerializer):
    """The attacker's serializer: a :class:`Plant` is stored as its payload."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, Plant):
            return obj.payload
        return super().dumps_typed(obj)


def _specs(spec: SaverSpec, mode: str) -> tuple[SaverSpec, SaverSpec]:
    """The attacker's writer and the victim's reader on the same store."""
    keyring = LocalKeyring({"k1": secrets.token_bytes(32)}, "k1")
    writer = {**spec.kwargs, "serde": Planter()}
    reader = dict(spec.kwargs)
    if mode == "encrypted":
        writer["encryption"] = reader["encryption"] = Encryption(keyring)
    elif mode == "plaintext-migration":
        reader["encryption"] = Encryption(keyring, allow_plaintext=True)
    return (
        dataclasses.replace(spec, kwargs=writer),
        dataclasses.replace(spec, kwargs=reader),
    )


def _plant(writer: Any, kinds: dict[str, tuple[str, bytes]]) -> None:
    """Per kind: a thread whose channel value is planted, one whose pending write is."""
    for kind, payload in kinds.items():
        cp = versioned_cp(payload=Plant(payload))
        writer.put(cfg(f"value-{kind}"), cp, {}, cp["channel_versions"])
        config = writer.put(cfg(f"write-{kind}"), versioned_cp(), {}, {})
        writer.put_writes(config, [("payload", Plant(payload))], "task-1")


async def _aplant(writer: Any, kinds: dict[str, tuple[str, bytes]]) -> None:
    for kind, payload in kinds.items():
        cp = versioned_cp(payload=Plant(payload))
        await writer.aput(cfg(f"value-{kind}"), cp, {}, cp["channel_versions"])
        config = await writer.aput(cfg(f"write-{kind}"), versioned_cp(), {}, {})
        await writer.aput_writes(config, [("payload", Plant(payload))], "task-1")


@pytest.fixture(params=[(b, m) for b in BACKENDS for m in MODES], ids="-".join)
def planted(request: pytest.FixtureRequest) -> tuple[SaverSpec, str]:
    backend, mode = request.param
    return make_spec(request, backend), mode


def test_planted_payloads_never_run(canary: Canary, planted: tuple[SaverSpec, str]) -> None:
    spec, mode = planted
    writer_spec, reader_spec = _specs(spec, mode)
    kinds = payloads(canary.module)
    with open_saver(writer_spec) as writer:
        _plant(writer, kinds)
    failures = []
    with open_saver(reader_spec) as reader:
        for kind in kinds:
            for thread in (f"value-{kind}", f"write-{kind}"):
                try:
                    reader.get_tuple(cfg(thread))
                except CorruptRecordError:
                    pass
                else:
                    failures.append(thread)
                assert canary.untouched(), f"{thread} ran code ({mode})"
    assert not failures, f"read without CorruptRecordError ({mode}): {failures}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
async def test_planted_payloads_never_run_async(
    canary: Canary, request: pytest.FixtureRequest, backend: str, mode: str
) -> None:
    writer_spec, reader_spec = _specs(make_spec(request, backend), mode)
    kinds = payloads(canary.module)
    async with aopen_saver(writer_spec) as writer:
        await _aplant(writer, kinds)
    async with aopen_saver(reader_spec) as reader:
        for kind in kinds:
            for thread in (f"value-{kind}", f"write-{kind}"):
                with pytest.raises(CorruptRecordError):
                    await reader.aget_tuple(cfg(thread))
                assert canary.untouched(), f"{thread} ran code ({mode})"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_payload_planted_in_raw_storage_never_runs(
    canary: Canary, request: pytest.FixtureRequest, backend: str
) -> None:
    """The stored bytes of a channel value, rewritten in the database itself."""
    spec = make_spec(request, backend)
    msgpack_kinds = {k: v for k, v in payloads(canary.module).items() if v[0] == "msgpack"}
    with open_saver(spec) as saver:
        for kind in msgpack_kinds:
            cp = versioned_cp(payload={"harmless": kind})
            saver.put(cfg(kind), cp, {}, cp["channel_versions"])
        for kind, (_type, data) in msgpack_kinds.items():
            stored = saver.get_tuple(cfg(kind))
            assert stored is not None and stored.checkpoint["channel_values"]["payload"]
            version = stored.checkpoint["channel_versions"]["payload"]
            with open_raw(spec, kind) as raw:
                assert raw.blob("payload", version)  # the value is stored as a blob
                raw.set_blob("payload", version, data)
            with pytest.raises(CorruptRecordError, match="not on the decoding allowlist|refused"):
                saver.get_tuple(cfg(kind))
            assert canary.untouched(), kind


# ---- the positive side: a graph's own types round-trip -----------------------------


class Mood(Enum):
    CALM = "calm"
    CURIOUS = "curious"


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Profile(BaseModel):
    name: str
    mood: Mood
    home: Point


class TypedState(TypedDict):
    profile: Profile
    trail: list[Point]
    mood: Mood
    turns: int


def _walk(state: TypedState) -> dict[str, Any]:
    turns = state["turns"] + 1
    return {
        "profile": Profile(name=state["profile"].name, mood=Mood.CURIOUS, home=Point(turns, 0)),
        "trail": [*state["trail"], Point(turns, turns)],
        "mood": Mood.CURIOUS,
        "turns": turns,
    }


def _graph(saver: Any) -> Any:
    builder = StateGraph(TypedState)
    builder.add_node("walk", _walk)
    builder.add_edge(START, "walk")
    return builder.compile(checkpointer=saver)


START_STATE: TypedState = {
    "profile": Profile(name="ada", mood=Mood.CALM, home=Point(0, 0)),
    "trail": [],
    "mood": Mood.CALM,
    "turns": 0,
}
AFTER_TWO: TypedState = {
    "profile": Profile(name="ada", mood=Mood.CURIOUS, home=Point(2, 0)),
    "trail": [Point(1, 1), Point(2, 2)],
    "mood": Mood.CURIOUS,
    "turns": 2,
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_graphs_own_types_round_trip_with_no_setting(
    request: pytest.FixtureRequest, backend: str
) -> None:
    assert "LANGGRAPH_STRICT_MSGPACK" not in os.environ
    spec = make_spec(request, backend)
    config = cfg(f"typed-{uuid.uuid4().hex[:8]}")
    with open_saver(spec) as saver:
        graph = _graph(saver)
        graph.invoke(START_STATE, config)
        # the second turn starts from the stored state (profile, trail, turns)
        assert graph.invoke({"mood": Mood.CALM}, config) == AFTER_TWO
        # outside the graph, the saver alone does not rebuild the graph's classes
        with pytest.raises(CorruptRecordError, match="is not on the decoding allowlist"):
            saver.get_tuple(config)
    with open_saver(spec) as restarted:  # another saver (a restarted process) reads it back
        assert _graph(restarted).get_state(config).values == AFTER_TWO


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_graphs_own_types_round_trip_async(
    request: pytest.FixtureRequest, backend: str
) -> None:
    spec = make_spec(request, backend)
    config = cfg(f"typed-{uuid.uuid4().hex[:8]}")
    async with aopen_saver(spec) as saver:
        graph = _graph(saver)
        await graph.ainvoke(START_STATE, config)
        assert await graph.ainvoke({"mood": Mood.CALM}, config) == AFTER_TWO
        assert (await _graph(saver).aget_state(config)).values == AFTER_TWO


@pytest.mark.parametrize("kind", KINDS)
def test_envelope_serializer_plaintext_migration_runs_nothing(canary: Canary, kind: str) -> None:
    """``EnvelopeSerializer`` (for upstream savers) decodes through the allowlist too: a
    plaintext record planted while ``allow_plaintext=True`` imports and calls nothing."""
    from langgraph_durable.errors import CorruptRecordError
    from langgraph_durable.protect import EnvelopeSerializer

    serde = EnvelopeSerializer(LocalKeyring({"k1": os.urandom(32)}, "k1"), allow_plaintext=True)
    with pytest.raises(CorruptRecordError):
        serde.loads_typed(payloads(canary.module)[kind])
    assert canary.untouched()


@dataclasses.dataclass
class Dot:
    x: int


def test_envelope_serializer_takes_a_graphs_allowlist() -> None:
    from langgraph_durable.errors import CorruptRecordError
    from langgraph_durable.protect import EnvelopeSerializer

    serde = EnvelopeSerializer(LocalKeyring({"k1": os.urandom(32)}, "k1"))
    stored = serde.dumps_typed(Dot(3))
    with pytest.raises(CorruptRecordError):
        serde.loads_typed(stored)
    widened = serde.with_msgpack_allowlist([(HERE, "Dot")])
    assert widened is not serde and widened.serde is not serde.serde
    assert widened.loads_typed(stored) == Dot(3)
