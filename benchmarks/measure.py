"""Measurements. Every saver under test is open at once (each on its own fresh schema and
pool), and the work is cut into rounds that visit the savers in turn, so that background
load on a shared machine falls on all of them alike. Sync savers run on ``C`` OS threads,
async savers on ``C`` asyncio tasks of one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from instrument import CallTimes, RoundTripProxy, install_timing, percentile
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from savers import (
    SaverSpec,
    add_old_partitions,
    backend_pids,
    drop_schema,
    open_async,
    open_sync,
    schema_bytes,
    server_cpu_seconds,
)
from workload import build_graph, graph_input, retarget, thread_config


@dataclass
class Settings:
    url: str
    turns: int
    threads: int
    concurrency: int
    pool_size: int
    raw_threads: int
    reads: int
    history: int
    durability: str
    rounds: int
    ours_partitions: int = 0


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000.0


def latency(samples: list[float]) -> dict[str, Any]:
    return {
        "n": len(samples),
        "p50_ms": _ms(percentile(samples, 50)),
        "p99_ms": _ms(percentile(samples, 99)),
        "mean_ms": _ms(statistics.fmean(samples)) if samples else None,
    }


def history_turns(checkpoints: int) -> int:
    """Turns whose single invocation writes at least ``checkpoints`` checkpoints (2K+3)."""
    return max(1, (checkpoints - 1) // 2)


def _chunks(items: list[Any], n: int) -> list[list[Any]]:
    n = max(1, min(n, len(items)))
    return [items[i::n] for i in range(n)]


def _replay(saver: Any, calls: list[tuple]) -> None:
    for call in calls:
        if call[0] == "put":
            saver.put(call[1], call[2], call[3], call[4])
        else:
            saver.put_writes(call[1], call[2], call[3], call[4])


async def _areplay(saver: Any, calls: list[tuple]) -> None:
    for call in calls:
        if call[0] == "put":
            await saver.aput(call[1], call[2], call[3], call[4])
        else:
            await saver.aput_writes(call[1], call[2], call[3], call[4])


async def _gather_limited(fn: Callable[[Any], Any], items: list[Any], concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(item: Any) -> None:
        async with sem:
            await fn(item)

    await asyncio.gather(*(one(i) for i in items))


@dataclass
class Tally:
    """What one saver accumulated over the timed rounds."""

    wall: float = 0.0
    cpu: float = 0.0
    server_cpu: float | None = 0.0  # None once any batch could not be measured
    units: int = 0  # steps (graph mode) or calls (raw mode)
    per_round: list[float] = field(default_factory=list)  # units/s of each round


class Session:
    """One open saver: its schema, pool, timing wrappers, and ways to drive it."""

    def __init__(
        self, spec: SaverSpec, s: Settings, schema: str, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.spec, self.s, self.schema, self.loop = spec, s, schema, loop
        self.times = CallTimes()
        self._sync_stack = contextlib.ExitStack()
        self._async_stack = contextlib.AsyncExitStack()
        self._graphs: dict[int, Any] = {}
        self.saver: Any = None
        self.partitions: int | None = None  # ours: partitions per table, when extra were made

    # -- lifecycle
    def open(self, pool_size: int | None = None, url: str | None = None) -> Session:
        size, url = pool_size or self.s.pool_size, url or self.s.url
        if self.spec.uses_db:
            drop_schema(self.s.url, self.schema)
            # Tag the saver's connections so that their server processes can be found.
            url = make_conninfo(url, application_name=self.schema)
        if self.spec.is_async:
            cm = open_async(self.spec, url, self.schema, size)
            self.saver = self.loop.run_until_complete(self._async_stack.enter_async_context(cm))
        else:
            cm_sync = open_sync(self.spec, url, self.schema, size)
            self.saver = self._sync_stack.enter_context(cm_sync)
        if self.spec.kind == "ours" and self.s.ours_partitions:
            self.partitions = add_old_partitions(self.s.url, self.schema, self.s.ours_partitions)
        install_timing(self.saver, self.times)
        return self

    def close(self) -> None:
        try:
            if self.spec.is_async:
                self.loop.run_until_complete(self._async_stack.aclose())
            else:
                self._sync_stack.close()
        finally:
            if self.spec.uses_db:
                drop_schema(self.s.url, self.schema)

    def size(self) -> int | None:
        return schema_bytes(self.s.url, self.schema) if self.spec.uses_db else None

    def graph(self, turns: int) -> Any:
        if turns not in self._graphs:
            self._graphs[turns] = build_graph(turns, self.saver)
        return self._graphs[turns]

    # -- generic fan-out: fn_sync(item) on C threads, or fn_async(item) on C tasks
    def fan_out(
        self,
        fn_sync: Callable[[Any], Any],
        fn_async: Callable[[Any], Any],
        items: list[Any],
        concurrency: int | None = None,
    ) -> None:
        c = concurrency or self.s.concurrency
        if self.spec.is_async:
            self.loop.run_until_complete(_gather_limited(fn_async, items, c))
        elif c == 1:
            for item in items:
                fn_sync(item)
        else:
            with ThreadPoolExecutor(max_workers=c) as ex:
                for _ in ex.map(fn_sync, items):
                    pass

    # -- workloads
    def run_threads(
        self, thread_nos: list[int], turns: int | None = None, concurrency: int | None = None
    ) -> None:
        graph = self.graph(turns or self.s.turns)
        d = self.s.durability

        def one(i: int) -> None:
            graph.invoke(graph_input(i), thread_config(f"g-{i}"), durability=d)

        async def aone(i: int) -> None:
            await graph.ainvoke(graph_input(i), thread_config(f"g-{i}"), durability=d)

        self.fan_out(one, aone, thread_nos, concurrency)

    def replay(self, jobs: list[list[tuple]], concurrency: int | None = None) -> None:
        saver = self.saver
        self.fan_out(lambda c: _replay(saver, c), lambda c: _areplay(saver, c), jobs, concurrency)

    def read_latest(
        self, thread_nos: list[int], times: int, concurrency: int | None = None
    ) -> None:
        saver = self.saver

        def one(i: int) -> None:
            for _ in range(times):
                saver.get_tuple(thread_config(f"g-{i}"))

        async def aone(i: int) -> None:
            for _ in range(times):
                await saver.aget_tuple(thread_config(f"g-{i}"))

        self.fan_out(one, aone, thread_nos, concurrency)

    def list_thread(self, thread_no: int, limit: int) -> int:
        cfg = thread_config(f"g-{thread_no}")
        if self.spec.is_async:

            async def collect() -> int:
                return len([c async for c in self.saver.alist(cfg, limit=limit)])

            return self.loop.run_until_complete(collect())
        return len(list(self.saver.list(cfg, limit=limit)))

    def get_tuple(self, thread_no: int) -> Any:
        cfg = thread_config(f"g-{thread_no}")
        if self.spec.is_async:
            return self.loop.run_until_complete(self.saver.aget_tuple(cfg))
        return self.saver.get_tuple(cfg)

    def calls(self, kinds: tuple[str, ...]) -> int:
        """How many calls of these kinds the timing wrappers have seen."""
        return sum(len(self.times.samples.get(k, [])) for k in kinds)

    # -- one timed batch
    def timed(self, tally: Tally, work: Callable[[], None], units: Callable[[], int]) -> None:
        pids = backend_pids(self.s.url, self.schema) if self.spec.uses_db else []
        srv0 = server_cpu_seconds(pids)
        before = units()
        cpu0, t0 = time.process_time(), time.perf_counter()
        work()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        srv1 = server_cpu_seconds(pids)
        done = units() - before
        tally.wall += wall
        tally.cpu += cpu
        if srv0 is None or srv1 is None or tally.server_cpu is None:
            tally.server_cpu = None
        else:
            tally.server_cpu += srv1 - srv0
        tally.units += done
        tally.per_round.append(done / wall if wall else 0.0)


def _rotations(names: list[str], r: int) -> list[str]:
    k = r % len(names)
    return names[k:] + names[:k]


def open_sessions(
    specs: list[SaverSpec], s: Settings, mode: str, tag: str, loop: asyncio.AbstractEventLoop
) -> dict[str, Session]:
    sessions: dict[str, Session] = {}
    try:
        for spec in specs:
            schema = f"lgd_bench_{spec.name.replace('-', '_')}_{mode}_{tag}"
            sessions[spec.name] = Session(spec, s, schema, loop).open()
    except BaseException:
        for sess in sessions.values():
            sess.close()
        raise
    return sessions


def graph_mode(
    specs: list[SaverSpec],
    s: Settings,
    tag: str,
    loop: asyncio.AbstractEventLoop,
    log: Callable[[str], None],
) -> dict[str, Any]:
    sessions = open_sessions(specs, s, "graph", tag, loop)
    names = list(sessions)
    sessions_db = {n: sess.spec.uses_db for n, sess in sessions.items()}
    try:
        for sess in sessions.values():  # warm-up: connections, prepared statements, caches
            sess.run_threads([-1, -2], concurrency=2)
            # enough reads for every pooled connection to pass a prepare threshold of 5
            sess.read_latest([-1], 6 * s.pool_size, concurrency=1)
            sess.times.clear()
        size0 = {n: sess.size() for n, sess in sessions.items()}
        tallies = {n: Tally() for n in names}
        batches = _chunks(list(range(s.threads)), s.rounds)
        for r, batch in enumerate(batches):
            for n in _rotations(names, r):
                sess = sessions[n]
                sess.timed(
                    tallies[n],
                    functools.partial(sess.run_threads, batch),
                    functools.partial(sess.calls, ("put",)),
                )
            log(
                f"  graph round {r + 1}/{len(batches)}: "
                + ", ".join(f"{n} {tallies[n].per_round[-1]:.0f}" for n in names)
                + " steps/s"
            )
        size1 = {n: sess.size() for n, sess in sessions.items()}
        run_times = {
            n: {k: list(v) for k, v in sess.times.samples.items()} for n, sess in sessions.items()
        }

        # get_tuple of the latest checkpoint: once one call at a time (the call's own
        # latency), once at concurrency C (what a loaded service sees).
        read_times: dict[int, dict[str, list[float]]] = {}
        read_wall: dict[str, float] = defaultdict(float)
        for conc in (1, s.concurrency):
            for sess in sessions.values():
                sess.times.clear()
            for r, batch in enumerate(batches):
                for n in _rotations(names, r):
                    t0 = time.perf_counter()
                    sessions[n].read_latest(batch, s.reads, concurrency=conc)
                    if conc == s.concurrency:
                        read_wall[n] += time.perf_counter() - t0
            read_times[conc] = {
                n: list(sess.times.samples.get("get_tuple", [])) for n, sess in sessions.items()
            }

        hist_no = 10**6
        for sess in sessions.values():
            sess.run_threads([hist_no], turns=history_turns(s.history), concurrency=1)
        list_secs: dict[str, list[float]] = defaultdict(list)
        list_len: dict[str, int] = {}
        for r in range(7):
            for n in _rotations(names, r):
                # Listing builds thousands of message objects; start each timing from a
                # collected heap so that a full GC pass lands on no saver in particular.
                gc.collect()
                t0 = time.perf_counter()
                list_len[n] = sessions[n].list_thread(hist_no, s.history)
                list_secs[n].append(time.perf_counter() - t0)
    finally:
        for sess in sessions.values():
            sess.close()

    out: dict[str, Any] = {}
    for n in names:
        t = tallies[n]
        rt = run_times[n]
        out[n] = {
            "steps": t.units,
            "wall_s": t.wall,
            "steps_per_s": t.units / t.wall if t.wall else None,
            "steps_per_s_by_round": t.per_round,
            "cpu_ms_per_step": t.cpu * 1000.0 / t.units if t.units else None,
            "server_cpu_ms_per_step": t.server_cpu * 1000.0 / t.units
            if t.server_cpu is not None and t.units and sessions_db[n]
            else None,
            "bytes_stored": None if size1[n] is None else size1[n] - (size0[n] or 0),
            "bytes_per_step": (size1[n] - size0[n]) / t.units
            if size0[n] is not None and size1[n] is not None and t.units
            else None,
            "put": latency(rt.get("put", [])),
            "put_writes": latency(rt.get("put_writes", [])),
            "get_tuple_in_run": latency(rt.get("get_tuple", [])),
            "get_tuple": latency(read_times[s.concurrency][n]),
            "get_tuple_sequential": latency(read_times[1][n]),
            "get_tuple_per_s": len(read_times[s.concurrency][n]) / read_wall[n]
            if read_wall[n]
            else None,
            "history_list_ms": _ms(statistics.median(list_secs[n])),
            "history_checkpoints": list_len[n],
            "partitions": sessions[n].partitions,
        }
    return out


def raw_mode(
    specs: list[SaverSpec],
    s: Settings,
    recorded: list[tuple],
    tag: str,
    loop: asyncio.AbstractEventLoop,
    log: Callable[[str], None],
) -> dict[str, Any]:
    sessions = open_sessions(specs, s, "raw", tag, loop)
    names = list(sessions)
    sessions_db = {n: sess.spec.uses_db for n, sess in sessions.items()}
    jobs = [retarget(recorded, f"r-{i}") for i in range(s.raw_threads)]
    try:
        for sess in sessions.values():
            sess.replay([retarget(recorded, f"r-warm-{i}") for i in range(s.concurrency)])
            sess.times.clear()
        size0 = {n: sess.size() for n, sess in sessions.items()}
        tallies = {n: Tally() for n in names}
        batches = _chunks(jobs, s.rounds)
        for r, batch in enumerate(batches):
            for n in _rotations(names, r):
                sess = sessions[n]
                sess.timed(
                    tallies[n],
                    functools.partial(sess.replay, batch),
                    functools.partial(sess.calls, ("put", "put_writes")),
                )
            log(
                f"  raw round {r + 1}/{len(batches)}: "
                + ", ".join(f"{n} {tallies[n].per_round[-1]:.0f}" for n in names)
                + " calls/s"
            )
        size1 = {n: sess.size() for n, sess in sessions.items()}
        samples = {
            n: {k: list(v) for k, v in sess.times.samples.items()} for n, sess in sessions.items()
        }
    finally:
        for sess in sessions.values():
            sess.close()

    out: dict[str, Any] = {}
    for n in names:
        t = tallies[n]
        out[n] = {
            "calls": t.units,
            "wall_s": t.wall,
            "puts_per_s": t.units / t.wall if t.wall else None,
            "puts_per_s_by_round": t.per_round,
            "cpu_ms_per_call": t.cpu * 1000.0 / t.units if t.units else None,
            "server_cpu_ms_per_call": t.server_cpu * 1000.0 / t.units
            if t.server_cpu is not None and t.units and sessions_db[n]
            else None,
            "bytes_per_call": (size1[n] - size0[n]) / t.units
            if size0[n] is not None and size1[n] is not None and t.units
            else None,
            "put": latency(samples[n].get("put", [])),
            "put_writes": latency(samples[n].get("put_writes", [])),
            "partitions": sessions[n].partitions,
        }
    return out


# --------------------------------------------------------------------------- round trips


def proxy_for(url: str) -> tuple[RoundTripProxy, str]:
    """Start a counting relay in front of the server of ``url``; return it and its URL."""
    params = conninfo_to_dict(url)
    host = str(params.get("host") or "127.0.0.1").split(",")[0]
    port = int(str(params.get("port") or 5432).split(",")[0])
    proxy = RoundTripProxy(host, port)
    params.pop("hostaddr", None)
    params.update(host="127.0.0.1", port=str(proxy.port), sslmode="disable")
    return proxy, make_conninfo(**params)


def count_round_trips(
    spec: SaverSpec, s: Settings, recorded: list[tuple], tag: str, loop: asyncio.AbstractEventLoop
) -> dict[str, Any]:
    """Sequential pass through the counting relay, on a one-connection pool."""
    proxy, purl = proxy_for(s.url)
    schema = f"lgd_bench_{spec.name.replace('-', '_')}_rt_{tag}"
    sess = Session(spec, s, schema, loop)
    per: dict[str, list[tuple[int, ...]]] = defaultdict(list)
    steps = sum(1 for c in recorded if c[0] == "put")

    def counted(kind: str, fn: Callable[[], Any]) -> None:
        before = proxy.snapshot()
        fn()
        after = proxy.snapshot()
        per[kind].append(tuple(a - b for a, b in zip(after, before, strict=True)))

    try:
        sess.open(pool_size=1, url=purl)
        # Warm up every kind of call past any prepare threshold, so the counts are the
        # steady state (psycopg prepares statements per connection after N uses).
        for i in range(8):
            sess.run_threads([-100 - i], concurrency=1)
            sess.replay([retarget(recorded, f"rt-warm-{i}")], concurrency=1)
            sess.get_tuple(-100 - i)
            sess.list_thread(-100 - i, s.history)
        for call in retarget(recorded, "rt-raw"):
            counted(call[0], lambda call=call: sess.replay([[call]], concurrency=1))
        for i in range(5):
            counted("get_tuple", lambda i=i: sess.get_tuple(-100 - i))
        for i in range(3):
            counted("graph", lambda i=i: sess.run_threads([-200 - i], concurrency=1))
        for i in range(3):
            counted("list", lambda i=i: sess.list_thread(-200 - i, s.history))
    finally:
        try:
            sess.close()
        finally:
            proxy.close()

    out: dict[str, Any] = {}
    for kind, rows in per.items():
        n = len(rows) * (steps if kind == "graph" else 1)
        out["graph_step" if kind == "graph" else kind] = {
            "round_trips": sum(r[0] for r in rows) / n,
            "bytes_up": sum(r[1] for r in rows) / n,
            "bytes_down": sum(r[2] for r in rows) / n,
            "n": n,
        }
    return out
