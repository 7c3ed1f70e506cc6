#!/usr/bin/env python
"""What redaction's detectors cost per KB of text (``find_spans`` with every built-in).

    python benchmarks/detectors.py                 # 1 KB and 16 KB texts, 7 repeats
    python benchmarks/detectors.py --quick         # smoke run

Texts of six kinds, each made to a size (deterministic, seeded):

- ``prose``: lowercase words, no digit, no ``@`` (most prechecks fail at once);
- ``prose+digits``: the same with dates, ids and amounts (the number detectors scan);
- ``pii``: the same with an e-mail address and a phone number every ~500 bytes (found and
  masked);
- ``accented``: non-ASCII text already in NFKC form (one ``unicodedata.is_normalized``
  pass more);
- ``full-width``: ``pii`` with its addresses and digits in full-width forms (the text is
  folded to NFKC with an index map, then scanned: the slowest path);
- ``json``: a tool result as JSON (keys, quotes, numbers).

Each figure is the median of ``--repeat`` timings of ``--calls`` calls, in µs per call
and µs per KB. Writes ``detectors-<timestamp>.json`` and ``.md`` to ``--out``
(``benchmarks/results``), and ``latest.detectors.*``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from langgraph_durable.protect.detectors import BUILTIN_DETECTORS, find_spans

WORDS = (
    "the agent calls a tool with the user's request and reads back what it found so the "
    "model can answer with a summary of the order history shipping status and next steps"
).split()
ACCENTED = "Grüße déjà vu façade naïve coöperate señor smörgåsbord Ærø Øresund crème brûlée".split()
FULL = str.maketrans("0123456789+@.", "０１２３４５６７８９＋＠．")


def _filler(rng: random.Random, size: int, word: Callable[[random.Random], str]) -> str:
    parts: list[str] = []
    total = 0
    while total < size:
        w = word(rng)
        parts.append(w)
        total += len(w.encode()) + 1
    return " ".join(parts)


def _plain(rng: random.Random) -> str:
    return rng.choice(WORDS)


def _digits(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.05:
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if roll < 0.10:
        return f"#{rng.randint(10_000, 99_999_999)}"
    if roll < 0.13:
        return f"${rng.randint(1, 999)}.{rng.randint(0, 99):02d}"
    return rng.choice(WORDS)


def _pii_text(rng: random.Random, size: int) -> str:
    chunks: list[str] = []
    total = 0
    n = 0
    while total < size:
        n += 1
        chunk = _filler(rng, 420, _digits)
        chunk += f" mail user{n}.name@example.com or call +1 415 555 {rng.randint(1000, 9999)}."
        chunks.append(chunk)
        total += len(chunk.encode()) + 1
    return " ".join(chunks)


def _json_text(rng: random.Random, size: int) -> str:
    rows = []
    total = 0
    while total < size:
        row = {
            "order_id": rng.randint(10_000, 99_999_999),
            "status": rng.choice(["shipped", "pending", "returned"]),
            "note": _filler(rng, 80, _plain),
            "updated": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T10:00:00Z",
        }
        rows.append(row)
        total = len(json.dumps(rows))
    return json.dumps({"results": rows})


def texts(size: int, seed: int = 7) -> dict[str, str]:
    rng = random.Random(seed)
    pii = _pii_text(rng, size)
    return {
        "prose": _filler(rng, size, _plain),
        "prose+digits": _filler(rng, size, _digits),
        "pii": pii,
        "accented": _filler(rng, size, lambda r: r.choice(ACCENTED + WORDS)),
        "full-width": pii.translate(FULL),
        "json": _json_text(rng, size),
    }


def measure(text: str, calls: int, repeat: int) -> float:
    """Median seconds per ``find_spans`` call over ``repeat`` timings."""
    detectors = tuple(BUILTIN_DETECTORS.values())
    find_spans(text, detectors)  # warm the regex caches
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            find_spans(text, detectors)
        timings.append((time.perf_counter() - start) / calls)
    return statistics.median(timings)


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,16384", help="text sizes in bytes")
    parser.add_argument("--calls", type=int, default=200, help="calls per timing (1 KB)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="few calls: a smoke run")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.repeat = 10, 3
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        calls = max(1, args.calls * 1024 // size)
        for kind, text in texts(size).items():
            seconds = measure(text, calls, args.repeat)
            kb = len(text.encode()) / 1024
            found = len(find_spans(text, tuple(BUILTIN_DETECTORS.values())))
            rows.append(
                {
                    "kind": kind,
                    "bytes": len(text.encode()),
                    "found": found,
                    "us_per_call": round(seconds * 1e6, 1),
                    "us_per_kb": round(seconds * 1e6 / kb, 1),
                }
            )
            print(
                f"{kind:>13} {len(text.encode()):>6} B  {found:>3} found  "
                f"{seconds * 1e6:9.1f} µs/call  {seconds * 1e6 / kb:7.1f} µs/KB"
            )
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    command = "python benchmarks/detectors.py " + " ".join(sys.argv[1:] if argv is None else argv)
    result = {
        "command": command.strip(),
        "commit": _commit(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "rows": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"`{result['command']}` (commit {result['commit']}, Python {result['python']}, "
        f"load average {result['load_average']})",
        "",
        "| text | bytes | found | µs per call | µs per KB |",
        "|---|---|---|---|---|",
        *(
            f"| {r['kind']} | {r['bytes']} | {r['found']} | {r['us_per_call']} | {r['us_per_kb']} |"
            for r in rows
        ),
    ]
    for name in (f"detectors-{stamp}", "latest.detectors"):
        (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / f'detectors-{stamp}.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
