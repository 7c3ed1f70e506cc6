#!/usr/bin/env python
"""Client CPU of one Redis script call on one server, three ways: through redis-py's
``execute_command``; through the sync saver's driver given a client (packed by the driver,
on a connection of the client's pool); and through the driver opened from the URL, whose
own pool also skips its check on a connection the previous script call handed back
(``_ScriptPool``).

    python benchmarks/redis_calls.py
    python benchmarks/redis_calls.py --calls 50000 --repeat 7

The call is a ``put_writes`` of the benchmark workload's size: the thread's 6 keys, 8
arguments with two blobs (800 and 300 bytes), against a script that answers at once. Each
way runs ``--calls`` calls ``--repeat`` times, in turn; the best repetition of each is
printed (process CPU per call, so the wait for the server counts only its system calls).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("BENCH_PACKAGE_ROOT") or str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from langgraph_durable.redis._driver import SyncDriver, _script_call  # noqa: E402
from langgraph_durable.redis._requests import LuaScript, Script  # noqa: E402

SOURCE = "return {1, 2, '11'}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--redis-url", default=os.environ.get("LGD_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    client = redis.Redis(
        connection_pool=redis.BlockingConnectionPool.from_url(args.redis_url, max_connections=4)
    )
    given = SyncDriver(client)
    opened = SyncDriver(args.redis_url, pool_size=4)
    try:
        keys = tuple(f"{{bench:t}}:{k}" for k in "abcdef")
        script = LuaScript("bench", SOURCE)
        assert client.script_load(SOURCE) == script.sha
        request = Script(
            script,
            keys,
            ("spec", "ns|checkpoint", "task", "1", 0, b"y" * 800, 1, b"z" * 300),
        )
        ways: dict[str, Callable[[], Any]] = {
            "execute_command": lambda: client.execute_command(*_script_call(request, False)),
            "driver, given a client": lambda: given.execute(request),
            "driver, opened from the URL": lambda: opened.execute(request),
        }
        best = dict.fromkeys(ways, float("inf"))
        for fn in ways.values():
            for _ in range(args.calls // 10):
                fn()
        for _ in range(args.repeat):
            for name, fn in ways.items():
                t0 = time.process_time()
                for _ in range(args.calls):
                    fn()
                best[name] = min(best[name], (time.process_time() - t0) / args.calls)
        for name, cpu in best.items():
            print(f"{name:28} {cpu * 1e6:6.1f} us client CPU per call")
    finally:
        opened.close()
        client.close()


if __name__ == "__main__":
    main()
