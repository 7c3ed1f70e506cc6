#!/usr/bin/env python
"""How fast ``langgraph-durable verify`` checks a store, and in how much memory.

    python benchmarks/verify.py                          # PostgreSQL and Redis, 10,000 x 10
    python benchmarks/verify.py --backend all --quick    # every backend, smoke sizes

For each backend: ``--threads`` threads of ``--per-thread`` checkpoints (plus one
``put_writes`` per thread) are written with raw ``put`` calls of our saver with
``integrity=`` (the data of ``benchmarks/prune.py``), by ``--procs`` processes. Then the
``verify`` command runs in a child process three times: on one thread (the process's own
footprint: interpreter, LangGraph, driver), on the first tenth of the store's size (a
second place loaded with a tenth of the threads) and on the whole store. Each reports its
wall time and its peak RSS (``ru_maxrss`` of the child); memory is bounded when the whole
store's peak stays near the tenth's. DynamoDB runs on moto (a smaller default), whose
times mean little.

Writes ``verify-<timestamp>.json`` and ``.md`` to ``--out``. Every schema, key prefix and
table made here is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _p in (str(HERE.parent), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from backends import Backend, make_backends  # noqa: E402
from prune import load, open_saver  # noqa: E402
from run import add_service_args, environment, log  # noqa: E402

BACKENDS = ("postgres", "redis", "dynamodb")

# Runs the command in the child and prints its own peak RSS (KiB on Linux) last, on stderr.
_CHILD = (
    "import resource, sys\n"
    "from langgraph_durable.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    "print('MAXRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


def _cli_target(name: str, backend: Backend, place: str) -> list[str]:
    if name == "postgres":
        return ["--url", backend.url, "--schema", place]  # type: ignore[attr-defined]
    if name == "redis":
        return ["--url", backend.url, "--prefix", place]  # type: ignore[attr-defined]
    endpoint = backend.endpoint  # type: ignore[attr-defined]
    return ["--url", f"dynamodb://{place}?region=us-east-1&endpoint={endpoint}"]


def run_verify(argv: list[str], key: str) -> dict[str, Any]:
    env = {**os.environ, "LGD_INTEGRITY_KEY": key}
    env.setdefault("AWS_ACCESS_KEY_ID", "bench")
    env.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, "verify", *argv, "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd=str(HERE.parent),
    )
    seconds = time.perf_counter() - t0
    rss = None
    for line in proc.stderr.splitlines():
        if line.startswith("MAXRSS "):
            rss = int(line.split()[1])
    summary: dict[str, Any] = {}
    for line in proc.stdout.splitlines():
        doc = json.loads(line)
        if doc.get("command") == "verify":
            summary = doc
    if proc.returncode != 0:
        raise RuntimeError(f"verify exited {proc.returncode}: {proc.stdout[-500:]}{proc.stderr}")
    return {
        "wall_seconds": round(seconds, 2),
        "verify_seconds": summary.get("seconds"),
        "threads": summary.get("threads"),
        "checkpoints": summary.get("checkpoints"),
        "ok": summary.get("ok"),
        "peak_rss_mib": round(rss / 1024, 1) if rss else None,
        "checkpoints_per_s": (
            round(summary["checkpoints"] / summary["seconds"], 1)
            if summary.get("seconds")
            else None
        ),
    }


def run_backend(
    name: str, backend: Backend, args: argparse.Namespace, tag: str, key: str
) -> dict[str, Any]:
    threads, per_thread = args.threads, args.per_thread
    if name == "dynamodb":
        threads, per_thread = args.dynamodb_threads, args.dynamodb_per_thread
    out: dict[str, Any] = {"threads": threads, "per_thread": per_thread}
    places = {"tenth": f"lgdbench_verify_{tag}_s", "whole": f"lgdbench_verify_{tag}_w"}
    if name == "dynamodb":
        places = {k: v.replace("_", "-") for k, v in places.items()}
    sizes = {"tenth": max(1, threads // 10), "whole": threads}
    try:
        for which, place in places.items():
            job: dict[str, Any] = {"kind": name, "place": place, "integrity": key}
            if name == "postgres":
                job["kind"], job["url"] = "ours", backend.url  # type: ignore[attr-defined]
            elif name == "redis":
                job["url"] = backend.url  # type: ignore[attr-defined]
            else:
                job["url"] = backend.endpoint  # type: ignore[attr-defined]
                job["moto"] = not backend._given  # type: ignore[attr-defined]
            _drop(name, backend, place)
            with open_saver(job) as saver:
                saver.setup()
            procs = args.procs if name != "dynamodb" else 2
            out[f"load_{which}"] = load(job, sizes[which], per_thread, procs)
        target = _cli_target(name, backend, places["whole"])
        out["one_thread"] = run_verify([*target, "--thread", "pt-0000000"], key)
        out["tenth"] = run_verify(_cli_target(name, backend, places["tenth"]), key)
        out["whole"] = run_verify(target, key)
        log(
            f"{name}: verify {out['whole']['checkpoints']:,} checkpoints in "
            f"{out['whole']['verify_seconds']}s ({out['whole']['checkpoints_per_s']:,}/s), "
            f"peak RSS {out['whole']['peak_rss_mib']} MiB (a tenth: "
            f"{out['tenth']['peak_rss_mib']} MiB, one thread: "
            f"{out['one_thread']['peak_rss_mib']} MiB)"
        )
    finally:
        for place in places.values():
            _drop(name, backend, place)
    return out


def _drop(name: str, backend: Backend, place: str) -> None:
    backend.drop(place)


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        f"# verify benchmark ({doc['created']})",
        "",
        f"`{doc['command']}`",
        "",
        "| backend | checkpoints | verify s | checkpoints/s | peak RSS MiB: one thread / a "
        "tenth / whole |",
        "|---|---|---|---|---|",
    ]
    for name, r in doc["results"].items():
        w = r.get("whole") or {}
        lines.append(
            f"| {name} | {w.get('checkpoints')} | {w.get('verify_seconds')} | "
            f"{w.get('checkpoints_per_s')} | {r['one_thread']['peak_rss_mib']} / "
            f"{r['tenth']['peak_rss_mib']} / {w.get('peak_rss_mib')} |"
        )
    lines += ["", f"load average at start {doc['loadavg_start']}, end {doc['loadavg_end']}", ""]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_service_args(p)
    p.add_argument("--backend", default="postgres,redis", help="comma list, or all")
    p.add_argument("--threads", type=int, default=10_000)
    p.add_argument("--per-thread", type=int, default=10)
    p.add_argument("--dynamodb-threads", type=int, default=1_000)
    p.add_argument("--dynamodb-per-thread", type=int, default=5)
    p.add_argument("--procs", type=int, default=2, help="loader processes")
    p.add_argument("--out", default=str(HERE / "results"), help="output directory")
    p.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    args = p.parse_args(argv)
    args.backends = list(BACKENDS) if args.backend == "all" else args.backend.split(",")
    if args.quick:
        args.threads, args.dynamodb_threads = 200, 50
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    backends = make_backends(args.url, args.redis_url, args.dynamodb_endpoint)
    tag = str(os.getpid())
    key = os.urandom(32).hex()
    started = time.time()
    load_start = os.getloadavg()
    results: dict[str, Any] = {}
    try:
        for name in args.backends:
            results[name] = run_backend(name, backends[name], args, tag, key)
    finally:
        for b in backends.values():
            b.close()
    doc: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "python benchmarks/verify.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "environment": environment([backends[b] for b in args.backends]),
        "results": results,
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "elapsed_s": round(time.time() - started, 1),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jpath = out / f"verify-{stamp}.json"
    jpath.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    mpath = out / f"verify-{stamp}.md"
    text = markdown(doc)
    mpath.write_text(text)
    print(text)
    print(f"wrote {jpath.name}, {mpath.name} ({doc['elapsed_s']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
