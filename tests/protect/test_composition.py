"""Redaction and encryption together, on every backend: redact -> serialize -> encrypt.

The redacted values are what gets encrypted, so a read shows the mode's view
(pseudonyms, or originals restored from the encrypted token vault); the clear
metadata that encryption authenticates is computed from the redacted copy, and
Redis stores the redacted message lists as (encrypted) deltas.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.encryption_helpers import local_encryption
from tests.redaction_helpers import (
    SaverSpec,
    aopen_saver,
    arun_pii_graph,
    expected_view,
    open_saver,
    run_pii_graph,
    state_view,
)

BACKENDS = ("postgres", "redis", "dynamodb")


def _spec(request: pytest.FixtureRequest, backend: str, mode: str) -> SaverSpec:
    if backend == "postgres":
        kwargs: dict[str, Any] = {"schema": request.getfixturevalue("pg_schema")}
        spec = SaverSpec("postgres", request.getfixturevalue("pg_url"), kwargs)
    elif backend == "redis":
        kwargs = {"prefix": request.getfixturevalue("redis_prefix")}
        spec = SaverSpec("redis", request.getfixturevalue("redis_url"), kwargs)
    else:
        endpoint = request.getfixturevalue("dynamodb_endpoint")
        table = request.getfixturevalue("dynamodb_table")
        conn = f"dynamodb://{table}?region=us-east-1&endpoint={endpoint}"
        spec = SaverSpec("dynamodb", conn, {})
    spec = spec.with_mode(mode)
    spec.kwargs["encryption"] = local_encryption()
    return spec


@pytest.mark.parametrize("mode", ["pseudonymize", "tokenize"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_redaction_under_encryption_sync(
    request: pytest.FixtureRequest, backend: str, mode: str
) -> None:
    spec = _spec(request, backend, mode)
    with open_saver(spec) as saver:
        state = run_pii_graph(saver)
        assert state_view(state) == expected_view(mode, spec.redaction())
        history = list(saver.list({"configurable": {"thread_id": "pii"}}))
        assert len(history) >= 4  # every checkpoint opens: metadata checks pass
    # a new process (new saver, same keyring and redaction key) reads the same
    with open_saver(spec) as saver:
        again = saver.get_tuple({"configurable": {"thread_id": "pii"}})
        assert again is not None
        assert again.checkpoint["channel_values"]["messages"] == state.values["messages"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_redaction_under_encryption_async(
    request: pytest.FixtureRequest, backend: str
) -> None:
    spec = _spec(request, backend, "tokenize")
    async with aopen_saver(spec) as saver:
        state = await arun_pii_graph(saver)
    assert state_view(state) == expected_view("tokenize", spec.redaction())
