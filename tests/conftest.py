"""Shared fixtures: real services from :mod:`tests.servers`, one namespace per test.

Each test gets its own schema (PostgreSQL), key prefix (Redis, single and cluster) or
table (DynamoDB), removed afterwards.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.servers import (
    SERVICES,
    cluster_conn_string,
    delete_dynamodb_table,
    delete_redis_keys,
    new_dynamodb_table_name,
    new_redis_prefix,
    plain_redis_url,
    set_dynamodb_environment,
)

#: Services resolved once in the pytest-xdist controller and handed to the workers.
SHARED_SERVICES = ("postgres", "redis", "redis-cluster", "dynamodb")


def _is_xdist_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") != "no"


def pytest_configure(config: pytest.Config) -> None:
    # Under pytest-xdist, resolve every service once in the controller and hand the URLs
    # to the workers through the environment (they are started after this hook), so each
    # throwaway server (and the 3-node Redis Cluster) is started once per run rather than
    # once per worker. The controller is otherwise idle, so the moto server it runs does
    # not compete with the tests for the workers' interpreter lock.
    if not _is_xdist_controller(config):
        return
    set_dynamodb_environment(os.environ)
    for name in SHARED_SERVICES:
        try:
            SERVICES.export(name, os.environ)
        except Exception as exc:  # the workers retry and fail the tests that need it
            print(f"[lgd test rig] {name}: not available: {exc}", file=sys.stderr)


def pytest_unconfigure(config: pytest.Config) -> None:
    SERVICES.close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"{name}: {SERVICES.plan(name)}" for name in SHARED_SERVICES]


# --------------------------------------------------------------------------- postgres


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


# --------------------------------------------------------------------------- redis


@pytest.fixture(scope="session")
def redis_url() -> str:
    """``redis://host:port/db`` of a single (non-cluster) Redis server."""
    return SERVICES.redis().url


@pytest.fixture(scope="session")
def redis_cluster_url() -> str:
    """``redis://host:port`` of one node of a 3-primary Redis Cluster (a seed for
    ``redis.cluster.RedisCluster.from_url``)."""
    return plain_redis_url(SERVICES.redis_cluster().url)


@pytest.fixture(scope="session")
def redis_cluster_conn_string(redis_cluster_url: str) -> str:
    """The cluster as a saver connection string: ``redis+cluster://host:port``."""
    return cluster_conn_string(redis_cluster_url)


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A fresh key prefix (``t`` + 12 hex digits) for one test.

    Afterwards every key starting with it is deleted (SCAN + UNLINK) on the single
    server and on the cluster, whichever of them this process has used.
    """
    prefix = new_redis_prefix()
    yield prefix
    for name in ("redis", "redis-cluster"):
        endpoint = SERVICES.resolved(name)
        if endpoint is not None:
            delete_redis_keys(endpoint.url, prefix)


# --------------------------------------------------------------------------- dynamodb


@pytest.fixture(scope="session")
def dynamodb_endpoint() -> str:
    """``http://host:port`` of a DynamoDB API (moto unless ``LGD_DYNAMODB_ENDPOINT``).

    Also gives boto3 dummy credentials and the region ``us-east-1`` through the
    environment, where they are not set already.
    """
    set_dynamodb_environment(os.environ)
    return SERVICES.dynamodb().url


@pytest.fixture
def dynamodb_table(dynamodb_endpoint: str) -> Iterator[str]:
    """A fresh table name (not created) for one test; the table is deleted afterwards."""
    name = new_dynamodb_table_name()
    yield name
    delete_dynamodb_table(dynamodb_endpoint, name)


# --------------------------------------------------------------------------- kms


@pytest.fixture
def kms_client(dynamodb_endpoint: str) -> Any:
    """A boto3 KMS client on ``LGD_KMS_ENDPOINT``, else on the rig's moto server.

    moto's server answers every AWS API, KMS included, and enforces the
    encryption context on Decrypt.
    """
    import boto3

    endpoint = os.environ.get("LGD_KMS_ENDPOINT") or dynamodb_endpoint
    return boto3.client("kms", endpoint_url=endpoint, region_name="us-east-1")
