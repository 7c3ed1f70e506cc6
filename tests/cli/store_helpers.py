"""Stores of a ``SaverSpec`` for the CLI's store tests, and raw scans of their items.

The raw scans read the backend's storage directly (SQL, Redis keys, a DynamoDB Scan),
not through the store, so a test sees what is stored, whatever the store would return:
each stored item as ``(tenant, namespace, key)``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.redaction_helpers import SaverSpec

__all__ = [
    "Item",
    "store_classes",
    "open_spec_store",
    "aopen_spec_store",
    "raw_items",
    "raw_value",
    "write_raw_value",
    "raw_time",
    "write_raw_time",
    "raw_vectors",
    "write_raw_vectors",
]

Item = tuple[str, tuple[str, ...], str]

_CLIENTS: dict[tuple[str, str], Any] = {}


def store_classes(backend: str) -> tuple[type[Any], type[Any]]:
    """The sync and async store classes of ``backend``."""
    if backend == "postgres":
        from langgraph_durable.postgres import AsyncPostgresStore, PostgresStore

        return PostgresStore, AsyncPostgresStore
    if backend == "redis":
        from langgraph_durable.redis import AsyncRedisStore, RedisStore

        return RedisStore, AsyncRedisStore
    from langgraph_durable.dynamodb import AsyncDynamoDBStore, DynamoDBStore

    return DynamoDBStore, AsyncDynamoDBStore


def _store_options(spec: SaverSpec) -> dict[str, Any]:
    if spec.backend == "postgres":
        return {"pool_size": 1, **spec.kwargs}
    return dict(spec.kwargs)


@contextmanager
def open_spec_store(spec: SaverSpec, tenant: Any, **options: Any) -> Iterator[Any]:
    """A set-up sync store of ``spec``'s backend, on its schema, prefix or table."""
    cls = store_classes(spec.backend)[0]
    with cls.from_conn_string(spec.conn, tenant=tenant, **_store_options(spec), **options) as store:
        store.setup()
        yield store


@asynccontextmanager
async def aopen_spec_store(spec: SaverSpec, tenant: Any, **options: Any) -> AsyncIterator[Any]:
    """A set-up async store of ``spec``'s backend, on its schema, prefix or table."""
    cls = store_classes(spec.backend)[1]
    async with cls.from_conn_string(
        spec.conn, tenant=tenant, **_store_options(spec), **options
    ) as store:
        await store.setup()
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


def _dynamodb_client(spec: SaverSpec) -> tuple[Any, str]:
    """A boto3 client of ``spec``'s endpoint (one per endpoint: making one takes a few
    tenths of a second) and its table."""
    import boto3

    parts = urlsplit(spec.conn)
    query = parse_qs(parts.query)
    where = (query["region"][0], query["endpoint"][0])
    client = _CLIENTS.get(where)
    if client is None:
        client = _CLIENTS[where] = boto3.client(
            "dynamodb", region_name=where[0], endpoint_url=where[1]
        )
    return client, parts.netloc


def _dynamodb_items(spec: SaverSpec) -> set[Item]:
    from langgraph_durable.dynamodb._items import dec

    client, table = _dynamodb_client(spec)
    found: set[Item] = set()
    for page in client.get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            pk, sk = item["pk"]["S"], item["sk"]["S"]
            tenant, sep, rest = pk.partition("##s#")
            if not sep or not sk.startswith("k#"):
                continue
            labels = tuple(dec(label) for label in rest.split("#")[:-1])
            found.add((dec(tenant), labels, dec(sk[2:])))
    return found


def raw_value(spec: SaverSpec, tenant: str, namespace: tuple[str, ...], key: str) -> bytes:
    """The stored bytes of an item's value (sealed: serialized, encrypted, tagged)."""
    if spec.backend == "postgres":
        import psycopg
        from psycopg import sql

        query = sql.SQL(
            "SELECT value FROM {}.store_items WHERE tenant_id = %s AND prefix = %s AND key = %s"
        ).format(sql.Identifier(spec.kwargs["schema"]))
        with psycopg.connect(spec.conn, autocommit=True) as conn:
            row = conn.execute(query, (tenant, ".".join(namespace), key)).fetchone()
        assert row is not None, (tenant, namespace, key)
        return bytes(row[0])
    if spec.backend == "redis":
        client, name = _redis_item(spec, tenant, namespace, key)
        try:
            data = client.hget(name, "v")
        finally:
            client.close()
        assert data is not None, (tenant, namespace, key)
        return bytes(data)
    client, table = _dynamodb_client(spec)
    item = client.get_item(
        TableName=table, Key=_dynamodb_key(tenant, namespace, key), ConsistentRead=True
    )["Item"]
    return bytes(item["v"]["B"])


def write_raw_value(
    spec: SaverSpec, tenant: str, namespace: tuple[str, ...], key: str, data: bytes
) -> None:
    """Overwrite the stored bytes of an item's value, behind the store's back."""
    field = "value" if spec.backend == "postgres" else "v"
    _overwrite(spec, tenant, namespace, key, field, data, data, {"B": data})


def _overwrite(
    spec: SaverSpec,
    tenant: str,
    namespace: tuple[str, ...],
    key: str,
    field: str,
    sql_value: Any,
    redis_value: Any,
    dynamodb_value: dict[str, Any],
) -> None:
    """Set one stored field of an item, given in each backend's stored form."""
    if spec.backend == "postgres":
        _pg_run(spec, field + " = %s", "", (sql_value, tenant, ".".join(namespace), key))
    elif spec.backend == "redis":
        client, item = _redis_item(spec, tenant, namespace, key)
        try:
            assert client.exists(item) == 1
            client.hset(item, field, redis_value)
        finally:
            client.close()
    else:
        client, table = _dynamodb_client(spec)
        client.update_item(
            TableName=table,
            Key=_dynamodb_key(tenant, namespace, key),
            UpdateExpression="SET #f = :v",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames={"#f": field},
            ExpressionAttributeValues={":v": dynamodb_value},
        )


#: The stored field of an item's write times on each backend (``created`` / ``updated``).
_TIME_FIELDS = {
    "postgres": {"created": "created_at", "updated": "updated_at"},
    "redis": {"created": "c", "updated": "u"},
    "dynamodb": {"created": "ca", "updated": "ua"},
}


def _pg_run(spec: SaverSpec, assignment: str, returning: str, params: tuple[Any, ...]) -> Any:
    """Run ``UPDATE store_items SET <assignment>`` (or a SELECT of ``returning`` when
    ``assignment`` is empty) on one item, whose (tenant, prefix, key) end ``params``."""
    import psycopg
    from psycopg import sql

    table = sql.Identifier(spec.kwargs["schema"])
    where = " WHERE tenant_id = %s AND prefix = %s AND key = %s"
    if assignment:
        query = sql.SQL("UPDATE {}.store_items SET " + assignment + where).format(table)
    else:
        query = sql.SQL("SELECT " + returning + " FROM {}.store_items" + where).format(table)
    with psycopg.connect(spec.conn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        if assignment:
            assert cur.rowcount == 1, params
            return None
        row = cur.fetchone()
    assert row is not None, params
    return row


def raw_time(
    spec: SaverSpec, tenant: str, namespace: tuple[str, ...], key: str, which: str
) -> float:
    """An item's stored write time (``which``: ``created`` or ``updated``), Unix seconds."""
    name = _TIME_FIELDS[spec.backend][which]
    where = (tenant, ".".join(namespace), key)
    if spec.backend == "postgres":
        return float(_pg_run(spec, "", name, where)[0])
    if spec.backend == "redis":
        client, item = _redis_item(spec, tenant, namespace, key)
        try:
            data = client.hget(item, name)
        finally:
            client.close()
        assert data is not None, where
        return float(data)
    client, table = _dynamodb_client(spec)
    found = client.get_item(
        TableName=table, Key=_dynamodb_key(tenant, namespace, key), ConsistentRead=True
    )["Item"]
    return float(found[name]["N"])


def write_raw_time(
    spec: SaverSpec, tenant: str, namespace: tuple[str, ...], key: str, which: str, value: float
) -> None:
    """Overwrite an item's stored write time (``created`` or ``updated``), behind the
    store's back."""
    name = _TIME_FIELDS[spec.backend][which]
    _overwrite(
        spec, tenant, namespace, key, name, value, repr(float(value)), {"N": repr(float(value))}
    )


def raw_vectors(
    spec: SaverSpec, tenant: str, namespace: tuple[str, ...], key: str
) -> tuple[str, bytes] | None:
    """An item's stored embeddings (sealed: type and bytes), None without."""
    where = (tenant, ".".join(namespace), key)
    if spec.backend == "postgres":
        kind, data = _pg_run(spec, "", "vectors_type, vectors", where)
    elif spec.backend == "redis":
        client, item = _redis_item(spec, tenant, namespace, key)
        try:
            kind, data = client.hmget(item, "wt", "w")
        finally:
            client.close()
        kind = (kind or b"").decode()
    else:
        client, table = _dynamodb_client(spec)
        found = client.get_item(
            TableName=table, Key=_dynamodb_key(tenant, namespace, key), ConsistentRead=True
        )["Item"]
        kind, data = found.get("wt", {}).get("S", ""), found.get("w", {}).get("B", b"")
    return (str(kind), bytes(data)) if kind else None


def write_raw_vectors(
    spec: SaverSpec,
    tenant: str,
    namespace: tuple[str, ...],
    key: str,
    sealed: tuple[str, bytes] | None,
) -> None:
    """Overwrite an item's stored embeddings (None: strip them), behind the store's back."""
    kind, data = sealed or ("", b"")
    if spec.backend == "postgres":
        where = (tenant, ".".join(namespace), key)
        _pg_run(spec, "vectors_type = %s, vectors = %s", "", (kind, data, *where))
    elif spec.backend == "redis":
        client, item = _redis_item(spec, tenant, namespace, key)
        try:
            assert client.exists(item) == 1
            client.hset(item, mapping={"wt": kind, "w": data})
        finally:
            client.close()
    else:
        client, table = _dynamodb_client(spec)
        where_key = _dynamodb_key(tenant, namespace, key)
        if sealed is None:
            client.update_item(
                TableName=table,
                Key=where_key,
                UpdateExpression="REMOVE wt, w",
                ConditionExpression="attribute_exists(pk)",
            )
        else:
            client.update_item(
                TableName=table,
                Key=where_key,
                UpdateExpression="SET wt = :t, w = :w",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues={":t": {"S": kind}, ":w": {"B": data}},
            )


def _redis_item(
    spec: SaverSpec, tenant: str, namespace: tuple[str, ...], key: str
) -> tuple[Any, str]:
    import redis

    from langgraph_durable.redis._keys import KeyLayout
    from langgraph_durable.redis._store import StoreKeys

    name = StoreKeys(KeyLayout(spec.kwargs["prefix"]), tenant).item(namespace, key)
    return redis.Redis.from_url(spec.conn), name


def _dynamodb_key(tenant: str, namespace: tuple[str, ...], key: str) -> dict[str, Any]:
    from langgraph_durable.dynamodb._store_keys import item_pk, item_sk

    return {"pk": {"S": item_pk(tenant, namespace)}, "sk": {"S": item_sk(key)}}
