#!/usr/bin/env python
"""Linear storage: what delta encoding of growing list channels stores and costs.

    python benchmarks/linear.py                       # every backend: a few minutes
    python benchmarks/linear.py --quick               # smoke run, about a minute
    python benchmarks/linear.py --backend postgres,redis

One run, every saver open at once, each on a place of its own (schema, key prefix, table):

1. **Bytes.** One thread of ``--history`` (100) checkpoints' worth of turns
   (``history_turns(100)`` = 49 turns in one invocation: 101 checkpoints, the history
   thread of ``run.py``) goes through the graph on each saver: ours with deltas on (the
   default), ours with ``delta_chain=0`` (every version in full) and the upstream saver of
   the backend. After every ``put`` the thread's stored bytes are measured (PostgreSQL:
   ``pg_column_size`` of the thread's rows in every table, TOAST included; Redis:
   ``MEMORY USAGE`` of the saver's keys; DynamoDB: item sizes by DynamoDB's rules over a
   scan of the saver's table, plus the aws saver's S3 objects). The place holds that thread
   only, so PostgreSQL's relation sizes are reported too.
2. **get_tuple** of that thread's latest checkpoint, one call at a time, ``--reads`` calls
   per saver in interleaved rounds: p50 of ours with deltas on against off.
3. **Throughput and history** against ``InMemorySaver``: ``--threads`` graph threads of
   ``--turns`` (20) turns at concurrency ``--concurrency`` on each saver in interleaved
   rounds (steps/s), and ``graph.get_state_history()`` of the history thread, fully
   consumed (median of ``--list-repeats``), next to ``saver.list()`` of it.

Writes ``linear-<timestamp>.json``, ``.md`` and ``.png`` (bytes against steps) to
``--out``, each copied to ``latest.linear.*``; ``--chart PATH`` writes the chart there too.
Every schema (``lgd_bench_*_lin_*``), key prefix and table (``lgdbench-*-lin-*``) made here
is removed at the end. See benchmarks/NOTES.md.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import gc
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The helper modules sit beside this file; the checkout's own package is what gets measured.
for _p in (str(HERE.parent), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import measure  # noqa: E402
from backends import make_backends  # noqa: E402
from instrument import ApiCallCounter, item_size  # noqa: E402
from run import add_service_args, environment, log  # noqa: E402
from savers import SPECS, SaverSpec, admin_connect, schema_bytes, unavailable  # noqa: E402
from workload import thread_config  # noqa: E402

BACKENDS = ("postgres", "redis", "dynamodb")
HIST_NO = 10**6  # the history thread is "g-1000000" on every saver
MODE = "lin"  # in every place name: lgd_bench_<saver>_lin_<pid>, lgdbench-<saver>-lin-<pid>

# Issue 12's bars.
BAR_BYTES = 0.25  # ours (deltas on) / upstream bytes per step, at most
BAR_GET = 1.2  # get_tuple p50, deltas on / off, at most
BAR_STEPS = 0.7  # graph steps/s, ours PostgreSQL / InMemorySaver, at least
BAR_HISTORY = 0.5  # get_state_history time, ours PostgreSQL / InMemorySaver, at most


@dataclasses.dataclass(frozen=True)
class Variant(SaverSpec):
    """A saver of ``savers.SPECS`` with ``delta_chain`` given to ours (None: the default)."""

    delta_chain: int | None = None
    role: str = ""  # "on", "off", "anchor", "async", "memory"

    def kwargs(self) -> dict[str, Any]:
        out = super().kwargs()
        if self.delta_chain is not None:
            out["delta_chain"] = self.delta_chain
        return out


def variant(
    base: str, role: str, name: str | None = None, delta_chain: int | None = None
) -> Variant:
    spec = SPECS[base]
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(SaverSpec)}
    label = spec.label + (", deltas off" if delta_chain == 0 else "")
    if role == "on":
        label += ", deltas on (default)"
    fields.update(name=name or base, label=label)
    return Variant(**fields, delta_chain=delta_chain, role=role)


def saver_plan(backends: list[str]) -> dict[str, list[Variant]]:
    """Per backend: ours with deltas on, off, the upstream anchor (and ours async on
    PostgreSQL, for throughput); InMemorySaver in a group of its own."""
    plan: dict[str, list[Variant]] = {}
    if "postgres" in backends:
        plan["postgres"] = [
            variant("ours", "on"),
            variant("ours", "off", "ours-nodelta", 0),
            variant("upstream", "anchor"),
            variant("ours-async", "async"),
        ]
    if "redis" in backends:
        plan["redis"] = [
            variant("redis", "on"),
            variant("redis", "off", "redis-nodelta", 0),
            variant("plainredis", "anchor"),
        ]
    if "dynamodb" in backends:
        plan["dynamodb"] = [
            variant("dynamodb", "on"),
            variant("dynamodb", "off", "dynamodb-nodelta", 0),
            variant("aws-dynamodb", "anchor"),
        ]
    plan["memory"] = [variant("memory", "memory")]
    return plan


# --------------------------------------------------------------------------- bytes stored

THREAD_TABLES_SQL = """
SELECT c.relname FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'thread_id' AND NOT a.attisdropped
WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname
"""


class Sizer:
    """Stored bytes of the history thread on one saver's place (which holds only it)."""

    def __init__(self, sess: measure.Session, thread_id: str) -> None:
        self.sess, self.thread_id = sess, thread_id
        self.backend = sess.backend
        self.kind = self.backend.name
        self._conn: Any = None
        self._client: Any = None
        self.detail: dict[str, int] = {}

    def __call__(self) -> int:
        return getattr(self, f"_{self.kind}")()

    def _postgres(self) -> int:
        if self._conn is None:
            self._conn = admin_connect(self.backend.url)
            self._tables = [
                r[0] for r in self._conn.execute(THREAD_TABLES_SQL, (self.sess.place,)).fetchall()
            ]
        schema = self.sess.place
        detail = {}
        for table in self._tables:
            row = self._conn.execute(
                f'SELECT coalesce(sum(pg_column_size(t.*)), 0)::bigint, count(*) FROM "{schema}".'
                f'"{table}" t WHERE thread_id = %s',
                (self.thread_id,),
            ).fetchone()
            detail[table] = int(row[0])
            detail[f"{table}:rows"] = int(row[1])
        self.detail = detail
        return sum(v for k, v in detail.items() if not k.endswith(":rows"))

    def _redis(self) -> int:
        return int(self.backend.size(self.sess.place) or 0)

    def _dynamodb(self) -> int:
        if self._client is None:
            self._client = self.backend.client("dynamodb")
        total = items = largest = 0
        for page in self._client.get_paginator("scan").paginate(TableName=self.sess.place):
            for item in page.get("Items", []):
                size = item_size(item)
                total += size
                items += 1
                largest = max(largest, size)
        self.detail = {"items": items, "item_bytes": total, "largest_item": largest}
        return total

    def s3_bytes(self) -> tuple[int, int]:
        """Objects and bytes in the place's S3 bucket (the aws saver's offload)."""
        if self.kind != "dynamodb":
            return 0, 0
        s3 = self.backend.client("s3")
        n = total = 0
        try:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.sess.place):
                for obj in page.get("Contents", []):
                    n += 1
                    total += int(obj["Size"])
        except Exception:  # noqa: BLE001 - no bucket (ours): nothing offloaded
            return 0, 0
        finally:
            s3.close()
        return n, total

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._client is not None:
            self._client.close()


def build_history(
    sess: measure.Session, turns: int, every: int, sizer: Sizer | None
) -> dict[str, Any]:
    """Run the history thread through the graph, measuring stored bytes after every put."""
    curve: list[tuple[int, int]] = [(0, 0)]
    saver = sess.saver
    before = saver.put
    count = 0

    def put(*args: Any, **kwargs: Any) -> Any:
        nonlocal count
        out = before(*args, **kwargs)
        count += 1
        if sizer is not None and count % every == 0:
            curve.append((count, sizer()))
        return out

    if sizer is not None and not sess.spec.is_async:
        saver.put = put
    t0 = time.perf_counter()
    try:
        sess.run_threads([HIST_NO], turns=turns, concurrency=1)
    finally:
        saver.put = before
    out: dict[str, Any] = {"build_s": time.perf_counter() - t0}
    if sizer is None:
        return out
    total = sizer()  # after the run: the last step's writes too
    if curve[-1][0] != count:
        curve.append((count, total))
    out.update(checkpoints=count, bytes=total, curve=curve, detail=dict(sizer.detail))
    out["bytes_per_step"] = total / count if count else None
    s3_objects, s3_bytes = sizer.s3_bytes()
    if s3_objects:
        out.update(s3_objects=s3_objects, s3_bytes=s3_bytes)
    if sess.backend.name == "postgres":
        out["schema_bytes"] = schema_bytes(sess.backend.url, sess.place)
    sizer.close()
    return out


# --------------------------------------------------------------------------- timings


def _rotations(names: list[str], r: int) -> list[str]:
    k = r % len(names)
    return names[k:] + names[:k]


def time_get_tuple(
    sessions: dict[str, measure.Session], names: list[str], reads: int, rounds: int
) -> dict[str, list[float]]:
    """``reads`` get_tuple calls of the history thread's latest checkpoint per saver, one at
    a time, in ``rounds`` rounds that visit the savers in turn."""
    cfg = thread_config(f"g-{HIST_NO}")
    per_round = max(1, reads // rounds)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for n in names:  # warm-up: every pooled connection past psycopg's prepare threshold
        for _ in range(24):
            sessions[n].get_tuple(HIST_NO)
    for r in range(rounds):
        for n in _rotations(names, r):
            get = sessions[n].saver.get_tuple
            out = samples[n]
            for _ in range(per_round):
                t0 = time.perf_counter()
                get(cfg)
                out.append(time.perf_counter() - t0)
    return samples


def time_get_by_id(
    sessions: dict[str, measure.Session], names: list[str], rounds: int
) -> dict[str, dict[str, Any]]:
    """get_tuple by id of every checkpoint of the history thread (chain depths 0 to
    ``delta_chain``), ``rounds`` times each, the savers in turn for each checkpoint."""
    configs = {n: sessions[n].configs(HIST_NO, 10**6) for n in names}
    count = min(len(c) for c in configs.values())
    per: dict[str, list[list[float]]] = {n: [[] for _ in range(count)] for n in names}
    for r in range(rounds):
        for i in range(count):
            for n in _rotations(names, r + i):
                get, cfg = sessions[n].saver.get_tuple, configs[n][i]
                t0 = time.perf_counter()
                get(cfg)
                per[n][i].append(time.perf_counter() - t0)
    out: dict[str, dict[str, Any]] = {}
    for n, rows in per.items():
        medians = [statistics.median(r) * 1000 for r in rows]
        worst = max(range(count), key=lambda i: medians[i])
        out[n] = {
            "checkpoints": count,
            "p50_ms": statistics.median([x for r in rows for x in r]) * 1000,
            "median_ms_by_checkpoint": medians,  # newest first
            "worst_ms": medians[worst],
            "worst_index": worst,
        }
    return out


def count_calls(sess: measure.Session) -> dict[str, dict[str, float]]:
    """API calls of one get_tuple of the history thread's latest checkpoint and of one
    listing of it (DynamoDB): botocore hooks on the saver's clients, removed afterwards."""
    counter = ApiCallCounter()
    clients = sess.backend.clients(sess.saver)
    for client in clients:
        counter.attach(client)
    out: dict[str, dict[str, float]] = {}
    try:
        for what, fn in (
            ("get_tuple", functools.partial(sess.get_tuple, HIST_NO)),
            ("list", functools.partial(sess.list_thread, HIST_NO, 10**6)),
        ):
            before = counter.snapshot()
            fn()
            after = counter.snapshot()
            out[what] = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    finally:
        for client in clients:
            events = client.meta.events
            events.unregister("before-parameter-build", counter._before_build)
            events.unregister("before-send", counter._before_send)
            events.unregister("after-call", counter._after_call)
    return out


def time_history(
    sessions: dict[str, measure.Session], names: list[str], repeats: int
) -> dict[str, dict[str, Any]]:
    """Medians of ``graph.get_state_history()`` and of ``saver.list()`` of the history
    thread, fully consumed, each timing after ``gc.collect()``, interleaved."""
    cfg = thread_config(f"g-{HIST_NO}")
    list_cfg = {"configurable": {"thread_id": f"g-{HIST_NO}", "checkpoint_ns": ""}}
    secs: dict[str, dict[str, list[float]]] = {n: {"history": [], "list": []} for n in names}
    counts: dict[str, dict[str, int]] = {n: {} for n in names}
    for r in range(repeats):
        for n in _rotations(names, r):
            sess = sessions[n]
            graph = sess.graph(1)  # any graph on this saver: get_state_history reads it
            for what, fn in (
                ("history", functools.partial(graph.get_state_history, cfg)),
                ("list", functools.partial(sess.saver.list, list_cfg)),
            ):
                gc.collect()
                t0 = time.perf_counter()
                got = list(fn())
                secs[n][what].append(time.perf_counter() - t0)
                counts[n][what] = len(got)
                del got
    return {
        n: {
            "get_state_history_ms": statistics.median(v["history"]) * 1000,
            "list_ms": statistics.median(v["list"]) * 1000,
            "get_state_history_all_ms": [x * 1000 for x in v["history"]],
            "list_all_ms": [x * 1000 for x in v["list"]],
            "checkpoints": counts[n],
        }
        for n, v in secs.items()
    }


def time_throughput(
    sessions: dict[str, measure.Session],
    names: list[str],
    turns: int,
    threads: int,
    rounds: int,
    concurrency: int,
) -> dict[str, dict[str, Any]]:
    """Graph steps/s: ``threads`` threads of ``turns`` turns per saver, in interleaved rounds."""
    for n in names:
        sessions[n].run_threads([-1, -2], turns=turns, concurrency=2)
    tallies = {n: measure.Tally() for n in names}
    batches = [list(range(threads))[i::rounds] for i in range(rounds)]
    for r, batch in enumerate(batches):
        for n in _rotations(names, r):
            sess = sessions[n]
            sess.timed(
                tallies[n],
                functools.partial(sess.run_threads, batch, turns, concurrency),
                functools.partial(sess.calls, ("put",)),
            )
        log(
            f"  throughput round {r + 1}/{rounds}: "
            + ", ".join(f"{n} {tallies[n].per_round[-1]:.0f}" for n in names)
            + " steps/s"
        )
    return {
        n: {
            "steps": t.units,
            "wall_s": t.wall,
            "steps_per_s": t.units / t.wall if t.wall else None,
            "steps_per_s_by_round": t.per_round,
            "cpu_ms_per_step": t.cpu * 1000 / t.units if t.units else None,
        }
        for n, t in tallies.items()
    }


# --------------------------------------------------------------------------- run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_service_args(p)
    p.add_argument(
        "--backend",
        default="all",
        help="comma list of postgres, redis, dynamodb, or all (default %(default)s)",
    )
    p.add_argument(
        "--history",
        type=int,
        default=100,
        help="the history thread runs history_turns(N) turns: 2K+3 checkpoints (101)",
    )
    p.add_argument("--reads", type=int, default=300, help="get_tuple calls per saver")
    p.add_argument("--read-rounds", type=int, default=15, help="rounds of the get_tuple pass")
    p.add_argument(
        "--id-rounds", type=int, default=3, help="get_tuple by id of every checkpoint, rounds"
    )
    p.add_argument("--list-repeats", type=int, default=7, help="timings of each history listing")
    p.add_argument("--turns", type=int, default=20, help="turns per thread, throughput pass")
    p.add_argument("--threads", type=int, default=64, help="threads per saver, throughput pass")
    p.add_argument("--rounds", type=int, default=8, help="rounds of the throughput pass")
    p.add_argument("--concurrency", type=int, default=4, help="threads or tasks at once")
    p.add_argument("--pool-size", type=int, default=4, help="connections per saver pool")
    p.add_argument(
        "--size-every",
        type=int,
        default=1,
        help="measure stored bytes after every N-th put (default: every one)",
    )
    p.add_argument(
        "--dynamodb-throughput",
        action="store_true",
        help="also time the DynamoDB savers' graph steps/s (on moto: says little)",
    )
    p.add_argument("--out", default=str(HERE / "results"), help="output directory")
    p.add_argument("--chart", default=None, help="also write the chart (PNG) to this path")
    p.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    p.add_argument(
        "--note", default=None, help="free text kept in the JSON (e.g. what was measured)"
    )
    args = p.parse_args(argv)
    wanted = BACKENDS if args.backend == "all" else tuple(args.backend.split(","))
    unknown = [b for b in wanted if b not in BACKENDS]
    if unknown:
        p.error(f"unknown backend(s) {unknown}: choose from {', '.join(BACKENDS)} or all")
    args.backends = [b for b in BACKENDS if b in wanted]
    if args.quick:
        args.history, args.reads, args.read_rounds, args.list_repeats = 30, 40, 4, 3
        args.id_rounds = 1
        args.turns, args.threads, args.rounds = 5, 8, 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    plan = saver_plan(args.backends)
    skipped: dict[str, str] = {}
    for group in plan.values():
        for spec in list(group):
            if why := unavailable(spec):
                skipped[spec.name] = why
                group.remove(spec)
                log(f"skipping {spec.name} ({why})")
    specs = [s for g in plan.values() for s in g]
    by_name = {s.name: s for s in specs}
    backends = make_backends(args.url, args.redis_url, args.dynamodb_endpoint)
    settings = measure.Settings(
        url=args.url,
        turns=args.turns,
        threads=args.threads,
        concurrency=args.concurrency,
        pool_size=args.pool_size,
        raw_threads=0,
        reads=args.reads,
        history=args.history,
        durability="sync",
        rounds=args.rounds,
        backends=backends,
    )
    hist_turns = measure.history_turns(args.history)
    tag = str(os.getpid())
    loop = asyncio.new_event_loop()
    sessions: dict[str, measure.Session] = {}
    results: dict[str, dict[str, Any]] = {s.name: {} for s in specs}
    load = {"before": os.getloadavg()}
    try:
        for spec in specs:
            place = backends[spec.backend].place(spec, MODE, tag)
            sessions[spec.name] = measure.Session(spec, settings, place, loop).open()

        # 1. bytes: the history thread on each saver (InMemorySaver too, for pass 3)
        for spec in specs:
            if spec.role == "async":
                continue
            sess = sessions[spec.name]
            sizer = Sizer(sess, f"g-{HIST_NO}") if spec.role in ("on", "off", "anchor") else None
            t0 = time.perf_counter()
            res = build_history(sess, hist_turns, args.size_every, sizer)
            results[spec.name]["history"] = res
            if sizer is not None:
                log(
                    f"bytes {spec.name:18s} {res['checkpoints']} checkpoints, {res['bytes']:,} B,"
                    f" {res['bytes_per_step']:,.0f} B/step ({time.perf_counter() - t0:.1f}s)"
                )

        # 2. get_tuple of the latest checkpoint of that thread, interleaved
        get_names = [s.name for s in specs if s.role != "async"]
        samples = time_get_tuple(sessions, get_names, args.reads, args.read_rounds)
        for n, v in samples.items():
            results[n]["get_tuple"] = measure.latency(v)
        by_id = time_get_by_id(sessions, get_names, args.id_rounds)
        for n, v in by_id.items():
            results[n]["get_tuple_by_id"] = v
        log(
            "get_tuple by id, p50 over every checkpoint, ms: "
            + ", ".join(f"{n} {by_id[n]['p50_ms']:.2f}" for n in get_names)
        )
        log(
            "get_tuple p50 ms: "
            + ", ".join(f"{n} {results[n]['get_tuple']['p50_ms']:.2f}" for n in get_names)
        )

        # 3a. history listings against InMemorySaver
        hist = time_history(sessions, get_names, args.list_repeats)
        for n, v in hist.items():
            results[n]["history_listing"] = v
        log(
            "get_state_history ms: "
            + ", ".join(f"{n} {hist[n]['get_state_history_ms']:.1f}" for n in get_names)
        )

        for n in get_names:  # untimed: what a read and a listing cost in API calls
            if by_name[n].backend == "dynamodb":
                results[n]["api_calls"] = count_calls(sessions[n])

        # 3b. graph steps/s against InMemorySaver
        tp_names = [
            s.name
            for s in specs
            if s.role in ("on", "off", "async", "memory")
            and (s.backend != "dynamodb" or args.dynamodb_throughput)
        ]
        tp = time_throughput(
            sessions, tp_names, args.turns, args.threads, args.rounds, args.concurrency
        )
        for n, v in tp.items():
            results[n]["throughput"] = v
    finally:
        for sess in sessions.values():
            try:
                sess.close()
            except Exception as exc:  # noqa: BLE001
                log(f"closing {sess.spec.name}: {exc}")
        loop.close()
        for backend in backends.values():
            backend.close()
    load["after"] = os.getloadavg()

    doc: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "python benchmarks/linear.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "settings": {
            k: v
            for k, v in vars(args).items()
            if k not in ("url", "redis_url", "dynamodb_endpoint", "out", "chart")
        }
        | {"history_turns": hist_turns},
        "savers": {
            s.name: {
                "label": s.label,
                "backend": s.backend,
                "role": s.role,
                "delta_chain": s.delta_chain,
            }
            for s in specs
        },
        "environment": environment([backends[b] for b in args.backends]) | {"loadavg": load},
        "skipped": skipped,
        "note": args.note,
        "results": results,
    }
    doc["verdicts"] = verdicts(doc)
    doc["elapsed_s"] = time.time() - started

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jpath, mpath, ppath = (out / f"linear-{stamp}.{ext}" for ext in ("json", "md", "png"))
    jpath.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    text = markdown(doc)
    mpath.write_text(text)
    chart(doc, str(ppath))
    for src in (jpath, mpath, ppath):
        shutil.copyfile(src, out / f"latest.linear{src.suffix}")
    if args.chart:
        Path(args.chart).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ppath, args.chart)
    print(text)
    print(f"wrote {jpath}, {mpath.name}, {ppath.name} ({doc['elapsed_s']:.0f}s)")
    return 0


# --------------------------------------------------------------------------- report


def _roles(doc: dict[str, Any], backend: str) -> dict[str, str]:
    return {
        v["role"]: n
        for n, v in doc["savers"].items()
        if v["backend"] == backend or (backend == "memory" and v["role"] == "memory")
    }


def _get(doc: dict[str, Any], name: str | None, *path: str) -> Any:
    d: Any = doc["results"].get(name or "", {})
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def _stored(doc: dict[str, Any], name: str | None) -> float | None:
    """Bytes per step, S3 objects included (the aws saver's offload)."""
    h = _get(doc, name, "history")
    if not h or h.get("bytes") is None:
        return None
    return (h["bytes"] + h.get("s3_bytes", 0)) / h["checkpoints"]


def verdicts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Each of issue 12's bars: the figure, the bar, met or not."""
    out: list[dict[str, Any]] = []
    mem = _roles(doc, "memory").get("memory")

    def add(what: str, value: float | None, bar: float, most: bool, detail: str) -> None:
        met = None if value is None else (value <= bar if most else value >= bar)
        out.append(
            {
                "what": what,
                "value": value,
                "bar": f"{'<=' if most else '>='} {bar}x",
                "met": met,
                "detail": detail,
            }
        )

    for backend in BACKENDS:
        r = _roles(doc, backend)
        if not r:
            continue
        on, off, anchor = r.get("on"), r.get("off"), r.get("anchor")
        if backend in ("postgres", "dynamodb"):
            add(
                f"{backend}: bytes per step, ours / {doc['savers'].get(anchor, {}).get('label')}",
                _ratio(_stored(doc, on), _stored(doc, anchor)),
                BAR_BYTES,
                True,
                f"{_stored(doc, on) or 0:,.0f} vs {_stored(doc, anchor) or 0:,.0f} B/step",
            )
        p_on = _get(doc, on, "get_tuple", "p50_ms")
        p_off = _get(doc, off, "get_tuple", "p50_ms")
        add(
            f"{backend}: get_tuple p50 of the latest checkpoint, deltas on / off",
            _ratio(p_on, p_off),
            BAR_GET,
            True,
            f"{p_on or 0:.3f} vs {p_off or 0:.3f} ms",
        )
        b_on = _get(doc, on, "get_tuple_by_id", "p50_ms")
        b_off = _get(doc, off, "get_tuple_by_id", "p50_ms")
        if b_on is not None:
            add(
                f"{backend}: get_tuple p50 by id over every checkpoint, deltas on / off",
                _ratio(b_on, b_off),
                BAR_GET,
                True,
                f"{b_on:.3f} vs {b_off or 0:.3f} ms (chain depths 0 to 32)",
            )
        if backend == "postgres":
            s_on = _get(doc, on, "throughput", "steps_per_s")
            s_mem = _get(doc, mem, "throughput", "steps_per_s")
            add(
                "postgres: graph steps/s, ours (sync) / InMemorySaver",
                _ratio(s_on, s_mem),
                BAR_STEPS,
                False,
                f"{s_on or 0:.0f} vs {s_mem or 0:.0f} steps/s",
            )
            s_async = _get(doc, r.get("async"), "throughput", "steps_per_s")
            if s_async is not None:
                add(
                    "postgres: graph steps/s, ours (async) / InMemorySaver",
                    _ratio(s_async, s_mem),
                    BAR_STEPS,
                    False,
                    f"{s_async:.0f} vs {s_mem or 0:.0f} steps/s",
                )
            h_on = _get(doc, on, "history_listing", "get_state_history_ms")
            h_mem = _get(doc, mem, "history_listing", "get_state_history_ms")
            add(
                "postgres: get_state_history time, ours / InMemorySaver",
                _ratio(h_on, h_mem),
                BAR_HISTORY,
                True,
                f"{h_on or 0:.1f} vs {h_mem or 0:.1f} ms",
            )
    return out


def _fmt(v: Any, spec: str = ",.0f") -> str:
    return "–" if v is None else format(v, spec)


def markdown(doc: dict[str, Any]) -> str:
    res, savers = doc["results"], doc["savers"]
    lines = [f"`{doc['command']}`", ""]
    lines += [
        "Bytes stored by the history thread "
        f"({doc['settings']['history_turns']} turns in one invocation):",
        "",
        "| saver | checkpoints | bytes stored | bytes/step | / anchor | schema size (PG) "
        "| S3 bytes | get_tuple p50/p99 ms | by id: p50, slowest ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for backend in BACKENDS:
        r = _roles(doc, backend)
        anchor = _stored(doc, r.get("anchor"))
        for role in ("on", "off", "anchor"):
            n = r.get(role)
            h = _get(doc, n, "history")
            if not h or "bytes" not in h:
                continue
            g = res[n].get("get_tuple", {})
            bi = res[n].get("get_tuple_by_id", {})
            lines.append(
                f"| {savers[n]['label']} | {h['checkpoints']} | {h['bytes']:,} | "
                f"{_fmt(_stored(doc, n))} | {_fmt(_ratio(_stored(doc, n), anchor), '.3f')} | "
                f"{_fmt(h.get('schema_bytes'))} | {_fmt(h.get('s3_bytes'))} | "
                f"{_fmt(g.get('p50_ms'), '.3f')}/{_fmt(g.get('p99_ms'), '.3f')} | "
                f"{_fmt(bi.get('p50_ms'), '.3f')}, {_fmt(bi.get('worst_ms'), '.3f')} |"
            )
    calls = {n: v["api_calls"] for n, v in res.items() if "api_calls" in v}
    if calls:
        lines += [
            "",
            "DynamoDB API calls (untimed, one call each; S3 calls included):",
            "",
            "| saver | get_tuple of the latest checkpoint | list of the whole thread |",
            "|---|---|---|",
        ]

        def ops(c: dict[str, float]) -> str:
            n = c.get("calls", 0) + c.get("s3_calls", 0)
            each = ", ".join(
                f"{k.split(':', 1)[1]} {v:.0f}" for k, v in sorted(c.items()) if k.startswith("op:")
            )
            return f"{n:.0f} ({each})"

        for n, c in calls.items():
            lines.append(
                f"| {savers[n]['label']} | {ops(c.get('get_tuple', {}))} | "
                f"{ops(c.get('list', {}))} |"
            )
    mem = _roles(doc, "memory").get("memory")
    lines += [
        "",
        "Against InMemorySaver: graph steps/s "
        f"({doc['settings']['turns']} turns per thread, {doc['settings']['threads']} threads, "
        f"concurrency {doc['settings']['concurrency']}); listing the history thread "
        "(median ms):",
        "",
        "| saver | steps/s | / memory | get_state_history ms | / memory | saver.list ms "
        "| / memory |",
        "|---|---|---|---|---|---|---|",
    ]
    m_tp = _get(doc, mem, "throughput", "steps_per_s")
    m_h = _get(doc, mem, "history_listing", "get_state_history_ms")
    m_l = _get(doc, mem, "history_listing", "list_ms")
    for n, v in savers.items():
        if v["role"] == "anchor" and v["backend"] == "dynamodb" and n not in res:
            continue
        tp = _get(doc, n, "throughput", "steps_per_s")
        h = _get(doc, n, "history_listing", "get_state_history_ms")
        li = _get(doc, n, "history_listing", "list_ms")
        if tp is None and h is None:
            continue
        lines.append(
            f"| {v['label']} | {_fmt(tp)} | {_fmt(_ratio(tp, m_tp), '.2f')} | {_fmt(h, '.1f')} | "
            f"{_fmt(_ratio(h, m_h), '.2f')} | {_fmt(li, '.1f')} | {_fmt(_ratio(li, m_l), '.2f')} |"
        )
    lines += [
        "",
        "Issue 12's bars:",
        "",
        "| figure | value | bar | met | |",
        "|---|---|---|---|---|",
    ]
    for v in doc["verdicts"]:
        met = {True: "**met**", False: "**not met**", None: "–"}[v["met"]]
        lines.append(
            f"| {v['what']} | {_fmt(v['value'], '.3f')} | {v['bar']} | {met} | {v['detail']} |"
        )
    for n, why in doc["skipped"].items():
        lines.append(f"\nskipped {n}: {why}")
    return "\n".join(lines) + "\n"


def chart(doc: dict[str, Any], path: str) -> None:
    """Bytes stored against checkpoints, one panel per backend: ours on, off, upstream."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [b for b in BACKENDS if _roles(doc, b)]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    styles = {"on": ("tab:blue", "-"), "off": ("tab:orange", "--"), "anchor": ("tab:gray", ":")}
    titles = {"postgres": "PostgreSQL", "redis": "Redis", "dynamodb": "DynamoDB (moto)"}
    units = {
        "postgres": "rows of the thread (pg_column_size)",
        "redis": "MEMORY USAGE of its keys",
        "dynamodb": "item sizes (+ S3 objects)",
    }
    for ax, backend in zip(axes[0], panels, strict=True):
        r = _roles(doc, backend)
        for role in ("anchor", "off", "on"):
            n = r.get(role)
            h = _get(doc, n, "history")
            if not h or "curve" not in h:
                continue
            xs = [c[0] for c in h["curve"]]
            ys = [c[1] / 1e6 for c in h["curve"]]
            if h.get("s3_bytes"):
                ys[-1] += h["s3_bytes"] / 1e6
            color, ls = styles[role]
            label = doc["savers"][n]["label"].replace("langgraph-checkpoint-aws ", "aws ")
            ax.plot(xs, ys, ls, color=color, lw=2, label=f"{label}: {_stored(doc, n):,.0f} B/step")
        ax.set_title(f"{titles[backend]}\n{units[backend]}", fontsize=10)
        ax.set_xlabel("checkpoints written")
        ax.set_ylabel("MB stored")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7.5, loc="upper left")
    fig.suptitle(
        "Bytes stored by one thread against its checkpoints "
        f"({doc['settings']['history_turns']} tool-call turns in one invocation)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
