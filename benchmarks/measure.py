"""Measurements. Every saver under test is open at once (each on its own fresh schema, key
prefix or table, with its own connections), and the work is cut into rounds that visit the
savers in turn, so that background load on a shared machine falls on all of them alike.
Sync savers run on ``C`` OS threads, async savers on ``C`` asyncio tasks of one event loop.
A separate, untimed, sequential pass counts what each call costs on the wire: round trips
through a relay (PostgreSQL, Redis) or API calls and write units (DynamoDB)."""

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

from instrument import ApiCallCounter, CallTimes, RoundTripProxy, install_timing, percentile
from savers import SaverSpec, server_cpu_seconds
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
    rtt_ms: float = 0.0  # > 0: also time calls through the relay with this added per round trip
    pii: bool = False  # workload variant: per-thread text with e-mail addresses, phone numbers
    # backend name -> backends.Backend (where each saver's data lives); not a setting
    backends: dict[str, Any] = field(default_factory=dict)


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
    """One open saver: its place (schema, key prefix, table), connections, timing
    wrappers, and ways to drive it."""

    def __init__(
        self, spec: SaverSpec, s: Settings, place: str, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.spec, self.s, self.place, self.loop = spec, s, place, loop
        self.backend = s.backends[spec.backend]
        self.times = CallTimes()
        self._sync_stack = contextlib.ExitStack()
        self._async_stack = contextlib.AsyncExitStack()
        self._graphs: dict[int, Any] = {}
        self.saver: Any = None
        self.partitions: int | None = None  # ours: partitions per table, when extra were made

    # -- lifecycle
    def open(self, pool_size: int | None = None, via: tuple[str, int] | None = None) -> Session:
        """Open the saver on a fresh place; ``via``: connect through this relay instead."""
        size, b = pool_size or self.s.pool_size, self.backend
        if self.spec.is_async:
            cm = b.open_async(self.spec, self.place, size, via)
            self.saver = self.loop.run_until_complete(self._async_stack.enter_async_context(cm))
        else:
            self.saver = self._sync_stack.enter_context(
                b.open_sync(self.spec, self.place, size, via)
            )
        self.partitions = b.after_open(self.spec, self.place, self.s)
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
                self.backend.drop(self.place)

    def size(self) -> int | None:
        return self.backend.size(self.place) if self.spec.uses_db else None

    def graph(self, turns: int) -> Any:
        if turns not in self._graphs:
            self._graphs[turns] = build_graph(turns, self.saver, self.s.pii)
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
        d, pii = self.s.durability, self.s.pii

        def one(i: int) -> None:
            graph.invoke(graph_input(i, pii), thread_config(f"g-{i}"), durability=d)

        async def aone(i: int) -> None:
            await graph.ainvoke(graph_input(i, pii), thread_config(f"g-{i}"), durability=d)

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
        if self.backend.list_ns is not None:
            cfg["configurable"]["checkpoint_ns"] = self.backend.list_ns
        if self.spec.is_async:

            async def collect() -> int:
                return len([c async for c in self.saver.alist(cfg, limit=limit)])

            return self.loop.run_until_complete(collect())
        return len(list(self.saver.list(cfg, limit=limit)))

    def get_tuple(self, thread_no: int, config: dict[str, Any] | None = None) -> Any:
        cfg = config or thread_config(f"g-{thread_no}")
        if self.spec.is_async:
            return self.loop.run_until_complete(self.saver.aget_tuple(cfg))
        return self.saver.get_tuple(cfg)

    def configs(self, thread_no: int, limit: int) -> list[dict[str, Any]]:
        """The configs of a thread's newest ``limit`` checkpoints, newest first."""
        cfg = thread_config(f"g-{thread_no}")
        if self.spec.is_async:

            async def collect() -> list[Any]:
                return [c.config async for c in self.saver.alist(cfg, limit=limit)]

            return self.loop.run_until_complete(collect())
        return [c.config for c in self.saver.list(cfg, limit=limit)]

    def calls(self, kinds: tuple[str, ...]) -> int:
        """How many calls of these kinds the timing wrappers have seen."""
        return sum(len(self.times.samples.get(k, [])) for k in kinds)

    # -- one timed batch
    def timed(self, tally: Tally, work: Callable[[], None], units: Callable[[], int]) -> None:
        b = self.backend
        pids = b.server_pids(self.place) if self.spec.uses_db else []
        srv0 = server_cpu_seconds(pids, b.server_comm)
        before = units()
        cpu0, t0 = time.process_time(), time.perf_counter()
        work()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        srv1 = server_cpu_seconds(pids, b.server_comm)
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
            place = s.backends[spec.backend].place(spec, mode, tag)
            sessions[spec.name] = Session(spec, s, place, loop).open()
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


# --------------------------------------------------------------------------- the wire


def count_wire(
    spec: SaverSpec, s: Settings, recorded: list[tuple], tag: str, loop: asyncio.AbstractEventLoop
) -> dict[str, Any]:
    """Sequential, untimed pass: what each kind of call costs on the wire.

    PostgreSQL and Redis: the saver connects through a counting relay
    (``RoundTripProxy``) on one connection; figures ``round_trips``, ``bytes_up``,
    ``bytes_down``. DynamoDB: an ``ApiCallCounter`` on the saver's boto3 clients; figures
    ``calls``, ``write_units``, ``http_requests``, per-operation counts, and ``cpu_ms``
    (client CPU: the mock server runs in another process). Kinds: ``put``,
    ``put_writes`` (the recorded thread replayed call by call), ``get_tuple`` (latest
    checkpoint), ``get_tuple_by_id`` (the checkpoint before it, which has pending
    writes), ``graph_step`` (one graph thread, per checkpoint written, its first
    read included), ``list`` (a graph thread's history) and ``list_history`` (a thread
    of ``--history`` checkpoints). Every figure is per call (per step for graph_step).
    """
    backend = s.backends[spec.backend]
    sess = Session(spec, s, backend.place(spec, "rt", tag), loop)
    per: dict[str, list[dict[str, float]]] = defaultdict(list)
    steps = sum(1 for c in recorded if c[0] == "put")
    proxy: RoundTripProxy | None = None
    counter: ApiCallCounter | None = None
    if backend.relay:
        host, port = backend.relay_target()
        proxy = RoundTripProxy(host, port, getattr(backend, "relay_recv", 1 << 16))

    def snap() -> dict[str, float]:
        if proxy is not None:
            rt, up, down = proxy.snapshot()
            return {"round_trips": rt, "bytes_up": up, "bytes_down": down}
        assert counter is not None
        return counter.snapshot() | {"cpu_s": time.process_time()}

    def counted(kind: str, fn: Callable[[], Any]) -> Any:
        before = snap()
        result = fn()
        after = snap()
        per[kind].append({k: after.get(k, 0) - before.get(k, 0) for k in after | before})
        return result

    history_len = 0
    emulated: dict[str, Any] | None = None
    try:
        sess.open(pool_size=1, via=None if proxy is None else ("127.0.0.1", proxy.port))
        if proxy is None:
            counter = ApiCallCounter()
            for client in backend.clients(sess.saver):
                counter.attach(client)
        # Warm up every kind of call before counting, so the counts are the steady state
        # (psycopg prepares statements per connection after 5 uses; scripts get loaded).
        warm = backend.warmups
        for i in range(warm):
            sess.run_threads([-100 - i], concurrency=1)
            sess.replay([retarget(recorded, f"rt-warm-{i}")], concurrency=1)
            sess.get_tuple(-100 - i)
            sess.list_thread(-100 - i, s.history)
        for call in retarget(recorded, "rt-raw"):
            counted(call[0], lambda call=call: sess.replay([[call]], concurrency=1))
        for i in range(5):
            counted("get_tuple", lambda i=i: sess.get_tuple(-100 - i % warm))
        # The checkpoint before the latest, by id: it has its task's pending writes.
        older = [sess.configs(-100 - i % warm, 2)[-1] for i in range(5)]
        for cfg in older:
            counted("get_tuple_by_id", lambda cfg=cfg: sess.get_tuple(0, cfg))
        for i in range(3):
            counted("graph", lambda i=i: sess.run_threads([-200 - i], concurrency=1))
        for i in range(3):
            counted("list", lambda i=i: sess.list_thread(-200 - i, s.history))
        sess.run_threads([-300], turns=history_turns(s.history), concurrency=1)
        for _ in range(3):
            history_len = counted("list_history", lambda: sess.list_thread(-300, s.history))
        if proxy is not None and s.rtt_ms > 0:
            proxy.delay = s.rtt_ms / 1000.0
            emulated = _time_over_network(sess, s, steps)
            proxy.delay = 0.0
    finally:
        try:
            sess.close()
        finally:
            if proxy is not None:
                proxy.close()

    out: dict[str, Any] = {}
    for kind, rows in per.items():
        n = len(rows) * (steps if kind == "graph" else 1)
        entry: dict[str, Any] = {
            k: sum(r.get(k, 0) for r in rows) / n for k in sorted(set().union(*rows))
        }
        if "cpu_s" in entry:
            entry["cpu_ms"] = entry.pop("cpu_s") * 1000.0
        entry["n"] = n
        out["graph_step" if kind == "graph" else kind] = entry
    if "list_history" in out:
        out["list_history"]["checkpoints"] = history_len
    if emulated is not None:
        out["emulated_network"] = emulated
    return out


def _time_over_network(sess: Session, s: Settings, steps: int) -> dict[str, Any]:
    """Latency of calls when every round trip costs ``s.rtt_ms`` more (relay delay).

    One call at a time on the one connection of the wire pass: medians of 15 get_tuple
    calls, of 3 graph threads (per checkpoint written) and of 5 listings of the history
    thread (each after ``gc.collect()``). The relay itself adds a little per round trip
    too (it runs in this process).
    """

    def median_ms(fn: Callable[[], Any], n: int, collect: bool = False) -> float:
        times = []
        for _ in range(n):
            if collect:
                gc.collect()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000.0

    threads = iter(range(-400, -500, -1))
    return {
        "rtt_ms": s.rtt_ms,
        "get_tuple_ms": median_ms(lambda: sess.get_tuple(-100), 15),
        "graph_step_ms": median_ms(lambda: sess.run_threads([next(threads)], concurrency=1), 3)
        / steps,
        "list_history_ms": median_ms(lambda: sess.list_thread(-300, s.history), 5, True),
    }
