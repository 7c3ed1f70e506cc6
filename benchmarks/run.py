#!/usr/bin/env python
"""Drive one workload through several LangGraph checkpoint savers side by side.

    python benchmarks/run.py --quick
    python benchmarks/run.py --turns 5 --threads 40 --concurrency 4 --rounds 5
    python benchmarks/run.py --backend redis          # ours vs langgraph-checkpoint-plainredis
    python benchmarks/run.py --backend dynamodb       # ours vs langgraph-checkpoint-aws (moto)

Writes ``bench-<timestamp>.json``, ``.md`` and a ``.png`` per backend (each also copied to
``latest.*``) to ``--out`` and prints a summary table. See benchmarks/NOTES.md for what
each figure means.

Environment: BENCH_PACKAGE_ROOT=DIR measures the ``langgraph_durable`` under DIR (say, a
checkout of an older commit) instead of this checkout's (benchmarks/series.py uses it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Collection
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The helper modules sit beside this file; the checkout's own package is what gets measured,
# or the one under BENCH_PACKAGE_ROOT when that is set.
PACKAGE_ROOT = os.environ.get("BENCH_PACKAGE_ROOT") or str(HERE.parent)
for _p in (PACKAGE_ROOT, str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import measure  # noqa: E402
import report  # noqa: E402
from backends import make_backends  # noqa: E402
from savers import DEFAULT_SAVERS, ENCRYPTED, REDACTED, SPECS, unavailable  # noqa: E402
from workload import record_calls  # noqa: E402

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
BACKENDS = ("postgres", "redis", "dynamodb")


def add_service_args(p: argparse.ArgumentParser) -> None:
    """``--url``, ``--redis-url`` and ``--dynamodb-endpoint`` (with their environment variables)."""
    p.add_argument(
        "--url",
        default=os.environ.get("BENCH_PG_URL", DEFAULT_URL),
        help="PostgreSQL URL (env BENCH_PG_URL; default %(default)s)",
    )
    p.add_argument(
        "--redis-url",
        default=os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL),
        help="Redis URL (env BENCH_REDIS_URL; default %(default)s)",
    )
    p.add_argument(
        "--dynamodb-endpoint",
        default=os.environ.get("BENCH_DYNAMODB_ENDPOINT") or None,
        help="DynamoDB endpoint URL (env BENCH_DYNAMODB_ENDPOINT; default: a moto\n"
        "server started in a child process)",
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_service_args(p)
    p.add_argument("--turns", type=int, default=5, help="tool-call turns per thread (K)")
    p.add_argument("--threads", type=int, default=60, help="graph threads per saver (T)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="OS threads (sync savers) or asyncio tasks (async savers) (C)",
    )
    p.add_argument(
        "--backend",
        choices=(*BACKENDS, "all"),
        default="postgres",
        help="which savers run when --savers is not given (default %(default)s):\n"
        + "\n".join(f"  {b}: {DEFAULT_SAVERS[b]}" for b in BACKENDS)
        + "\n  all: every one of them",
    )
    p.add_argument(
        "--savers",
        default=None,
        help=f"comma list from: {', '.join(SPECS)}\n(default: those of --backend)",
    )
    p.add_argument(
        "--compare-encryption",
        action="store_true",
        help="run each of our savers next to its encrypted twin <name>-enc\n"
        "(encryption= with a LocalKeyring) and print the ratios enc/plain",
    )
    p.add_argument(
        "--compare-redaction",
        action="store_true",
        help="run each of our savers next to its redacted twin <name>-red\n"
        "(redaction=Redaction(): every built-in detector) and print the ratios red/plain",
    )
    p.add_argument(
        "--pii",
        action="store_true",
        help="workload variant: every thread's message text is its own; the input\n"
        "holds an e-mail address, every tool result one and a phone number",
    )
    p.add_argument("--mode", choices=("graph", "raw", "both"), default="both")
    p.add_argument("--pool-size", type=int, default=4, help="connections per saver pool")
    p.add_argument(
        "--raw-threads",
        type=int,
        default=200,
        help="fresh thread ids the recorded call sequence is replayed on (N)",
    )
    p.add_argument("--reads", type=int, default=5, help="get_tuple calls per graph thread")
    p.add_argument(
        "--history", type=int, default=100, help="checkpoints in the thread whose history is listed"
    )
    p.add_argument(
        "--durability",
        choices=("sync", "async", "exit"),
        default="sync",
        help="LangGraph durability mode for graph runs",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=8,
        help="cut the work into this many rounds that visit the savers in turn",
    )
    p.add_argument(
        "--ours-partitions",
        type=int,
        default=0,
        help="give our savers' schemas this many extra partitions for past\n"
        "epochs (a deployment that has run for a while; default 0)",
    )
    p.add_argument(
        "--no-round-trips",
        action="store_true",
        help="skip the pass that counts round trips / API calls",
    )
    p.add_argument(
        "--rtt-ms",
        type=float,
        default=0.0,
        help="in the round-trip pass, also time get_tuple, a graph step and the\n"
        "history listing with this many ms added to every round trip by the\n"
        "relay (a network, emulated; PostgreSQL and Redis; default 0: off)",
    )
    p.add_argument(
        "--dynamodb-timings",
        action="store_true",
        help="also time the DynamoDB savers in graph and raw mode (on moto the\n"
        "timings say little about DynamoDB; by default only calls are counted)",
    )
    p.add_argument("--out", default=str(HERE / "results"), help="output directory")
    p.add_argument("--quick", action="store_true", help="small sizes for a smoke run (<1 min)")
    args = p.parse_args(argv)
    if args.savers is None:
        wanted = BACKENDS if args.backend == "all" else (args.backend,)
        names = [n for b in wanted for n in DEFAULT_SAVERS[b].split(",")]
        args.savers = ",".join(dict.fromkeys(names))  # InMemorySaver once
    # each of ours, then its encrypted and/or redacted twin
    twins = [ENCRYPTED] if args.compare_encryption else []
    twins += [REDACTED] if args.compare_redaction else []
    if twins:
        names = [n.strip() for n in args.savers.split(",") if n.strip()]
        args.savers = ",".join(
            dict.fromkeys(m for n in names for m in (n, *(t.get(n) for t in twins)) if m)
        )
    if args.quick:
        args.turns, args.threads, args.raw_threads = 2, 8, 12
        args.reads, args.history, args.rounds = 3, 30, 2
    return args


def environment(backends: list[Any]) -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "packages": {},
    }
    for pkg in (
        "langgraph",
        "langgraph-checkpoint",
        "langgraph-checkpoint-postgres",
        "psycopg",
        "psycopg-binary",
        "psycopg-pool",
        "langgraph-durable",
        "redis",
        "langgraph-checkpoint-plainredis",
        "boto3",
        "botocore",
        "moto",
        "langgraph-checkpoint-aws",
    ):
        try:
            env["packages"][pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            env["packages"][pkg] = None
    for backend in backends:
        env.update(backend.describe())
    if os.environ.get("BENCH_PACKAGE_ROOT"):
        env["package_root"] = Path(PACKAGE_ROOT).name  # no path of the machine
    try:
        env["git_commit"] = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=HERE,
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
            or None
        )
        # Whether the measured package differs from that commit.
        env["package_modified"] = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--", "langgraph_durable"],
                cwd=HERE.parent,
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
        )
    except Exception:  # noqa: BLE001
        env["git_commit"] = None
    return env


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def pick_savers(listed: str, allowed: Collection[str]) -> tuple[list[str], dict[str, str]] | None:
    """The savers of a ``--savers`` list that can run, and why the others were skipped.

    None (after logging why) when a name is unknown or nothing can run.
    """
    names = [n.strip() for n in listed.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        log(f"unknown saver(s): {', '.join(unknown)} (choose from {', '.join(sorted(allowed))})")
        return None
    skipped: dict[str, str] = {}
    for n in list(names):
        if why := unavailable(SPECS[n]):
            skipped[n] = f"not importable: {why}"
            names.remove(n)
            log(f"skipping {n} ({why})")
    if not names:
        log("no saver to run")
        return None
    return names, skipped


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    picked = pick_savers(args.savers, SPECS)
    if picked is None:
        return 2
    names, skipped = picked

    backends = make_backends(args.url, args.redis_url, args.dynamodb_endpoint)
    settings = measure.Settings(
        url=args.url,
        turns=args.turns,
        threads=args.threads,
        concurrency=args.concurrency,
        pool_size=args.pool_size,
        raw_threads=args.raw_threads,
        reads=args.reads,
        history=args.history,
        durability=args.durability,
        rounds=args.rounds,
        ours_partitions=args.ours_partitions,
        rtt_ms=args.rtt_ms,
        pii=args.pii,
        backends=backends,
    )
    started = time.time()
    recorded = record_calls(args.turns, args.durability, args.pii)
    n_put = sum(1 for c in recorded if c[0] == "put")
    log(
        f"recorded one {args.turns}-turn thread: {n_put} put + "
        f"{len(recorded) - n_put} put_writes calls"
    )

    results: dict[str, dict[str, Any]] = {n: {} for n in names}
    tag = str(os.getpid())
    loop = asyncio.new_event_loop()
    # Each backend's savers are measured together (rounds interleave them), one backend
    # after the other; InMemorySaver runs with the first one that is timed.
    by_backend = report.groups(names, args.dynamodb_timings)
    try:
        for group, members in by_backend.items():
            specs = [SPECS[n] for n in members]
            timed = [sp for sp in specs if sp.backend != "dynamodb" or args.dynamodb_timings]
            if timed and args.mode in ("graph", "both"):
                t0 = time.perf_counter()
                for n, res in measure.graph_mode(timed, settings, tag, loop, log).items():
                    results[n]["graph"] = res
                log(f"{group}: graph mode done ({time.perf_counter() - t0:.1f}s)")
            if timed and args.mode in ("raw", "both"):
                t0 = time.perf_counter()
                for n, res in measure.raw_mode(timed, settings, recorded, tag, loop, log).items():
                    results[n]["raw"] = res
                log(f"{group}: raw mode done ({time.perf_counter() - t0:.1f}s)")
            if args.no_round_trips:
                continue
            for spec in specs:
                if not spec.uses_db:
                    continue
                wire = measure.count_wire(spec, settings, recorded, tag, loop)
                relay = backends[spec.backend].relay
                results[spec.name]["round_trips" if relay else "api_calls"] = wire
                unit = "round_trips" if relay else "calls"
                log(
                    f"{unit} {spec.name:18s} "
                    + " ".join(f"{k}={v[unit]:.2f}" for k, v in wire.items() if unit in v)
                )
    finally:
        loop.close()
        for backend in backends.values():
            backend.close()

    doc: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "python benchmarks/run.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "settings": {k: v for k, v in vars(settings).items() if k not in ("url", "backends")}
        | {
            "backend": args.backend,
            "dynamodb_timings": args.dynamodb_timings,
            "compare_encryption": args.compare_encryption,
            "compare_redaction": args.compare_redaction,
            "mode": args.mode,
            "savers": names,
            "recorded_puts": n_put,
            "recorded_put_writes": len(recorded) - n_put,
        },
        "environment": environment(
            [backends[b] for b in dict.fromkeys(SPECS[n].backend for n in names)]
        ),
        "skipped": skipped,
        "results": results,
        "elapsed_s": time.time() - started,
    }
    summary = report.summarize(doc)
    doc["summary"] = summary
    doc["ratios"] = report.ratios(doc, summary)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jpath = out / f"bench-{stamp}.json"
    jpath.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    # One chart per backend: bench-<stamp>-<backend>.png, but bench-<stamp>.png for a
    # PostgreSQL-only run (as before there were other backends).
    copies = [(jpath, "latest.json")]
    pngs = []
    for group, members in by_backend.items():
        only_pg = len(by_backend) == 1 and group in ("postgres", "memory")
        suffix = "" if only_pg else f"-{group}"
        ppath = out / f"bench-{stamp}{suffix}.png"
        report.chart(doc, {n: summary[n] for n in members}, str(ppath), group)
        copies.append((ppath, f"latest{suffix.replace('-', '.')}.png"))  # latest.redis.png
        pngs.append(ppath)
    mpath = out / f"bench-{stamp}.md"
    mpath.write_text(
        f"`{doc['command']}`\n\n"
        + report.markdown_table(summary)
        + "\n\n"
        + "\n".join(f"- {line}" for line in report.ratio_lines(doc["ratios"]))
        + "\n"
    )
    copies.append((mpath, "latest.md"))
    for src, name in copies:
        shutil.copyfile(src, out / name)

    print(report.text_table(summary))
    for line in report.ratio_lines(doc["ratios"]):
        print(line)
    for n, why in skipped.items():
        print(f"skipped {n}: {why}")
    print(f"wrote {jpath}, {', '.join(p.name for p in pngs)} ({doc['elapsed_s']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
