#!/usr/bin/env python
"""The floor of graph steps/s for any saver that writes each call to PostgreSQL.

    python benchmarks/floor.py                      # 20 rounds of 12 threads per saver
    python benchmarks/floor.py --rounds 4 --quick   # smoke run
    python benchmarks/floor.py --get                # the floor of one get_tuple
    python benchmarks/floor.py --raw                # also raw puts/s (no graph)
    python benchmarks/floor.py --parts              # also the parts between floor and ours
    python benchmarks/floor.py --backend redis --raw   # the same on Redis
    BENCH_PACKAGE_ROOT=DIR python benchmarks/floor.py --get   # our package under DIR, as run.py

Runs the benchmark workload (``workload.build_graph``: a tool-calling agent loop, 5 turns,
13 steps per thread), four threads at a time, through:

- ``memory``: LangGraph's ``InMemorySaver`` (no persistence: the reference);
- ``floor``: the least a durable PostgreSQL saver does per call. ``put`` serializes what
  ``InMemorySaver`` serializes (the checkpoint without its values, its metadata, the new
  channel values) and stores it with one prepared ``INSERT``; ``put_writes`` serializes the
  writes and stores them with one prepared ``INSERT``, each blob a parameter of its own, on
  a cursor kept per connection. No reads (``get_tuple`` returns None: every thread is new),
  no codec, no deltas, no locks, a pool of four connections in autocommit;
- ``floor-nosync``: the same with ``synchronous_commit=off`` (no wait for the WAL flush);
- ``ours``: our ``PostgresSaver`` with its defaults;
- ``upstream``: langgraph-checkpoint-postgres's ``PostgresSaver`` (its documented connection
  settings, a pool of four, a schema of its own).

With ``--parts``, four more savers show where ours' distance to the floor lies:

- ``floor+50us``: the floor saver with 50 us more client CPU per call, the GIL held (what
  that much client work per call costs in steps/s);
- ``floor+ours-encoding``: the floor saver's statements storing what our codec encodes
  (deltas included), our statement parameters built and dropped;
- ``ours-bare-driver``: our saver's operations (its statements, its reads) run by the
  least driver (a cursor kept per pooled connection, no retries, no error translation);
- ``ours-deltas-off``: our ``PostgresSaver`` with ``delta_chain=0`` (every list value
  stored whole: what the deltas cost the client and save the server).

Each saver's steps/s is also given against upstream's: the floor's ratio is the most any
saver that writes each call to PostgreSQL can reach against upstream on this machine (the
floor reads nothing back, so it is an upper bound).

With ``--raw``, each saver also replays the workload's recorded ``put`` and ``put_writes``
calls on fresh threads, four at a time, without the graph (raw puts/s, as ``run.py --mode
raw`` counts them).

With ``--backend redis``, the same on Redis: ``memory``; ``floor``, one ``RPUSH`` of the
serialized parts per ``put`` and per ``put_writes`` (pools of four connections); ``redis``,
our ``RedisSaver``; and ``plainredis`` (langgraph-checkpoint-plainredis), the saver the
ratios are taken against.

With ``--get``, the floor of one ``get_tuple`` instead: a 5-turn thread is written to
upstream's saver and ours, and its newest checkpoint, serialized whole by LangGraph's
serializer, to one row of a table; then, one call at a time, in rotating rounds:

- ``floor-get``: one prepared ``SELECT`` of that row and LangGraph's serializer decoding
  it (what any saver must do to hand back a checkpoint it stores in PostgreSQL);
- ``floor-fetch``: the same ``SELECT`` without decoding;
- ``upstream``: langgraph-checkpoint-postgres's ``get_tuple`` (its documented connection
  settings, a pool of one);
- ``ours``: our ``get_tuple`` (a pool of one);
- ``ours-deltas-off``: the same with ``delta_chain=0`` (the newest ``messages`` read as one
  stored value rather than a chain of deltas).

It prints p50 latency and client CPU per call, and each against upstream's.

Rounds rotate which saver goes first. Prints, and writes to ``floor-<timestamp>.json``
and ``.md`` in ``--out``, each saver's process CPU per step, the CPU of the local server's
processes per step (all of them: backends, WAL writer; from ``/proc``) and graph steps/s, and
steps/s against ``memory``. What it shows: how much of the gap to ``InMemorySaver`` any
saver that stores every call through psycopg must keep (``docs/performance.md``,
"Floors").
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# the checkout's package, or the one under BENCH_PACKAGE_ROOT (as run.py)
PACKAGE_ROOT = os.environ.get("BENCH_PACKAGE_ROOT") or str(HERE.parent)
for _p in (PACKAGE_ROOT, str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import psycopg  # noqa: E402
from langgraph.checkpoint.base import BaseCheckpointSaver  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from psycopg_pool import ConnectionPool  # noqa: E402
from workload import build_graph, graph_input, thread_config  # noqa: E402

from langgraph_durable.postgres import PostgresSaver  # noqa: E402

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
STEPS_PER_THREAD = 13  # 5 turns: 2 * 5 + 3 checkpoints


def _server_seconds(comm: str) -> float:
    """CPU time used so far by every local process named ``comm`` (the server's backends,
    WAL writer and the rest), from ``/proc``; 0.0 where there is no ``/proc``."""
    from savers import server_cpu_seconds

    pids = (
        [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
        if os.path.isdir("/proc")
        else []
    )
    # one process at a time: one that ended meanwhile (None) counts nothing
    return sum(server_cpu_seconds([pid], comm) or 0.0 for pid in pids)


def _stored(thread: str, checkpoint_id: str) -> dict[str, Any]:
    """The config a put returns."""
    return {
        "configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}
    }


def _kept_cursor(conn: Any) -> Any:
    """The cursor kept on a pooled connection (a new one per statement looks up every
    parameter's dumper and column's loader again)."""
    cur = getattr(conn, "_floor_cursor", None)
    if cur is None:
        cur = conn._floor_cursor = conn.cursor()
    return cur


class FloorSaver(BaseCheckpointSaver):  # type: ignore[misc]
    """One prepared INSERT per put and per put_writes; nothing is read back."""

    def __init__(self, pool: ConnectionPool, table: str) -> None:
        super().__init__()
        self.pool = pool
        self.table = table
        self._sql: dict[tuple[str, int], str] = {}

    def get_tuple(self, config: Any) -> None:
        return None

    def list(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        return iter(())

    def _insert(self, sql: str, params: list[Any], blobs: list[bytes]) -> None:
        """Run one prepared INSERT whose last value is ``blobs`` (a bytea[]), as cheaply as
        psycopg allows: each blob a parameter of its own (psycopg adapts a list element by
        element) and a cursor kept on each connection (a new one looks up every
        parameter's dumper again)."""
        key = (sql, len(blobs))
        text = self._sql.get(key)
        if text is None:
            items = ", ".join(["%s"] * len(blobs))
            text = self._sql[key] = sql.replace("%b", f"ARRAY[{items}]::bytea[]")
        with self.pool.connection() as conn:
            _kept_cursor(conn).execute(text, [*params, *blobs], prepare=True)

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        body = dict(checkpoint)
        values = body.pop("channel_values")
        blobs = [self.serde.dumps_typed(values[ch])[1] for ch in new_versions if ch in values]
        thread = config["configurable"]["thread_id"]
        self._insert(
            f"INSERT INTO {self.table} (thread_id, checkpoint_id, body, metadata, blobs) "
            "VALUES (%s, %s, %s, %s, %b)",
            [
                thread,
                checkpoint["id"],
                self.serde.dumps_typed(body)[1],
                self.serde.dumps_typed(metadata)[1],
            ],
            blobs,
        )
        return _stored(thread, checkpoint["id"])

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        conf = config["configurable"]
        self._insert(
            f"INSERT INTO {self.table}_writes (thread_id, checkpoint_id, task_id, data) "
            "VALUES (%s, %s, %s, %b)",
            [conf["thread_id"], conf["checkpoint_id"], task_id],
            [self.serde.dumps_typed(value)[1] for _channel, value in writes],
        )

    def get_next_version(self, current: Any, channel: Any) -> str:
        if current is None:
            last = 0
        elif isinstance(current, int):
            last = current
        else:
            last = int(str(current).split(".")[0])
        return f"{last + 1:032}.{random.random():016}"


class SpinFloorSaver(FloorSaver):
    """The floor saver plus ``spin_us`` of client CPU per call, the GIL held (a calibration:
    what that much more client work per call costs in graph steps/s)."""

    def __init__(self, pool: ConnectionPool, table: str, spin_us: float) -> None:
        super().__init__(pool, table)
        self.spin_s = spin_us / 1e6

    def _spin(self) -> None:
        end = time.thread_time() + self.spin_s
        while time.thread_time() < end:
            pass

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        self._spin()
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        self._spin()
        super().put_writes(config, writes, task_id, task_path)


class EncodedFloorSaver(FloorSaver):
    """The floor saver's statements storing what our saver's codec encodes (deltas
    included), with our saver's statement parameters built and dropped: our encoding's
    cost without our statements."""

    def __init__(self, pool: ConnectionPool, table: str, ours: PostgresSaver) -> None:
        super().__init__(pool, table)
        self.ours = ours

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        ops = self.ours._ops
        key = self.ours._key(config)
        rec = ops.codec.encode_checkpoint(key, config, checkpoint, metadata, new_versions)
        ops._put_query(ops.PUT_SQL, rec)
        ops.codec.written(rec)
        thread = config["configurable"]["thread_id"]
        self._insert(
            f"INSERT INTO {self.table} (thread_id, checkpoint_id, body, metadata, blobs) "
            "VALUES (%s, %s, %s, %s, %b)",
            [thread, checkpoint["id"], rec.body.data, rec.metadata.data],
            [b.sealed.data for b in rec.blobs if b.sealed is not None],
        )
        return _stored(thread, checkpoint["id"])

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        conf = config["configurable"]
        key = self.ours._key(config)
        records, _ = self.ours._ops.codec.encode_writes(
            key, conf["checkpoint_id"], writes, task_id, task_path
        )
        self._insert(
            f"INSERT INTO {self.table}_writes (thread_id, checkpoint_id, task_id, data) "
            "VALUES (%s, %s, %s, %b)",
            [conf["thread_id"], conf["checkpoint_id"], task_id],
            [r.sealed.data for r in records],
        )


class BareDriverSaver(BaseCheckpointSaver):  # type: ignore[misc]
    """Our saver's operations (its statements, its reads) run by the least driver: each
    statement on a cursor kept per pooled connection, no retries, no error translation.
    Against ``ours``: what our driver layer costs."""

    def __init__(self, pool: ConnectionPool, ours: PostgresSaver) -> None:
        super().__init__(serde=ours.serde)
        self.pool = pool
        self.ours = ours

    def _run(self, op: Any) -> Any:
        steps = op.steps
        try:
            step = steps.send(None)
            while True:
                with self.pool.connection() as conn:
                    cur = _kept_cursor(conn)
                    cur.execute(step.sql, step.params or None, prepare=True)
                    if step.fetch == "one":
                        result = cur.fetchone()
                    elif step.fetch == "all":
                        result = cur.fetchall()
                    else:
                        result = cur.rowcount
                step = steps.send(result)
        except StopIteration as stop:
            return stop.value

    def get_tuple(self, config: Any) -> Any:
        return self._run(self.ours._get_op(config))

    def list(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        return iter(())

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return self._run(self.ours._put_op(config, checkpoint, metadata, new_versions))

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        self._run(self.ours._put_writes_op(config, writes, task_id, task_path))

    def get_next_version(self, current: Any, channel: Any) -> str:
        return self.ours.get_next_version(current, channel)


class FloorRedisSaver(FloorSaver):
    """One Redis command per put (RPUSH of the serialized parts) and per put_writes."""

    def __init__(self, client: Any, prefix: str) -> None:
        BaseCheckpointSaver.__init__(self)
        self.client = client
        self.prefix = prefix

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        body = dict(checkpoint)
        values = body.pop("channel_values")
        blobs = [self.serde.dumps_typed(values[ch])[1] for ch in new_versions if ch in values]
        thread = config["configurable"]["thread_id"]
        self.client.rpush(
            f"{self.prefix}:{thread}:{checkpoint['id']}",
            self.serde.dumps_typed(body)[1],
            self.serde.dumps_typed(metadata)[1],
            *blobs,
        )
        return _stored(thread, checkpoint["id"])

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        conf = config["configurable"]
        self.client.rpush(
            f"{self.prefix}:{conf['thread_id']}:{conf['checkpoint_id']}:w:{task_id}",
            *[self.serde.dumps_typed(value)[1] for _channel, value in writes],
        )


def redis_floor(args: argparse.Namespace, per: int) -> int:
    """The graph (and raw) floor on Redis: memory, the floor saver, ours and plainredis."""
    import redis
    from langgraph_checkpoint_plainredis import RedisSaver as PlainRedisSaver

    from langgraph_durable.redis import RedisSaver

    tag = uuid.uuid4().hex[:8]
    prefixes = {name: f"lgdbench-floor-{name}-{tag}" for name in ("floor", "redis", "plainredis")}
    pools = [
        redis.BlockingConnectionPool.from_url(args.redis_url, max_connections=4, timeout=60)
        for _ in prefixes
    ]
    clients = [redis.Redis(connection_pool=pool) for pool in pools]
    try:
        ours = RedisSaver(clients[1], prefix=prefixes["redis"])
        ours.setup()
        savers: dict[str, Any] = {
            "memory": InMemorySaver(),
            "floor": FloorRedisSaver(clients[0], prefixes["floor"]),
            "redis": ours,
            "plainredis": PlainRedisSaver(clients[2], prefix=prefixes["plainredis"]),
        }
        result = _compare(savers, args.rounds, per, args.raw, "redis-server")
    finally:
        for client, prefix in zip(clients, prefixes.values(), strict=True):
            for keys in _batched(client.scan_iter(match=f"{prefix}*", count=1000), 500):
                client.unlink(*keys)
            client.close()
    _report(args, per, result, "plainredis")
    return 0


def _batched(items: Any, n: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def get_floor(url: str, rounds: int, calls: int, out: Path) -> int:
    """The floor of one get_tuple (see the module's docstring)."""
    from langgraph.checkpoint.postgres import PostgresSaver as UpstreamSaver
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from savers import UPSTREAM_CONN_KWARGS
    from workload import record_calls, retarget

    tag = uuid.uuid4().hex[:8]
    table, up_schema, schema = (
        f"lgd_bench_getfloor_{tag}",
        f"lgd_bench_getfloor_up_{tag}",
        f"lgd_bench_getfloor_ours_{tag}",
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {up_schema}")
        conn.execute(
            f"CREATE TABLE {table} (thread_id text, checkpoint_id text, body bytea, "
            "PRIMARY KEY (thread_id, checkpoint_id))"
        )
    up_pool = ConnectionPool(
        url,
        min_size=1,
        max_size=1,
        kwargs={**UPSTREAM_CONN_KWARGS, "options": f"-c search_path={up_schema}"},
        open=True,
    )
    floor_pool = ConnectionPool(url, min_size=1, max_size=1, kwargs={"autocommit": True}, open=True)
    opened = PostgresSaver.from_conn_string(url, schema=schema, pool_size=1)
    whole_opened = PostgresSaver.from_conn_string(
        url, schema=schema + "_d", pool_size=1, delta_chain=0
    )
    serde = JsonPlusSerializer()
    thread = "getfloor"
    config = thread_config(thread)
    select = f"SELECT body FROM {table} WHERE thread_id = %s ORDER BY checkpoint_id DESC LIMIT 1"
    try:
        ours = opened.__enter__()
        ours.setup()
        whole = whole_opened.__enter__()
        whole.setup()
        upstream = UpstreamSaver(up_pool)
        upstream.setup()
        for saver in (upstream, ours, whole):
            parent = None
            for name, cfg, *rest in retarget(record_calls(5), thread):
                if name == "put":
                    parent = saver.put(cfg, *rest)
                else:
                    saver.put_writes(parent or cfg, *rest)
        newest = upstream.get_tuple(config)
        assert newest is not None
        type_, body = serde.dumps_typed(dict(newest.checkpoint))
        with floor_pool.connection() as conn:
            conn.execute(f"INSERT INTO {table} VALUES (%s, %s, %s)", (thread, "1", body))

        def fetch() -> Any:
            with floor_pool.connection() as conn:
                return _kept_cursor(conn).execute(select, (thread,), prepare=True).fetchone()

        calls_of: dict[str, Any] = {
            "floor-get": lambda: serde.loads_typed((type_, fetch()[0])),
            "floor-fetch": fetch,
            "upstream": lambda: upstream.get_tuple(config),
            "ours": lambda: ours.get_tuple(config),
            "ours-deltas-off": lambda: whole.get_tuple(config),
        }
        lat: dict[str, list[float]] = {name: [] for name in calls_of}
        cpu = dict.fromkeys(calls_of, 0.0)
        names = list(calls_of)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                call = calls_of[name]
                for _ in range(20):  # warm: prepared statements, caches
                    call()
                cpu0 = time.process_time()
                for _ in range(calls):
                    t0 = time.perf_counter()
                    call()
                    lat[name].append(time.perf_counter() - t0)
                cpu[name] += time.process_time() - cpu0
    finally:
        opened.__exit__(None, None, None)
        whole_opened.__exit__(None, None, None)
        up_pool.close()
        floor_pool.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(f"DROP SCHEMA IF EXISTS {up_schema} CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS {schema}_d CASCADE")
    n = rounds * calls
    rows = {
        name: {
            "p50_ms": _percentile(lat[name], 0.5) * 1000.0,
            "p99_ms": _percentile(lat[name], 0.99) * 1000.0,
            "cpu_ms": cpu[name] * 1000.0 / n,
        }
        for name in lat
    }
    up = rows["upstream"]
    lines = [
        f"`python benchmarks/floor.py --get --rounds {rounds} --calls {calls}`",
        "",
        "| get_tuple | p50 ms | p99 ms | client CPU ms | p50 vs upstream | CPU vs upstream |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['p50_ms']:.3f} | {row['p99_ms']:.3f} | {row['cpu_ms']:.3f} | "
            f"{row['p50_ms'] / up['p50_ms']:.2f}x | {row['cpu_ms'] / up['cpu_ms']:.2f}x |"
        )
    _write(Path(out), "floor-get", lines, {"rounds": rounds, "calls": calls, "get_tuple": rows})
    return 0


def _write(out: Path, name: str, lines: list[str], doc: dict[str, Any]) -> None:
    """Print the table, and write it (``<name>-<stamp>.md``) and ``doc`` (``.json``) to ``out``."""
    if os.environ.get("BENCH_PACKAGE_ROOT"):  # named by its last part: no path of the machine
        doc = {**doc, "package_root": Path(PACKAGE_ROOT).name}
        lines = [*lines, "", f"Our package measured: the one under `{Path(PACKAGE_ROOT).name}`."]
    print("\n".join(lines))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}-{stamp}.json").write_text(json.dumps({"created": stamp, **doc}, indent=2))
    (out / f"{name}-{stamp}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {name}-{stamp}.json, {name}-{stamp}.md")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("postgres", "redis"), default="postgres")
    p.add_argument("--url", default=os.environ.get("BENCH_PG_URL", DEFAULT_URL))
    p.add_argument(
        "--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--threads", type=int, default=12, help="graph threads per saver per round")
    p.add_argument("--quick", action="store_true", help="3 threads per round")
    p.add_argument("--out", default=str(HERE / "results"), help="output directory")
    p.add_argument("--get", action="store_true", help="the floor of one get_tuple instead")
    p.add_argument("--calls", type=int, default=200, help="--get: calls per saver per round")
    p.add_argument(
        "--raw", action="store_true", help="also raw puts/s: recorded calls replayed, no graph"
    )
    p.add_argument(
        "--parts",
        action="store_true",
        help="also the parts between the floor and ours (PostgreSQL): the floor with 50 us "
        "more client CPU per call, the floor storing our encoding, our operations on a bare "
        "driver, ours with deltas off",
    )
    args = p.parse_args(argv)
    if args.backend == "redis":
        return redis_floor(args, 3 if args.quick else args.threads)
    if args.get:
        return get_floor(args.url, args.rounds, args.calls, Path(args.out))
    per = 3 if args.quick else args.threads
    tag = uuid.uuid4().hex[:8]
    table, schema = f"lgd_bench_floor_{tag}", f"lgd_bench_floor_ours_{tag}"
    up_schema = f"lgd_bench_floor_up_{tag}"
    from langgraph.checkpoint.postgres import PostgresSaver as UpstreamSaver
    from savers import UPSTREAM_CONN_KWARGS

    with psycopg.connect(args.url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {up_schema}")
        conn.execute(
            f"CREATE TABLE {table} (thread_id text, checkpoint_id text, body bytea, "
            "metadata bytea, blobs bytea[], PRIMARY KEY (thread_id, checkpoint_id))"
        )
        conn.execute(
            f"CREATE TABLE {table}_writes (thread_id text, checkpoint_id text, task_id text, "
            "data bytea[])"
        )
    kw: dict[str, Any] = {"autocommit": True}
    closers: list[Any] = []
    pools = [
        ConnectionPool(args.url, min_size=4, max_size=4, kwargs=kw, open=True),
        ConnectionPool(
            args.url,
            min_size=4,
            max_size=4,
            kwargs={**kw, "options": "-c synchronous_commit=off"},
            open=True,
        ),
        ConnectionPool(
            args.url,
            min_size=4,
            max_size=4,
            kwargs={**UPSTREAM_CONN_KWARGS, "options": f"-c search_path={up_schema}"},
            open=True,
        ),
    ]
    opened = PostgresSaver.from_conn_string(args.url, schema=schema)
    parts_opened = None
    try:
        ours = opened.__enter__()
        ours.setup()
        upstream = UpstreamSaver(pools[2])
        upstream.setup()
        savers: dict[str, Any] = {
            "memory": InMemorySaver(),
            "floor": FloorSaver(pools[0], table),
            "floor-nosync": FloorSaver(pools[1], table),
        }
        if args.parts:
            # savers of their own (codec, caches), so that no part shares ours' state
            parts_opened = PostgresSaver.from_conn_string(args.url, schema=schema + "_p")
            parts = parts_opened.__enter__()
            parts.setup()
            enc_from = PostgresSaver.from_conn_string(args.url, schema=schema + "_p")
            savers["floor+50us"] = SpinFloorSaver(pools[0], table, 50.0)
            savers["floor+ours-encoding"] = EncodedFloorSaver(pools[0], table, enc_from.__enter__())
            closers.append(enc_from)
            pools.append(ConnectionPool(args.url, min_size=4, max_size=4, kwargs=kw, open=True))
            savers["ours-bare-driver"] = BareDriverSaver(pools[-1], parts)
            whole = PostgresSaver.from_conn_string(args.url, schema=schema + "_d", delta_chain=0)
            savers["ours-deltas-off"] = whole.__enter__()
            closers.append(whole)  # closed even if its setup fails
            savers["ours-deltas-off"].setup()
        savers["ours"] = ours
        savers["upstream"] = upstream
        result = _compare(savers, args.rounds, per, args.raw, "postgres")
    finally:
        opened.__exit__(None, None, None)
        for closer in [*closers, parts_opened]:
            if closer is not None:
                closer.__exit__(None, None, None)
        for pool in pools:
            pool.close()
        with psycopg.connect(args.url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}, {table}_writes")
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS {schema}_p CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS {schema}_d CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS {up_schema} CASCADE")
    _report(args, per, result, "upstream")
    return 0


def _compare(
    savers: dict[str, Any], rounds: int, per: int, raw: bool, comm: str
) -> tuple[dict[str, list[float]], dict[str, Any] | None]:
    """Graph rounds (and raw rounds when ``raw``) over ``savers``, in rotating order."""
    graphs = {name: build_graph(5, saver) for name, saver in savers.items()}
    totals = {name: [0.0, 0.0, 0.0] for name in savers}
    names, n = list(savers), 0
    raws = _raw_rounds(savers, rounds, per, comm) if raw else None
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            graph, ids = graphs[name], list(range(n, n + per))
            n += per
            srv0 = _server_seconds(comm)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            with ThreadPoolExecutor(4) as ex:
                for _ in ex.map(
                    lambda i, g=graph: g.invoke(graph_input(i), thread_config(f"f-{i}")), ids
                ):
                    pass
            totals[name][0] += time.process_time() - cpu0
            totals[name][1] += time.perf_counter() - wall0
            totals[name][2] += _server_seconds(comm) - srv0
    return totals, raws


def _report(
    args: argparse.Namespace,
    per: int,
    result: tuple[dict[str, list[float]], dict[str, Any] | None],
    baseline: str,
) -> None:
    """Print and write the graph table (and the raw one) with each saver against ``baseline``."""
    totals, raw = result
    steps = args.rounds * per * STEPS_PER_THREAD
    rows = {
        name: {
            "cpu_ms_per_step": cpu * 1000.0 / steps,
            "server_cpu_ms_per_step": srv * 1000.0 / steps,
            "steps_per_s": steps / wall,
            "vs_memory": totals["memory"][1] / wall,
            "vs_baseline": totals[baseline][1] / wall,
        }
        for name, (cpu, wall, srv) in totals.items()
    }
    lines = [
        f"`python benchmarks/floor.py --backend {args.backend} --rounds {args.rounds}"
        + (" --quick" if args.quick else f" --threads {per}")
        + (" --raw`" if args.raw else "`"),
        "",
        "| saver | process CPU ms/step | server CPU ms/step | graph steps/s "
        f"| steps/s vs InMemorySaver | steps/s vs {baseline} |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['cpu_ms_per_step']:.3f} | {row['server_cpu_ms_per_step']:.3f} | "
            f"{row['steps_per_s']:.0f} | "
            f"{row['vs_memory']:.3f}x | {row['vs_baseline']:.3f}x |"
        )
    doc: dict[str, Any] = {
        "backend": args.backend,
        "baseline": baseline,
        "rounds": args.rounds,
        "threads": per,
        "steps": steps,
        "savers": rows,
    }
    if raw is not None:
        base = raw[baseline]["calls_per_s"]
        lines += [
            "",
            "Raw mode: the recorded `put` and `put_writes` calls of one thread replayed on "
            f"{per} fresh threads per saver per round, 4 at a time.",
            "",
            "| saver | process CPU ms/call | server CPU ms/call | raw puts/s "
            f"| raw puts/s vs {baseline} |",
            "|---|---|---|---|---|",
        ]
        for name, row in raw.items():
            row["vs_baseline"] = row["calls_per_s"] / base
            lines.append(
                f"| {name} | {row['cpu_ms_per_call']:.3f} | {row['server_cpu_ms_per_call']:.3f} | "
                f"{row['calls_per_s']:.0f} | "
                f"{row['vs_baseline']:.3f}x |"
            )
        doc["raw"] = raw
    _write(Path(args.out), "floor" if args.backend == "postgres" else "floor-redis", lines, doc)


def _raw_rounds(savers: dict[str, Any], rounds: int, per: int, comm: str) -> dict[str, Any]:
    """Raw puts/s of each saver: the workload's recorded calls on fresh threads, 4 at a time."""
    from workload import record_calls, retarget

    recorded = record_calls(5)
    names = list(savers)
    totals = {name: [0.0, 0.0, 0, 0.0] for name in names}
    for name in names:  # warm-up: prepared statements, caches
        _replay_all(savers[name], [retarget(recorded, f"rw-{name}-{i}") for i in range(4)])
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            jobs = [retarget(recorded, f"r-{r}-{i}-{uuid.uuid4().hex[:6]}") for i in range(per)]
            srv0 = _server_seconds(comm)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            _replay_all(savers[name], jobs)
            totals[name][0] += time.process_time() - cpu0
            totals[name][1] += time.perf_counter() - wall0
            totals[name][2] += sum(len(j) for j in jobs)
            totals[name][3] += _server_seconds(comm) - srv0
    return {
        name: {
            "cpu_ms_per_call": cpu * 1000.0 / calls,
            "server_cpu_ms_per_call": srv * 1000.0 / calls,
            "calls_per_s": calls / wall,
        }
        for name, (cpu, wall, calls, srv) in totals.items()
    }


def _replay_all(saver: Any, jobs: list[list[tuple]]) -> None:
    def one(calls: list[tuple]) -> None:
        for call in calls:
            if call[0] == "put":
                saver.put(call[1], call[2], call[3], call[4])
            else:
                saver.put_writes(call[1], call[2], call[3], call[4])

    with ThreadPoolExecutor(4) as ex:
        for _ in ex.map(one, jobs):
            pass


if __name__ == "__main__":
    sys.exit(main())
