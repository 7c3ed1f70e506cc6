"""The differential harness on the pure core's dict store (no service needed).

Backends run the same harness in their own test modules (``test_postgres_store``).
``LGD_PROPERTY_EXAMPLES`` sets the examples per test (default 4, as the other
property tests).
"""

from __future__ import annotations

import asyncio
import os

import pytest
from hypothesis import Phase, given, settings
from langgraph.store.base import GetOp, PutOp, SearchOp

from tests.store.core_store import CoreStore, aopen_core_store, open_core_store
from tests.store.differential import (
    COVERING_PROGRAM,
    FakeClock,
    Mismatch,
    acheck_ttl,
    arun_program,
    check_ttl,
    index_config,
    programs,
    run_program,
)

PHASES = tuple(Phase) if os.environ.get("LGD_STORE_SHRINK") else tuple(set(Phase) - {Phase.shrink})
EXAMPLES = int(os.environ.get("LGD_PROPERTY_EXAMPLES", "4"))
PROPERTY = settings(
    max_examples=max(EXAMPLES, 10),  # the dict store is cheap: a few more draws
    deadline=None,
    database=None,
    derandomize=os.environ.get("CI", "").lower() == "true",
    phases=PHASES,
)


def test_covering_program_sync_and_async() -> None:
    run_program(CoreStore(index=index_config()), COVERING_PROGRAM)
    asyncio.run(arun_program(CoreStore(index=index_config()), COVERING_PROGRAM))


@PROPERTY
@given(programs())
def test_random_programs(program: list) -> None:
    run_program(CoreStore(index=index_config()), program)


@PROPERTY
@given(programs(6))
def test_random_programs_async(program: list) -> None:
    asyncio.run(arun_program(CoreStore(index=index_config()), program))


def test_ttl_with_an_injected_clock() -> None:
    check_ttl(open_core_store)
    asyncio.run(acheck_ttl(aopen_core_store))


class _Wrong(CoreStore):
    """A store that breaks one rule at a time, to show the harness notices."""

    def __init__(self, rule: str, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.rule = rule

    def batch(self, ops):  # type: ignore[no-untyped-def]
        ops = list(ops)
        if self.rule == "limit-before-filter":
            ops = [
                o._replace(filter=None) if isinstance(o, SearchOp) and o.limit < 100 else o
                for o in ops
            ]
        results = super().batch(ops)
        if self.rule == "oldest-first":
            results = [
                r[::-1] if isinstance(r, list) and r and hasattr(r[0], "score") else r
                for r in results
            ]
        if self.rule == "forget-gets":
            results = [
                None if isinstance(o, GetOp) else r for o, r in zip(ops, results, strict=True)
            ]
        return results


@pytest.mark.parametrize("rule", ["limit-before-filter", "oldest-first", "forget-gets"])
def test_the_harness_notices_a_wrong_store(rule: str) -> None:
    program: list[list] = [
        [PutOp(("a",), f"k{i}", {"n": i, "s": "x", "tag": {"t": 0}})] for i in range(3)
    ]
    program += [
        [GetOp(("a",), "k1"), SearchOp(("a",), filter={"n": {"$lte": 1}}, limit=2)],
    ]
    with pytest.raises(Mismatch):
        run_program(_Wrong(rule, index=index_config(), clock=FakeClock().tick), program)
