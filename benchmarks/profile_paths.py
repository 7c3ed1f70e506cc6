"""Where a saver's client CPU goes, per call kind: one cProfile per path and saver.

    python benchmarks/profile_paths.py                              # ours vs upstream, PostgreSQL
    python benchmarks/profile_paths.py --savers ours,ours-enc,ours-red,ours-int --paths get_tuple
    python benchmarks/profile_paths.py --backend redis --savers redis,plainredis
    python benchmarks/profile_paths.py --savers ours-async,upstream-async --paths put,step

For each saver (the same names as ``run.py --savers``) and each path it replays the
benchmark workload's recorded calls (``put``, ``put_writes``), reads the newest checkpoint
(``get_tuple``), lists a thread's history (``list``) or runs whole graph threads
(``step``), first untimed (warm-up: caches, prepared statements), then timed, then under
cProfile. It prints the client CPU per call (process time, profiler off) and the functions
with the most own CPU time. The profile is timed by the CPU of the thread each function
runs in, so waiting (for the server, for another thread) counts nothing. A sync graph runs
the saver's calls in LangGraph's executor threads: for ``step`` those calls are profiled
in their thread and added to the profile. A path's cost can be read per feature by
running a saver next to its twins (``-enc``, ``-red``, ``-int``, ``-rls``). Nothing is
written unless ``--out`` names a path prefix for the full pstats dumps.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from backends import make_backends  # noqa: E402
from savers import SPECS  # noqa: E402
from workload import build_graph, graph_input, record_calls, retarget, thread_config  # noqa: E402

PATHS = ("put", "put_writes", "get_tuple", "list", "step")
DEFAULTS = {"postgres": "ours,upstream", "redis": "redis,plainredis", "dynamodb": "dynamodb"}


class _Meter:
    """Client CPU of the calls being measured, and the profiler switched on around them."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.calls = 0
        self.profile: cProfile.Profile | None = None

    def start(self) -> float:
        if self.profile is not None:
            self.profile.enable()
        return time.process_time()

    def stop(self, t0: float) -> None:
        self.cpu += time.process_time() - t0
        if self.profile is not None:
            self.profile.disable()
        self.calls += 1


def _replay(saver: Any, calls: list[tuple], kind: str | None, meter: _Meter) -> None:
    """Replay recorded calls; those of ``kind`` are measured (puts always run so that
    writes have a checkpoint to attach to)."""
    cfg = None
    for name, config, *rest in calls:
        t0 = meter.start() if name == kind else None
        if name == "put":
            cfg = saver.put(config, *rest)
        else:
            saver.put_writes(cfg or config, *rest)
        if t0 is not None:
            meter.stop(t0)


async def _areplay(saver: Any, calls: list[tuple], kind: str | None, meter: _Meter) -> None:
    cfg = None
    for name, config, *rest in calls:
        t0 = meter.start() if name == kind else None
        if name == "put":
            cfg = await saver.aput(config, *rest)
        else:
            await saver.aput_writes(cfg or config, *rest)
        if t0 is not None:
            meter.stop(t0)


class _Run:
    """The calls of one path, sync or async, on one saver, measured by a ``_Meter``."""

    def __init__(self, saver: Any, path: str, calls: list[tuple], turns: int, is_async: bool):
        self.saver, self.path, self.calls, self.turns = saver, path, calls, turns
        self.is_async = is_async
        self._lock = threading.Lock()
        self.graph = build_graph(turns, saver) if path == "step" else None
        self.read_thread = f"profile-read-{uuid.uuid4().hex[:8]}"
        # the profile of the saver's calls a sync graph makes from its executor threads
        # (set while the profiled repetitions run)
        self.thread_profile: cProfile.Profile | None = None
        self.in_threads = self.graph is not None and not is_async
        if self.in_threads:
            for method in ("put", "put_writes", "get_tuple", "list"):
                setattr(saver, method, self._profiled(getattr(saver, method)))

    def _profiled(self, call: Any) -> Any:
        def profiled(*args: Any, **kwargs: Any) -> Any:
            prof = self.thread_profile
            if prof is None or threading.current_thread() is threading.main_thread():
                return call(*args, **kwargs)
            with self._lock:  # one graph thread at a time: its calls never overlap anyway
                prof.enable()
                try:
                    return call(*args, **kwargs)
                finally:
                    prof.disable()

        return profiled

    async def prepare(self) -> None:
        if self.path in ("get_tuple", "list"):
            calls = retarget(self.calls, self.read_thread)
            if self.is_async:
                await _areplay(self.saver, calls, None, _Meter())
            else:
                _replay(self.saver, calls, None, _Meter())

    async def once(self, meter: _Meter) -> None:
        s, cfg = self.saver, thread_config(self.read_thread)
        if self.path in ("put", "put_writes"):
            calls = retarget(self.calls, f"profile-{uuid.uuid4().hex[:12]}")
            if self.is_async:
                await _areplay(s, calls, self.path, meter)
            else:
                _replay(s, calls, self.path, meter)
            return
        thread = thread_config(f"profile-step-{uuid.uuid4().hex[:12]}")
        t0 = meter.start()
        if self.path == "get_tuple":
            await s.aget_tuple(cfg) if self.is_async else s.get_tuple(cfg)
        elif self.path == "list":
            _ = [t async for t in s.alist(cfg)] if self.is_async else list(s.list(cfg))
        elif self.is_async:
            await self.graph.ainvoke(graph_input(1), thread, durability="sync")
        else:
            self.graph.invoke(graph_input(1), thread, durability="sync")
        meter.stop(t0)
        if self.path == "step":  # graph steps of one thread, as run.py counts them
            meter.calls += 2 * self.turns + 3 - 1


async def _measure(run: _Run, repeat: int, warm: int, profile: cProfile.Profile) -> float:
    """Client CPU per call with the profiler off; then the same work, profiled."""
    await run.prepare()
    for _ in range(warm):
        await run.once(_Meter())
    meter = _Meter()
    for _ in range(repeat):
        await run.once(meter)
    profiled = _Meter()
    profiled.profile = profile
    if run.in_threads:
        run.thread_profile = cProfile.Profile(time.thread_time)
    for _ in range(repeat):
        await run.once(profiled)
    return meter.cpu / max(meter.calls, 1)


def _profile_one(backend: Any, name: str, path: str, args: argparse.Namespace, calls: list) -> None:
    spec = SPECS[name]
    place = backend.place(spec, "profile", path)
    # Timed by the thread's CPU, not the wall clock: waits (for the server, for the
    # executor thread running the saver's calls) count nothing.
    prof = cProfile.Profile(time.thread_time)
    threads: cProfile.Profile | None = None
    try:
        if spec.is_async:

            async def go() -> float:
                async with backend.open_async(spec, place, args.pool_size) as saver:
                    run = _Run(saver, path, calls, args.turns, True)
                    return await _measure(run, args.repeat, args.warm, prof)

            cpu = asyncio.run(go())
        else:
            with backend.open_sync(spec, place, args.pool_size) as saver:
                run = _Run(saver, path, calls, args.turns, False)
                cpu = asyncio.run(_measure(run, args.repeat, args.warm, prof))
                threads = run.thread_profile
    finally:
        backend.drop(place)
    print(f"\n=== {name} {path}: client CPU {cpu * 1000:.3f} ms per call")
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    if threads is not None:
        threads.create_stats()
        if threads.stats:  # type: ignore[attr-defined]
            stats.add(threads)
    stats.sort_stats(args.sort).print_stats(args.top)
    body = out.getvalue()
    print(body[body.find("   ncalls") :] if "   ncalls" in body else body)
    if args.out:
        stats.dump_stats(f"{args.out}.{name}.{path}.pstats")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--backend", choices=tuple(DEFAULTS), default="postgres")
    p.add_argument("--savers", help="comma list of run.py saver names (default per backend)")
    p.add_argument("--paths", default=",".join(PATHS), help=f"comma list from {', '.join(PATHS)}")
    p.add_argument("--url", default=None, help="PostgreSQL URL (as run.py)")
    p.add_argument("--redis-url", default=None, help="Redis URL (as run.py)")
    p.add_argument("--dynamodb-endpoint", default=None)
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--repeat", type=int, default=200, help="timed repetitions of the path")
    p.add_argument("--warm", type=int, default=20, help="untimed repetitions first")
    p.add_argument("--pool-size", type=int, default=4)
    p.add_argument("--sort", default="tottime", help="pstats sort key (tottime, cumulative)")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--out", help="path prefix for pstats dumps")
    args = p.parse_args(argv)
    import os

    backends = make_backends(
        args.url or os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test"),
        args.redis_url or os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
        args.dynamodb_endpoint or os.environ.get("BENCH_DYNAMODB_ENDPOINT"),
    )
    backend = backends[args.backend]
    names = (args.savers or DEFAULTS[args.backend]).split(",")
    unknown = [n for n in names if n not in SPECS]
    paths = args.paths.split(",")
    if unknown or any(x not in PATHS for x in paths):
        p.error(f"unknown saver or path in {names} {paths}")
    calls = record_calls(args.turns)
    try:
        for path in paths:
            for name in names:
                _profile_one(backend, name, path, args, calls)
    finally:
        for b in backends.values():
            b.close()


if __name__ == "__main__":
    main()
