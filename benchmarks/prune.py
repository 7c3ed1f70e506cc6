#!/usr/bin/env python
"""How fast the pruners remove expired threads, and what a writer feels meanwhile.

    python benchmarks/prune.py                            # PostgreSQL, 100,000 threads x 10
    python benchmarks/prune.py --backend all --quick      # every backend, smoke sizes
    python benchmarks/prune.py --backend redis,dynamodb   # the key-value pruners only

PostgreSQL (``--backend postgres``):

1. ``--threads`` threads of ``--per-thread`` checkpoints each (a few hundred bytes of
   channel values per checkpoint, and one ``put_writes`` of two writes per thread) are
   written with raw ``put`` calls of our ``PostgresSaver`` (``partition_days=1``) by
   ``--procs`` processes, each with a saver and a connection of its own; then the same
   data through langgraph-checkpoint-postgres's ``PostgresSaver`` into a schema of its
   own (its fixed table names, found through ``search_path``).
2. Our rows are aged in bulk SQL, as ``tests/postgres/aging.py`` ages one thread: 90% of
   the threads get registry timestamps 31 to 38 days old and their rows move to the
   partitions of those days' epochs; of the 10% live threads, a fifth are moved to two of
   those old epochs too (created long ago, written recently), so the pruner must drop
   six epochs whole and delete the expired threads of the other two in batches.
3. A writer process ``put``s to the live threads at a steady rate, one call at a time,
   and records each call's latency; after ``--baseline-seconds`` the pruner runs
   (``prune_expired(Retention(idle=30d))``), then the writer goes on for as long again.
   Afterwards the live threads must be there with every checkpoint (the loaded ones and
   the writer's) and no row of an expired thread may remain.
4. Upstream's ``delete_thread`` is timed, one call at a time, on ``--upstream-sample``
   expired threads and extrapolated to all of them.

Redis and DynamoDB (``--backend redis`` / ``dynamodb``, smaller sizes): threads written
under a saver without retention, then ``prune_expired(Retention(idle=50s),
now=time.time() + 3600)``, so that every thread has expired by the injected clock.

Writes ``prune-<timestamp>.json`` and ``.md`` to ``--out`` (copied to
``latest.prune.*``). Every schema (``lgd_bench_prune_*``), key prefix and table
(``lgdbench-prune-*``) made here is removed at the end. See benchmarks/NOTES.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import queue
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The helper modules sit beside this file; the checkout's own package is what gets measured.
for _p in (str(HERE.parent), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from backends import Backend, make_backends  # noqa: E402
from instrument import percentile  # noqa: E402
from run import add_service_args, environment, log  # noqa: E402
from savers import UPSTREAM_CONN_KWARGS, admin_connect, drop_schema, schema_bytes  # noqa: E402

from langgraph_durable.retention import DEFAULT_THROTTLE  # noqa: E402

BACKENDS = ("postgres", "redis", "dynamodb")
TENANT = "default"
DAY = 86400.0
IDLE = datetime.timedelta(days=30)  # the PostgreSQL policy: 30 days idle
FIRST_BACK = 31  # expired threads were created 31.. days ago (epochs current-31..)
PAYLOAD_CHARS = 300
CONTEXT_CHARS = 200
TEXT_VARIANTS = 64
WARM_PUTS = 10  # the writer's calls before it is timed (psycopg prepares after 5)


# --------------------------------------------------------------------------- data


_TEXTS: list[str] = []


def texts() -> list[str]:
    """Filler texts (``workload.filler``: compresses about like prose), made once."""
    if not _TEXTS:
        from workload import filler

        _TEXTS.extend(filler(seed, PAYLOAD_CHARS) for seed in range(TEXT_VARIANTS))
    return _TEXTS


def thread_id(i: int) -> str:
    return f"pt-{i:07d}"


def version(n: int) -> str:
    return f"{n:032}.0"


def checkpoint(i: int, seed: int, step: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Checkpoint ``step`` of a thread, and its new channel versions.

    Channels: ``step`` (an int), ``turn`` (a message-like dict of ~300 characters, a new
    version every step) and ``context`` (~200 characters, written by the first step only
    and referenced by every later one).
    """
    from langgraph.checkpoint.base import empty_checkpoint

    t = texts()
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["v"] = 4
    cp["channel_values"] = {
        "step": step,
        "turn": {"role": "assistant", "content": t[(seed + step) % TEXT_VARIANTS], "n": step},
        "context": {"user": f"user-{i}", "notes": t[seed % TEXT_VARIANTS][:CONTEXT_CHARS]},
    }
    cp["channel_versions"] = {
        "step": version(step + 1),
        "turn": version(step + 1),
        "context": version(1),
    }
    new = {"step": version(step + 1), "turn": version(step + 1)}
    if step == 0:
        new["context"] = version(1)
    return cp, new


def put_config(thread: str, parent: str | None) -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if parent:
        c["checkpoint_id"] = parent
    return {"configurable": c}


def write_thread(saver: Any, i: int, per_thread: int, writes: bool) -> int:
    """Thread ``i``: ``per_thread`` chained ``put`` calls, then one ``put_writes``.

    Returns the number of calls made.
    """
    thread = thread_id(i)
    parent: str | None = None
    config: dict[str, Any] = {}
    for step in range(per_thread):
        cp, new = checkpoint(i, i, step)
        meta = {"source": "loop", "step": step, "parents": {}}
        config = saver.put(put_config(thread, parent), cp, meta, new)
        parent = config["configurable"]["checkpoint_id"]
    if not writes:
        return per_thread
    content = texts()[(i + 7) % TEXT_VARIANTS][:200]
    saver.put_writes(
        config,
        [("turn", {"role": "tool", "content": content}), ("branch:to:agent", None)],
        f"task-{i}",
    )
    return per_thread + 1


# --------------------------------------------------------------------------- savers


@contextlib.contextmanager
def open_saver(job: dict[str, Any]) -> Iterator[Any]:
    """A saver on ``job``'s place, without ``setup()`` (run once, by the parent)."""
    kind = job["kind"]
    # ours with the hash chain on (benchmarks/verify.py): the chain key in hex
    chained: dict[str, Any] = {}
    if job.get("integrity"):
        chained["integrity"] = bytes.fromhex(job["integrity"])
    if kind in ("ours", "upstream"):
        from psycopg_pool import ConnectionPool

        kwargs: dict[str, Any] = {}
        if kind == "upstream":
            kwargs = {**UPSTREAM_CONN_KWARGS, "options": f"-c search_path={job['place']}"}
        if job.get("app"):  # tagged, so that pg_stat_activity shows its backend
            kwargs["application_name"] = job["app"]
        pool = ConnectionPool(job["url"], min_size=1, max_size=1, kwargs=kwargs, open=True)
        try:
            pool.wait()
            if kind == "ours":
                from langgraph_durable.postgres import PostgresSaver

                yield PostgresSaver(pool, schema=job["place"], partition_days=1, **chained)
            else:
                from langgraph.checkpoint.postgres import PostgresSaver as UpstreamSaver

                yield UpstreamSaver(pool)
        finally:
            pool.close()
    elif kind == "redis":
        import redis

        from langgraph_durable.redis import RedisSaver

        client = redis.Redis.from_url(job["url"])
        try:
            yield RedisSaver(client, prefix=job["place"], **chained)
        finally:
            client.close()
    elif kind == "dynamodb":
        import boto3
        from botocore.config import Config

        from langgraph_durable.dynamodb import DynamoDBSaver

        creds: dict[str, Any] = {}
        if job.get("moto"):  # moto accepts any credentials
            creds = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
        session = boto3.Session(region_name="us-east-1", **creds)
        client = session.client(
            "dynamodb",
            endpoint_url=job["url"],
            config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
        )
        saver = DynamoDBSaver(client, table=job["place"], **chained)
        try:
            yield saver
        finally:
            saver.close()
            client.close()
    else:
        raise ValueError(kind)


# --------------------------------------------------------------------------- loading


def _load_worker(
    job: dict[str, Any], worker: int, procs: int, threads: int, per_thread: int, counter: Any
) -> None:
    with open_saver(job) as saver:
        pending = 0
        for i in range(worker, threads, procs):
            pending += write_thread(saver, i, per_thread, writes=True)
            if pending >= 200:
                with counter.get_lock():
                    counter.value += pending
                pending = 0
        with counter.get_lock():
            counter.value += pending


def load(job: dict[str, Any], threads: int, per_thread: int, procs: int) -> dict[str, Any]:
    """Write every thread from ``procs`` processes; print the rate as it goes."""
    ctx = mp.get_context("spawn")
    counter = ctx.Value("q", 0)
    workers = [
        ctx.Process(target=_load_worker, args=(job, w, procs, threads, per_thread, counter))
        for w in range(procs)
    ]
    started = time.perf_counter()
    for w in workers:
        w.start()
    last_log, last_count = started, 0
    while any(w.is_alive() for w in workers):
        mp_connection.wait([w.sentinel for w in workers if w.is_alive()], timeout=1.0)
        if any(w.exitcode not in (None, 0) for w in workers):
            for w in workers:
                if w.is_alive():
                    w.terminate()
            raise RuntimeError(f"a {job['kind']} loader process failed")
        now = time.perf_counter()
        if now - last_log >= 15:
            count = counter.value
            log(
                f"{job['kind']}: {count:,} calls, {count / (now - started):,.0f}/s overall, "
                f"{(count - last_count) / (now - last_log):,.0f}/s last {now - last_log:.0f}s"
            )
            last_log, last_count = now, count
    for w in workers:
        w.join()
        if w.exitcode != 0:
            raise RuntimeError(f"a {job['kind']} loader process failed")
    seconds = time.perf_counter() - started
    calls = threads * (per_thread + 1)
    out = {
        "processes": procs,
        "puts": threads * per_thread,
        "put_writes": threads,
        "seconds": round(seconds, 2),
        "calls_per_s": round(calls / seconds, 1),
        "puts_per_s": round(threads * per_thread / seconds, 1),
    }
    log(
        f"{job['kind']}: wrote {threads:,} threads x {per_thread} in {seconds:.0f}s: "
        f"{out['calls_per_s']:,.0f} calls/s ({out['puts_per_s']:,.0f} puts/s)"
    )
    return out


# --------------------------------------------------------------------------- the plan


def make_plan(threads: int, old_epochs: int, kept_epochs: int) -> list[dict[str, Any]]:
    """Each thread's fate: live or expired, and how far back it moves.

    Every 10th thread is live; every 5th live thread is moved to one of ``kept_epochs``
    old epochs (created that many days ago, last written within the last half day).
    Expired threads are spread over ``old_epochs`` epochs, created 31.. days ago and last
    written up to 20 hours after that (so idle for more than 30 days).
    """
    backs = [FIRST_BACK + k for k in range(old_epochs)]
    kept = sorted({backs[int((j + 0.5) * old_epochs / kept_epochs)] for j in range(kept_epochs)})
    plan = []
    expired = 0
    for i in range(threads):
        if i % 10 == 0:
            j = i // 10
            if kept and j % 5 == 0:
                back = kept[(j // 5) % len(kept)]
                plan.append({"i": i, "live": True, "back": back, "c": back, "u": (j % 12) / 24})
            else:
                plan.append({"i": i, "live": True, "back": 0, "c": 0.0, "u": 0.0})
        else:
            back = backs[expired % len(backs)]
            plan.append(
                {"i": i, "live": False, "back": back, "c": back, "u": back - (expired % 21) / 24}
            )
            expired += 1
    return plan


# --------------------------------------------------------------------------- PostgreSQL


def age_ours(url: str, schema: str, mapping: str, plan: list[dict[str, Any]]) -> dict[str, Any]:
    """Move threads back in time in bulk: registry timestamps, then rows to older epochs."""
    s, m = f'"{schema}"', f'"{mapping}"'
    started = time.perf_counter()
    with admin_connect(url) as conn:
        conn.execute(f"CREATE SCHEMA {m}")
        conn.execute(
            f"CREATE TABLE {m}.threads (thread_id text PRIMARY KEY, live boolean NOT NULL, "
            "back integer NOT NULL, created_days double precision NOT NULL, "
            "updated_days double precision NOT NULL, extra integer NOT NULL DEFAULT 0)"
        )
        with conn.cursor() as cur:
            with cur.copy(
                f"COPY {m}.threads (thread_id, live, back, created_days, updated_days) FROM STDIN"
            ) as copy:
                for p in plan:
                    copy.write_row((thread_id(p["i"]), p["live"], p["back"], p["c"], p["u"]))
        conn.execute(f"ANALYZE {m}.threads")
        current = int(conn.execute(f"SELECT {s}.current_epoch()").fetchone()[0])  # type: ignore[index]
        backs = sorted({p["back"] for p in plan if p["back"]})
        for back in backs:
            conn.execute(f"SELECT {s}.ensure_partitions(%s)", (current - back,))
        timings = {}
        t0 = time.perf_counter()
        n = conn.execute(
            f"UPDATE {s}.threads th SET epoch = %(cur)s - m.back, "
            "created_at = now() - make_interval(secs => m.created_days * 86400), "
            "updated_at = now() - make_interval(secs => m.updated_days * 86400) "
            f"FROM {m}.threads m WHERE th.tenant_id = %(tenant)s "
            "AND th.thread_id = m.thread_id AND m.back > 0",
            {"cur": current, "tenant": TENANT},
        ).rowcount
        timings["threads"] = (n, round(time.perf_counter() - t0, 1))
        for table in ("checkpoints", "blobs", "writes"):
            t0 = time.perf_counter()
            n = conn.execute(
                f"UPDATE {s}.{table} x SET epoch = %(cur)s - m.back FROM {m}.threads m "
                "WHERE x.tenant_id = %(tenant)s AND x.thread_id = m.thread_id AND m.back > 0",
                {"cur": current, "tenant": TENANT},
            ).rowcount
            timings[table] = (n, round(time.perf_counter() - t0, 1))
            log(f"aged {table}: {n:,} rows moved in {timings[table][1]}s")
        t0 = time.perf_counter()
        for table in ("threads", "checkpoints", "blobs", "writes"):
            conn.execute(f"VACUUM (ANALYZE) {s}.{table}")
        timings["vacuum_analyze_s"] = round(time.perf_counter() - t0, 1)
    return {
        "current_epoch": current,
        "old_epochs": [current - b for b in backs],
        "rows_moved": timings,
        "seconds": round(time.perf_counter() - started, 1),
    }


def partition_epochs(url: str, schema: str) -> list[int]:
    with admin_connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname ~ '^checkpoints_e-?[0-9]+$'",
            (schema,),
        ).fetchall()
    return sorted(int(r[0].rsplit("_e", 1)[1]) for r in rows)


def rows_by_fate(url: str, schema: str, mapping: str) -> dict[str, dict[str, int]]:
    """Rows of every table, split by the fate of their thread (live or expired)."""
    s, m = f'"{schema}"', f'"{mapping}"'
    out: dict[str, dict[str, int]] = {"live": {}, "expired": {}, "total": {}}
    with admin_connect(url) as conn:
        for table in ("threads", "checkpoints", "blobs", "writes", "effects"):
            for live, name in ((True, "live"), (False, "expired")):
                row = conn.execute(
                    f"SELECT count(*) FROM {s}.{table} x JOIN {m}.threads t "
                    "ON t.thread_id = x.thread_id WHERE x.tenant_id = %s AND t.live = %s",
                    (TENANT, live),
                ).fetchone()
                out[name][table] = int(row[0])  # type: ignore[index]
            row = conn.execute(f"SELECT count(*) FROM {s}.{table}").fetchone()
            out["total"][table] = int(row[0])  # type: ignore[index]
    return out


def verify_ours(
    url: str,
    schema: str,
    mapping: str,
    per_thread: int,
    live: int,
    before: dict[str, dict[str, int]],
    writer_counts: dict[str, int],
) -> dict[str, Any]:
    """Exactly the live threads remain, each with every checkpoint; nothing expired remains."""
    s, m = f'"{schema}"', f'"{mapping}"'
    after = rows_by_fate(url, schema, mapping)
    extra = sum(writer_counts.values())
    with admin_connect(url) as conn:
        if writer_counts:
            ids, counts = zip(*writer_counts.items(), strict=True)
            conn.execute(
                f"UPDATE {m}.threads m SET extra = w.n FROM unnest(%s::text[], %s::integer[]) "
                "AS w(thread_id, n) WHERE m.thread_id = w.thread_id",
                (list(ids), list(counts)),
            )
        row = conn.execute(
            "SELECT count(*) FROM (SELECT m.thread_id, m.extra, count(c.thread_id) AS n "
            f"FROM {m}.threads m LEFT JOIN {s}.checkpoints c ON c.tenant_id = %s "
            "AND c.thread_id = m.thread_id WHERE m.live GROUP BY m.thread_id, m.extra) x "
            "WHERE n <> %s + extra",
            (TENANT, per_thread),
        ).fetchone()
        wrong_threads = int(row[0])  # type: ignore[index]
    checks = {
        "registry holds exactly the live threads": after["total"]["threads"] == live
        and after["live"]["threads"] == live,
        "every live thread has all its checkpoints": wrong_threads == 0
        and after["live"]["checkpoints"] == before["live"]["checkpoints"] + extra,
        "live blobs and writes kept": after["live"]["blobs"] == before["live"]["blobs"] + extra
        and after["live"]["writes"] == before["live"]["writes"],
        "no row of an expired thread remains": not any(after["expired"].values()),
        "no other rows": after["total"] == after["live"],
    }
    return {
        "checks": checks,
        "ok": all(checks.values()),
        "live_threads_with_wrong_checkpoint_count": wrong_threads,
        "rows_after": after,
        "writer_puts": extra,
    }


def _writer(
    job: dict[str, Any],
    threads: list[str],
    per_thread: int,
    rate: float,
    ready: Any,
    stop: Any,
    out: Any,
) -> None:
    """``put`` to the live threads in turn, ``rate`` calls a second (0: flat out)."""
    samples: list[tuple[float, float]] = []
    counts: dict[str, int] = {}
    parents: dict[str, str] = {}
    errors: list[str] = []
    interval = 1.0 / rate if rate > 0 else 0.0
    clock = time.monotonic

    def one(k: int) -> float:
        thread = threads[k % len(threads)]
        step = per_thread + counts.get(thread, 0)
        cp, new = checkpoint(k, k, step)
        new.pop("context", None)
        meta = {"source": "loop", "step": step, "parents": {}}
        t0 = clock()
        config = saver.put(put_config(thread, parents.get(thread)), cp, meta, new)
        t1 = clock()
        counts[thread] = counts.get(thread, 0) + 1
        parents[thread] = config["configurable"]["checkpoint_id"]
        samples.append((t0, t1 - t0))
        return t0

    with open_saver(job) as saver:
        for k in range(WARM_PUTS):
            one(k)
        samples.clear()
        ready.set()
        k = WARM_PUTS
        due = clock()
        while not stop.is_set():
            if interval:
                now = clock()
                if due > now:
                    time.sleep(due - now)
                due = max(due + interval, clock() - interval)  # no catch-up burst
            try:
                one(k)
            except Exception as exc:  # noqa: BLE001
                errors.append(f"{type(exc).__name__}: {exc}")
                if len(errors) > 100:
                    break
            k += 1
    out.put({"samples": samples, "counts": counts, "errors": errors[:10], "n_errors": len(errors)})


def window(samples: list[tuple[float, float]], lo: float, hi: float) -> dict[str, Any]:
    lat = [d for t, d in samples if lo <= t < hi]
    span = hi - lo
    return {
        "seconds": round(span, 2),
        "puts": len(lat),
        "puts_per_s": round(len(lat) / span, 1) if span > 0 else None,
        "p50_ms": _ms(percentile(lat, 50)),
        "p99_ms": _ms(percentile(lat, 99)),
        "mean_ms": _ms(statistics.fmean(lat)) if lat else None,
        "max_ms": _ms(max(lat)) if lat else None,
    }


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000.0, 3)


class WaitSampler:
    """Polls ``pg_stat_activity`` for the writer's and the pruner's backends.

    Every ``interval`` seconds, from a thread of its own with a connection of its own:
    each backend's state and wait event (``cpu`` when active and waiting on nothing), so
    that a window's samples say whether the writer waited on a lock, on I/O or the WAL,
    or on nothing (then it was running, or waiting for a CPU).
    """

    def __init__(self, url: str, apps: list[str], interval: float = 0.005) -> None:
        import threading

        self.url, self.apps, self.interval = url, apps, interval
        self.samples: list[tuple[float, str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with admin_connect(self.url) as conn:
            while not self._stop.is_set():
                rows = conn.execute(
                    "SELECT application_name, state, wait_event_type, wait_event "
                    "FROM pg_stat_activity WHERE application_name = ANY(%s)",
                    (self.apps,),
                ).fetchall()
                now = time.monotonic()
                for app, state, wtype, wevent in rows:
                    if state != "active":
                        what = "idle" if state and state.startswith("idle") else str(state)
                    elif wtype is None:
                        what = "cpu"
                    else:
                        what = f"{wtype}:{wevent}"
                    self.samples.append((now, app, what))
                time.sleep(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def summary(self, app: str, lo: float, hi: float) -> dict[str, int]:
        """Samples of ``app``'s backend in [lo, hi), by what it was doing."""
        out: dict[str, int] = {}
        for t, a, what in self.samples:
            if a == app and lo <= t < hi:
                out[what] = out.get(what, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def prune_with_writer(
    args: argparse.Namespace,
    ours_job: dict[str, Any],
    live_ids: list[str],
    phase1_threads: int,
) -> tuple[Any, dict[str, Any], dict[str, int]]:
    """Run the pruner while a writer process puts to live threads; time both."""
    from langgraph_durable import Retention

    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    tag = ours_job["place"].rsplit("_", 1)[-1]
    writer_job = {**ours_job, "app": f"lgd_bench_prune_writer_{tag}"}
    pruner_job = {**ours_job, "app": f"lgd_bench_prune_pruner_{tag}"}
    writer = ctx.Process(
        target=_writer,
        args=(writer_job, live_ids, args.per_thread, args.writer_rate, ready, stop, out),
    )
    writer.start()
    result: dict[str, Any] = {}
    sampler: WaitSampler | None = None
    try:
        deadline = time.monotonic() + 120
        while not ready.wait(1.0):
            if not writer.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the writer process did not start")
        log(f"writer running at {args.writer_rate:g} puts/s; baseline {args.baseline_seconds}s")
        if args.sample_waits:
            sampler = WaitSampler(args.url, [writer_job["app"], pruner_job["app"]])
        time.sleep(args.baseline_seconds)
        events: list[tuple[float, int, int, int]] = []

        def progress(p: Any) -> None:
            events.append((time.monotonic(), p.done, p.threads, p.checkpoints))

        load_before = os.getloadavg()
        with open_saver(pruner_job) as saver:
            t0 = time.monotonic()
            report = saver.prune_expired(
                Retention(idle=IDLE), batch=args.batch, throttle=args.throttle, progress=progress
            )
            t1 = time.monotonic()
        load_after = os.getloadavg()
        duration = t1 - t0
        log(
            f"prune: {report.threads:,} threads, {report.checkpoints:,} checkpoints, "
            f"{report.partitions} partitions in {duration:.2f}s"
        )
        after = min(duration, args.baseline_seconds)
        time.sleep(after)
        stop.set()
        try:
            got = out.get(timeout=300)
        except queue.Empty as exc:
            raise RuntimeError("the writer process returned nothing") from exc
        writer.join(60)
    finally:
        if sampler is not None:
            sampler.stop()
        stop.set()
        if writer.is_alive():
            writer.join(30)
        if writer.is_alive():
            writer.terminate()
    samples = got["samples"]
    before_span = min(duration, args.baseline_seconds)
    phase1_end = next((t for t, done, _th, _c in events if done >= phase1_threads), None)
    result["prune"] = {
        **report.as_dict(),
        "wall_seconds": round(duration, 3),
        "threads_per_s": round(report.threads / duration, 1) if duration else None,
        "checkpoints_per_s": round(report.checkpoints / duration, 1) if duration else None,
        "batch": args.batch,
        "progress_events": len(events),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
    }
    if phase1_end is not None:
        p1 = phase1_end - t0
        p2 = t1 - phase1_end
        rows_threads = report.threads - phase1_threads
        result["prune"]["phases"] = {
            "partitions": {"threads": phase1_threads, "seconds": round(p1, 3)},
            "rows": {
                "threads": rows_threads,
                "seconds": round(p2, 3),
                "threads_per_s": round(rows_threads / p2, 1) if p2 > 0 else None,
                "batches": len(events) - sum(1 for e in events if e[0] <= phase1_end),
            },
        }
    result["writer"] = {
        "rate_target": args.writer_rate,
        "threads": len(live_ids),
        "before": window(samples, t0 - before_span, t0),
        "baseline_full": window(samples, t0 - args.baseline_seconds, t0),
        "during": window(samples, t0, t1),
        "after": window(samples, t1, t1 + after),
        "errors": got["errors"],
        "n_errors": got["n_errors"],
    }
    if phase1_end is not None:
        # Which phase of the pruner a slow put fell in.
        result["writer"]["during_partitions"] = window(samples, t0, phase1_end)
        result["writer"]["during_rows"] = window(samples, phase1_end, t1)
    slowest = sorted(((d, t) for t, d in samples if t0 <= t < t1), reverse=True)[:10]
    result["writer"]["slowest_during"] = [
        {"at_s": round(t - t0, 3), "ms": _ms(d)} for d, t in slowest
    ]
    if sampler is not None:
        spans = {"before": (t0 - before_span, t0), "during": (t0, t1), "after": (t1, t1 + after)}
        if phase1_end is not None:
            spans["during_partitions"] = (t0, phase1_end)
            spans["during_rows"] = (phase1_end, t1)
        result["backend_waits"] = {
            who: {name: sampler.summary(job["app"], lo, hi) for name, (lo, hi) in spans.items()}
            for who, job in (("writer", writer_job), ("pruner", pruner_job))
        }
    b, d = result["writer"]["before"], result["writer"]["during"]
    if b["p99_ms"] and d["p99_ms"]:
        result["writer"]["p99_during_over_before"] = round(d["p99_ms"] / b["p99_ms"], 3)
        result["writer"]["p50_during_over_before"] = round(d["p50_ms"] / b["p50_ms"], 3)
    return report, result, got["counts"]


def upstream_deletes(
    job: dict[str, Any], url: str, schema: str, expired_ids: list[str], sample: int
) -> dict[str, Any]:
    """Time upstream's ``delete_thread`` one call at a time on a spread sample."""
    step = max(1, len(expired_ids) // (sample + 20))
    picked = expired_ids[::step][: sample + 20]
    warm, timed = picked[:20], picked[20:]
    lat: list[float] = []
    with open_saver(job) as saver:
        for t in warm:
            saver.delete_thread(t)
        load_before = os.getloadavg()
        started = time.perf_counter()
        for t in timed:
            t0 = time.perf_counter()
            saver.delete_thread(t)
            lat.append(time.perf_counter() - t0)
        seconds = time.perf_counter() - started
    s = f'"{schema}"'
    left = {}
    with admin_connect(url) as conn:
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            row = conn.execute(
                f"SELECT count(*) FROM {s}.{table} WHERE thread_id = ANY(%s)", (picked,)
            ).fetchone()
            left[table] = int(row[0])  # type: ignore[index]
    rate = len(timed) / seconds
    return {
        "sample": len(timed),
        "warm_up": len(warm),
        "seconds": round(seconds, 3),
        "threads_per_s": round(rate, 1),
        "p50_ms": _ms(percentile(lat, 50)),
        "p99_ms": _ms(percentile(lat, 99)),
        "mean_ms": _ms(statistics.fmean(lat)),
        "rows_left_of_sample": left,
        "loadavg_before": load_before,
        "extrapolated_seconds_all_expired": round(len(expired_ids) / rate, 1),
        "expired_threads": len(expired_ids),
    }


def run_postgres(args: argparse.Namespace, tag: str) -> dict[str, Any]:
    from psycopg_pool import ConnectionPool

    url = args.url
    ours = f"lgd_bench_prune_ours_{tag}"
    theirs = f"lgd_bench_prune_upstream_{tag}"
    mapping = f"lgd_bench_prune_map_{tag}"
    ours_job = {"kind": "ours", "url": url, "place": ours}
    up_job = {"kind": "upstream", "url": url, "place": theirs}
    plan = make_plan(args.threads, args.old_epochs, args.kept_epochs)
    live = [p for p in plan if p["live"]]
    expired = [p for p in plan if not p["live"]]
    kept_backs = {p["back"] for p in live if p["back"]}
    # The pruner moves an old epoch's live threads forward when they hold no more
    # checkpoints than its expired ones (then the epoch drops whole, in the
    # partition phase); here every thread starts with as many checkpoints.
    moved_backs = {
        b
        for b in kept_backs
        if sum(1 for p in live if p["back"] == b) <= sum(1 for p in expired if p["back"] == b)
    }
    phase1_threads = sum(
        1 for p in expired if p["back"] not in kept_backs or p["back"] in moved_backs
    )
    out: dict[str, Any] = {
        "threads": args.threads,
        "per_thread": args.per_thread,
        "checkpoints": args.threads * args.per_thread,
        "live_threads": len(live),
        "live_threads_in_old_epochs": sum(1 for p in live if p["back"]),
        "expired_threads": len(expired),
        "expired_in_droppable_epochs": phase1_threads,
        "expired_in_kept_epochs": len(expired) - phase1_threads,
        "schemas": [ours, theirs, mapping],
    }
    for s in (ours, theirs, mapping):
        drop_schema(url, s)
    try:
        with ConnectionPool(url, min_size=1, max_size=1, open=True) as pool:
            from langgraph_durable.postgres import PostgresSaver

            PostgresSaver(pool, schema=ours, partition_days=1).setup()
        out["load_ours"] = load(ours_job, args.threads, args.per_thread, args.procs)
        if args.upstream_sample:
            with admin_connect(url) as conn:
                conn.execute(f'CREATE SCHEMA "{theirs}"')
            with open_saver(up_job) as saver:
                saver.setup()
            out["load_upstream"] = load(up_job, args.threads, args.per_thread, args.procs)
        out["bytes_ours_loaded"] = schema_bytes(url, ours)
        out["aging"] = age_ours(url, ours, mapping, plan)
        log(f"aged in {out['aging']['seconds']}s")
        with admin_connect(url) as conn:
            if args.upstream_sample:
                for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                    conn.execute(f'VACUUM (ANALYZE) "{theirs}".{table}')
            conn.execute("CHECKPOINT")
        out["partitions_before"] = partition_epochs(url, ours)
        before = rows_by_fate(url, ours, mapping)
        out["rows_before"] = before
        out["bytes_ours_before"] = schema_bytes(url, ours)
        # The writer: current-epoch and old-epoch live threads, interleaved.
        old_live = [thread_id(p["i"]) for p in live if p["back"]]
        cur_live = [thread_id(p["i"]) for p in live if not p["back"]]
        ratio = max(1, len(cur_live) // max(1, len(old_live)))
        live_ids: list[str] = []
        for k, t in enumerate(cur_live):
            live_ids.append(t)
            if k % ratio == 0 and k // ratio < len(old_live):
                live_ids.append(old_live[k // ratio])
        report, res, counts = prune_with_writer(args, ours_job, live_ids, phase1_threads)
        out.update(res)
        out["partitions_after"] = partition_epochs(url, ours)
        out["bytes_ours_after"] = schema_bytes(url, ours)
        out["verify"] = verify_ours(url, ours, mapping, args.per_thread, len(live), before, counts)
        out["report_matches_plan"] = (
            report.threads == len(expired) and report.checkpoints == len(expired) * args.per_thread
        )
        log(f"verification: {'ok' if out['verify']['ok'] else 'FAILED'} {out['verify']['checks']}")
        if args.upstream_sample:
            out["upstream_delete"] = upstream_deletes(
                up_job, url, theirs, [thread_id(p["i"]) for p in expired], args.upstream_sample
            )
            u = out["upstream_delete"]
            log(
                f"upstream delete_thread: {u['threads_per_s']:,.0f} threads/s, p50 {u['p50_ms']} ms"
            )
            ours_rate = out["prune"]["threads_per_s"]
            out["ratio_ours_over_upstream"] = round(ours_rate / u["threads_per_s"], 2)
            rows = out["prune"].get("phases", {}).get("rows", {})
            if rows.get("threads_per_s"):
                out["ratio_rows_phase_over_upstream"] = round(
                    rows["threads_per_s"] / u["threads_per_s"], 2
                )
    finally:
        for s in (ours, theirs, mapping):
            drop_schema(url, s)
    return out


# --------------------------------------------------------------------------- Redis, DynamoDB


def count_left(backend: Backend, name: str, place: str) -> int:
    """Keys (Redis) or items (DynamoDB) left in the place."""
    if name == "redis":
        import redis

        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in place) + ":*"
        with redis.Redis.from_url(backend.url) as client:  # type: ignore[attr-defined]
            return sum(1 for _ in client.scan_iter(match=pattern, count=1000))
    ddb = backend.client("dynamodb")  # type: ignore[attr-defined]
    try:
        total = 0
        for page in ddb.get_paginator("scan").paginate(TableName=place, Select="COUNT"):
            total += int(page["Count"])
        return total
    finally:
        ddb.close()


def run_kv(name: str, backend: Backend, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    """Write threads without retention, then prune all of them by the injected clock."""
    from langgraph_durable import Retention

    threads, per_thread, procs = {
        "redis": (args.redis_threads, args.redis_per_thread, args.procs),
        "dynamodb": (args.dynamodb_threads, args.dynamodb_per_thread, 2),
    }[name]
    place = f"lgdbench-prune-{tag}"
    job: dict[str, Any] = {"kind": name, "place": place}
    if name == "redis":
        job["url"] = backend.url  # type: ignore[attr-defined]
    else:
        job["url"] = backend.endpoint  # type: ignore[attr-defined]
        job["moto"] = not backend._given  # type: ignore[attr-defined]
    out: dict[str, Any] = {
        "threads": threads,
        "per_thread": per_thread,
        "checkpoints": threads * per_thread,
        "place": place,
    }
    backend.drop(place)
    try:
        with open_saver(job) as saver:
            saver.setup()
        out["load"] = load(job, threads, per_thread, procs)
        out["left_before"] = count_left(backend, name, place)
        with open_saver(job) as saver:
            counter = None
            if name == "dynamodb":  # on moto the API calls mean something, the times do not
                from instrument import ApiCallCounter

                counter = ApiCallCounter()
                counter.attach(saver.client)
            try:
                c0 = time.process_time()
                t0 = time.perf_counter()
                report = saver.prune_expired(
                    Retention(idle=datetime.timedelta(seconds=50)),
                    now=time.time() + 3600,
                    batch=args.batch,
                    throttle=args.throttle,
                )
                seconds = time.perf_counter() - t0
                cpu = time.process_time() - c0
            except Exception as exc:  # noqa: BLE001  (the pruner may not exist yet)
                out["pending"] = f"{type(exc).__name__}: {exc}"
                log(f"{name}: prune_expired failed, figures pending: {out['pending']}")
                return out
            out["prune"] = {
                **report.as_dict(),
                "wall_seconds": round(seconds, 3),
                "threads_per_s": round(report.threads / seconds, 1) if seconds else None,
                "checkpoints_per_s": round(report.checkpoints / seconds, 1) if seconds else None,
                "batch": args.batch,
                "client_cpu_s": round(cpu, 3),
            }
            if counter is not None:
                calls = counter.snapshot()
                out["prune"]["api_calls"] = {
                    k: v for k, v in sorted(calls.items()) if k == "calls" or k.startswith("op:")
                }
                out["prune"]["api_calls_per_thread"] = round(calls.get("calls", 0) / threads, 2)
            step = max(1, threads // 50)
            found = sum(
                1
                for i in range(0, threads, step)
                if saver.get_tuple({"configurable": {"thread_id": thread_id(i)}}) is not None
            )
        out["left_after"] = count_left(backend, name, place)
        out["verify"] = {
            "sampled_threads_still_readable": found,
            "report_threads_equals_written": report.threads == threads,
            "report_checkpoints_equals_written": report.checkpoints == threads * per_thread,
        }
        log(
            f"{name}: pruned {report.threads:,} threads ({report.checkpoints:,} checkpoints) "
            f"in {seconds:.2f}s: {out['prune']['threads_per_s']:,.0f} threads/s; "
            f"{out['left_after']} keys/items left"
        )
    finally:
        backend.drop(place)
    return out


# --------------------------------------------------------------------------- output


def _n(v: Any, digits: int = 0) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and digits:
        return f"{v:,.{digits}f}"
    return f"{v:,.0f}" if isinstance(v, (int, float)) else str(v)


def markdown(doc: dict[str, Any]) -> str:
    parts = [f"`{doc['command']}`"]
    pg = doc["results"].get("postgres")
    if pg:
        lines = [
            "**PostgreSQL**",
            "",
            f"{pg['threads']:,} threads x {pg['per_thread']} checkpoints; "
            f"{pg['expired_threads']:,} expired ({pg['expired_in_droppable_epochs']:,} in "
            f"epochs expected to drop whole, {pg['expired_in_kept_epochs']:,} in epochs that "
            f"live threads keep), {pg['live_threads']:,} live "
            f"({pg['live_threads_in_old_epochs']:,} of them in old epochs).",
            "",
            "| what | figure |",
            "|---|---|",
        ]
        lo = pg["load_ours"]
        lines.append(
            f"| write, ours | {_n(lo['calls_per_s'])} calls/s ({_n(lo['puts_per_s'])} puts/s), "
            f"{lo['processes']} processes, {_n(lo['seconds'], 1)} s |"
        )
        if "load_upstream" in pg:
            lu = pg["load_upstream"]
            lines.append(
                f"| write, upstream | {_n(lu['calls_per_s'])} calls/s "
                f"({_n(lu['puts_per_s'])} puts/s), {_n(lu['seconds'], 1)} s |"
            )
        pr = pg["prune"]
        lines.append(
            f"| prune, ours | {_n(pr['threads'])} threads, {_n(pr['checkpoints'])} checkpoints, "
            f"{pr['partitions']} partitions in {_n(pr['wall_seconds'], 2)} s: "
            f"**{_n(pr['threads_per_s'])} threads/s**; {_n(pr.get('moved', 0))} live threads "
            "moved forward |"
        )
        ph = pr.get("phases")
        if ph:
            lines.append(
                f"| of which partitions | {_n(ph['partitions']['threads'])} threads in "
                f"{_n(ph['partitions']['seconds'], 2)} s |"
            )
            lines.append(
                f"| after the partition phase (the detached partitions' DROP, then any row "
                f"batches) | {_n(ph['rows']['threads'])} threads in "
                f"{_n(ph['rows']['seconds'], 2)} s ({ph['rows']['batches']} batches) |"
            )
        if "upstream_delete" in pg:
            u = pg["upstream_delete"]
            lines.append(
                f"| upstream delete_thread | {u['sample']:,} threads in {_n(u['seconds'], 2)} s: "
                f"**{_n(u['threads_per_s'])} threads/s** (p50/p99 {u['p50_ms']}/{u['p99_ms']} "
                f"ms); all {u['expired_threads']:,}: "
                f"~{_n(u['extrapolated_seconds_all_expired'])} s |"
            )
            lines.append(
                f"| ours / upstream per expired thread | **{pg['ratio_ours_over_upstream']}x** |"
            )
            if "ratio_rows_phase_over_upstream" in pg:
                lines.append(
                    f"| row batches only / upstream | {pg['ratio_rows_phase_over_upstream']}x |"
                )
        w = pg["writer"]
        for key in (
            "baseline_full",
            "before",
            "during",
            "during_partitions",
            "during_rows",
            "after",
        ):
            x = w.get(key)
            if x is None:
                continue
            lines.append(
                f"| writer {key} ({_n(x['seconds'], 1)} s) | {x['puts']:,} puts, p50/p99 "
                f"{x['p50_ms']}/{x['p99_ms']} ms, max {x['max_ms']} ms |"
            )
        if "p99_during_over_before" in w:
            lines.append(f"| writer p99 during / before | **{w['p99_during_over_before']}x** |")
        v = pg["verify"]
        lines.append(f"| verification | {'all checks passed' if v['ok'] else v['checks']} |")
        parts.append("\n".join(lines))
    for name in ("redis", "dynamodb"):
        r = doc["results"].get(name)
        if not r:
            continue
        head = f"**{name}**: {r['threads']:,} threads x {r['per_thread']}"
        if "pending" in r:
            parts.append(f"{head}: pruner not available ({r['pending']}); figures pending")
            continue
        pr = r["prune"]
        parts.append(
            f"{head}: write {_n(r['load']['calls_per_s'])} calls/s; prune {pr['threads']:,} "
            f"threads, {pr['checkpoints']:,} checkpoints in {_n(pr['wall_seconds'], 2)} s: "
            f"**{_n(pr['threads_per_s'])} threads/s**; {r['left_before']:,} keys/items before, "
            f"{r['left_after']:,} after"
            + (
                f"; {pr['api_calls_per_thread']} API calls per thread"
                if "api_calls_per_thread" in pr
                else ""
            )
        )
    return "\n\n".join(parts) + "\n"


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--backend",
        default="postgres",
        help="comma list from postgres, redis, dynamodb, or all (default %(default)s)",
    )
    p.add_argument("--threads", type=int, default=100_000, help="PostgreSQL threads")
    p.add_argument("--per-thread", type=int, default=10, help="PostgreSQL checkpoints per thread")
    p.add_argument("--old-epochs", type=int, default=8, help="old epochs of expired threads")
    p.add_argument(
        "--kept-epochs", type=int, default=2, help="of them, epochs that live threads keep"
    )
    p.add_argument("--procs", type=int, default=4, help="loader processes")
    p.add_argument("--batch", type=int, default=500, help="prune_expired(batch=...)")
    p.add_argument(
        "--throttle",
        type=float,
        default=DEFAULT_THROTTLE,
        help="prune_expired(throttle=...): rest this many times each batch's time\n"
        "(default %(default)s, the library's default; 0: flat out)",
    )
    p.add_argument(
        "--upstream-sample",
        type=int,
        default=2000,
        help="expired threads upstream's delete_thread is timed on (0: skip upstream)",
    )
    p.add_argument(
        "--writer-rate", type=float, default=200.0, help="writer puts per second (0: flat out)"
    )
    p.add_argument(
        "--baseline-seconds",
        type=float,
        default=90.0,
        help="writer alone before the prune (and at most as long after it)",
    )
    p.add_argument(
        "--sample-waits",
        action="store_true",
        help="poll pg_stat_activity every 5 ms for the writer's and the pruner's\n"
        "backends (what they wait on, per window); off for the figures",
    )
    p.add_argument("--redis-threads", type=int, default=10_000)
    p.add_argument("--redis-per-thread", type=int, default=10)
    p.add_argument(
        "--dynamodb-threads",
        type=int,
        default=100,
        help="moto slows and grows with every transaction",
    )
    p.add_argument("--dynamodb-per-thread", type=int, default=5)
    add_service_args(p)
    p.add_argument("--out", default=str(HERE / "results"), help="output directory")
    p.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    args = p.parse_args(argv)
    wanted = [b.strip() for b in args.backend.split(",") if b.strip()]
    args.backends = list(BACKENDS) if wanted == ["all"] else wanted
    unknown = set(args.backends) - set(BACKENDS)
    if unknown:
        p.error(f"unknown backend(s): {', '.join(sorted(unknown))}")
    if args.quick:
        args.threads, args.per_thread, args.procs = 2000, 5, 2
        args.upstream_sample, args.baseline_seconds = 200, 5.0
        args.redis_threads, args.redis_per_thread = 300, 5
        args.dynamodb_threads, args.dynamodb_per_thread = 40, 3
    if args.threads < 20 * args.old_epochs:
        p.error("--threads is too small for the plan")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    backends = make_backends(args.url, args.redis_url, args.dynamodb_endpoint)
    tag = str(os.getpid())
    started = time.time()
    load_start = os.getloadavg()
    results: dict[str, Any] = {}
    try:
        for name in args.backends:
            t0 = time.perf_counter()
            if name == "postgres":
                results[name] = run_postgres(args, tag)
            else:
                results[name] = run_kv(name, backends[name], args, tag)
            log(f"{name}: done in {time.perf_counter() - t0:.0f}s")
    finally:
        for b in backends.values():
            b.close()
    doc: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "python benchmarks/prune.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "settings": {
            k: getattr(args, k)
            for k in (
                "threads",
                "per_thread",
                "old_epochs",
                "kept_epochs",
                "procs",
                "batch",
                "throttle",
                "upstream_sample",
                "writer_rate",
                "baseline_seconds",
                "redis_threads",
                "redis_per_thread",
                "dynamodb_threads",
                "dynamodb_per_thread",
                "backends",
            )
        },
        "environment": environment([backends[b] for b in args.backends]),
        "results": results,
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "elapsed_s": round(time.time() - started, 1),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jpath = out / f"prune-{stamp}.json"
    jpath.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    mpath = out / f"prune-{stamp}.md"
    text = markdown(doc)
    mpath.write_text(text)
    shutil.copyfile(jpath, out / "latest.prune.json")
    shutil.copyfile(mpath, out / "latest.prune.md")
    print(text)
    print(f"wrote {jpath}, {mpath.name} ({doc['elapsed_s']:.0f}s)")
    pg = results.get("postgres")
    return 1 if pg is not None and not pg["verify"]["ok"] else 0


if __name__ == "__main__":
    sys.exit(main())
