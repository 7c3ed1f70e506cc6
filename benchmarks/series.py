#!/usr/bin/env python
"""Our saver at a given commit, our saver as checked out now and the upstream saver, in one
series of alternating runs: medians and ratios, so that a regression shows up as a ratio.

    python benchmarks/series.py --commit HEAD~5
    python benchmarks/series.py --commit 316b311 --repeat 3 --async
    python benchmarks/series.py --commit HEAD~5 --backend redis
    python benchmarks/series.py --commit HEAD~5 --rounds 8 --raw-threads 400   # run.py's options

Two versions of ``langgraph_durable`` cannot be imported in one process, so every figure
comes from a ``run.py`` child process. The package of ``--commit`` is extracted (``git
archive``) into a temporary directory; ``run.py`` from this checkout measures it through
``BENCH_PACKAGE_ROOT`` (only the package is old: the benchmark scripts are today's, so only
the plain savers, no protection twins, are run). Each of ``--repeat`` repetitions makes two
runs, their order alternating from one repetition to the next:

- *now*: this checkout's package, ``--savers upstream,ours`` (PostgreSQL);
- *then*: the package of ``--commit``, the same savers.

Each run has its own upstream saver, interleaved with ours round by round as ``run.py``
does. Per metric the table gives the median over the repetitions of upstream (both runs'),
ours at the commit and ours now, and the medians of the per-repetition ratios of values:

- ``now/up`` and ``then/up``: ours against the upstream saver of the same run;
- ``now/then``: ours now against ours at the commit, from the two runs of one repetition;
- ``now/then via up``: ``(now/up) / (then/up)``, the same comparison with each run's upstream
  taken as the yardstick (it cancels what changed on the machine between the two runs).

A ratio is of values, so a regression is a ``now/then`` below 1 for a rate and above 1 for
a time, bytes or round trips (the column "better" says which way is good). The spread of
the per-repetition ``now/then`` ratios is printed next to them: a ratio inside it is noise.

Writes ``series-<timestamp>.json`` (every run's summary) and ``.md`` to ``--out``, each also
copied to ``latest.series.*``. The runs' own files go to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PACKAGE = "langgraph_durable"

# Per backend: (our saver, the upstream saver it is compared with), sync then async.
PAIRS: dict[str, list[tuple[str, str]]] = {
    "postgres": [("ours", "upstream"), ("ours-async", "upstream-async")],
    "redis": [("redis", "plainredis"), ("redis-async", "plainredis-async")],
    "dynamodb": [("dynamodb", "aws-dynamodb"), ("dynamodb-async", "aws-dynamodb-async")],
}

# (label, summary keys tried in order, higher is better). The summary is run.py's
# (report.summarize); on DynamoDB API calls stand where round trips are.
METRICS: list[tuple[str, tuple[str, ...], bool]] = [
    ("graph steps/s", ("steps_per_s",), True),
    ("raw puts/s", ("raw_puts_per_s",), True),
    ("get_tuple p50 ms (C=1)", ("get_seq_p50_ms",), False),
    ("client CPU ms/step", ("cpu_ms_per_step",), False),
    ("bytes/step", ("bytes_per_step",), False),
    ("history listing ms", ("history_list_ms",), False),
    ("round trips/get_tuple", ("rt_get_tuple", "calls_get_tuple"), False),
    ("round trips/step", ("rt_step", "calls_step"), False),
]

RATIOS = ("now/up", "then/up", "now/then", "now/then via up")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter, allow_abbrev=False
    )
    p.add_argument(
        "--commit", required=True, help="the commit (any git revision) whose package is compared"
    )
    p.add_argument("--repeat", type=int, default=5, help="repetitions (default %(default)s)")
    p.add_argument(
        "--backend",
        choices=tuple(PAIRS),
        default="postgres",
        help="postgres: ours, upstream; redis: redis, plainredis;\n"
        "dynamodb: dynamodb, aws-dynamodb (on moto only API calls are counted unless\n"
        "--dynamodb-timings is passed on to run.py)",
    )
    p.add_argument("--async", dest="async_", action="store_true", help="also the async savers")
    p.add_argument("--threads", type=int, default=16, help="run.py --threads (T)")
    p.add_argument("--turns", type=int, default=5, help="run.py --turns (K)")
    p.add_argument("--concurrency", type=int, default=4, help="run.py --concurrency (C)")
    p.add_argument("--pool-size", type=int, default=4, help="run.py --pool-size")
    p.add_argument("--rounds", type=int, default=5, help="run.py --rounds")
    p.add_argument(
        "--verbose", action="store_true", help="show the runs' progress (run.py's stderr)"
    )
    p.add_argument("--out", default=str(HERE / "results"), help="output directory")
    p.epilog = (
        "Any other option is passed on to every run.py run (see python benchmarks/run.py "
        "--help),\nfor example --url, --redis-url, --raw-threads, --history, --durability."
    )
    args, extra = p.parse_known_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    for opt in ("--savers", "--out", "--backend", "--compare-encryption", "--compare-redaction"):
        if any(a == opt or a.startswith(opt + "=") for a in extra):
            p.error(f"{opt} is set by series.py")
    return args, extra


def git(*argv: str) -> str:
    return subprocess.run(
        ["git", *argv], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def resolve(commit: str) -> dict[str, str]:
    """The commit's full and short hash and subject; SystemExit if git does not know it."""
    try:
        full = git("rev-parse", "--verify", f"{commit}^{{commit}}")
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"unknown commit {commit!r}: {exc.stderr.strip()}") from exc
    subject = git("log", "-1", "--format=%s", full)
    return {
        "given": commit,
        "hash": full,
        "short": git("rev-parse", "--short", full),
        "subject": subject if len(subject) <= 100 else subject[:97] + "...",
    }


def extract_package(commit: str, dest: Path) -> None:
    """Write the commit's ``langgraph_durable`` tree under ``dest``."""
    archive = dest / "package.tar"
    with archive.open("wb") as f:
        subprocess.run(["git", "archive", commit, PACKAGE], cwd=ROOT, stdout=f, check=True)
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # Python before 3.10.12 / 3.11.4: the tree is our own repository's
            tar.extractall(dest)
    archive.unlink()


def check_package(root: Path, module: str) -> str:
    """Import ``module`` the way run.py will (``root`` first) and return where it came from."""
    code = f"import sys; sys.path.insert(0, {str(root)!r}); import {module} as m; print(m.__file__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the package at the commit does not import:\n{done.stderr[-2000:]}")
    where = done.stdout.strip()
    if not Path(where).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"{module} came from {where}, not from {root}")
    return where


def run_once(
    label: str,
    package_root: Path | None,
    savers: list[str],
    run_args: list[str],
    out: Path,
    verbose: bool,
) -> dict[str, Any]:
    """One run.py child process; returns its JSON document."""
    env = dict(os.environ)
    env.pop("BENCH_PACKAGE_ROOT", None)
    if package_root is not None:
        env["BENCH_PACKAGE_ROOT"] = str(package_root)
    cmd = [sys.executable, str(HERE / "run.py"), "--savers", ",".join(savers), "--out", str(out)]
    cmd += run_args
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=None if verbose else -1)
    if done.returncode:
        err = "" if verbose else done.stderr.decode(errors="replace")[-3000:]
        raise SystemExit(f"run.py ({label}) exited with {done.returncode}:\n{err}")
    files = sorted(out.glob("bench-*.json"))
    if not files:
        raise SystemExit(f"run.py ({label}) wrote no JSON to {out}")
    doc: dict[str, Any] = json.loads(files[-1].read_text())
    measured = doc["environment"].get("package_root")  # run.py records the last part only
    if measured != (None if package_root is None else Path(package_root).name):
        raise SystemExit(f"run.py ({label}) measured the package under {measured}")
    missing = [n for n in savers if n not in doc["summary"]]
    if missing:
        raise SystemExit(f"run.py ({label}) did not run {missing}: {doc.get('skipped')}")
    doc["series_elapsed_s"] = time.perf_counter() - t0
    return doc


def value(summary: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for k in keys:
        v = summary.get(k)
        if v is not None:
            return float(v)
    return None


def div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def median(xs: list[float | None]) -> float | None:
    got = [x for x in xs if x is not None]
    return statistics.median(got) if got else None


def tabulate(runs: list[dict[str, Any]], repeat: int, ours: str, up: str) -> dict[str, Any]:
    """Per metric: medians of the three savers, and medians of the per-repetition ratios."""
    by = {(r["repetition"], r["label"]): r["summary"] for r in runs}
    table: dict[str, Any] = {}
    for label, keys, higher in METRICS:
        now = [value(by[(i, "now")][ours], keys) for i in range(repeat)]
        then = [value(by[(i, "then")][ours], keys) for i in range(repeat)]
        up_now = [value(by[(i, "now")][up], keys) for i in range(repeat)]
        up_then = [value(by[(i, "then")][up], keys) for i in range(repeat)]
        per_rep = {
            "now/up": [div(a, b) for a, b in zip(now, up_now, strict=True)],
            "then/up": [div(a, b) for a, b in zip(then, up_then, strict=True)],
            "now/then": [div(a, b) for a, b in zip(now, then, strict=True)],
        }
        per_rep["now/then via up"] = [
            div(a, b) for a, b in zip(per_rep["now/up"], per_rep["then/up"], strict=True)
        ]
        spread = [x for x in per_rep["now/then"] if x is not None]
        table[label] = {
            "keys": list(keys),
            "higher_is_better": higher,
            "upstream": median(up_now + up_then),
            "then": median(then),
            "now": median(now),
            "values": {"now": now, "then": then, "upstream_now": up_now, "upstream_then": up_then},
            "ratios": {k: median(v) for k, v in per_rep.items()},
            "ratios_by_repetition": per_rep,
            "now/then range": [min(spread), max(spread)] if spread else None,
        }
    return table


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def rows(table: dict[str, Any]) -> list[list[str]]:
    out = []
    for label, t in table.items():
        lo_hi = t["now/then range"]
        out.append(
            [
                label,
                "higher" if t["higher_is_better"] else "lower",
                fmt(t["upstream"]),
                fmt(t["then"]),
                fmt(t["now"]),
                *(fmt_ratio(t["ratios"][k]) for k in RATIOS),
                "-" if lo_hi is None else f"{lo_hi[0]:.3f}..{lo_hi[1]:.3f}",
            ]
        )
    return out


def header(then_label: str) -> list[str]:
    return ["metric", "better", "upstream", then_label, "ours now", *RATIOS, "now/then range"]


def text_table(head: list[str], body: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]

    def line(r: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )

    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, body)])


def markdown_table(head: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args, extra = parse_args(argv)
    commit = resolve(args.commit)
    head = resolve("HEAD")
    dirty = bool(git("status", "--porcelain", "--", PACKAGE))
    pairs = PAIRS[args.backend][: 2 if args.async_ else 1]
    savers = [n for ours, up in pairs for n in (up, ours)]
    run_args = [
        *("--threads", str(args.threads), "--turns", str(args.turns)),
        *("--concurrency", str(args.concurrency), "--pool-size", str(args.pool_size)),
        *("--rounds", str(args.rounds)),
        *extra,
    ]
    then_label = f"ours@{commit['short']}"
    now_label = f"ours now ({head['short']}{', modified' if dirty else ''})"
    log(
        f"{args.repeat} x 2 runs of {','.join(savers)}: {then_label} ({commit['subject']}) "
        f"against {now_label}; run.py {' '.join(run_args)}"
    )
    started = time.time()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lgd-series-") as tmp_name:
        tmp = Path(tmp_name)
        package_root = tmp / "package"
        package_root.mkdir()
        extract_package(commit["hash"], package_root)
        module = f"{PACKAGE}.{args.backend}"
        log(f"{then_label}: {check_package(package_root, module)}")
        for i in range(args.repeat):
            order = [("now", None), ("then", package_root)]
            if i % 2:
                order.reverse()
            for label, root in order:
                doc = run_once(
                    label, root, savers, run_args, tmp / f"run-{i}-{label}", args.verbose
                )
                runs.append(
                    {
                        "repetition": i,
                        "label": label,
                        "package_root": "checkout" if root is None else f"{commit['short']}",
                        "elapsed_s": doc["series_elapsed_s"],
                        "git_commit": doc["environment"].get("git_commit"),
                        "summary": {n: doc["summary"][n] for n in savers},
                        "ratios": doc.get("ratios"),
                    }
                )
                steps = " ".join(f"{n} {fmt(doc['summary'][n].get('steps_per_s'))}" for n in savers)
                log(
                    f"  {i + 1}/{args.repeat} {label:4s} ({doc['series_elapsed_s']:.0f}s): "
                    f"steps/s {steps}"
                )
        sample = doc  # the settings and environment of the last run stand for all

    tables = {f"{ours} vs {up}": tabulate(runs, args.repeat, ours, up) for ours, up in pairs}
    command = "python benchmarks/series.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    doc_out: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "settings": {
            "commit": commit,
            "now": head | {"package_modified": dirty},
            "repeat": args.repeat,
            "backend": args.backend,
            "async": args.async_,
            "savers": savers,
            "run_args": run_args,
            "run_settings": sample.get("settings"),
        },
        "environment": sample.get("environment"),
        "runs": runs,
        "tables": tables,
        "elapsed_s": time.time() - started,
    }

    head_row = header(then_label)
    texts, mds = [], [f"`{command}`", ""]
    mds.append(
        f"{then_label}: {commit['subject']}  \nours now: {head['short']}"
        f"{' with uncommitted changes to the package' if dirty else ''}; "
        f"{args.repeat} repetitions, ratios are medians of per-repetition ratios of values"
    )
    for name, table in tables.items():
        body = rows(table)
        texts.append(f"{name} (medians of {args.repeat} repetitions)\n{text_table(head_row, body)}")
        mds += ["", f"### {name}", "", markdown_table(head_row, body)]

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jpath = out / f"series-{stamp}.json"
    jpath.write_text(json.dumps(doc_out, indent=2, default=str) + "\n")
    mpath = out / f"series-{stamp}.md"
    mpath.write_text("\n".join(mds) + "\n")
    for src in (jpath, mpath):
        shutil.copyfile(src, out / f"latest.series{src.suffix}")

    print("\n\n".join(texts))
    print(
        "ratios are of values: for a 'higher' metric a now/then below 1 is a regression, "
        "for a 'lower' one above 1"
    )
    print(f"wrote {jpath} ({doc_out['elapsed_s']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
