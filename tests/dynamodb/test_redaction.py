"""PII redaction on DynamoDB (moto's server): nothing detectable at rest, placeholders,
pseudonyms or restored originals on read, and an approval that resumes in
another process.

Encryption is off, so a dump of every item of the test's table (every
attribute, maps and lists included) would show any value that was not redacted
(the run with redaction off shows that it does). The savers come from
``from_conn_string("dynamodb://TABLE?region=...&endpoint=...", redaction=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.dynamodb.helpers import REGION, make_client, table_dump
from tests.redaction_helpers import (
    ALL_MODES,
    MODES,
    SaverSpec,
    aopen_saver,
    aresume_in_new_process,
    arun_pii_graph,
    astart_agent,
    check_paused,
    check_resumed,
    check_storage,
    expected_view,
    mode_id,
    open_saver,
    pii_hits,
    resume_in_new_process,
    run_pii_graph,
    start_agent,
    state_view,
)


@pytest.fixture
def spec(dynamodb_endpoint: str, dynamodb_table: str) -> SaverSpec:
    conn = f"dynamodb://{dynamodb_table}?region={REGION}&endpoint={dynamodb_endpoint}"
    return SaverSpec("dynamodb", conn, {})


@pytest.fixture
def dump(dynamodb_endpoint: str, dynamodb_table: str) -> Callable[[], bytes]:
    client = make_client(dynamodb_endpoint)
    return lambda: table_dump(client, dynamodb_table)


# ---- nothing detectable at rest ------------------------------------------------------


@pytest.mark.parametrize("mode", ALL_MODES, ids=mode_id)
def test_pii_never_reaches_storage_sync(spec: SaverSpec, dump: Any, mode: str | None) -> None:
    spec = spec.with_mode(mode)
    with open_saver(spec) as saver:
        state = run_pii_graph(saver)
    assert state_view(state) == expected_view(mode, spec.redaction())
    check_storage(dump(), mode)


@pytest.mark.parametrize("mode", ALL_MODES, ids=mode_id)
async def test_pii_never_reaches_storage_async(
    spec: SaverSpec, dump: Any, mode: str | None
) -> None:
    spec = spec.with_mode(mode)
    async with aopen_saver(spec) as saver:
        state = await arun_pii_graph(saver)
    assert state_view(state) == expected_view(mode, spec.redaction())
    check_storage(dump(), mode)


# ---- approval in another process --------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_agent_approved_in_a_new_process_sync(spec: SaverSpec, dump: Any, mode: str) -> None:
    spec = spec.with_mode(mode)
    with open_saver(spec) as saver:
        args = check_paused(start_agent(saver, "agent"), spec)
    check_resumed(resume_in_new_process(spec, "agent", use_async=False), args)
    assert pii_hits(dump()) == []


@pytest.mark.parametrize("mode", MODES)
async def test_agent_approved_in_a_new_process_async(spec: SaverSpec, dump: Any, mode: str) -> None:
    spec = spec.with_mode(mode)
    async with aopen_saver(spec) as saver:
        args = check_paused(await astart_agent(saver, "agent"), spec)
    check_resumed(await aresume_in_new_process(spec, "agent", use_async=True), args)
    assert pii_hits(dump()) == []
