#!/usr/bin/env python
"""What the effect journal costs one call of an ``@idempotent`` function, on each of our savers.

    python benchmarks/effects.py                      # every backend, sync and async savers
    python benchmarks/effects.py --backend redis --threads 100
    python benchmarks/effects.py --quick              # smoke run

A graph with one node, ``work``, that calls an ``@idempotent`` function ``--calls`` times
with distinct arguments, and right after each call the same function unwrapped. Every
thread is run three times:

- *fresh*: the first run; the node fails after its calls (it raises, as if the process
  had died there), so each call claimed and recorded a new journal entry;
- *same-step replay*: ``invoke(None)`` on the thread re-runs the failed node at the same
  step, the way a resume after a crash or an interrupt does: every call finds its entry;
- *time-travel replay*: ``invoke(None)`` from the checkpoint before the node. LangGraph
  runs the replayed node one step later, so each call claims a new entry at that step,
  looks up the original one step earlier and records its result again.

Two passes per saver: one that counts what each call costs on the wire (round trips
through ``instrument.RoundTripProxy`` on PostgreSQL and Redis, API calls through
``instrument.ApiCallCounter`` on DynamoDB), never timed; and one that times each call
(``perf_counter`` around the wrapped call and around the unwrapped one, in the same node
run) and its client CPU, with the savers of a backend interleaved thread by thread.
Writes ``effects-<timestamp>.json`` and ``.md`` (also copied to ``latest.effects.*``) to
``--out``. See benchmarks/NOTES.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The helper modules sit beside this file; the checkout's own package is what gets measured.
for _p in (str(HERE.parent), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from backends import make_backends  # noqa: E402
from instrument import ApiCallCounter, RoundTripProxy, percentile  # noqa: E402
from measure import Session, Settings  # noqa: E402
from run import add_service_args, environment, log, pick_savers  # noqa: E402
from savers import SPECS  # noqa: E402

BACKENDS = ("postgres", "redis", "dynamodb")
# Our savers of each backend, sync then async.
SAVERS = {
    "postgres": ("ours", "ours-async"),
    "redis": ("redis", "redis-async"),
    "dynamodb": ("dynamodb", "dynamodb-async"),
}
PHASES = ("fresh", "resume", "travel")
PHASE_LABELS = {
    "fresh": "fresh call",
    "resume": "same-step replay",
    "travel": "time-travel replay",
}


class Crash(Exception):
    """Raised by the node after its calls in a thread's first run."""


class Probe:
    """What the node measures around each call; the harness sets phase, crash and meter.

    ``meter`` (counting pass only) returns the wire counters so far: round trips and
    bytes from the relay, or the API call counter's totals. It is read outside the timed
    windows.
    """

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.phase = "warm"
        self.record = False
        self.crash = False
        self.meter: Callable[[], dict[str, float]] | None = None
        self.executed = 0  # executions of the function body, wrapped or not
        self.samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.wire: dict[str, list[dict[str, float]]] = defaultdict(list)

    def read(self) -> dict[str, float]:
        return self.meter() if self.meter is not None else {}

    def add(
        self,
        wrapped_s: float,
        cpu_s: float,
        bare_s: float,
        ran: int,
        before: dict[str, float],
        after: dict[str, float],
    ) -> None:
        if not self.record:
            return
        s = self.samples[self.phase]
        s["wrapped_s"].append(wrapped_s)
        s["cpu_s"].append(cpu_s)
        s["bare_s"].append(bare_s)
        s["ran"].append(ran)
        if self.meter is not None:
            self.wire[self.phase].append(
                {k: after.get(k, 0) - before.get(k, 0) for k in after | before}
            )


def build_graph(checkpointer: Any, probe: Probe, is_async: bool, journal: Any = None) -> Any:
    """START -> work -> END; ``work`` calls the wrapped function and the bare one in turn.

    ``journal``: journal in this saver instead of the checkpointer (the counting pass).
    """
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    from langgraph_durable.effects import idempotent

    class State(TypedDict, total=False):
        receipts: list[str]

    def charge(order: int, amount: int) -> dict[str, Any]:
        probe.executed += 1
        return {"order": order, "amount": amount, "receipt": f"receipt-{order}-{amount}"}

    async def acharge(order: int, amount: int) -> dict[str, Any]:
        return charge(order, amount)

    bare: Any = acharge if is_async else charge
    wrapped = idempotent(name="charge", journal=journal)(bare)
    clock, cpu = time.perf_counter, time.process_time

    def work(state: State) -> dict[str, Any]:
        receipts = []
        for i in range(probe.calls):
            before, ran = probe.read(), probe.executed
            c0 = cpu()
            t0 = clock()
            receipt = wrapped(i, 100 + i)["receipt"]
            t1 = clock()
            c1 = cpu()
            ran = probe.executed - ran
            b0 = clock()
            bare(i, 100 + i)
            b1 = clock()
            probe.add(t1 - t0, c1 - c0, b1 - b0, ran, before, probe.read())
            receipts.append(receipt)
        if probe.crash:
            raise Crash("the node failed after its calls")
        return {"receipts": receipts}

    async def awork(state: State) -> dict[str, Any]:
        receipts = []
        for i in range(probe.calls):
            before, ran = probe.read(), probe.executed
            c0 = cpu()
            t0 = clock()
            receipt = (await wrapped(i, 100 + i))["receipt"]
            t1 = clock()
            c1 = cpu()
            ran = probe.executed - ran
            b0 = clock()
            await bare(i, 100 + i)
            b1 = clock()
            probe.add(t1 - t0, c1 - c0, b1 - b0, ran, before, probe.read())
            receipts.append(receipt)
        if probe.crash:
            raise Crash("the node failed after its calls")
        return {"receipts": receipts}

    g = StateGraph(State)
    g.add_node("work", awork if is_async else work)
    g.add_edge(START, "work")
    g.add_edge("work", END)
    return g.compile(checkpointer=checkpointer)


def expected(calls: int) -> list[str]:
    return [f"receipt-{i}-{100 + i}" for i in range(calls)]


def run_thread(sess: Session, graph: Any, probe: Probe, thread_id: str, record: bool) -> None:
    """Fresh run (the node fails after its calls), same-step resume, time-travel replay."""
    cfg = {"configurable": {"thread_id": thread_id}}
    loop = sess.loop
    want = {"receipts": expected(probe.calls)}

    def invoke(value: Any, config: dict[str, Any]) -> Any:
        if sess.spec.is_async:
            return loop.run_until_complete(graph.ainvoke(value, config, durability="sync"))
        return graph.invoke(value, config, durability="sync")

    def before_work() -> dict[str, Any]:
        if sess.spec.is_async:

            async def collect() -> list[Any]:
                return [s async for s in graph.aget_state_history(cfg)]

            history = loop.run_until_complete(collect())
        else:
            history = list(graph.get_state_history(cfg))
        return next(s for s in history if s.next == ("work",)).config

    probe.record = record
    probe.phase, probe.crash = "fresh", True
    try:
        invoke({"receipts": []}, cfg)
    except Crash:
        pass
    else:
        raise RuntimeError("the node was meant to fail in the first run")
    probe.phase, probe.crash = "resume", False
    if invoke(None, cfg) != want:
        raise RuntimeError(f"{sess.spec.name}: the resumed run returned other receipts")
    probe.phase = "travel"
    if invoke(None, before_work()) != want:
        raise RuntimeError(f"{sess.spec.name}: the time-travel replay returned other receipts")
    probe.record = False


def count_wire(
    name: str, s: Settings, calls: int, threads: int, tag: str, loop: asyncio.AbstractEventLoop
) -> dict[str, Any]:
    """Untimed, sequential: the wire cost of each call (relay or API call counter).

    The journal is a saver of its own (``@idempotent(journal=...)``, the same class on a
    place of its own), with one connection through the relay (PostgreSQL, Redis) or a
    client of its own with the API call counter (DynamoDB); the graph's checkpointer
    connects directly. So only the journal's traffic is counted: LangGraph writes a time
    travel's fork checkpoint in a background thread while the node's first call runs,
    and on a shared connection that write would be counted as the call's.
    """
    spec = SPECS[name]
    backend = s.backends[spec.backend]
    jsess = Session(spec, s, backend.place(spec, "effrt", tag), loop)
    gsess = Session(spec, s, backend.place(spec, "effrtcp", tag), loop)
    probe = Probe(calls)
    proxy: RoundTripProxy | None = None
    if backend.relay:
        host, port = backend.relay_target()
        proxy = RoundTripProxy(host, port, getattr(backend, "relay_recv", 1 << 16))
    try:
        jsess.open(pool_size=1, via=None if proxy is None else ("127.0.0.1", proxy.port))
        gsess.open()
        if proxy is not None:

            def relay_meter(proxy: RoundTripProxy = proxy) -> dict[str, float]:
                rt, up, down = proxy.snapshot()
                return {"round_trips": rt, "bytes_up": up, "bytes_down": down}

            probe.meter = relay_meter
        else:
            counter = ApiCallCounter()
            for client in backend.clients(jsess.saver):
                counter.attach(client)
            probe.meter = counter.snapshot
        graph = build_graph(gsess.saver, probe, spec.is_async, journal=jsess.saver)
        for i in range(backend.warmups):
            run_thread(gsess, graph, probe, f"effrt-warm-{i}", record=False)
        for i in range(threads):
            run_thread(gsess, graph, probe, f"effrt-{i}", record=True)
    finally:
        try:
            gsess.close()
        finally:
            try:
                jsess.close()
            finally:
                if proxy is not None:
                    proxy.close()
    unit = "round_trips" if proxy is not None else "calls"
    out: dict[str, Any] = {"unit": unit}
    for phase, rows in probe.wire.items():
        keys = sorted(set().union(*rows))
        entry: dict[str, Any] = {k: sum(r.get(k, 0) for r in rows) / len(rows) for k in keys}
        entry["min"] = min(r.get(unit, 0) for r in rows)
        entry["max"] = max(r.get(unit, 0) for r in rows)
        entry["n"] = len(rows)
        entry["executed_per_call"] = statistics.fmean(probe.samples[phase]["ran"])
        out[phase] = entry
    return out


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000.0


def latency(samples: list[float]) -> dict[str, Any]:
    return {
        "n": len(samples),
        "p50_ms": _ms(percentile(samples, 50)),
        "p99_ms": _ms(percentile(samples, 99)),
        "mean_ms": _ms(statistics.fmean(samples)) if samples else None,
    }


def timed(
    names: list[str],
    s: Settings,
    calls: int,
    threads: int,
    tag: str,
    loop: asyncio.AbstractEventLoop,
) -> dict[str, Any]:
    """The savers of one backend open at once, one thread each in turn (order rotating)."""
    sessions: dict[str, Session] = {}
    probes = {n: Probe(calls) for n in names}
    graphs: dict[str, Any] = {}
    try:
        for n in names:
            spec = SPECS[n]
            place = s.backends[spec.backend].place(spec, "eff", tag)
            sessions[n] = Session(spec, s, place, loop).open()
            graphs[n] = build_graph(sessions[n].saver, probes[n], spec.is_async)
        for n in names:
            for i in range(sessions[n].backend.warmups):
                run_thread(sessions[n], graphs[n], probes[n], f"eff-warm-{i}", record=False)
        for r in range(threads):
            k = r % len(names)
            for n in names[k:] + names[:k]:
                run_thread(sessions[n], graphs[n], probes[n], f"eff-{r}", record=True)
    finally:
        for sess in sessions.values():
            sess.close()
    out: dict[str, Any] = {}
    for n in names:
        per: dict[str, Any] = {}
        for phase in PHASES:
            smp = probes[n].samples[phase]
            per[phase] = {
                "wrapped": latency(smp["wrapped_s"]),
                "unwrapped": latency(smp["bare_s"]),
                "cpu_us_mean": statistics.fmean(smp["cpu_s"]) * 1e6 if smp["cpu_s"] else None,
                "executed_per_call": statistics.fmean(smp["ran"]) if smp["ran"] else None,
            }
        out[n] = per
    return out


# --------------------------------------------------------------------------- output


def _f(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _wire_cell(w: dict[str, Any] | None) -> str:
    if not w:
        return "–"
    unit = w["unit_value"]
    cell = f"{unit:.2f}".rstrip("0").rstrip(".") if unit == int(unit) else f"{unit:.2f}"
    if w["min"] != w["max"]:
        cell += f" ({w['min']:g}–{w['max']:g})"
    return cell


def rows(doc: dict[str, Any], backend: str) -> tuple[list[str], list[list[str]]]:
    unit = "API calls" if backend == "dynamodb" else "round trips"
    header = [
        "saver",
        "call",
        f"{unit} per call",
        "wrapped p50/p99 ms",
        "unwrapped p50/p99 ms",
        "added p50 ms",
        "client CPU µs/call",
    ]
    out = []
    for n in SAVERS[backend]:
        res = doc["results"].get(n)
        if not res:
            continue
        wire, tim = res.get("wire", {}), res.get("timed", {})
        for phase in PHASES:
            w = wire.get(phase)
            if w:
                w = {**w, "unit_value": w[wire["unit"]]}
            t = tim.get(phase, {})
            wr, un = t.get("wrapped", {}), t.get("unwrapped", {})
            added = (
                None
                if wr.get("p50_ms") is None or un.get("p50_ms") is None
                else wr["p50_ms"] - un["p50_ms"]
            )
            out.append(
                [
                    n,
                    PHASE_LABELS[phase],
                    _wire_cell(w),
                    f"{_f(wr.get('p50_ms'))}/{_f(wr.get('p99_ms'))}",
                    f"{_f(un.get('p50_ms'), 4)}/{_f(un.get('p99_ms'), 4)}",
                    _f(added),
                    _f(t.get("cpu_us_mean"), 0),
                ]
            )
    return header, out


def markdown(doc: dict[str, Any]) -> str:
    parts = [f"`{doc['command']}`"]
    for backend in BACKENDS:
        header, body = rows(doc, backend)
        if not body:
            continue
        lines = [f"**{backend}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def text(doc: dict[str, Any]) -> str:
    parts = []
    for backend in BACKENDS:
        header, body = rows(doc, backend)
        if not body:
            continue
        widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]

        def line(cells: list[str], widths: list[int] = widths) -> str:
            return "  ".join(
                c.rjust(w) if i > 1 else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )

        lines = [f"[{backend}]", line(header), line(["-" * w for w in widths])]
        parts.append("\n".join(lines + [line(r) for r in body]))
    return "\n\n".join(parts)


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--backend",
        choices=(*BACKENDS, "all"),
        default="all",
        help="whose savers run (default %(default)s): "
        + "; ".join(f"{b}: {','.join(SAVERS[b])}" for b in BACKENDS),
    )
    p.add_argument(
        "--savers",
        default=None,
        help="comma list from: "
        + ", ".join(n for b in BACKENDS for n in SAVERS[b])
        + "\n(default: those of --backend)",
    )
    p.add_argument("--calls", type=int, default=10, help="@idempotent calls per node run (N)")
    p.add_argument(
        "--threads",
        type=int,
        default=50,
        help="timed threads per saver, each run fresh, resumed and replayed (T)",
    )
    p.add_argument(
        "--counted-threads", type=int, default=3, help="threads in the counting pass per saver"
    )
    p.add_argument("--pool-size", type=int, default=4, help="connections per saver pool (timed)")
    add_service_args(p)
    p.add_argument("--no-round-trips", action="store_true", help="skip the counting pass")
    p.add_argument("--out", default=str(HERE / "results"), help="output directory")
    p.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    args = p.parse_args(argv)
    if args.savers is None:
        wanted = BACKENDS if args.backend == "all" else (args.backend,)
        args.savers = ",".join(n for b in wanted for n in SAVERS[b])
    if args.quick:
        args.calls, args.threads, args.counted_threads = 5, 4, 1
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    picked = pick_savers(args.savers, {n for b in BACKENDS for n in SAVERS[b]})
    if picked is None:
        return 2
    names, skipped = picked

    backends = make_backends(args.url, args.redis_url, args.dynamodb_endpoint)
    settings = Settings(
        url=args.url,
        turns=0,
        threads=args.threads,
        concurrency=1,
        pool_size=args.pool_size,
        raw_threads=0,
        reads=0,
        history=0,
        durability="sync",
        rounds=args.threads,
        backends=backends,
    )
    started = time.time()
    tag = str(os.getpid())
    loop = asyncio.new_event_loop()
    results: dict[str, dict[str, Any]] = {n: {} for n in names}
    try:
        for backend in BACKENDS:
            members = [n for n in names if SPECS[n].backend == backend]
            if not members:
                continue
            t0 = time.perf_counter()
            for n, res in timed(members, settings, args.calls, args.threads, tag, loop).items():
                results[n]["timed"] = res
            log(f"{backend}: timed pass done ({time.perf_counter() - t0:.1f}s)")
            if args.no_round_trips:
                continue
            for n in members:
                wire = count_wire(n, settings, args.calls, args.counted_threads, tag, loop)
                results[n]["wire"] = wire
                unit = wire["unit"]
                log(
                    f"{unit} {n:16s} "
                    + " ".join(f"{p}={wire[p][unit]:.2f}" for p in PHASES if p in wire)
                )
    finally:
        loop.close()
        for b in backends.values():
            b.close()

    doc: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "python benchmarks/effects.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "settings": {
            "calls": args.calls,
            "threads": args.threads,
            "counted_threads": args.counted_threads,
            "pool_size": args.pool_size,
            "savers": names,
            "durability": "sync",
        },
        "environment": environment(
            [backends[b] for b in dict.fromkeys(SPECS[n].backend for n in names)]
        ),
        "skipped": skipped,
        "results": results,
        "elapsed_s": time.time() - started,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jpath = out / f"effects-{stamp}.json"
    jpath.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    mpath = out / f"effects-{stamp}.md"
    mpath.write_text(markdown(doc))
    shutil.copyfile(jpath, out / "latest.effects.json")
    shutil.copyfile(mpath, out / "latest.effects.md")
    print(text(doc))
    for n, why in skipped.items():
        print(f"skipped {n}: {why}")
    print(f"wrote {jpath}, {mpath.name} ({doc['elapsed_s']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
