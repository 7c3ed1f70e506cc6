"""Which of the write path's C calls let go of the GIL, and what that costs.

    python benchmarks/gil.py
    python benchmarks/gil.py --calls 500 --seconds 0.3

A C function that releases the GIL (``Py_BEGIN_ALLOW_THREADS``) around a few microseconds
of work hands the GIL to whichever thread is waiting for it, then waits to get it back.
With LangGraph's threads around, that wait is what the call costs. Each candidate is timed
twice, per call: alone, then while another thread spins in a Python loop (a thread that
wants the GIL all the time). A call that keeps the GIL costs about the same both ways; one
that lets go of it costs up to the interpreter's switch interval (5 ms) with the spinner.

Nothing is written; the table goes to standard output (benchmarks/NOTES.md, "The GIL and
the write path", has a run).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import ssl
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from langgraph_durable._core.hashing import feed  # noqa: E402


def candidates() -> dict[str, Callable[[], Any]]:
    """The calls a protected write makes per record, at the sizes the workload has."""
    aead = AESGCM(os.urandom(32))
    nonce = os.urandom(12)
    small, record, large = os.urandom(1000), os.urandom(8000), os.urandom(30000)

    def fed(data: bytes) -> Callable[[], bytes]:
        def run() -> bytes:
            h = hashlib.sha256()
            feed(h, data)
            return h.digest()

        return run

    return {
        "os.urandom(12)": lambda: os.urandom(12),
        "ssl.RAND_bytes(12)": lambda: ssl.RAND_bytes(12),
        "AESGCM.encrypt 1 KB": lambda: aead.encrypt(nonce, small, b"aad"),
        "AESGCM.encrypt 8 KB": lambda: aead.encrypt(nonce, record, b"aad"),
        "sha256 1 KB": lambda: hashlib.sha256(small).digest(),
        "sha256 30 KB": lambda: hashlib.sha256(large).digest(),
        "sha256 30 KB, fed": fed(large),
        "blake2b 30 KB": lambda: hashlib.blake2b(large, digest_size=16).digest(),
    }


def per_call(fn: Callable[[], Any], calls: int, seconds: float) -> float:
    """Microseconds per call: at most ``calls`` calls, stopping after ``seconds``."""
    start = time.perf_counter()
    done = 0
    while done < calls and time.perf_counter() - start < seconds:
        fn()
        done += 1
    return (time.perf_counter() - start) / done * 1e6


def with_spinner(fn: Callable[[], Any], calls: int, seconds: float) -> float:
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    time.sleep(0.01)
    try:
        return per_call(fn, calls, seconds)
    finally:
        stop.set()
        thread.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per measurement, at most")
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement, at most")
    args = parser.parse_args(argv)
    print("| call | alone, us | with a spinning thread, us |")
    print("|---|---|---|")
    for name, fn in candidates().items():
        fn()
        alone = per_call(fn, args.calls, args.seconds)
        spun = with_spinner(fn, args.calls, args.seconds)
        print(f"| {name} | {alone:.2f} | {spun:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
