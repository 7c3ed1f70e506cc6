"""Property tests: every checkpoint a saver returns equals ``InMemorySaver``'s for the same run.

Hypothesis draws programs (``tests/property/history.py``): appends of 1-3
messages, replacements by id, ``RemoveMessage``, forks (``invoke`` or
``update_state`` from an earlier checkpoint, replays), interrupts and resumes,
failing nodes, ``copy_thread``, switching threads, ``delete_for_runs``,
``prune`` (``keep_latest`` and ``delete``) and a second saver instance on the
same storage. Each program runs on a saver and on ``InMemorySaver``; after
every step the thread's ``list`` must be the same on both, and at the end so
must ``get_tuple`` of every checkpoint, of the latest, and ``list`` with
``limit``, ``before`` and ``filter``, on every thread.

The savers: PostgreSQL, Redis and DynamoDB (sync), each with

- ``chain2``: ``delta_chain=2`` (full copies and deltas interleave) and the
  smallest pages the backend allows to be set (Redis ``page_size=3``,
  DynamoDB ``list_page_items=5, get_page_items=2``; PostgreSQL's are fixed),
  so listings cross page boundaries in the middle of delta chains;
- ``default``: the saver's defaults;

and the async PostgreSQL saver with ``delta_chain=3``. A reference-against-
reference test checks the harness itself.

Each example uses fresh thread and run ids on the test's own schema or prefix
(DynamoDB: a table of its own, since moto's Scan, which ``delete_for_runs``
uses, reads the whole table, and moto serves one request at a time).
Hypothesis keeps no example database (``database=None``); a failure prints
the program and a trace of its steps.

Environment:
    LGD_PROPERTY_EXAMPLES: examples per PostgreSQL and Redis test (default 4,
        besides the two fixed programs every run tries first, which cover every
        operation); DynamoDB (moto answers ~20 times slower) runs a quarter as
        many (at least 1), the reference self-test four times as many. ``make
        soak`` runs 100; a longer
        run: ``LGD_PROPERTY_EXAMPLES=400 pytest -n 2 tests/property -p no:randomly``.
    LGD_PROPERTY_STEPS: most operations after the opening appends (default 12).
    CI: ``true`` derandomizes the draws (the same programs on every CI run).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from hypothesis import example, given, settings

from tests.effects.conftest import make_spec
from tests.property.history import (
    Append,
    AsyncSide,
    Checks,
    Copy,
    DeleteRun,
    Fork,
    OtherProcess,
    Pause,
    Prune,
    RefSide,
    Remove,
    Replace,
    Resume,
    Switch,
    SyncSide,
    checks,
    programs,
    run_program,
)
from tests.redaction_helpers import SaverSpec, _classes, aopen_saver, open_saver
from tests.servers import delete_dynamodb_table, new_dynamodb_table_name

EXAMPLES = int(os.environ.get("LGD_PROPERTY_EXAMPLES", "4"))
STEPS = int(os.environ.get("LGD_PROPERTY_STEPS", "12"))
BACKENDS = ("postgres", "redis", "dynamodb")
#: Saver arguments per variant and backend (``default``: none).
VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "chain2": {
        "postgres": {"delta_chain": 2},
        "redis": {"delta_chain": 2, "page_size": 3},
        "dynamodb": {"delta_chain": 2, "list_page_items": 5, "get_page_items": 2},
    },
    "default": {"postgres": {}, "redis": {}, "dynamodb": {}},
}
#: In CI (``CI=true``) the draws are derandomized: every CI run checks the same
#: programs, so a red CI means a regression; other runs draw new programs.
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=os.environ.get("CI", "").lower() == "true",
)

#: Programs every run tries first, so each operation is covered whatever is drawn.
#: Deltas written by one instance, extended by the other, pruned under both, then
#: edited in the middle and shrunk:
TWO_PROCESSES = [
    Append(3, "invoke"),
    Append(2, "invoke"),
    Append(1, "update"),
    OtherProcess(),
    Append(1, "invoke"),
    OtherProcess(),
    Prune("keep_latest"),
    Append(2, "invoke"),
    Replace(0, "invoke"),
    Remove(1, "update"),
    Append(1, "invoke", large=True),
]
#: Time travel, a copy, an interrupt and a failure, a deleted run, a trimmed thread:
FORKS_AND_COPIES = [
    Append(2, "invoke"),
    Append(1, "invoke", large=True),
    Fork(3, "invoke", 2),
    Fork(5, "update"),
    Fork(1, "replay"),
    Copy(),
    Append(1, "invoke"),
    Pause("interrupt"),
    Resume(),
    Switch(0),
    DeleteRun(1),
    Pause("error"),
    Prune("keep_latest"),
    Append(1, "invoke"),
    Copy(),
    Prune("delete"),
    Append(2, "update"),
]
COVERAGE = Checks(limit=2, before=3, source="loop")
#: A failing example is shrunk for up to five minutes (Hypothesis's own bound),
#: which the suite's 300 s timeout would cut short, losing the minimal program.
SHRINK_TIMEOUT = pytest.mark.timeout(900)


def examples(backend: str) -> int:
    return max(1, EXAMPLES // 4) if backend == "dynamodb" else EXAMPLES


def _spec(request: pytest.FixtureRequest, backend: str, options: dict[str, Any]) -> SaverSpec:
    spec = make_spec(request, backend)
    spec.kwargs.update(options)
    return spec


def _prefix() -> str:
    return f"p{uuid.uuid4().hex[:10]}"


@contextmanager
def sync_side(spec: SaverSpec, name: str) -> Iterator[SyncSide]:
    """Two savers on ``spec``: the second is "another process" (same storage, its own
    delta tracker)."""
    with ExitStack() as stack:
        savers = [stack.enter_context(open_saver(spec)) for _ in range(2)]
        yield SyncSide(savers, name)


@contextmanager
def fresh_table(endpoint: str, options: dict[str, Any]) -> Iterator[SaverSpec]:
    """A DynamoDB saver spec on a new table, deleted afterwards."""
    table = new_dynamodb_table_name()
    try:
        conn = f"dynamodb://{table}?region=us-east-1&endpoint={endpoint}"
        yield SaverSpec("dynamodb", conn, dict(options))
    finally:
        delete_dynamodb_table(endpoint, table)


@SHRINK_TIMEOUT
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_history_matches_memory_saver(
    request: pytest.FixtureRequest, backend: str, variant: str
) -> None:
    options = VARIANTS[variant][backend]
    name = f"{_classes(backend)[0].__name__}({options})"
    with ExitStack() as stack:
        if backend == "dynamodb":
            endpoint = request.getfixturevalue("dynamodb_endpoint")
            shared = None
        else:
            shared = stack.enter_context(sync_side(_spec(request, backend, options), name))

        @settings(PROPERTY, max_examples=examples(backend))
        @given(program=programs(STEPS), params=checks)
        @example(program=TWO_PROCESSES, params=COVERAGE)
        @example(program=FORKS_AND_COPIES, params=COVERAGE)
        def history_matches(program: list[Any], params: Checks) -> None:
            if shared is not None:
                run_program(RefSide(), shared, _prefix(), program, params)
                return
            with fresh_table(endpoint, options) as spec, sync_side(spec, name) as side:
                run_program(RefSide(), side, _prefix(), program, params)

        history_matches()


@SHRINK_TIMEOUT
def test_async_history_matches_memory_saver(request: pytest.FixtureRequest) -> None:
    options = {"delta_chain": 3}
    spec = _spec(request, "postgres", options)
    loop = asyncio.new_event_loop()
    contexts = [aopen_saver(spec) for _ in range(2)]
    entered = []
    try:
        for context in contexts:
            entered.append(loop.run_until_complete(context.__aenter__()))
        side = AsyncSide(entered, f"AsyncPostgresSaver({options})", loop)

        @PROPERTY
        @given(program=programs(STEPS), params=checks)
        @example(program=TWO_PROCESSES, params=COVERAGE)
        @example(program=FORKS_AND_COPIES, params=COVERAGE)
        def history_matches(program: list[Any], params: Checks) -> None:
            run_program(RefSide(), side, _prefix(), program, params)

        history_matches()
    finally:
        for context in reversed(contexts[: len(entered)]):
            loop.run_until_complete(context.__aexit__(None, None, None))
        loop.close()


@SHRINK_TIMEOUT
@settings(PROPERTY, max_examples=EXAMPLES * 4)
@given(program=programs(STEPS), params=checks)
@example(program=TWO_PROCESSES, params=COVERAGE)
@example(program=FORKS_AND_COPIES, params=COVERAGE)
def test_reference_against_itself(program: list[Any], params: Checks) -> None:
    """The harness: two ``InMemorySaver`` runs of one program compare equal (labels,
    versions and task ids differ between them as they do against a saver)."""
    other = RefSide()
    other.name = "second reference"
    run = run_program(RefSide(), other, _prefix(), program, params)
    assert len(run.trace) == len(program)
