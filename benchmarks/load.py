#!/usr/bin/env python
"""Many graph threads at once from several worker processes on one store.

    python benchmarks/load.py --backend postgres            # 4 workers x 250 threads
    python benchmarks/load.py --backend redis --pool-size 0  # the saver's own client
    python benchmarks/load.py --backend postgres --savers ours --threads 50

Each saver of the run is measured on its own: ``--workers`` processes open it on one
shared place (a schema, a key prefix), each on a pool of ``--pool-size`` connections;
every worker runs ``--threads`` graph threads at once (asyncio tasks for an async saver,
OS threads for a sync one), each one invocation of the benchmark graph of
``--turns`` tool-call turns (workload.py: 2K+3 checkpoints), all workers released
together. Figures:

- steps/s: checkpoints written by every worker / the wall time from the common start
  to the last thread's end;
- step latency: per thread, the time from one checkpoint stored to the next (the
  first from the invocation's start): the node, ``put_writes`` and ``put`` with every
  wait for a pooled connection in it; p50 and p99 over every step of every thread;
- saver calls: p50 and p99 of ``put``, ``put_writes`` and ``get_tuple``;
- connections: sampled every ``--sample`` seconds while the threads run. PostgreSQL:
  ``pg_stat_activity`` rows of the run's connections (tagged with its
  ``application_name``) and of the whole database (the sampler's own excluded);
  Redis: ``CLIENT LIST`` entries named for the run and ``connected_clients`` (the
  sampler's own excluded). The maxima, and the count before the workers started;
- errors: each thread that raised, by exception type and message.

Pools: our PostgreSQL savers open their own pool from the URL (``pool_size``,
``pool_timeout``); upstream's get a ``psycopg_pool`` pool of ``--pool-size`` (savers.py).
Redis: ``--pool-size N`` gives the saver a client on a ``BlockingConnectionPool`` of N
connections (a call waits up to ``--pool-timeout`` s for one); ``--pool-size 0`` lets the
saver open its own client from the URL (redis-py's default pool: a connection per
concurrent call, no bound).

Writes ``load-<timestamp>.json`` and ``.md`` (also copied to ``latest.load.*``) to ``--out``
and prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PACKAGE_ROOT = os.environ.get("BENCH_PACKAGE_ROOT") or str(HERE.parent)
for _p in (PACKAGE_ROOT, str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from backends import PostgresBackend, RedisBackend  # noqa: E402
from instrument import CallTimes, install_timing, percentile  # noqa: E402
from run import add_service_args, environment, pick_savers  # noqa: E402
from savers import (  # noqa: E402
    SPECS,
    SaverSpec,
    admin_connect,
    open_async,
    open_sync,
    server_cpu_seconds,
)
from workload import build_graph, graph_input, thread_config  # noqa: E402

BACKENDS = ("postgres", "redis")
DEFAULT_SAVERS = {"postgres": "ours-async,upstream-async", "redis": "redis-async"}
LOAD_SAVERS = ("ours", "ours-async", "upstream", "upstream-async", "redis", "redis-async")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_service_args(p)
    p.add_argument("--backend", choices=BACKENDS, default="postgres")
    p.add_argument(
        "--savers",
        default=None,
        help=f"comma list from: {', '.join(LOAD_SAVERS)} (sync ones run on OS threads)\n"
        + "\n".join(f"  default for {b}: {s}" for b, s in DEFAULT_SAVERS.items()),
    )
    p.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    p.add_argument(
        "--threads", type=int, default=250, help="graph threads per worker, all at once (250)"
    )
    p.add_argument("--turns", type=int, default=3, help="tool-call turns per thread (K; 3)")
    p.add_argument(
        "--pool-size",
        type=int,
        default=4,
        help="connections per worker (default 4, our savers' pool_size); Redis: 0 =\n"
        "the saver's own client from the URL (no bound)",
    )
    p.add_argument(
        "--pool-timeout",
        type=float,
        default=30.0,
        help="seconds a call waits for a pooled connection (default 30, our\n"
        "PostgreSQL savers' default)",
    )
    p.add_argument("--durability", choices=("sync", "async", "exit"), default="sync")
    p.add_argument("--sample", type=float, default=0.1, help="connection sampling period (s)")
    p.add_argument(
        "--timeout", type=float, default=1800.0, help="give up on the workers after this (s)"
    )
    p.add_argument("--out", default=str(HERE / "results"), help="output directory")
    args = p.parse_args(argv)
    if args.savers is None:
        args.savers = DEFAULT_SAVERS[args.backend]
    if args.workers < 1 or args.threads < 1 or args.turns < 1 or args.pool_size < 0:
        p.error("--workers, --threads and --turns must be >= 1, --pool-size >= 0")
    return args


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- opening


def _backend(spec: SaverSpec, args: argparse.Namespace) -> PostgresBackend | RedisBackend:
    return PostgresBackend(args.url) if spec.backend == "postgres" else RedisBackend(args.redis_url)


def _redis_url(url: str, query: str) -> str:
    return url + ("&" if "?" in url else "?") + query


@contextlib.asynccontextmanager
async def open_saver_async(spec: SaverSpec, cfg: dict[str, Any]) -> Any:
    """The async saver a worker drives, on the run's place, with its own pool."""
    place, size, wait = cfg["place"], cfg["pool_size"], cfg["pool_timeout"]
    if spec.backend == "postgres":
        url = cfg["pg_url"]  # tagged with application_name = place
        if spec.kind == "upstream":
            async with open_async(spec, url, place, size) as saver:
                yield saver
            return
        from langgraph_durable.postgres import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(
            url, schema=place, pool_size=size, pool_timeout=wait
        ) as saver:
            yield saver
        return
    from langgraph_durable.redis import AsyncRedisSaver

    named = _redis_url(cfg["redis_url"], f"client_name={place}")
    if size == 0:
        async with AsyncRedisSaver.from_conn_string(named, prefix=place) as saver:
            yield saver
        return
    import redis.asyncio

    pool = redis.asyncio.BlockingConnectionPool.from_url(named, max_connections=size, timeout=wait)
    client = redis.asyncio.Redis(connection_pool=pool)
    try:
        yield AsyncRedisSaver(client, prefix=place)
    finally:
        await client.aclose()
        await pool.disconnect()


@contextlib.contextmanager
def open_saver_sync(spec: SaverSpec, cfg: dict[str, Any]) -> Iterator[Any]:
    """The sync saver a worker drives (see :func:`open_saver_async`)."""
    place, size, wait = cfg["place"], cfg["pool_size"], cfg["pool_timeout"]
    if spec.backend == "postgres":
        url = cfg["pg_url"]
        if spec.kind == "upstream":
            with open_sync(spec, url, place, size) as saver:
                yield saver
            return
        from langgraph_durable.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(
            url, schema=place, pool_size=size, pool_timeout=wait
        ) as saver:
            yield saver
        return
    from langgraph_durable.redis import RedisSaver

    named = _redis_url(cfg["redis_url"], f"client_name={place}")
    if size == 0:
        with RedisSaver.from_conn_string(named, prefix=place) as saver:
            yield saver
        return
    import redis

    pool = redis.BlockingConnectionPool.from_url(named, max_connections=size, timeout=wait)
    client = redis.Redis(connection_pool=pool)
    try:
        yield RedisSaver(client, prefix=place)
    finally:
        client.close()
        pool.disconnect()


def prepare_place(spec: SaverSpec, cfg: dict[str, Any]) -> None:
    """Set the run's place up once, before the workers open it."""
    if spec.backend == "postgres":
        if spec.kind == "upstream":
            with open_sync(SPECS["upstream"], cfg["pg_url"], cfg["place"], 1):
                pass  # creates the schema and runs upstream's setup()
            return
        from langgraph_durable.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(
            cfg["pg_url"], schema=cfg["place"], pool_size=1
        ) as saver:
            saver.setup()
        return
    from langgraph_durable.redis import RedisSaver

    with RedisSaver.from_conn_string(cfg["redis_url"], prefix=cfg["place"]) as saver:
        saver.setup()


def _pool_stats(saver: Any) -> dict[str, int] | None:
    """psycopg_pool's counters of the saver's pool (PostgreSQL), if it has one."""
    pool = getattr(getattr(saver, "_conn", None), "pool", None) or getattr(saver, "conn", None)
    stats = getattr(pool, "get_stats", None)
    return dict(stats()) if stats is not None else None


# --------------------------------------------------------------------------- a worker


class StepClock:
    """Per thread, the time from one stored checkpoint to the next (wraps ``put``)."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.samples: list[float] = []
        self.stored_count = 0  # puts that returned

    def start(self, thread_id: str) -> None:
        self.last[thread_id] = time.perf_counter()

    def stored(self, config: Any) -> None:
        tid = config["configurable"]["thread_id"]
        now = time.perf_counter()
        prev = self.last.get(tid)
        self.stored_count += 1
        if prev is not None:
            self.samples.append(now - prev)
        self.last[tid] = now

    def install(self, saver: Any, is_async: bool) -> None:
        if is_async:
            orig = saver.aput

            @functools.wraps(orig)
            async def aput(config: Any, *args: Any, **kwargs: Any) -> Any:
                out = await orig(config, *args, **kwargs)
                self.stored(config)
                return out

            saver.aput = aput
        else:
            orig_sync = saver.put

            @functools.wraps(orig_sync)
            def put(config: Any, *args: Any, **kwargs: Any) -> Any:
                out = orig_sync(config, *args, **kwargs)
                self.stored(config)
                return out

            saver.put = put


def _error_key(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:160]
    return f"{type(exc).__module__}.{type(exc).__qualname__}: {text}"


def worker_main(name: str, cfg: dict[str, Any], no: int, barrier: Any, out: Any) -> None:
    """One worker process: open the saver, warm up, wait for the others, run the threads."""
    try:
        spec = SPECS[name]
        if spec.is_async:
            result = asyncio.run(_worker_async(spec, cfg, no, barrier))
        else:
            result = _worker_sync(spec, cfg, no, barrier)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        with contextlib.suppress(Exception):
            barrier.abort()
        result = {"worker": no, "fatal": _error_key(exc), "traceback": traceback.format_exc()}
    out.put(result)


def _thread_ids(cfg: dict[str, Any], no: int) -> list[int]:
    n = cfg["threads"]
    return list(range(no * n, (no + 1) * n))


def _collect(
    no: int,
    clock: StepClock,
    times: CallTimes,
    errors: Counter[str],
    t0: float,
    t1: float,
    cpu: float,
    stats: dict[str, int] | None,
) -> dict[str, Any]:
    return {
        "worker": no,
        "start": t0,
        "end": t1,
        "cpu_s": cpu,
        "steps": clock.stored_count,
        "step_s": clock.samples,
        "calls_s": {k: list(v) for k, v in times.samples.items()},
        "errors": dict(errors),
        "pool_stats": stats,
    }


async def _loop_lag(lags: list[float], period: float = 0.01) -> None:
    """How late the event loop wakes a task that sleeps ``period`` (its ready queue)."""
    while True:
        t0 = time.perf_counter()
        await asyncio.sleep(period)
        lags.append(time.perf_counter() - t0 - period)


async def _worker_async(spec: SaverSpec, cfg: dict[str, Any], no: int, barrier: Any) -> Any:
    async with open_saver_async(spec, cfg) as saver:
        graph = build_graph(cfg["turns"], saver)
        d = cfg["durability"]
        for i in range(2):  # warm-up: a connection, prepared statements, scripts
            tid = f"warm-{no}-{i}"
            await graph.ainvoke(graph_input(-1 - i), thread_config(tid), durability=d)
        times, clock, errors = CallTimes(), StepClock(), Counter[str]()
        install_timing(saver, times)
        clock.install(saver, True)

        async def one(i: int) -> None:
            tid = f"load-{i}"
            clock.start(tid)
            try:
                await graph.ainvoke(graph_input(i), thread_config(tid), durability=d)
            except Exception as exc:  # noqa: BLE001 - counted, the run goes on
                errors[_error_key(exc)] += 1

        await asyncio.to_thread(barrier.wait, cfg["barrier_timeout"])
        lags: list[float] = []
        probe = asyncio.create_task(_loop_lag(lags))
        cpu0, t0 = time.process_time(), time.time()
        await asyncio.gather(*(one(i) for i in _thread_ids(cfg, no)))
        t1, cpu = time.time(), time.process_time() - cpu0
        probe.cancel()
        out = _collect(no, clock, times, errors, t0, t1, cpu, _pool_stats(saver))
        return out | {"loop_lag_s": lags}


def _worker_sync(spec: SaverSpec, cfg: dict[str, Any], no: int, barrier: Any) -> Any:
    with open_saver_sync(spec, cfg) as saver:
        graph = build_graph(cfg["turns"], saver)
        d = cfg["durability"]
        for i in range(2):
            graph.invoke(graph_input(-1 - i), thread_config(f"warm-{no}-{i}"), durability=d)
        times, clock, errors = CallTimes(), StepClock(), Counter[str]()
        install_timing(saver, times)
        clock.install(saver, False)
        lock = threading.Lock()

        def one(i: int) -> None:
            tid = f"load-{i}"
            clock.start(tid)
            try:
                graph.invoke(graph_input(i), thread_config(tid), durability=d)
            except Exception as exc:  # noqa: BLE001
                with lock:
                    errors[_error_key(exc)] += 1

        ids = _thread_ids(cfg, no)
        with ThreadPoolExecutor(max_workers=len(ids)) as ex:
            barrier.wait(cfg["barrier_timeout"])
            cpu0, t0 = time.process_time(), time.time()
            list(ex.map(one, ids))
            t1, cpu = time.time(), time.process_time() - cpu0
        return _collect(no, clock, times, errors, t0, t1, cpu, _pool_stats(saver))


# --------------------------------------------------------------------------- sampling


class ConnectionSampler:
    """Counts the server's connections every ``period`` seconds on a thread of its own:
    ``run`` (those of the run's place) and ``server`` (the database's, or Redis's)."""

    def __init__(self, spec: SaverSpec, cfg: dict[str, Any], period: float) -> None:
        self.spec, self.cfg, self.period = spec, cfg, period
        self.samples: list[tuple[float, int, int]] = []
        self.cpu: dict[int, list[float]] = {}  # server pid -> [first, last] CPU seconds
        # PostgreSQL: "<state> <wait_event_type>:<wait_event>" of the run's connections,
        # summed over the samples (where the server side of the run spends its time)
        self.waits: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._count: Callable[[], tuple[int, int]]
        self._close: Callable[[], None]
        if spec.backend == "postgres":
            conn = admin_connect(cfg["admin_url"])

            def count() -> tuple[int, int]:
                rows = conn.execute(
                    "SELECT pid, application_name, datname = current_database(), state,"
                    " wait_event_type, wait_event"
                    " FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                ).fetchall()
                mine = [int(r[0]) for r in rows if r[1] == cfg["place"]]
                for r in rows:
                    if r[1] == cfg["place"]:
                        self.waits[f"{r[3]} {r[4] or '-'}:{r[5] or '-'}"] += 1
                for pid in mine:
                    self._cpu(pid, "postgres")
                return len(mine), sum(1 for r in rows if r[2])

            self._count, self._close = count, conn.close
        else:
            import redis

            client = redis.Redis.from_url(cfg["redis_url"])
            server_pid = int(client.info("server")["process_id"])

            def count() -> tuple[int, int]:
                self._cpu(server_pid, "redis-server")
                clients = client.client_list()
                mine = sum(1 for c in clients if c.get("name") == cfg["place"])
                return mine, len(clients) - 1

            self._count, self._close = count, client.close

    def _cpu(self, pid: int, comm: str) -> None:
        seconds = server_cpu_seconds([pid], comm)
        if seconds is not None:
            self.cpu.setdefault(pid, [seconds, seconds])[1] = seconds

    def server_cpu_s(self) -> float | None:
        """CPU seconds the server processes seen spent between their first and last sample
        (PostgreSQL: the run's backends; Redis: the whole server, other clients too)."""
        return sum(last - first for first, last in self.cpu.values()) if self.cpu else None

    def once(self) -> tuple[int, int]:
        run, server = self._count()
        self.samples.append((time.time(), run, server))
        return run, server

    def _loop(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                self.once()
            if self._stop.wait(self.period):
                return

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self._close()


# --------------------------------------------------------------------------- one saver


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000.0


def _lat(samples: list[float]) -> dict[str, Any]:
    return {
        "n": len(samples),
        "p50_ms": _ms(percentile(samples, 50)),
        "p99_ms": _ms(percentile(samples, 99)),
        "max_ms": _ms(max(samples)) if samples else None,
        "mean_ms": _ms(statistics.fmean(samples)) if samples else None,
    }


def _pool_mean(stats: list[dict[str, int]], key: str) -> float | None:
    """A psycopg_pool total (ms) per connection request, over every worker's pool."""
    requests = sum(st.get("requests_num", 0) for st in stats)
    return sum(st.get(key, 0) for st in stats) / requests if requests else None


def measure_saver(name: str, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    spec = SPECS[name]
    backend = _backend(spec, args)
    place = backend.place(spec, "load", tag)
    cfg: dict[str, Any] = {
        "place": place,
        "admin_url": args.url,
        "pg_url": backend._url(place, None) if isinstance(backend, PostgresBackend) else None,
        "redis_url": args.redis_url,
        "pool_size": args.pool_size,
        "pool_timeout": args.pool_timeout,
        "threads": args.threads,
        "turns": args.turns,
        "durability": args.durability,
        "barrier_timeout": 300.0,
    }
    if spec.backend == "postgres" and args.pool_size == 0:
        raise SystemExit("--pool-size 0 is for Redis only")
    backend.drop(place)
    prepare_place(spec, cfg)
    sampler = ConnectionSampler(spec, cfg, args.sample)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(args.workers + 1)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=worker_main, args=(name, cfg, i, barrier, out), daemon=True)
        for i in range(args.workers)
    ]
    results: list[dict[str, Any]] = []
    load0 = os.getloadavg()
    try:
        base_run, base_server = sampler.once()
        sampler.cpu.clear()
        sampler.waits.clear()
        for proc in procs:
            proc.start()
        try:
            barrier.wait(cfg["barrier_timeout"])
        except threading.BrokenBarrierError:
            log(f"{name}: a worker failed before the start")
        else:
            sampler.start()
            log(f"{name}: {args.workers} workers x {args.threads} threads started")
        deadline = time.monotonic() + args.timeout
        while len(results) < len(procs) and time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                results.append(out.get(timeout=5))
                r = results[-1]
                log(
                    f"  worker {r['worker']}: "
                    + (
                        f"fatal {r['fatal']}"
                        if "fatal" in r
                        else f"{r['steps']} steps in {r['end'] - r['start']:.1f}s,"
                        f" {sum(r['errors'].values())} failed threads"
                    )
                )
            if len(results) < len(procs) and not any(p.is_alive() for p in procs):
                with contextlib.suppress(Exception):
                    while True:
                        results.append(out.get(timeout=1))
                break
    finally:
        sampler.stop()
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join(10)
        load1 = os.getloadavg()
        backend.drop(place)
        backend.close()

    fatal = [r for r in results if "fatal" in r]
    for r in fatal:
        log(f"worker {r['worker']} failed:\n{r['traceback']}")
    ok = [r for r in results if "fatal" not in r]
    steps = sum(r["steps"] for r in ok)
    wall = (max(r["end"] for r in ok) - min(r["start"] for r in ok)) if ok else 0.0
    run_samples = sampler.samples[1:]
    errors: Counter[str] = Counter()
    for r in ok:
        errors.update(r["errors"])
    calls: dict[str, list[float]] = {}
    for r in ok:
        for k, v in r["calls_s"].items():
            calls.setdefault(k, []).extend(v)
    pool_stats = [r["pool_stats"] for r in ok if r.get("pool_stats")]
    server_cpu = sampler.server_cpu_s()
    return {
        "saver": name,
        "label": spec.label,
        "place": place,
        "workers": args.workers,
        "threads_per_worker": args.threads,
        "threads": args.workers * args.threads,
        "workers_done": len(ok),
        "workers_failed": [r["fatal"] for r in fatal],
        "pool_size_per_worker": args.pool_size,
        "pool_timeout_s": args.pool_timeout,
        "steps": steps,
        "wall_s": wall,
        "steps_per_s": steps / wall if wall else None,
        "steps_per_s_by_worker": [r["steps"] / (r["end"] - r["start"]) for r in ok],
        "client_cpu_ms_per_step": sum(r["cpu_s"] for r in ok) * 1000.0 / steps if steps else None,
        "server_cpu_ms_per_step": server_cpu * 1000.0 / steps
        if server_cpu is not None and steps
        else None,
        "pool_wait_ms_mean": _pool_mean(pool_stats, "requests_wait_ms"),
        "pool_hold_ms_mean": _pool_mean(pool_stats, "usage_ms"),
        "step": _lat([x for r in ok for x in r["step_s"]]),
        "calls": {k: _lat(v) for k, v in sorted(calls.items())},
        "event_loop_lag": _lat([x for r in ok for x in r.get("loop_lag_s", [])]),
        "failed_threads": sum(errors.values()),
        "errors": dict(errors.most_common()),
        "connections": {
            "run_max": max((s[1] for s in run_samples), default=None),
            "server_max": max((s[2] for s in run_samples), default=None),
            "run_before": base_run,
            "server_before": base_server,
            "samples": len(run_samples),
            "series": run_samples,
            "pg_states_sampled": dict(sampler.waits.most_common()),
        },
        "pool_stats": pool_stats,
        "loadavg_before": load0,
        "loadavg_after": load1,
    }


# --------------------------------------------------------------------------- report


def _f(v: Any, fmt: str = ".0f") -> str:
    return "–" if v is None else format(v, fmt)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| saver | threads (workers × each) | pool / worker | steps | wall s | steps/s "
        "| step p50 ms | step p99 ms | put p50 / p99 ms | CPU ms/step client, server "
        "| connections: run (server) max | failed threads |"
        "\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        put = r["calls"].get("put", {})
        pool = r["pool_size_per_worker"] or "own client (no bound)"
        c = r["connections"]
        lines.append(
            f"| {r['label']} | {r['threads']:,} ({r['workers']} × {r['threads_per_worker']}) "
            f"| {pool} | {r['steps']:,} | {_f(r['wall_s'], '.1f')} | {_f(r['steps_per_s'])} "
            f"| {_f(r['step']['p50_ms'])} | {_f(r['step']['p99_ms'])} "
            f"| {_f(put.get('p50_ms'), '.1f')} / {_f(put.get('p99_ms'))} "
            f"| {_f(r['client_cpu_ms_per_step'], '.2f')}, {_f(r['server_cpu_ms_per_step'], '.2f')} "
            f"| {_f(c['run_max'])} ({_f(c['server_max'])}) | {r['failed_threads']} |"
        )
    notes = []
    for r in rows:
        for err, n in r["errors"].items():
            notes.append(f"- {r['saver']}: {n} × `{err}`")
        for err in r["workers_failed"]:
            notes.append(f"- {r['saver']}: a worker failed: `{err}`")
    return "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "")


def _package_root() -> dict[str, str]:
    """BENCH_PACKAGE_ROOT by its last part only (results name no path of the machine)."""
    root = os.environ.get("BENCH_PACKAGE_ROOT")
    return {"package_root": Path(root).name} if root else {}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    picked = pick_savers(args.savers, LOAD_SAVERS)
    if picked is None:
        return 2
    names, skipped = picked
    wrong = [n for n in names if SPECS[n].backend != args.backend]
    if wrong:
        log(f"not {args.backend} savers: {', '.join(wrong)}")
        return 2
    started = time.time()
    tag = str(os.getpid())
    rows = []
    for name in names:
        t0 = time.perf_counter()
        rows.append(measure_saver(name, args, tag))
        log(f"{name}: done ({time.perf_counter() - t0:.1f}s)")
    backends = [
        PostgresBackend(args.url) if args.backend == "postgres" else RedisBackend(args.redis_url)
    ]
    command = "python benchmarks/load.py " + " ".join(sys.argv[1:] if argv is None else argv)
    doc: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "settings": {k: v for k, v in vars(args).items() if k not in ("url", "redis_url", "out")},
        "environment": environment(backends) | _package_root(),
        "skipped": skipped,
        "results": rows,
        "elapsed_s": time.time() - started,
    }
    table = markdown_table(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jpath = out / f"load-{stamp}.json"
    jpath.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    mpath = out / f"load-{stamp}.md"
    mpath.write_text(f"`{command}`\n\n{table}\n")
    shutil.copyfile(jpath, out / "latest.load.json")
    shutil.copyfile(mpath, out / "latest.load.md")
    print(table)
    print(f"wrote {jpath} and {mpath.name} ({doc['elapsed_s']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
