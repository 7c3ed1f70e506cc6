"""PII redaction on PostgreSQL: nothing detectable at rest, placeholders, pseudonyms or
restored originals on read, and an approval that resumes in another process.

Encryption is off, so a scan of every row of every table of the test's schema
would show any value that was not redacted (the run with redaction off shows
that it does).
"""

from __future__ import annotations

import pytest

from tests.postgres.test_encryption import dump_schema
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
def spec(pg_url: str, pg_schema: str) -> SaverSpec:
    return SaverSpec("postgres", pg_url, {"schema": pg_schema})


def dump(spec: SaverSpec) -> bytes:
    return dump_schema(spec.conn, spec.kwargs["schema"])


# ---- nothing detectable at rest ------------------------------------------------------


@pytest.mark.parametrize("mode", ALL_MODES, ids=mode_id)
def test_pii_never_reaches_storage_sync(spec: SaverSpec, mode: str | None) -> None:
    spec = spec.with_mode(mode)
    with open_saver(spec) as saver:
        state = run_pii_graph(saver)
    assert state_view(state) == expected_view(mode, spec.redaction())
    check_storage(dump(spec), mode)


@pytest.mark.parametrize("mode", ALL_MODES, ids=mode_id)
async def test_pii_never_reaches_storage_async(spec: SaverSpec, mode: str | None) -> None:
    spec = spec.with_mode(mode)
    async with aopen_saver(spec) as saver:
        state = await arun_pii_graph(saver)
    assert state_view(state) == expected_view(mode, spec.redaction())
    check_storage(dump(spec), mode)


# ---- approval in another process --------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_agent_approved_in_a_new_process_sync(spec: SaverSpec, mode: str) -> None:
    spec = spec.with_mode(mode)
    with open_saver(spec) as saver:
        args = check_paused(start_agent(saver, "agent"), spec)
    check_resumed(resume_in_new_process(spec, "agent", use_async=False), args)
    assert pii_hits(dump(spec)) == []


@pytest.mark.parametrize("mode", MODES)
async def test_agent_approved_in_a_new_process_async(spec: SaverSpec, mode: str) -> None:
    spec = spec.with_mode(mode)
    async with aopen_saver(spec) as saver:
        args = check_paused(await astart_agent(saver, "agent"), spec)
    check_resumed(await aresume_in_new_process(spec, "agent", use_async=True), args)
    assert pii_hits(dump(spec)) == []
