"""Fixtures of the effect-journal tests: a saver spec per backend, sync or async, a log."""

from __future__ import annotations

from typing import Any

import pytest

from tests.effects.graphs import EffectLog
from tests.redaction_helpers import SaverSpec

BACKENDS = ("postgres", "redis", "dynamodb")


def make_spec(request: pytest.FixtureRequest, backend: str) -> SaverSpec:
    """A JSON-able spec of a saver on the test's own schema, prefix or table."""
    if backend == "postgres":
        kwargs: dict[str, Any] = {"schema": request.getfixturevalue("pg_schema")}
        return SaverSpec("postgres", request.getfixturevalue("pg_url"), kwargs)
    if backend == "redis":
        kwargs = {"prefix": request.getfixturevalue("redis_prefix")}
        return SaverSpec("redis", request.getfixturevalue("redis_url"), kwargs)
    endpoint = request.getfixturevalue("dynamodb_endpoint")
    table = request.getfixturevalue("dynamodb_table")
    return SaverSpec("dynamodb", f"dynamodb://{table}?region=us-east-1&endpoint={endpoint}", {})


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def log(tmp_path: Any) -> EffectLog:
    return EffectLog(str(tmp_path / "effects.log"))
