"""Stores of a ``SaverSpec`` for the CLI's store tests, and raw scans of their items.

The raw scans read the backend's storage directly (SQL, Redis keys, a DynamoDB Scan),
not through the store, so a test sees what is stored, whatever the store would return:
each stored item as ``(tenant, namespace, key)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.redaction_helpers import SaverSpec

__all__ = ["Item", "open_spec_store", "raw_items"]

Item = tuple[str, tuple[str, ...], str]

_CLIENTS: dict[tuple[str, str], Any] = {}


@contextmanager
def open_spec_store(spec: SaverSpec, tenant: Any, **options: Any) -> Iterator[Any]:
    """A set-up sync store of ``spec``'s backend, on its schema, prefix or table."""
    if spec.backend == "postgres":
        from langgraph_durable.postgres import PostgresStore

        with PostgresStore.from_conn_string(
            spec.conn, tenant=tenant, pool_size=1, **spec.kwargs, **options
        ) as store:
            store.setup()
            yield store
    elif spec.backend == "redis":
        from langgraph_durable.redis import RedisStore

        with RedisStore.from_conn_string(
            spec.conn, tenant=tenant, **spec.kwargs, **options
        ) as store:
            store.setup()
            yield store
    else:
        from langgraph_durable.dynamodb import DynamoDBStore

        with DynamoDBStore.from_conn_string(spec.conn, tenant=tenant, **options) as store:
            store.setup()
            yield store


def raw_items(spec: SaverSpec) -> set[Item]:
    """Every store item the backend holds for ``spec``'s schema, prefix or table."""
    if spec.backend == "postgres":
        return _pg_items(spec)
    if spec.backend == "redis":
        return _redis_items(spec)
    return _dynamodb_items(spec)


def _pg_items(spec: SaverSpec) -> set[Item]:
    import psycopg
    from psycopg import sql

    query = sql.SQL("SELECT tenant_id, prefix, key FROM {}.store_items").format(
        sql.Identifier(spec.kwargs["schema"])
    )
    with psycopg.connect(spec.conn, autocommit=True) as conn:
        rows = conn.execute(query).fetchall()
    return {(tenant, tuple(prefix.split(".")), key) for tenant, prefix, key in rows}


def _redis_items(spec: SaverSpec) -> set[Item]:
    import redis

    prefix = spec.kwargs["prefix"]
    client = redis.Redis.from_url(spec.conn)
    try:
        names = list(client.scan_iter(match=f"{prefix}:store:*", count=1000))
    finally:
        client.close()
    found: set[Item] = set()
    for name in names:
        text = name.decode()
        head, sep, member = text.partition("}:i:")
        if not sep:
            continue  # an index key
        tenant = unquote(head[len(f"{prefix}:store:{{") :])
        namespace, _, key = member.partition("\x00")
        found.add((tenant, tuple(namespace.split(".")), key))
    return found


def _dynamodb_items(spec: SaverSpec) -> set[Item]:
    import boto3

    from langgraph_durable.dynamodb._items import dec

    parts = urlsplit(spec.conn)
    query = parse_qs(parts.query)
    where = (query["region"][0], query["endpoint"][0])
    client = _CLIENTS.get(where)
    if client is None:  # one per endpoint: making a boto3 client takes a few tenths of a second
        client = _CLIENTS[where] = boto3.client(
            "dynamodb", region_name=where[0], endpoint_url=where[1]
        )
    found: set[Item] = set()
    for page in client.get_paginator("scan").paginate(TableName=parts.netloc):
        for item in page["Items"]:
            pk, sk = item["pk"]["S"], item["sk"]["S"]
            tenant, sep, rest = pk.partition("##s#")
            if not sep or not sk.startswith("k#"):
                continue
            labels = tuple(dec(label) for label in rest.split("#")[:-1])
            found.add((dec(tenant), labels, dec(sk[2:])))
    return found
