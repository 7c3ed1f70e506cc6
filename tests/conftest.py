"""Shared fixtures: real services from :mod:`tests.servers`, one schema per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.servers import SERVICES


def _is_xdist_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") != "no"


def pytest_configure(config: pytest.Config) -> None:
    # Under pytest-xdist, resolve Postgres once in the controller and hand the URL to
    # the workers through the environment (they are started after this hook), so a
    # throwaway server is started once per run rather than once per worker.
    if _is_xdist_controller(config):
        SERVICES.export("postgres", os.environ)


def pytest_unconfigure(config: pytest.Config) -> None:
    SERVICES.close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"postgres: {SERVICES.plan('postgres')}"]


@pytest.fixture(scope="session")
def pg_url() -> str:
    """URL of a PostgreSQL database the tests may create schemas in."""
    return SERVICES.postgres().url


@pytest.fixture
def pg_schema(pg_url: str) -> Iterator[str]:
    """A fresh schema name (not created) that is dropped with everything in it afterwards."""
    import psycopg
    from psycopg import sql

    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
