"""Each backend's stored layout as records of fields, for the tamper matrix (``tamper``).

Nothing here knows a column, hash field or attribute by name: the records are
read from the storage itself.

* PostgreSQL: every table of the schema (``information_schema``; partitions
  through their parent), the rows of the thread (tables with ``tenant_id`` and
  ``thread_id``) or of its tenant (tables with ``tenant_id`` only); every column
  is a field, arrays and JSON are decomposed into leaves; the primary key
  columns locate a row.
* Redis: every key under the saver's prefix (``SCAN``), by type: each hash
  field, sorted-set member, set member or string is a record; its name is split
  on NUL into parts (editing one moves the record), its value decoded as text,
  a delta blob, msgpack or write frames (``redis/_records.py``), JSON text
  inside decoded too.
* DynamoDB: every item of the thread's partition and of its tenant's data-key
  partition (``Query``); the sort key split on ``#`` into parts, every other
  attribute decoded (lists and maps into leaves, JSON text too).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import ormsgpack

from tests.security.tamper import Edit, Enc, Layout, Record, StorageRefused, leaves, tweak

__all__ = ["PostgresLayout", "RedisLayout", "DynamoLayout"]


# ---- JSON text inside a value --------------------------------------------------------------


def expand(tree: Any) -> Any:
    """``tree`` with JSON object/array texts decoded (an :class:`Enc` of ``"json"``)."""
    if isinstance(tree, str) and tree[:1] in ("{", "[") and len(tree) > 1:
        try:
            return Enc("json", expand(json.loads(tree)))
        except ValueError:
            return tree
    if isinstance(tree, list):
        return [expand(v) for v in tree]
    if isinstance(tree, dict):
        return {k: expand(v) for k, v in tree.items()}
    if isinstance(tree, Enc):
        return Enc(tree.fmt, expand(tree.value))
    return tree


def collapse(tree: Any) -> Any:
    """Undo :func:`expand` (and every other :class:`Enc` the layout encodes itself)."""
    if isinstance(tree, Enc) and tree.fmt == "json":
        return json.dumps(collapse(tree.value), separators=(",", ":"))
    if isinstance(tree, list):
        return [collapse(v) for v in tree]
    if isinstance(tree, dict):
        return {k: collapse(v) for k, v in tree.items()}
    return tree


# ---- PostgreSQL ------------------------------------------------------------------------------


class PostgresLayout(Layout):
    """The rows of one thread (and of its tenant) in every table of ``schema``."""

    SCOPE = ("tenant_id", "thread_id")

    def __init__(self, url: str, schema: str, tenant: str, thread: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.schema, self.tenant, self.thread = schema, tenant, thread
        self.columns: dict[str, dict[str, str]] = {}
        self.pkeys: dict[str, tuple[str, ...]] = {}
        self.skipped: list[str] = []
        rows = self.conn.execute(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = c.oid "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
            "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY c.relname, a.attnum",
            (schema,),
        ).fetchall()
        for table, column, type_ in rows:
            self.columns.setdefault(table, {})[column] = type_
        for table in self.columns:
            pk = self.conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
                (f'"{schema}"."{table}"',),
            ).fetchall()
            self.pkeys[table] = tuple(r[0] for r in pk)

    def close(self) -> None:
        self.conn.close()

    def _q(self, table: str) -> str:
        return f'"{self.schema}"."{table}"'

    def records(self) -> list[Record]:
        out = []
        self.skipped = []
        for table, cols in self.columns.items():
            if "tenant_id" in cols and "thread_id" in cols:
                where, params = "tenant_id = %s AND thread_id = %s", (self.tenant, self.thread)
            elif "tenant_id" in cols:
                where, params = "tenant_id = %s", (self.tenant,)
            else:
                self.skipped.append(f"{table} (no tenant: not part of a thread)")
                continue
            names = list(cols)
            cur = self.conn.execute(
                f"SELECT {', '.join(names)} FROM {self._q(table)} WHERE {where}", params
            )
            rows = cur.fetchall()
            if not rows:
                self.skipped.append(f"{table} (no row written by the scenario)")
            for row in rows:
                fields = {n: expand(_pg_value(v)) for n, v in zip(names, row, strict=True)}
                pk = {c: fields[c] for c in self.pkeys[table]}
                label = "/".join(
                    str(v)[-12:] for c, v in pk.items() if c not in ("tenant_id", "thread_id")
                )
                out.append(Record(table, label, fields, self.pkeys[table], pk))
        return out

    def _param(self, table: str, column: str) -> str:
        return f"%s::{self.columns[table][column]}"

    def _adapt(self, table: str, column: str, value: Any) -> Any:
        from psycopg.types.json import Jsonb

        value = collapse(value)
        if self.columns[table][column] in ("jsonb", "json") and value is not None:
            if isinstance(value, str):
                value = json.loads(value)
            return Jsonb(value)
        return value

    def _run(self, sql: str, params: list[Any]) -> int:
        import psycopg

        try:
            return self.conn.execute(sql, params).rowcount
        except (psycopg.errors.IntegrityError, psycopg.errors.DataError) as exc:
            raise StorageRefused(type(exc).__name__) from exc

    def _update(self, table: str, pk: dict[str, Any], values: dict[str, Any]) -> None:
        sets = ", ".join(f"{c} = {self._param(table, c)}" for c in values)
        where = " AND ".join(f"{c} = {self._param(table, c)}" for c in pk)
        params = [self._adapt(table, c, v) for c, v in values.items()]
        params += [self._adapt(table, c, v) for c, v in pk.items()]
        n = self._run(f"UPDATE {self._q(table)} SET {sets} WHERE {where}", params)
        assert n == 1, (table, pk, n)

    def _insert(self, table: str, fields: dict[str, Any]) -> None:
        cols = list(fields)
        self._run(
            f"INSERT INTO {self._q(table)} ({', '.join(cols)}) VALUES "
            f"({', '.join(self._param(table, c) for c in cols)})",
            [self._adapt(table, c, fields[c]) for c in cols],
        )

    def _delete(self, table: str, pk: dict[str, Any]) -> None:
        where = " AND ".join(f"{c} = {self._param(table, c)}" for c in pk)
        n = self._run(
            f"DELETE FROM {self._q(table)} WHERE {where}",
            [self._adapt(table, c, v) for c, v in pk.items()],
        )
        assert n == 1, (table, pk, n)

    def write(self, rec: Record, fields: dict[str, Any]) -> Callable[[], None]:
        table, pk = rec.kind, rec.handle
        full = {c: fields.get(c) for c in self.columns[table]}  # a removed field is NULL
        changed = {c: v for c, v in full.items() if repr(v) != repr(rec.fields.get(c))}
        if not changed:
            raise StorageRefused("no change")
        self._update(table, pk, changed)
        new_pk = {c: full[c] for c in pk}
        back = {c: rec.fields.get(c) for c in changed}
        return lambda: self._update(table, new_pk, back)

    def insert(self, rec: Record, fields: dict[str, Any]) -> Callable[[], None]:
        self._insert(rec.kind, fields)
        new_pk = {c: fields[c] for c in rec.handle}
        return lambda: self._delete(rec.kind, new_pk)

    def delete(self, rec: Record) -> Callable[[], None]:
        self._delete(rec.kind, rec.handle)
        return lambda: self._insert(rec.kind, rec.fields)


def _pg_value(v: Any) -> Any:
    if isinstance(v, memoryview):
        return bytes(v)
    return v


# ---- Redis --------------------------------------------------------------------------------

_FRAME_HEAD = struct.Struct(">iI")
_LEN = struct.Struct(">I")


def _unpack(raw: bytes) -> Any:
    return expand(ormsgpack.unpackb(raw))


def _pack(tree: Any) -> bytes:
    return ormsgpack.packb(collapse(tree))


def _printable(raw: bytes) -> bool:
    return len(raw) > 0 and all(32 <= b < 127 for b in raw)


def decode_redis(raw: bytes) -> Any:
    """A Redis value as a tree (see the module docstring); raw bytes when no decoding
    gives the same bytes back."""
    tree = _decode_redis(raw)
    try:
        if encode_redis(tree) == raw:
            return tree
    except (ValueError, TypeError, struct.error):
        pass
    return raw


def _decode_redis(raw: bytes) -> Any:
    if _printable(raw):
        return Enc("text", expand(raw.decode()))
    if raw[:1] == b"D":
        try:
            (n,) = _LEN.unpack_from(raw, 1)
            return Enc(
                "delta",
                [Enc("msgpack", _unpack(raw[5 : 5 + n])), Enc("msgpack", _unpack(raw[5 + n :]))],
            )
        except (ValueError, TypeError, struct.error):
            pass
    try:
        tree = Enc("msgpack", _unpack(raw))
        if _pack(tree.value) == raw:
            return tree
    except (ValueError, TypeError):
        pass
    frames = _frames(raw)
    if frames is not None:
        return Enc("frames", frames)
    return raw


def _frames(raw: bytes) -> list[Any] | None:
    out, pos = [], 0
    try:
        while pos < len(raw):
            idx, hlen = _FRAME_HEAD.unpack_from(raw, pos)
            pos += 8
            head = _unpack(raw[pos : pos + hlen])
            pos += hlen
            (dlen,) = _LEN.unpack_from(raw, pos)
            pos += 4
            data = raw[pos : pos + dlen]
            if len(data) != dlen:
                return None
            pos += dlen
            out.append({"idx": idx, "head": Enc("msgpack", head), "data": data})
    except (ValueError, TypeError, struct.error):
        return None
    return out or None


def encode_redis(tree: Any) -> bytes:
    """Undo :func:`decode_redis`."""
    if isinstance(tree, (bytes, bytearray)):
        return bytes(tree)
    if tree is None:
        return b""
    assert isinstance(tree, Enc), tree
    if tree.fmt == "text":
        return str(collapse(tree.value)).encode()
    if tree.fmt == "msgpack":
        return _pack(tree.value)
    if tree.fmt == "delta":
        meta, value = ([encode_redis(t) for t in tree.value] + [b"", b""])[:2]
        return b"D" + _LEN.pack(len(meta)) + meta + value
    if tree.fmt == "frames":
        out = b""
        for frame in tree.value:
            idx, head, data = frame.get("idx", 0), frame.get("head"), frame.get("data")
            h = encode_redis(head) if head is not None else b""
            d = bytes(data or b"")
            out += _FRAME_HEAD.pack(int(idx or 0), len(h)) + h + _LEN.pack(len(d)) + d
        return out
    raise AssertionError(tree.fmt)


def _stored_as(fields: dict[str, Any]) -> tuple[Any, Any]:
    """What a Redis record's fields store (value bytes, score)."""
    value = fields.get("value")
    return (encode_redis(value) if "value" in fields else None, fields.get("score"))


def _text(b: Any) -> str:
    return b.decode("utf-8", "surrogateescape") if isinstance(b, bytes) else str(b)


def _bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


class RedisLayout(Layout):
    """Every key of one saver prefix (one tenant, one thread in the matrix)."""

    def __init__(self, conn: str, prefix: str) -> None:
        import redis
        from redis.cluster import RedisCluster

        if conn.startswith("redis+cluster://"):
            self.r: Any = RedisCluster.from_url("redis://" + conn.split("://", 1)[1])
        else:
            self.r = redis.Redis.from_url(conn)
        self.prefix = prefix
        self.skipped: list[str] = []

    def close(self) -> None:
        self.r.close()

    def _kind(self, key: str) -> str:
        import re

        rest = key[len(self.prefix) :]
        return re.sub(r"\{[^}]*\}", "{T}", rest)

    def records(self) -> list[Record]:
        out = []
        for key in sorted(self.r.scan_iter(match=f"{self.prefix}*", count=1000)):
            name = _text(key)
            kind = self._kind(name)
            type_ = _text(self.r.type(key))
            if type_ == "hash":
                for f, v in sorted(self.r.hgetall(key).items()):
                    out.append(self._rec(f"{kind} hash", key, f, {"value": decode_redis(bytes(v))}))
            elif type_ == "zset":
                for m, score in self.r.zrange(key, 0, -1, withscores=True):
                    out.append(self._rec(f"{kind} zset", key, m, {"score": score}))
            elif type_ == "set":
                for m in sorted(self.r.smembers(key)):
                    out.append(self._rec(f"{kind} set", key, m, {}))
            elif type_ == "string":
                rec = Record(
                    f"{kind} string",
                    name,
                    {"value": decode_redis(self.r.get(key))},
                    (),
                    (key, None),
                )
                out.append(rec)
            else:
                self.skipped.append(f"{name} ({type_})")
        return out

    def _rec(self, kind: str, key: bytes, member: bytes, fields: dict[str, Any]) -> Record:
        parts = _text(member).split("\x00")
        label = "\\0".join(p[-12:] for p in parts)
        return Record(kind, label, {"name": parts, **fields}, ("name",), (key, member))

    def without(self, rec: Record, name: str) -> dict[str, Any] | None:
        return None  # a hash field's value is one string: its elements are dropped instead

    def _put(self, kind: str, key: bytes, member: bytes | None, fields: dict[str, Any]) -> None:
        t = kind.rsplit(" ", 1)[1]
        if t == "hash":
            assert member is not None
            self.r.hset(key, member, encode_redis(fields.get("value")))
        elif t == "zset":
            assert member is not None
            self.r.zadd(key, {member: float(fields.get("score", 0))})
        elif t == "set":
            self.r.sadd(key, member)
        else:
            self.r.set(key, encode_redis(fields.get("value")))

    def _remove(self, kind: str, key: bytes, member: bytes | None) -> None:
        t = kind.rsplit(" ", 1)[1]
        if t == "hash":
            self.r.hdel(key, member)
        elif t == "zset":
            self.r.zrem(key, member)
        elif t == "set":
            self.r.srem(key, member)
        else:
            self.r.delete(key)

    def _member(self, rec: Record, fields: dict[str, Any]) -> bytes | None:
        if "name" not in fields:
            return rec.handle[1]
        return _bytes("\x00".join(str(p) for p in fields["name"]))

    def write(self, rec: Record, fields: dict[str, Any]) -> Callable[[], None]:
        key, member = rec.handle
        new = self._member(rec, fields)
        if new == member and _stored_as(rec.fields) == _stored_as(fields):
            raise StorageRefused("no change")
        if new != member:
            if self._exists(rec.kind, key, new):
                raise StorageRefused("a record of that name exists")
            self._remove(rec.kind, key, member)
        self._put(rec.kind, key, new, fields)

        def undo() -> None:
            if new != member:
                self._remove(rec.kind, key, new)
            self._put(rec.kind, key, member, rec.fields)

        return undo

    def _exists(self, kind: str, key: bytes, member: bytes | None) -> bool:
        t = kind.rsplit(" ", 1)[1]
        if t == "hash":
            return bool(self.r.hexists(key, member))
        if t == "zset":
            return self.r.zscore(key, member) is not None
        if t == "set":
            return bool(self.r.sismember(key, member))
        return bool(self.r.exists(key))

    def insert(self, rec: Record, fields: dict[str, Any]) -> Callable[[], None]:
        key = rec.handle[0]
        new = self._member(rec, fields)
        if self._exists(rec.kind, key, new):
            raise StorageRefused("a record of that name exists")
        self._put(rec.kind, key, new, fields)
        return lambda: self._remove(rec.kind, key, new)

    def delete(self, rec: Record) -> Callable[[], None]:
        key, member = rec.handle
        self._remove(rec.kind, key, member)
        return lambda: self._put(rec.kind, key, member, rec.fields)

    def extra_edits(self, records: list[Record]) -> Iterator[Edit]:
        """A whole checkpoint (every record whose name holds its id) deleted, or copied
        under a new id: the fields of ``h``, ``c``, ``w`` and the members of ``i``, ``n``."""
        ids = sorted(
            {
                p
                for r in records
                if r.kind.endswith(":h hash")
                for p in r.fields["name"]
                if len(p) == 36
            }
        )
        if len(ids) < 3:
            return
        cid = ids[len(ids) // 2]
        group = [r for r in records if any(cid in str(p) for p in r.fields.get("name", []))]

        def delete_all() -> Callable[[], None]:
            undos = [self.delete(r) for r in group]
            return lambda: [u() for u in reversed(undos)] and None

        def copy_all() -> Callable[[], None]:
            new_id = tweak(cid)
            undos = []
            for r in group:
                name = [str(p).replace(cid, new_id) for p in r.fields["name"]]
                undos.append(self.insert(r, {**r.fields, "name": name}))
            return lambda: [u() for u in reversed(undos)] and None

        yield Edit(
            "checkpoint",
            cid[-12:],
            "*",
            f"delete whole checkpoint ({len(group)} records)",
            delete_all,
            removal=True,
        )
        yield Edit("checkpoint", cid[-12:], "*", "copy whole checkpoint under a new id", copy_all)


# ---- DynamoDB -------------------------------------------------------------------------------


class DynamoLayout(Layout):
    """Every item of one thread's partition and of its tenant's data keys."""

    SCOPE = ("pk",)

    def __init__(self, conn: str, tenant: str, thread: str) -> None:
        import boto3
        from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

        from langgraph_durable.dynamodb import _items

        url = urlsplit(conn)
        query = parse_qs(url.query)
        self.table = url.netloc
        self.client = boto3.client(
            "dynamodb",
            endpoint_url=query["endpoint"][0],
            region_name=query.get("region", ["us-east-1"])[0],
        )
        self.pks = [_items.thread_pk(tenant, thread), _items.data_keys_pk(tenant)]
        self._de, self._ser = TypeDeserializer(), TypeSerializer()
        self.skipped: list[str] = []

    def close(self) -> None:
        self.client.close()

    def _py(self, attr: dict[str, Any]) -> Any:
        value = self._de.deserialize(attr)
        return _plain(value)

    def _attr(self, value: Any) -> dict[str, Any]:
        return self._ser.serialize(collapse(value))

    def records(self) -> list[Record]:
        out = []
        for pk in self.pks:
            pages = self.client.get_paginator("query").paginate(
                TableName=self.table,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": pk}},
                ConsistentRead=True,
            )
            for page in pages:
                for item in page["Items"]:
                    sk = item["sk"]["S"]
                    parts = sk.split("#")
                    fields: dict[str, Any] = {"pk": pk, "sk": parts}
                    for name, attr in item.items():
                        if name not in ("pk", "sk"):
                            fields[name] = expand(self._py(attr))
                    label = "#".join(p[-12:] for p in parts)
                    out.append(Record(_item_kind(pk, parts), label, fields, ("pk", "sk"), (pk, sk)))
        return out

    def _item(self, fields: dict[str, Any]) -> dict[str, Any]:
        item = {"pk": {"S": fields["pk"]}, "sk": {"S": "#".join(str(p) for p in fields["sk"])}}
        for name, value in fields.items():
            if name not in ("pk", "sk"):
                item[name] = self._attr(value)
        return item

    def _key(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"pk": item["pk"], "sk": item["sk"]}

    def _put(self, item: dict[str, Any], new: bool = False) -> None:
        kw: dict[str, Any] = {}
        if new:
            kw["ConditionExpression"] = "attribute_not_exists(sk)"
        try:
            self.client.put_item(TableName=self.table, Item=item, **kw)
        except self.client.exceptions.ConditionalCheckFailedException as exc:
            raise StorageRefused("an item of that key exists") from exc
        except self.client.exceptions.ClientError as exc:  # e.g. an empty key
            raise StorageRefused(str(exc)[:80]) from exc

    def write(self, rec: Record, fields: dict[str, Any]) -> Callable[[], None]:
        old, new = self._item(rec.fields), self._item(fields)
        moved = self._key(new) != self._key(old)
        self._put(new, new=moved)
        if moved:
            self.client.delete_item(TableName=self.table, Key=self._key(old))

        def undo() -> None:
            if moved:
                self.client.delete_item(TableName=self.table, Key=self._key(new))
            self._put(old)

        return undo

    def insert(self, rec: Record, fields: dict[str, Any]) -> Callable[[], None]:
        new = self._item(fields)
        self._put(new, new=True)
        return lambda: self.client.delete_item(TableName=self.table, Key=self._key(new)) and None

    def delete(self, rec: Record) -> Callable[[], None]:
        old = self._item(rec.fields)
        self.client.delete_item(TableName=self.table, Key=self._key(old))
        return lambda: self._put(old)

    def blanked(self, rec: Record) -> dict[str, Any] | None:
        """The item cut down to its keys."""
        if len(rec.fields) <= 2:
            return None
        return {"pk": rec.fields["pk"], "sk": rec.fields["sk"]}


def _item_kind(pk: str, parts: list[str]) -> str:
    if pk.endswith("##keys"):
        return "data key"
    if parts[0] == "b":
        return "blob" + (" chunk" if "k" in parts[4:] else "")
    if parts[0] == "c":  # c, ns, id, "" | k,name,i | w,task,idx[,k,name,i]
        if len(parts) > 3 and parts[3] == "w":
            return "write"
        if "k" in parts[3:]:
            return "chunk"
        return "checkpoint"
    return parts[0]


def _plain(value: Any) -> Any:
    """boto3's deserialized value with ``Binary`` as bytes."""
    from boto3.dynamodb.types import Binary

    if isinstance(value, Binary):
        return bytes(value.value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, set):
        return {_plain(v) for v in value}
    return value


def layout_leaf_count(records: list[Record]) -> int:
    return sum(1 for r in records for t in r.fields.values() for _ in leaves(t))
