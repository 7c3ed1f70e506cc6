#!/usr/bin/env python
"""Instructions per graph step in our PostgreSQL saver's client, counted by callgrind.

    python benchmarks/instructions.py                       # plain against integrity=
    python benchmarks/instructions.py --variants plain,int,enc --graphs 5,25

Steps/s ratios on a shared machine move by several percent from run to run; an
instruction count does not (valgrind's callgrind counts instructions, the same for the
same binary and inputs whatever else the machine does). For each variant a child process
runs the benchmark's graph (``workload.build_graph``: the agent/tools loop, ``--turns``
tool calls) on a sync ``PostgresSaver``, one graph at a time, under callgrind, once with
the smaller and once with the larger number of graphs of ``--graphs``. The difference of
the two totals over the difference in ``put`` calls (a step, as ``run.py`` counts them) is
the client's instructions per step, start-up and imports excluded; the C functions whose
counts grow most against the first variant show where the difference goes.

``--codec`` counts the saver's codec alone instead (what a ``put`` and a ``put_writes``
encode: records, tags, the chain), replaying the ``put``/``put_writes`` calls of one
recorded graph on new thread ids without I/O or threads: no background thread or network
timing takes part, so the counts repeat to a few thousand instructions per step, where the
whole client's move by some tens of thousands from run to run.

Valgrind runs OpenSSL's SHA-256 without the CPU's SHA extensions, so hashing counts for
more here than it costs natively (``openssl speed -evp sha256`` gives the native rate).

Variants: ``plain`` (no options), ``int`` (``integrity=``), ``enc`` (``encryption=`` with
a local keyring). Needs valgrind with ``callgrind_annotate``; PostgreSQL from ``--url``.
Writes ``instructions-<timestamp>.json`` and ``.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _p in (str(HERE.parent), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from run import DEFAULT_URL, environment, log  # noqa: E402

VARIANTS = ("plain", "int", "enc")
_TOTALS = re.compile(r"^\s*([\d,]+)\s+\(?.*PROGRAM TOTALS")
_ROW = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$")


def _child(url: str, variant: str, graphs: int, turns: int, schema: str) -> int:
    """Run ``graphs`` graphs on a fresh saver; print how many puts they made."""
    import psycopg
    from psycopg_pool import ConnectionPool
    from workload import build_graph, graph_input, thread_config

    from langgraph_durable.postgres import PostgresSaver

    kwargs = _options(variant)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')  # type: ignore[arg-type]
    pool = ConnectionPool(url, min_size=1, max_size=1, open=True)
    try:
        saver = PostgresSaver(pool, schema=schema, **kwargs)
        saver.setup()
        puts = 0
        real_put = saver.put

        def counted(*args: Any, **kw: Any) -> Any:
            nonlocal puts
            puts += 1
            return real_put(*args, **kw)

        saver.put = counted  # type: ignore[method-assign]
        graph = build_graph(turns, saver)
        graph.invoke(graph_input(-1), thread_config("warm-up"))
        puts = 0
        for i in range(graphs):
            graph.invoke(graph_input(i), thread_config(f"g-{i}"))
        print(json.dumps({"puts": puts}))
    finally:
        pool.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]
    return 0


def _codec_child(variant: str, threads: int, turns: int) -> int:
    """Replay one recorded graph's put/put_writes calls on ``threads`` new threads through
    the codec of a saver of ``variant`` (never connected); print how many puts."""
    from psycopg_pool import ConnectionPool
    from workload import record_calls, retarget

    from langgraph_durable._core.codec import thread_key
    from langgraph_durable.postgres import PostgresSaver

    saver = PostgresSaver(ConnectionPool("postgresql://", open=False), **_options(variant))
    codec = saver._ops.codec
    calls = record_calls(turns)
    puts = 0
    for i in range(threads):
        for call in retarget(calls, f"g-{i}"):
            config = call[1]
            key = thread_key(config, None, "default")
            if call[0] == "put":
                codec.written(codec.encode_checkpoint(key, config, call[2], call[3], call[4]))
                puts += 1
            else:
                cid = config["configurable"]["checkpoint_id"]
                path = call[4] if len(call) > 4 else ""
                codec.encode_writes(key, cid, call[2], call[3], path)
                codec.wrote(key, cid, call[2], call[3])
    print(json.dumps({"puts": puts}))
    return 0


def _options(variant: str) -> dict[str, Any]:
    if variant == "int":
        return {"integrity": b"instructions benchmark chain key"}
    if variant == "enc":
        from savers import encryption

        return {"encryption": encryption()}
    return {}


def _counts(path: Path) -> tuple[int, dict[str, int]]:
    """(program total, self instructions per C function) of a callgrind output file."""
    out = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    total, functions = 0, {}
    for line in out.splitlines():
        m = _TOTALS.match(line)
        if m:
            total = int(m.group(1).replace(",", ""))
            continue
        m = _ROW.match(line)
        if m and total:
            name = re.sub(r"\s*\[[^\]]*\]$", "", m.group(2))  # drop the object file
            name = re.sub(r"^.*/(Python|Objects|Modules|Include)/", r"\1/", name)
            functions[name] = functions.get(name, 0) + int(m.group(1).replace(",", ""))
    return total, functions


def _measure(
    url: str, variant: str, graphs: int, turns: int, work: Path, codec: bool
) -> tuple[int, int, dict[str, int]]:
    """(puts, total instructions, per-function) of one child under callgrind."""
    out = work / f"callgrind.{variant}.{graphs}.out"
    schema = f"lgd_bench_instr_{variant}_{graphs}_{os.getpid()}"
    cmd = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        variant,
        str(graphs),
        "--turns",
        str(turns),
        "--url",
        url,
        "--schema",
        schema,
        *(["--codec"] if codec else []),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} x {graphs}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    puts = json.loads(proc.stdout.strip().splitlines()[-1])["puts"]
    total, functions = _counts(out)
    return int(puts), total, functions


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("BENCH_PG_URL", DEFAULT_URL))
    p.add_argument("--variants", default="plain,int", help=f"comma list from {VARIANTS}")
    p.add_argument(
        "--graphs",
        help="the two numbers of graphs (fewer,more; default 5,25, with --codec 20,120)",
    )
    p.add_argument("--codec", action="store_true", help="the codec alone (see above)")
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--top", type=int, default=15, help="C functions listed per variant")
    p.add_argument("--out", default=str(HERE / "results"))
    p.add_argument("--child", nargs=2, metavar=("VARIANT", "GRAPHS"), help=argparse.SUPPRESS)
    p.add_argument("--schema", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        if args.codec:
            return _codec_child(args.child[0], int(args.child[1]), args.turns)
        return _child(args.url, args.child[0], int(args.child[1]), args.turns, args.schema)
    if args.graphs is None:
        args.graphs = "20,120" if args.codec else "5,25"

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        log(f"unknown variant(s) {bad}: choose from {', '.join(VARIANTS)}")
        return 2
    try:
        small, large = (int(n) for n in args.graphs.split(","))
    except ValueError:
        log("--graphs takes two numbers, fewer first: 5,25")
        return 2
    if not 0 < small < large:
        log("--graphs takes two numbers, fewer first: 5,25")
        return 2
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        log("valgrind (with callgrind_annotate) is needed on PATH")
        return 2

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="lgd-instructions-") as tmp:
        jobs = [(v, n) for v in variants for n in (small, large)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            futures = {
                job: pool.submit(
                    _measure, args.url, job[0], job[1], args.turns, Path(tmp), args.codec
                )
                for job in jobs
            }
            done = {job: f.result() for job, f in futures.items()}
    results: dict[str, Any] = {}
    for v in variants:
        p_small, t_small, f_small = done[(v, small)]
        p_large, t_large, f_large = done[(v, large)]
        steps = p_large - p_small
        per_function = {
            name: (f_large.get(name, 0) - f_small.get(name, 0)) / steps
            for name in set(f_small) | set(f_large)
        }
        results[v] = {
            "steps": steps,
            "per_step": (t_large - t_small) / steps,
            "per_function": per_function,
        }
    base = variants[0]
    lines = [
        f"`python benchmarks/instructions.py --variants {','.join(variants)} "
        f"--graphs {small},{large} --turns {args.turns}{' --codec' if args.codec else ''}`",
        "",
        "| variant | instructions per step | against " + base + " |",
        "|---|---|---|",
    ]
    for v in variants:
        per = results[v]["per_step"]
        lines.append(f"| {v} | {per:,.0f} | {per / results[base]['per_step']:.3f}x |")
    for v in variants[1:]:
        grown = sorted(
            (
                (d - results[base]["per_function"].get(n, 0.0), n)
                for n, d in results[v]["per_function"].items()
            ),
            reverse=True,
        )[: args.top]
        title = f"C functions that grow most, {v} against {base} (instructions per step):"
        lines += ["", title, ""]
        lines += [f"- {delta:,.0f}  {name}" for delta, name in grown]
    report = "\n".join(lines)
    print(report)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "created": stamp,
        "settings": {
            "variants": variants,
            "graphs": [small, large],
            "turns": args.turns,
            "codec": args.codec,
        },
        "environment": environment([]),
        "results": {
            v: {
                "steps": r["steps"],
                "per_step": r["per_step"],
                "top_functions": dict(
                    sorted(r["per_function"].items(), key=lambda kv: -kv[1])[: args.top * 2]
                ),
            }
            for v, r in results.items()
        },
        "elapsed_s": round(time.time() - started, 1),
    }
    (out / f"instructions-{stamp}.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / f"instructions-{stamp}.md").write_text(report + "\n")
    log(f"wrote {out}/instructions-{stamp}.json, .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
