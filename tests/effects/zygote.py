"""A process that imports everything once, then forks graph workers on request.

The crash tests start hundreds of worker processes and SIGKILL them at random
moments; a fresh interpreter per worker would spend most of the test importing
LangGraph. The zygote is single-threaded and opens no connection, so a fork
of it is as clean as a new process. Protocol: one JSON object per line on
stdin, one reply per line on stdout:

* ``{"start": job}`` -> ``{"pid": n}``: fork a worker running ``worker.run(job)``.
* ``{"wait": pid}`` -> ``{"status": n}``: its exit code, or minus the signal that killed it.
* ``{"poll": pid}`` -> ``{"status": n or null}``: the same without waiting (null: running).
* ``{"quit": true}``: exit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import IO, Any

# Imported before any fork so each worker starts warm.
import boto3  # noqa: F401
import langgraph.graph  # noqa: F401
import psycopg  # noqa: F401
import redis  # noqa: F401

import langgraph_durable.dynamodb  # noqa: F401
import langgraph_durable.effects  # noqa: F401
import langgraph_durable.postgres  # noqa: F401
import langgraph_durable.redis  # noqa: F401
from tests.effects import worker


def _child(job: dict[str, Any]) -> None:
    code = 1
    try:
        out = os.open(job.get("output", os.devnull), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.dup2(out, 1)
        os.dup2(out, 2)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        code = worker.run(job)
    except BaseException:  # noqa: BLE001 - report and exit, never return into the zygote
        import traceback

        print(f"worker {os.getpid()} failed", flush=True)
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    reaped: dict[int, int] = {}
    for line in sys.stdin:
        request = json.loads(line)
        if "start" in request:
            pid = os.fork()
            if pid == 0:
                _child(request["start"])
            reply: dict[str, Any] = {"pid": pid}
        elif "wait" in request:
            pid = int(request["wait"])
            if pid not in reaped:
                _, status = os.waitpid(pid, 0)
                reaped[pid] = os.waitstatus_to_exitcode(status)
            reply = {"status": reaped.pop(pid)}
        elif "poll" in request:
            pid = int(request["poll"])
            if pid not in reaped:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    reaped[pid] = os.waitstatus_to_exitcode(status)
            reply = {"status": reaped.get(pid)}
        else:
            return
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


class Zygote:
    """The test side: starts the zygote and talks to it."""

    def __init__(self, cwd: str, module: str = "tests.effects.zygote") -> None:
        """``module``: the zygote to start (another may swap in its own ``worker``)."""
        from tests.servers import set_dynamodb_environment

        env = dict(os.environ)
        set_dynamodb_environment(env)  # boto3 signs requests to the local endpoint
        self._proc = subprocess.Popen(
            [sys.executable, "-m", module],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._lock = threading.Lock()

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            stdin: IO[str] = self._proc.stdin  # type: ignore[assignment]
            stdout: IO[str] = self._proc.stdout  # type: ignore[assignment]
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
            line = stdout.readline()
        if not line:
            raise RuntimeError("the zygote process died")
        return json.loads(line)  # type: ignore[no-any-return]

    def start(self, job: dict[str, Any]) -> int:
        return int(self._ask({"start": job})["pid"])

    def running(self, pid: int) -> bool:
        return self._ask({"poll": pid})["status"] is None

    def wait(self, pid: int) -> int:
        return int(self._ask({"wait": pid})["status"])

    def close(self) -> None:
        try:
            self._ask({"quit": True})
        except (RuntimeError, BrokenPipeError, ValueError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()


if __name__ == "__main__":
    main()
