#!/usr/bin/env python
"""What single PostgreSQL actions, with no pruner around them, do to a writer's put p99.

    python benchmarks/stalls.py                 # three rounds of every action
    python benchmarks/stalls.py --rounds 1 --big-mb 300

``prune.py`` compares a writer's put p99 during a prune with its p99 before it. This
script measures the same ratio around bare SQL, to tell what the pruner adds from what
the machine's disk does anyway. A writer thread ``put``s to ``--writer-threads``
threads of our ``PostgresSaver`` at ``--writer-rate`` calls a second, one call at a
time, and records each call's latency. Each round, for each action in turn (the order
rotates): the action's table is prepared (autovacuum off) and a checkpoint taken, ``--settle``
seconds pass, then ``--window``
seconds of the writer alone (*before*), then the action runs on a connection of its own
and the writer goes on until ``--window`` seconds after the action began, or its end if
later (*during*). Actions:

- ``nothing``: a sleep (the ratio's own noise between two windows);
- ``delete-rows``: one ``DELETE`` of 90% of a 100,000-row table shaped like the thread
  registry (what forgetting the expired threads of a prune's epochs writes);
- ``copy-rows``: one ``INSERT ... SELECT`` of 20,000 rows of 1.4 KB (about the rows
  a move of 2,000 live threads copies);
- ``drop-small``: ``DROP TABLE`` of a table of ``--small-mb`` MB;
- ``drop-big``: ``DROP TABLE`` of a table of ``--big-mb`` MB (default: the bytes the
  1,000,000-checkpoint prune of ``prune.py`` frees).

Writes ``stalls-<timestamp>.json`` and ``.md`` to ``--out``; everything it makes lives
in the schema ``lgd_bench_stalls_<pid>``, dropped at the end. See benchmarks/NOTES.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _p in (str(HERE.parent), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from backends import make_backends  # noqa: E402
from prune import checkpoint, put_config, window  # noqa: E402
from run import add_service_args, environment, log  # noqa: E402

#: No autovacuum on the scratch tables: a vacuum of a table just filled would run
#: during later windows.
_QUIET = "WITH (autovacuum_enabled = false)"
ACTIONS = ("nothing", "delete-rows", "copy-rows", "drop-small", "drop-big")


class Stalls:
    def __init__(self, args: argparse.Namespace) -> None:
        import psycopg

        self.args = args
        self.schema = f"lgd_bench_stalls_{os.getpid()}"
        self.admin = psycopg.connect(args.url, autocommit=True)
        self.sql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        self.sql(f"CREATE SCHEMA {self.schema}")

    def sql(self, text: str) -> Any:
        return self.admin.execute(text)  # type: ignore[call-overload]

    def wal(self) -> str:
        return str(self.sql("SELECT pg_current_wal_lsn()").fetchone()[0])

    def wal_mb(self, start: str, end: str) -> float:
        row = self.admin.execute("SELECT pg_wal_lsn_diff(%s, %s)", (end, start)).fetchone()
        return round(float(row[0]) / 2**20, 1)

    # ---- the actions: (prepare, act)

    def prepare(self, action: str) -> Callable[[Any], None]:
        s = self.schema
        if action == "delete-rows":
            self.sql(f"DROP TABLE IF EXISTS {s}.reg")
            self.sql(
                f"CREATE TABLE {s}.reg (tenant_id text, thread_id text, epoch int, "
                "created_at timestamptz, updated_at timestamptz, "
                "PRIMARY KEY (tenant_id, thread_id)) WITH (autovacuum_enabled = false)"
            )
            self.sql(
                f"INSERT INTO {s}.reg SELECT 'default', 'thread-' || g, g % 10, now(), now() "
                "FROM generate_series(1, 100000) g"
            )
            self.sql(f"CREATE INDEX ON {s}.reg (epoch, updated_at)")
            return lambda c: c.execute(f"DELETE FROM {s}.reg WHERE epoch <> 0")
        if action == "copy-rows":
            self.sql(f"DROP TABLE IF EXISTS {s}.src, {s}.dst")
            self.sql(
                f"CREATE TABLE {s}.src {_QUIET} AS SELECT g AS id, repeat('y', 1400) AS pad "
                "FROM generate_series(1, 20000) g"
            )
            self.sql(f"CREATE TABLE {s}.dst (id bigint, pad text) {_QUIET}")
            return lambda c: c.execute(f"INSERT INTO {s}.dst SELECT * FROM {s}.src")
        if action in ("drop-small", "drop-big"):
            mb = self.args.small_mb if action == "drop-small" else self.args.big_mb
            self.sql(f"DROP TABLE IF EXISTS {s}.big")
            # unlogged: made faster, without a WAL the size of the table; its files are
            # freed by a DROP the same way
            self.sql(f"CREATE UNLOGGED TABLE {s}.big (id bigint, pad text) {_QUIET}")
            # 1 KB rows: about 7 to a page, so 1,024 rows a MB (within a few %)
            self.sql(
                f"INSERT INTO {s}.big SELECT g, repeat('x', 900) "
                f"FROM generate_series(1, {int(mb * 1024)}) g"
            )
            return lambda c: c.execute(f"DROP TABLE {s}.big")
        return lambda c: time.sleep(0.5)

    def table_mb(self) -> float | None:
        row = self.sql(f"SELECT pg_total_relation_size(to_regclass('{self.schema}.big'))")
        size = row.fetchone()[0]
        return None if size is None else round(size / 2**20, 1)

    def close(self) -> None:
        self.sql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        self.admin.close()


class Writer:
    """Our saver's ``put`` at a steady rate on a thread of its own; latencies kept."""

    def __init__(self, url: str, schema: str, threads: int, rate: float) -> None:
        from psycopg_pool import ConnectionPool

        from langgraph_durable.postgres import PostgresSaver

        self.pool = ConnectionPool(url, min_size=1, max_size=1, open=True)
        self.saver = PostgresSaver(self.pool, schema=schema)
        self.saver.setup()
        self.ids = [f"writer-{i}" for i in range(threads)]
        self.parents: dict[str, str] = {}
        self.steps: dict[str, int] = {}
        self.samples: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self.interval = 1.0 / rate
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _one(self, k: int) -> None:
        thread = self.ids[k % len(self.ids)]
        step = self.steps.get(thread, 0)
        cp, new = checkpoint(k, k, step)
        meta = {"source": "loop", "step": step, "parents": {}}
        t0 = time.monotonic()
        config = self.saver.put(put_config(thread, self.parents.get(thread)), cp, meta, new)
        self.samples.append((t0, time.monotonic() - t0))
        self.steps[thread] = step + 1
        self.parents[thread] = config["configurable"]["checkpoint_id"]

    def _run(self) -> None:
        k = 0
        due = time.monotonic()
        while not self.stop.is_set():
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            due = max(due + self.interval, time.monotonic() - self.interval)
            try:
                self._one(k)
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"{type(exc).__name__}: {exc}")
            k += 1

    def start(self) -> None:
        for k in range(10):  # psycopg prepares after 5 calls
            self._one(-1 - k)
        self.samples.clear()
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.pool.close()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import psycopg

    bench = Stalls(args)
    writer = Writer(args.url, bench.schema, args.writer_threads, args.writer_rate)
    rows: list[dict[str, Any]] = []
    try:
        writer.start()
        time.sleep(args.window)
        with psycopg.connect(args.url, autocommit=True) as conn:
            for r in range(args.rounds):
                order = ACTIONS[r % len(ACTIONS) :] + ACTIONS[: r % len(ACTIONS)]
                for action in order:
                    act = bench.prepare(action)
                    size = bench.table_mb() if action.startswith("drop") else None
                    bench.sql("CHECKPOINT")
                    time.sleep(args.settle)
                    b0 = time.monotonic()
                    time.sleep(args.window)
                    start = bench.wal()
                    t0 = time.monotonic()
                    act(conn)
                    t1 = time.monotonic()
                    end = bench.wal()
                    time.sleep(max(0.0, args.window - (t1 - t0)))
                    t2 = time.monotonic()
                    before = window(writer.samples, b0, t0)
                    during = window(writer.samples, t0, t2)
                    ratio = (
                        round(during["p99_ms"] / before["p99_ms"], 2)
                        if before["p99_ms"] and during["p99_ms"]
                        else None
                    )
                    row = {
                        "round": r + 1,
                        "action": action,
                        "table_mb": size,
                        "action_seconds": round(t1 - t0, 3),
                        "wal_mb": bench.wal_mb(start, end),
                        "before": before,
                        "during": during,
                        "p99_during_over_before": ratio,
                    }
                    rows.append(row)
                    log(
                        f"round {r + 1} {action:12s} {row['action_seconds']:6.3f}s "
                        f"wal {row['wal_mb']:6.1f} MB  p99 {before['p99_ms']} -> "
                        f"{during['p99_ms']} ms ({ratio}x)"
                    )
    finally:
        writer.close()
        bench.close()
    summary: dict[str, Any] = {}
    for action in ACTIONS:
        ratios = [r["p99_during_over_before"] for r in rows if r["action"] == action]
        ratios = [x for x in ratios if x is not None]
        summary[action] = {
            "ratios": ratios,
            "median": round(statistics.median(ratios), 2) if ratios else None,
        }
    return {"rows": rows, "summary": summary, "writer_errors": writer.errors[:10]}


def markdown(doc: dict[str, Any]) -> str:
    out = [
        f"# Writer put p99 around single actions ({doc['created']})",
        "",
        f"`{doc['command']}`; commit `{doc['environment'].get('git_commit')}`; "
        f"writer {doc['settings']['writer_rate']:g} puts/s, windows of "
        f"{doc['settings']['window']:g} s.",
        "",
        "| round | action | table MB | action s | WAL MB | p99 before ms | p99 during ms | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["results"]["rows"]:
        out.append(
            f"| {r['round']} | {r['action']} | {r['table_mb'] or ''} | {r['action_seconds']} "
            f"| {r['wal_mb']} | {r['before']['p99_ms']} | {r['during']['p99_ms']} "
            f"| {r['p99_during_over_before']}x |"
        )
    out += ["", "Median ratio per action:", ""]
    for action, s in doc["results"]["summary"].items():
        out.append(f"- `{action}`: {s['median']}x (rounds: {s['ratios']})")
    return "\n".join(out) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="rounds of every action")
    p.add_argument("--window", type=float, default=3.0, help="seconds per window")
    p.add_argument(
        "--settle", type=float, default=3.0, help="seconds between a preparation and a window"
    )
    p.add_argument("--writer-rate", type=float, default=200.0, help="writer puts per second")
    p.add_argument("--writer-threads", type=int, default=2000, help="threads the writer uses")
    p.add_argument("--small-mb", type=float, default=300.0, help="drop-small's table size")
    p.add_argument(
        "--big-mb", type=float, default=1361.0, help="drop-big's table size (1,427,278,054 B)"
    )
    add_service_args(p)
    p.add_argument("--out", default=str(HERE / "results"), help="output directory")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.window <= 0 or args.writer_rate <= 0:
        p.error("--rounds, --window and --writer-rate must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    backends = make_backends(args.url, args.redis_url, args.dynamodb_endpoint)
    try:
        env = environment([backends["postgres"]])
        started = time.time()
        results = measure(args)
    finally:
        for b in backends.values():
            b.close()
    doc = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(
            ["python benchmarks/stalls.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "settings": {
            k: getattr(args, k)
            for k in ("rounds", "window", "writer_rate", "writer_threads", "small_mb", "big_mb")
        },
        "environment": env,
        "results": results,
        "elapsed_s": round(time.time() - started, 1),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"stalls-{stamp}.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    text = markdown(doc)
    (out / f"stalls-{stamp}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
