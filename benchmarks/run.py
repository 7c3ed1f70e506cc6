#!/usr/bin/env python
"""Drive one workload through several LangGraph checkpoint savers side by side.

    python benchmarks/run.py --quick
    python benchmarks/run.py --turns 5 --threads 40 --concurrency 4 --rounds 5

Writes ``bench-<timestamp>.json``, ``.png`` and ``.md`` (each also copied to ``latest.*``) to
``--out`` and prints a summary table. See benchmarks/README.md for what each figure means.
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
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The helper modules sit beside this file; the checkout's own package is what gets measured.
for _p in (str(HERE.parent), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import measure  # noqa: E402
import report  # noqa: E402
from savers import SPECS, admin_connect, ours_available  # noqa: E402
from workload import record_calls  # noqa: E402

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_SAVERS = "ours,upstream,ours-async,upstream-async,memory"  # pairs side by side


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--url",
        default=os.environ.get("BENCH_PG_URL", DEFAULT_URL),
        help="PostgreSQL URL (env BENCH_PG_URL; default %(default)s)",
    )
    p.add_argument("--turns", type=int, default=5, help="tool-call turns per thread (K)")
    p.add_argument("--threads", type=int, default=60, help="graph threads per saver (T)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="OS threads (sync savers) or asyncio tasks (async savers) (C)",
    )
    p.add_argument(
        "--savers",
        default=DEFAULT_SAVERS,
        help=f"comma list from: {', '.join(SPECS)} (default: all)",
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
    p.add_argument("--no-round-trips", action="store_true", help="skip the round-trip pass")
    p.add_argument("--out", default=str(HERE / "results"), help="output directory")
    p.add_argument("--quick", action="store_true", help="small sizes for a smoke run (<1 min)")
    args = p.parse_args(argv)
    if args.quick:
        args.turns, args.threads, args.raw_threads = 2, 8, 12
        args.reads, args.history, args.rounds = 3, 30, 2
    return args


def environment(url: str) -> dict[str, Any]:
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
    ):
        try:
            env["packages"][pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            env["packages"][pkg] = None
    try:
        with admin_connect(url) as conn:
            env["postgres"] = conn.execute("SHOW server_version").fetchone()[0]
            for name in ("shared_buffers", "synchronous_commit", "fsync", "max_connections"):
                env.setdefault("postgres_settings", {})[name] = conn.execute(
                    f"SHOW {name}"
                ).fetchone()[0]
    except Exception as exc:  # noqa: BLE001
        env["postgres"] = f"unavailable: {exc}"
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in args.savers.split(",") if n.strip()]
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        log(f"unknown saver(s): {', '.join(unknown)}")
        return 2
    skipped: dict[str, str] = {}
    if any(SPECS[n].kind == "ours" for n in names) and (why := ours_available()):
        for n in [n for n in names if SPECS[n].kind == "ours"]:
            skipped[n] = f"not importable: {why}"
            names.remove(n)
        log(f"skipping our savers ({why})")
    if not names:
        log("no saver to run")
        return 2

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
    )
    started = time.time()
    recorded = record_calls(args.turns, args.durability)
    n_put = sum(1 for c in recorded if c[0] == "put")
    log(
        f"recorded one {args.turns}-turn thread: {n_put} put + "
        f"{len(recorded) - n_put} put_writes calls"
    )

    specs = [SPECS[n] for n in names]
    results: dict[str, dict[str, Any]] = {n: {} for n in names}
    tag = str(os.getpid())
    loop = asyncio.new_event_loop()
    try:
        if args.mode in ("graph", "both"):
            t0 = time.perf_counter()
            for n, res in measure.graph_mode(specs, settings, tag, loop, log).items():
                results[n]["graph"] = res
            log(f"graph mode done ({time.perf_counter() - t0:.1f}s)")
        if args.mode in ("raw", "both"):
            t0 = time.perf_counter()
            for n, res in measure.raw_mode(specs, settings, recorded, tag, loop, log).items():
                results[n]["raw"] = res
            log(f"raw mode done ({time.perf_counter() - t0:.1f}s)")
        if not args.no_round_trips:
            for spec in specs:
                if not spec.uses_db:
                    continue
                rt = measure.count_round_trips(spec, settings, recorded, tag, loop)
                results[spec.name]["round_trips"] = rt
                log(
                    f"round trips {spec.name:15s} "
                    + " ".join(f"{k}={v['round_trips']:.2f}" for k, v in rt.items())
                )
    finally:
        loop.close()

    doc: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "python benchmarks/run.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "settings": {k: v for k, v in vars(settings).items() if k != "url"}
        | {
            "mode": args.mode,
            "savers": names,
            "recorded_puts": n_put,
            "recorded_put_writes": len(recorded) - n_put,
        },
        "environment": environment(args.url),
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
    jpath, ppath = out / f"bench-{stamp}.json", out / f"bench-{stamp}.png"
    jpath.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    report.chart(doc, summary, str(ppath))
    mpath = out / f"bench-{stamp}.md"
    mpath.write_text(
        f"`{doc['command']}`\n\n"
        + report.markdown_table(summary)
        + "\n\n"
        + "\n".join(f"- {line}" for line in report.ratio_lines(doc["ratios"]))
        + "\n"
    )
    for src, name in ((jpath, "latest.json"), (ppath, "latest.png"), (mpath, "latest.md")):
        shutil.copyfile(src, out / name)

    print(report.text_table(summary))
    for line in report.ratio_lines(doc["ratios"]):
        print(line)
    for n, why in skipped.items():
        print(f"skipped {n}: {why}")
    print(f"wrote {jpath} and {ppath} ({doc['elapsed_s']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
