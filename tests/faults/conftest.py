"""Proxies (tests/faults/proxy.py) in front of the test rig's PostgreSQL and Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.proxy import FaultProxy, proxy_to


@pytest.fixture
def pg_proxy(pg_url: str) -> Iterator[FaultProxy]:
    proxy = proxy_to(pg_url, 5432)
    yield proxy
    proxy.close()


@pytest.fixture
def redis_proxy(redis_url: str) -> Iterator[FaultProxy]:
    proxy = proxy_to(redis_url, 6379)
    yield proxy
    proxy.close()
