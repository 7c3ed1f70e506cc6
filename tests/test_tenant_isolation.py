"""Crafted ids cannot reach another tenant's records, on every backend.

Each case is two (tenant, thread, namespace) triples that would name the same
records if a backend joined the parts with a separator and did not escape them
(Redis joins with ``:`` inside a ``{...}`` hash tag, DynamoDB with ``#``). One
triple is written; every read, listing, write and delete through the other
must see and touch nothing of it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.effects.conftest import BACKENDS, make_spec
from tests.helpers import cfg, put_chain
from tests.redaction_helpers import SaverSpec, aopen_saver, open_saver

#: (written, probe): the written triple, and one that collides with it when the
#: parts are joined naively.
CASES: list[tuple[tuple[str, str, str], tuple[str, str, str]]] = [
    (("a", "b:c", ""), ("a:b", "c", "")),
    (("a", "b#c", ""), ("a#b", "c", "")),
    (("a}", "{b", ""), ("a", "}{b", "")),
    (("a:b", "c", ""), ("a%3Ab", "c", "")),
    (("a#b", "c", ""), ("a%23b", "c", "")),
    (("t", "x", "n#1"), ("t", "x#n", "1")),
    (("t", "x", "n:1"), ("t", "x:n", "1")),
    (("t", "x", ""), ("t", "x", "#")),
]


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


def _cfg(triple: tuple[str, str, str], checkpoint_id: str | None = None) -> dict[str, Any]:
    tenant, thread, ns = triple
    return cfg(thread, ns, checkpoint_id, tenant_id=tenant)


def _ids(case: tuple[tuple[str, str, str], tuple[str, str, str]]) -> str:
    return f"{case[0]!r}~{case[1]!r}"


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_a_colliding_triple_sees_and_touches_nothing(
    spec: SaverSpec, case: tuple[tuple[str, str, str], tuple[str, str, str]]
) -> None:
    written, probe = case
    with open_saver(spec) as saver:
        configs = put_chain(saver, written[1], 3, ns=written[2], tenant_id=written[0])
        saver.put_writes(configs[-1], [("inbox", "secret")], "task-1")
        stored = saver.get_tuple(_cfg(written))
        assert stored is not None and stored.pending_writes
        newest = configs[-1]["configurable"]["checkpoint_id"]

        # reads through the probe find nothing
        assert saver.get_tuple(_cfg(probe)) is None
        assert saver.get_tuple(_cfg(probe, newest)) is None
        assert list(saver.list(_cfg(probe))) == []
        probe_tenant = {"configurable": {"tenant_id": probe[0]}}
        listed = {t.config["configurable"]["thread_id"] for t in saver.list(probe_tenant)}
        assert written[1] not in listed or probe[0] == written[0]

        # writes (and deletes, where the probe is another thread) through the
        # probe leave the written thread whole
        put_chain(saver, probe[1], 1, ns=probe[2], tenant_id=probe[0])
        if probe[:2] != written[:2]:
            saver.delete_thread(probe[1], tenant_id=probe[0])
        again = saver.get_tuple(_cfg(written))
        assert again is not None
        assert again.checkpoint == stored.checkpoint
        assert again.pending_writes == stored.pending_writes
        assert len(list(saver.list(_cfg(written)))) == 3


async def test_async_savers_keep_crafted_tenants_apart(spec: SaverSpec) -> None:
    written, probe = CASES[0]
    async with aopen_saver(spec) as saver:
        from langgraph.checkpoint.base import empty_checkpoint

        cp = empty_checkpoint()
        config = await saver.aput(_cfg(written), cp, {"source": "input", "step": -1}, {})
        assert await saver.aget_tuple(_cfg(probe)) is None
        assert [t async for t in saver.alist(_cfg(probe))] == []
        await saver.adelete_thread(probe[1], tenant_id=probe[0])
        kept = await saver.aget_tuple(config)
        assert kept is not None and kept.checkpoint["id"] == cp["id"]
