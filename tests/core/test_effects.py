"""The effect journal's pure core: argument digests, effect ids, decisions."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langgraph_durable._core.effects import (
    EffectSite,
    StoredEffect,
    args_digest,
    decide,
    downstream_key,
    effect_material,
    user_key_material,
)
from langgraph_durable._core.records import Sealed
from langgraph_durable.errors import InvalidInputError


@dataclasses.dataclass
class Order:
    sku: str
    qty: int


def test_digest_is_canonical_for_equal_arguments() -> None:
    a = args_digest((), {"to": "a@x.org", "items": {"b": 2, "a": 1}, "when": None})
    b = args_digest((), {"when": None, "items": {"a": 1, "b": 2}, "to": "a@x.org"})
    assert a == b
    assert args_digest((1, 2), {}) == args_digest([1, 2], {})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (1, "1"),
        (1, 1.5),
        (True, 1),
        (None, "None"),
        ([1, 2], [2, 1]),
        (b"ab", "ab"),
        ({"a": 1}, {"a": 2}),
        ({1: "x"}, {"1": "x"}),
        (Order("x", 1), Order("x", 2)),
        (HumanMessage("hi"), AIMessage("hi")),
        (2**60, 2**60 + 1),
        (float("nan"), float("inf")),
        ({1, 2}, [1, 2]),
        (datetime.date(2026, 1, 1), "2026-01-01"),
    ],
)
def test_digest_tells_different_arguments_apart(left: Any, right: Any) -> None:
    assert args_digest((), {"v": left}) != args_digest((), {"v": right})


def test_digest_of_rich_values_is_stable() -> None:
    value = {
        "order": Order("sku-1", 3),
        "msg": HumanMessage("hello", id="m1"),
        "id": uuid.UUID(int=7),
        "at": datetime.datetime(2026, 12, 1, 3, 0),
        "tags": frozenset({"b", "a"}),
    }
    assert args_digest((), value) == args_digest((), dict(value))


def test_digest_refuses_values_it_cannot_name() -> None:
    with pytest.raises(InvalidInputError, match="key="):
        args_digest((), {"lock": object()})


def test_material_separates_every_part() -> None:
    site = EffectSite("", 3, "('__pregel_pull','pay')", "charge")
    base = effect_material(site, 0, "d1")
    others = [
        effect_material(dataclasses.replace(site, ns="sub"), 0, "d1"),
        effect_material(dataclasses.replace(site, step=4), 0, "d1"),
        effect_material(dataclasses.replace(site, path="('__pregel_pull','ship')"), 0, "d1"),
        effect_material(dataclasses.replace(site, name="refund"), 0, "d1"),
        effect_material(site, 1, "d1"),
        effect_material(site, 0, "d2"),
        user_key_material("charge"),
    ]
    assert len({base, *others}) == len(others) + 1
    # length-prefixed parts: moving a boundary changes the material
    assert effect_material(EffectSite("a", 1, "bc", "n"), 0, "d") != effect_material(
        EffectSite("ab", 1, "c", "n"), 0, "d"
    )


def test_downstream_key_depends_on_tenant_thread_and_entry() -> None:
    keys = {
        downstream_key("t1", "th", "e"),
        downstream_key("t2", "th", "e"),
        downstream_key("t1", "th2", "e"),
        downstream_key("t1", "th", "e2"),
    }
    assert len(keys) == 4
    assert all(k.startswith("lgd-") and len(k) == 44 for k in keys)
    assert downstream_key("t1", "th", "e") == downstream_key("t1", "th", "e")


def _entry(**kw: Any) -> StoredEffect:
    base: dict[str, Any] = dict(
        effect_id="e",
        state="claimed",
        token=1,
        attempt=1,
        lease_until=100.0,
        request=Sealed("t", b""),
    )
    base.update(kw)
    return StoredEffect(**base)


def test_decisions() -> None:
    assert decide(_entry(won=True, token=3, attempt=3), 50).action == "run"
    assert decide(_entry(won=True), 50).token == 1
    assert decide(_entry(state="done", outcome="ok"), 500).action == "replay"
    assert decide(_entry(lease_until=100.0), 99.9).action == "wait"
    assert decide(_entry(lease_until=100.0), 100.0).action == "ambiguous"
