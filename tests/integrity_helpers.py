"""Raw tampering with stored history, one class per backend, and the graphs of the tests.

``tests/test_integrity.py`` builds a store through the savers (real LangGraph
graphs), then changes it behind the saver's back, as someone with write access
to the database would: one :class:`Raw` per backend reads and writes the
stored records directly (psycopg, redis-py, boto3; no saver code on the write
path), following the layouts documented in ``postgres/_schema.py`` (tables and
columns), ``redis/_keys.py`` + ``redis/_records.py`` (keys, hash fields,
msgpack payloads, write frames) and ``dynamodb/_items.py`` (pk/sk and
attributes). Every payload a test alters here is small enough to be stored
inline (no DynamoDB chunks, no S3).

* :func:`build_store` runs the graphs: thread ``A`` (a chat graph invoked twice,
  then forked from an older checkpoint: 9 checkpoints, pending writes on most
  of them, channel values stored as blobs, some as deltas), thread ``B`` (a
  graph paused on ``interrupt()``, so its latest checkpoint has pending
  writes). :func:`abuild_store` does the same through an async saver, and
  resumes thread ``B`` once before it pauses again.
* :func:`flip` / :func:`flip_body` change one byte of a payload (for a
  checkpoint body, inside the payload itself, not its tag or chain block).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from langgraph_durable._core.chain import TAG_SIZE, split_block
from langgraph_durable._core.records import Sealed
from tests.redaction_helpers import SaverSpec

__all__ = [
    "LONG",
    "TENANT",
    "Built",
    "Raw",
    "open_raw",
    "flip",
    "flip_body",
    "chat_graph",
    "pause_graph",
    "build_store",
    "abuild_store",
]

TENANT = "default"
#: Long enough that no message is a small inline value.
LONG = "The quick brown fox jumps over the lazy dog while the checkpoints pile up. " * 6


# ---- bytes --------------------------------------------------------------------------


def flip(data: bytes, at: int | None = None) -> bytes:
    """``data`` with one bit of one byte changed (the middle byte by default)."""
    assert data, "nothing to alter"
    i = len(data) // 2 if at is None else at
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


def flip_body(data: bytes) -> bytes:
    """A stored checkpoint body with one byte of its payload changed (not its tag
    nor its chain block, which stay as they were)."""
    inner, block = split_block(Sealed("msgpack", data))
    assert block is not None, "the body has no chain block"
    payload = len(inner.data) - TAG_SIZE
    assert payload > 0
    return flip(data, payload // 2)


# ---- graphs ---------------------------------------------------------------------------


def chat_graph(checkpointer: Any) -> Any:
    """START -> bot: each invoke appends the input and one long reply."""

    def bot(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"reply {len(state['messages'])}: {LONG}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    return builder.compile(checkpointer=checkpointer)


def pause_graph(checkpointer: Any) -> Any:
    """START -> ask: pauses on ``interrupt()`` until resumed."""

    def ask(state: MessagesState) -> dict[str, Any]:
        answer = interrupt(f"approve {len(state['messages'])}?")
        return {"messages": [AIMessage(content=f"approved ({answer}): {LONG}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    return builder.compile(checkpointer=checkpointer)


@dataclass
class Built:
    """What :func:`build_store` stored.

    Attributes:
        a: The chat thread's id (with a fork).
        b: The paused thread's id.
        tuples: Thread ``a``'s checkpoint tuples, newest first.
        fork_point: The checkpoint of ``a`` that has two children.
    """

    a: str
    b: str
    tuples: list[Any] = field(default_factory=list)
    fork_point: str = ""

    @property
    def ids(self) -> list[str]:
        return [t.config["configurable"]["checkpoint_id"] for t in self.tuples]

    def parent(self, cid: str) -> str | None:
        for t in self.tuples:
            if t.config["configurable"]["checkpoint_id"] == cid:
                parent = t.parent_config
                return None if parent is None else parent["configurable"]["checkpoint_id"]
        raise KeyError(cid)

    def children(self, cid: str) -> list[str]:
        return [c for c in self.ids if self.parent(c) == cid]

    def tuple(self, cid: str) -> Any:
        return next(t for t in self.tuples if t.config["configurable"]["checkpoint_id"] == cid)

    def middle(self) -> str:
        """A checkpoint in the middle of the thread: one parent, one child, no fork."""
        linear = sorted(
            c for c in self.ids if self.parent(c) is not None and len(self.children(c)) == 1
        )
        assert len(linear) >= 3, linear
        return linear[len(linear) // 2]

    def with_writes(self) -> str:
        """A checkpoint in the middle of the thread that has pending writes."""
        ids = sorted(c for c in self.ids if self.tuple(c).pending_writes and self.children(c))
        assert ids, "no checkpoint with pending writes"
        return ids[len(ids) // 2]


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def build_store(saver: Any, a: str = "thread-a", b: str = "thread-b") -> Built:
    """Run the graphs on ``saver`` (see the module docstring)."""
    chat = chat_graph(saver)
    for turn in range(2):
        chat.invoke({"messages": [HumanMessage(content=f"turn {turn}: {LONG}")]}, _config(a))
    history = list(chat.get_state_history(_config(a)))
    older = next(s for s in history if s.metadata and s.metadata.get("step") == 1)
    chat.invoke({"messages": [HumanMessage(content=f"fork: {LONG}")]}, older.config)
    pause = pause_graph(saver)
    pause.invoke({"messages": [HumanMessage(content=f"please: {LONG}")]}, _config(b))
    assert saver.get_tuple(_config(b)).pending_writes  # paused: its interrupt is pending
    built = Built(a, b, list(saver.list(_config(a))))
    built.fork_point = older.config["configurable"]["checkpoint_id"]
    assert len(built.ids) >= 6 and len(built.children(built.fork_point)) == 2
    return built


async def abuild_store(saver: Any, a: str = "thread-a", b: str = "thread-b") -> Built:
    """:func:`build_store` through an async saver (the paused thread is resumed, then
    pauses again)."""
    chat = chat_graph(saver)
    for turn in range(2):
        await chat.ainvoke({"messages": [HumanMessage(content=f"turn {turn}: {LONG}")]}, _config(a))
    history = [s async for s in chat.aget_state_history(_config(a))]
    older = next(s for s in history if s.metadata and s.metadata.get("step") == 1)
    await chat.ainvoke({"messages": [HumanMessage(content=f"fork: {LONG}")]}, older.config)
    pause = pause_graph(saver)
    await pause.ainvoke({"messages": [HumanMessage(content=f"please: {LONG}")]}, _config(b))
    await pause.ainvoke(Command(resume="yes"), _config(b))
    await pause.ainvoke({"messages": [HumanMessage(content=f"again: {LONG}")]}, _config(b))
    latest = await saver.aget_tuple(_config(b))
    assert latest.pending_writes
    built = Built(a, b, [t async for t in saver.alist(_config(a))])
    built.fork_point = older.config["configurable"]["checkpoint_id"]
    assert len(built.ids) >= 6 and len(built.children(built.fork_point)) == 2
    return built


# ---- raw access -----------------------------------------------------------------------


class Raw:
    """Direct access to one thread's stored records (root namespace, default tenant).

    ``body`` / ``metadata`` are a checkpoint's stored payloads (tag and, for the
    body, chain block included); ``blob`` a channel value's; ``write`` one
    pending write's. ``copy_checkpoint`` stores a copy of a checkpoint's whole
    record under a new id (optionally with another body); ``swap_records``
    exchanges everything two checkpoint records hold but their ids.
    """

    def __init__(self, spec: SaverSpec, thread: str, tenant: str = TENANT, ns: str = "") -> None:
        self.spec, self.thread, self.tenant, self.ns = spec, thread, tenant, ns

    def close(self) -> None:
        raise NotImplementedError

    def body(self, cid: str) -> bytes:
        raise NotImplementedError

    def set_body(self, cid: str, data: bytes) -> None:
        raise NotImplementedError

    def metadata(self, cid: str) -> bytes:
        raise NotImplementedError

    def set_metadata(self, cid: str, data: bytes) -> None:
        raise NotImplementedError

    def delete_checkpoint(self, cid: str) -> None:
        raise NotImplementedError

    def copy_checkpoint(self, source: str, new_id: str) -> None:
        raise NotImplementedError

    def swap_records(self, a: str, b: str) -> None:
        raise NotImplementedError

    def checkpoint_exists(self, cid: str) -> bool:
        raise NotImplementedError

    def blob(self, channel: str, version: str) -> bytes:
        raise NotImplementedError

    def set_blob(self, channel: str, version: str, data: bytes) -> None:
        raise NotImplementedError

    def write_keys(self, cid: str) -> list[tuple[str, int]]:
        raise NotImplementedError

    def write(self, cid: str, task: str, idx: int) -> bytes:
        raise NotImplementedError

    def set_write(self, cid: str, task: str, idx: int, data: bytes) -> None:
        raise NotImplementedError

    def delete_write(self, cid: str, task: str, idx: int) -> None:
        raise NotImplementedError

    # shared --------------------------------------------------------------------------

    def swap_bodies(self, a: str, b: str) -> None:
        body_a, body_b = self.body(a), self.body(b)
        self.set_body(a, body_b)
        self.set_body(b, body_a)


class PostgresRaw(Raw):
    """Rows of ``checkpoints``, ``blobs`` and ``writes`` in the spec's schema."""

    _SWAPPED = (
        "parent_checkpoint_id",
        "v",
        "run_id",
        "blob_channels",
        "blob_versions",
        "metadata_index",
        "checkpoint_type",
        "checkpoint",
        "metadata_type",
        "metadata",
    )

    def __init__(self, spec: SaverSpec, thread: str, tenant: str = TENANT, ns: str = "") -> None:
        import psycopg

        super().__init__(spec, thread, tenant, ns)
        self.conn = psycopg.connect(spec.conn, autocommit=True)
        self.s = '"' + spec.kwargs["schema"] + '"'

    def close(self) -> None:
        self.conn.close()

    def _one(self, query: str, *params: Any) -> Any:
        rows = self.conn.execute(query, (self.tenant, self.thread, self.ns, *params)).fetchall()
        assert len(rows) == 1, (query, params, rows)
        return rows[0][0]

    def _update(self, query: str, *params: Any) -> None:
        cur = self.conn.execute(query, params)
        assert cur.rowcount == 1, (query, params, cur.rowcount)

    _WHERE = "tenant_id = %s AND thread_id = %s AND checkpoint_ns = %s"

    def body(self, cid: str) -> bytes:
        return bytes(
            self._one(
                f"SELECT checkpoint FROM {self.s}.checkpoints "
                f"WHERE {self._WHERE} AND checkpoint_id = %s",
                cid,
            )
        )

    def set_body(self, cid: str, data: bytes) -> None:
        self._update(
            f"UPDATE {self.s}.checkpoints SET checkpoint = %s WHERE {self._WHERE} "
            "AND checkpoint_id = %s",
            data,
            self.tenant,
            self.thread,
            self.ns,
            cid,
        )

    def metadata(self, cid: str) -> bytes:
        return bytes(
            self._one(
                f"SELECT metadata FROM {self.s}.checkpoints "
                f"WHERE {self._WHERE} AND checkpoint_id = %s",
                cid,
            )
        )

    def set_metadata(self, cid: str, data: bytes) -> None:
        self._update(
            f"UPDATE {self.s}.checkpoints SET metadata = %s WHERE {self._WHERE} "
            "AND checkpoint_id = %s",
            data,
            self.tenant,
            self.thread,
            self.ns,
            cid,
        )

    def delete_checkpoint(self, cid: str) -> None:
        self._update(
            f"DELETE FROM {self.s}.checkpoints WHERE {self._WHERE} AND checkpoint_id = %s",
            self.tenant,
            self.thread,
            self.ns,
            cid,
        )

    def copy_checkpoint(self, source: str, new_id: str) -> None:
        rest = ", ".join(("epoch", *self._SWAPPED))
        self._update(
            f"INSERT INTO {self.s}.checkpoints (tenant_id, thread_id, checkpoint_ns, "
            f"checkpoint_id, {rest}) SELECT tenant_id, thread_id, checkpoint_ns, %s, {rest} "
            f"FROM {self.s}.checkpoints WHERE {self._WHERE} AND checkpoint_id = %s",
            new_id,
            self.tenant,
            self.thread,
            self.ns,
            source,
        )

    def swap_records(self, a: str, b: str) -> None:
        sets = ", ".join(f"{c} = y.{c}" for c in self._SWAPPED)
        cur = self.conn.execute(
            f"UPDATE {self.s}.checkpoints AS x SET {sets} FROM {self.s}.checkpoints AS y "
            "WHERE x.tenant_id = y.tenant_id AND x.thread_id = y.thread_id "
            "AND x.checkpoint_ns = y.checkpoint_ns AND x.tenant_id = %(t)s "
            "AND x.thread_id = %(th)s AND x.checkpoint_ns = %(ns)s "
            "AND ((x.checkpoint_id = %(a)s AND y.checkpoint_id = %(b)s) "
            "OR (x.checkpoint_id = %(b)s AND y.checkpoint_id = %(a)s))",
            {"t": self.tenant, "th": self.thread, "ns": self.ns, "a": a, "b": b},
        )
        assert cur.rowcount == 2

    def checkpoint_exists(self, cid: str) -> bool:
        row = self.conn.execute(
            f"SELECT count(*) FROM {self.s}.checkpoints WHERE {self._WHERE} AND checkpoint_id = %s",
            (self.tenant, self.thread, self.ns, cid),
        ).fetchone()
        return bool(row and row[0])

    def blob(self, channel: str, version: str) -> bytes:
        return bytes(
            self._one(
                f"SELECT blob FROM {self.s}.blobs WHERE {self._WHERE} "
                "AND channel = %s AND version = %s",
                channel,
                version,
            )
        )

    def set_blob(self, channel: str, version: str, data: bytes) -> None:
        self._update(
            f"UPDATE {self.s}.blobs SET blob = %s WHERE {self._WHERE} "
            "AND channel = %s AND version = %s",
            data,
            self.tenant,
            self.thread,
            self.ns,
            channel,
            version,
        )

    def write_keys(self, cid: str) -> list[tuple[str, int]]:
        rows = self.conn.execute(
            f"SELECT task_id, idx FROM {self.s}.writes WHERE {self._WHERE} "
            "AND checkpoint_id = %s ORDER BY task_id, idx",
            (self.tenant, self.thread, self.ns, cid),
        ).fetchall()
        return [(str(t), int(i)) for t, i in rows]

    def write(self, cid: str, task: str, idx: int) -> bytes:
        return bytes(
            self._one(
                f"SELECT blob FROM {self.s}.writes WHERE {self._WHERE} "
                "AND checkpoint_id = %s AND task_id = %s AND idx = %s",
                cid,
                task,
                idx,
            )
        )

    def set_write(self, cid: str, task: str, idx: int, data: bytes) -> None:
        self._update(
            f"UPDATE {self.s}.writes SET blob = %s WHERE {self._WHERE} "
            "AND checkpoint_id = %s AND task_id = %s AND idx = %s",
            data,
            self.tenant,
            self.thread,
            self.ns,
            cid,
            task,
            idx,
        )

    def delete_write(self, cid: str, task: str, idx: int) -> None:
        self._update(
            f"DELETE FROM {self.s}.writes WHERE {self._WHERE} "
            "AND checkpoint_id = %s AND task_id = %s AND idx = %s",
            self.tenant,
            self.thread,
            self.ns,
            cid,
            task,
            idx,
        )


_FRAME_HEAD = struct.Struct(">iI")
_LEN = struct.Struct(">I")


def _frames(blob: bytes) -> list[tuple[int, bytes, bytes]]:
    """(idx, header, data) of each write frame (see ``redis/_records.py``)."""
    out, pos = [], 0
    while pos < len(blob):
        idx, hlen = _FRAME_HEAD.unpack_from(blob, pos)
        pos += _FRAME_HEAD.size
        head = blob[pos : pos + hlen]
        pos += hlen
        (dlen,) = _LEN.unpack_from(blob, pos)
        pos += _LEN.size
        out.append((idx, head, blob[pos : pos + dlen]))
        pos += dlen
    return out


def _join_frames(frames: list[tuple[int, bytes, bytes]]) -> bytes:
    return b"".join(
        _FRAME_HEAD.pack(idx, len(head)) + head + _LEN.pack(len(data)) + data
        for idx, head, data in frames
    )


class RedisRaw(Raw):
    """Fields of the thread's ``h``, ``c``, ``b``, ``w`` hashes and ``i``, ``n`` sets."""

    def __init__(self, spec: SaverSpec, thread: str, tenant: str = TENANT, ns: str = "") -> None:
        import redis

        from langgraph_durable.redis._keys import KeyLayout

        super().__init__(spec, thread, tenant, ns)
        self.r = redis.Redis.from_url(spec.conn)
        self.h, self.c, self.b, self.w, self.i, self.n = KeyLayout(spec.kwargs["prefix"]).thread(
            tenant, thread
        )

    def close(self) -> None:
        self.r.close()

    def _field(self, cid: str) -> bytes:
        return f"{self.ns}\x00{cid}".encode()

    def _payload(self, cid: str) -> list[Any]:
        import ormsgpack

        raw = self.r.hget(self.c, self._field(cid))
        assert raw is not None, cid
        return list(ormsgpack.unpackb(raw))

    def _set_payload(self, cid: str, payload: list[Any]) -> None:
        import ormsgpack

        assert self.r.hexists(self.c, self._field(cid))
        self.r.hset(self.c, self._field(cid), ormsgpack.packb(payload))

    def body(self, cid: str) -> bytes:
        return bytes(self._payload(cid)[2])

    def set_body(self, cid: str, data: bytes) -> None:
        payload = self._payload(cid)
        payload[2] = data
        self._set_payload(cid, payload)

    def metadata(self, cid: str) -> bytes:
        return bytes(self._payload(cid)[4])

    def set_metadata(self, cid: str, data: bytes) -> None:
        payload = self._payload(cid)
        payload[4] = data
        self._set_payload(cid, payload)

    def delete_checkpoint(self, cid: str) -> None:
        f = self._field(cid)
        assert self.r.hdel(self.h, f) == 1 and self.r.hdel(self.c, f) == 1
        self.r.zrem(self.i, f)
        self.r.zrem(self.n, f"{cid}\x00{self.ns}".encode())

    def copy_checkpoint(self, source: str, new_id: str) -> None:
        src, dst = self._field(source), self._field(new_id)
        header, payload = self.r.hget(self.h, src), self.r.hget(self.c, src)
        assert header is not None and payload is not None
        self.r.hset(self.h, dst, header)
        self.r.hset(self.c, dst, payload)
        self.r.zadd(self.i, {dst: 0})
        self.r.zadd(self.n, {f"{new_id}\x00{self.ns}".encode(): 0})

    def swap_records(self, a: str, b: str) -> None:
        fa, fb = self._field(a), self._field(b)
        for key in (self.h, self.c):
            va, vb = self.r.hget(key, fa), self.r.hget(key, fb)
            assert va is not None and vb is not None
            self.r.hset(key, mapping={fa: vb, fb: va})

    def checkpoint_exists(self, cid: str) -> bool:
        return bool(self.r.hexists(self.h, self._field(cid)))

    def _blob_field(self, channel: str, version: str) -> bytes:
        return f"{self.ns}\x00{channel}\x00{version}".encode()

    @staticmethod
    def _split_blob(raw: bytes) -> tuple[bytes, bytes]:
        """(the delta's mark and meta, or b"" for a full value; the msgpack [type, bytes])."""
        if raw[:1] != b"D":
            return b"", raw
        (n,) = _LEN.unpack_from(raw, 1)
        return raw[: 1 + _LEN.size + n], raw[1 + _LEN.size + n :]

    def blob(self, channel: str, version: str) -> bytes:
        import ormsgpack

        raw = self.r.hget(self.b, self._blob_field(channel, version))
        assert raw is not None, (channel, version)
        _head, value = self._split_blob(raw)
        return bytes(ormsgpack.unpackb(value)[1])

    def set_blob(self, channel: str, version: str, data: bytes) -> None:
        import ormsgpack

        f = self._blob_field(channel, version)
        head, value = self._split_blob(self.r.hget(self.b, f))
        type_, _old = ormsgpack.unpackb(value)
        self.r.hset(self.b, f, head + ormsgpack.packb([type_, data]))

    def _tasks(self, cid: str) -> list[str]:
        import ormsgpack

        raw = self.r.hget(self.w, self._field(cid))
        return [] if raw is None else [str(t) for t in ormsgpack.unpackb(raw)]

    def _task_field(self, cid: str, task: str) -> bytes:
        return f"{self.ns}\x00{cid}\x00{task}".encode()

    def write_keys(self, cid: str) -> list[tuple[str, int]]:
        keys = []
        for task in self._tasks(cid):
            raw = self.r.hget(self.w, self._task_field(cid, task)) or b""
            keys.extend((task, idx) for idx, _h, _d in _frames(raw))
        return sorted(keys)

    def write(self, cid: str, task: str, idx: int) -> bytes:
        raw = self.r.hget(self.w, self._task_field(cid, task))
        assert raw is not None
        return next(data for i, _h, data in _frames(raw) if i == idx)

    def set_write(self, cid: str, task: str, idx: int, data: bytes) -> None:
        f = self._task_field(cid, task)
        frames = _frames(self.r.hget(self.w, f))
        assert any(i == idx for i, _h, _d in frames)
        self.r.hset(
            self.w, f, _join_frames([(i, h, data if i == idx else d) for i, h, d in frames])
        )

    def delete_write(self, cid: str, task: str, idx: int) -> None:
        import ormsgpack

        f = self._task_field(cid, task)
        frames = _frames(self.r.hget(self.w, f))
        kept = [frame for frame in frames if frame[0] != idx]
        assert len(kept) == len(frames) - 1
        if kept:
            self.r.hset(self.w, f, _join_frames(kept))
            return
        self.r.hdel(self.w, f)
        tasks = [t for t in self._tasks(cid) if t != task]
        if tasks:
            self.r.hset(self.w, self._field(cid), ormsgpack.packb(tasks))
        else:
            self.r.hdel(self.w, self._field(cid))


class DynamoRaw(Raw):
    """Items of the thread's partition (pointer ``c#``, blob ``b#``, write ``...#w#``)."""

    def __init__(self, spec: SaverSpec, thread: str, tenant: str = TENANT, ns: str = "") -> None:
        import boto3

        from langgraph_durable.dynamodb import _items

        super().__init__(spec, thread, tenant, ns)
        url = urlsplit(spec.conn)
        query = parse_qs(url.query)
        self.table = url.netloc
        self.client = boto3.client(
            "dynamodb",
            endpoint_url=query["endpoint"][0],
            region_name=query.get("region", ["us-east-1"])[0],
        )
        self.items = _items
        self.pk = _items.thread_pk(tenant, thread)

    def close(self) -> None:
        self.client.close()

    def _get(self, sk: str) -> dict[str, Any]:
        item = self.client.get_item(
            TableName=self.table,
            Key={"pk": {"S": self.pk}, "sk": {"S": sk}},
            ConsistentRead=True,
        ).get("Item")
        assert item is not None, sk
        return item

    def _payload(self, sk: str, name: str) -> bytes:
        item = self._get(sk)
        assert name in item, f"payload {name!r} of {sk!r} is not inline"
        return bytes(item[name]["B"])

    def _set_payload(self, sk: str, name: str, data: bytes) -> None:
        item = self._get(sk)
        assert name in item
        item[name] = {"B": data}
        self.client.put_item(TableName=self.table, Item=item)

    def _pointer(self, cid: str) -> str:
        return self.items.pointer_sk(self.ns, cid)

    def body(self, cid: str) -> bytes:
        return self._payload(self._pointer(cid), "b")

    def set_body(self, cid: str, data: bytes) -> None:
        self._set_payload(self._pointer(cid), "b", data)

    def metadata(self, cid: str) -> bytes:
        return self._payload(self._pointer(cid), "m")

    def set_metadata(self, cid: str, data: bytes) -> None:
        self._set_payload(self._pointer(cid), "m", data)

    def delete_checkpoint(self, cid: str) -> None:
        self._get(self._pointer(cid))
        self.client.delete_item(
            TableName=self.table, Key={"pk": {"S": self.pk}, "sk": {"S": self._pointer(cid)}}
        )

    def copy_checkpoint(self, source: str, new_id: str) -> None:
        item = self._get(self._pointer(source))
        item["sk"] = {"S": self._pointer(new_id)}
        self.client.put_item(TableName=self.table, Item=item)

    def swap_records(self, a: str, b: str) -> None:
        item_a, item_b = self._get(self._pointer(a)), self._get(self._pointer(b))
        for item, other in ((item_a, item_b), (item_b, item_a)):
            swapped = {k: v for k, v in other.items() if k not in ("pk", "sk")}
            self.client.put_item(
                TableName=self.table, Item={"pk": item["pk"], "sk": item["sk"], **swapped}
            )

    def checkpoint_exists(self, cid: str) -> bool:
        return "Item" in self.client.get_item(
            TableName=self.table,
            Key={"pk": {"S": self.pk}, "sk": {"S": self._pointer(cid)}},
            ConsistentRead=True,
        )

    def blob(self, channel: str, version: str) -> bytes:
        return self._payload(self.items.blob_sk(self.ns, channel, version), "d")

    def set_blob(self, channel: str, version: str, data: bytes) -> None:
        self._set_payload(self.items.blob_sk(self.ns, channel, version), "d", data)

    def write_keys(self, cid: str) -> list[tuple[str, int]]:
        prefix = self._pointer(cid) + "w#"
        found = self.client.query(
            TableName=self.table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
            ExpressionAttributeValues={":pk": {"S": self.pk}, ":p": {"S": prefix}},
            ConsistentRead=True,
        )["Items"]
        keys = []
        for item in found:
            parsed = self.items.parse_checkpoint_sk(item["sk"]["S"])
            if parsed.kind == "write":
                keys.append((parsed.task_id, parsed.idx))
        return sorted(keys)

    def write(self, cid: str, task: str, idx: int) -> bytes:
        return self._payload(self.items.write_sk(self.ns, cid, task, idx), "v")

    def set_write(self, cid: str, task: str, idx: int, data: bytes) -> None:
        self._set_payload(self.items.write_sk(self.ns, cid, task, idx), "v", data)

    def delete_write(self, cid: str, task: str, idx: int) -> None:
        sk = self.items.write_sk(self.ns, cid, task, idx)
        self._get(sk)
        self.client.delete_item(TableName=self.table, Key={"pk": {"S": self.pk}, "sk": {"S": sk}})


_RAW = {"postgres": PostgresRaw, "redis": RedisRaw, "dynamodb": DynamoRaw}


@contextmanager
def open_raw(spec: SaverSpec, thread: str, tenant: str = TENANT, ns: str = "") -> Iterator[Raw]:
    """The :class:`Raw` of ``spec``'s backend on one thread (closed on exit)."""
    raw = _RAW[spec.backend](spec, thread, tenant, ns)
    try:
        yield raw
    finally:
        raw.close()
