"""The pruner on every backend, as cron runs it: killed and rerun, two at once, the CLI.

* A pruner SIGKILLed mid-run, then run again, ends where an uninterrupted run ends:
  every thread of the expired tenant gone (no stored record names it), every other
  thread whole.
* Two pruners at once: the second (the ``prune`` command) exits 0 saying another
  pruner is running, and changes nothing.
* ``prune --dry-run`` changes nothing and reports what the next real run removes.
* ``--max-seconds`` exits 3 with work left; the next run finishes (exit 0).

Each pruner (the ``prune`` command, or ``tests.retention.worker``) runs in a process of
its own, started as ``python -m`` would start it, but forked from a process that imported
the package and its drivers once (:class:`Forker`): a fresh interpreter spends about a
second importing LangGraph, and these tests start some forty pruners.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable import Retention
from tests.effects.conftest import BACKENDS, make_spec
from tests.helpers import cfg, cli_target, put_chain
from tests.redaction_helpers import SaverSpec, open_saver
from tests.retention.worker import POLICIES

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120
THREADS = [f"t{i:02d}" for i in range(10)]
STEPS = 2


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


def _env() -> dict[str, str]:
    from tests.servers import set_dynamodb_environment

    env = dict(os.environ)
    for name in ("LGD_POSTGRES_URL", "LGD_REDIS_URL", "LGD_DYNAMODB_URL"):
        env.pop(name, None)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    set_dynamodb_environment(env)
    return env


def _populate(spec: SaverSpec, retention: Any) -> None:
    spec = SaverSpec(spec.backend, spec.conn, {**spec.kwargs, "retention": retention})
    with open_saver(spec) as saver:
        for tenant in ("old", "young"):
            for thread in THREADS:
                configs = put_chain(saver, thread, STEPS, tenant_id=tenant)
                saver.put_writes(configs[-1], [("inbox", thread)], "task-1")


def _state(spec: SaverSpec) -> dict[tuple[str, str], int]:
    """Checkpoints per (tenant, thread) as the saver lists them."""
    out = {}
    with open_saver(spec) as saver:
        for tenant in ("old", "young"):
            for thread in THREADS:
                out[(tenant, thread)] = len(list(saver.list(cfg(thread, tenant_id=tenant))))
    return out


def _expected() -> dict[tuple[str, str], int]:
    return {
        (tenant, thread): (STEPS if tenant == "young" else 0)
        for tenant in ("old", "young")
        for thread in THREADS
    }


def _raw_mentions(spec: SaverSpec, tenant: str) -> int:
    """Stored records (rows, keys, items) of ``tenant``, read around the saver."""
    if spec.backend == "postgres":
        import psycopg

        schema = spec.kwargs["schema"]
        with psycopg.connect(spec.conn, autocommit=True) as conn:
            return sum(
                int(
                    conn.execute(  # type: ignore[index]
                        f'SELECT count(*) FROM "{schema}".{table} WHERE tenant_id = %s', (tenant,)
                    ).fetchone()[0]
                )
                for table in ("threads", "checkpoints", "blobs", "writes", "effects")
            )
    if spec.backend == "redis":
        import redis

        client = redis.Redis.from_url(spec.conn)
        try:
            prefix = spec.kwargs["prefix"]
            keys = [k.decode() for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
            hits = [k for k in keys if "{" + tenant + ":" in k]
            index = f"{prefix}:threads:{{{tenant}}}"
            return len(hits) + (int(client.zcard(index)) if index in keys else 0)
        finally:
            client.close()
    from urllib.parse import parse_qs, urlsplit

    import boto3

    parts = urlsplit(spec.conn)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    client = boto3.client(
        "dynamodb", region_name=query.get("region", "us-east-1"), endpoint_url=query["endpoint"]
    )
    count = 0
    for page in client.get_paginator("scan").paginate(TableName=parts.netloc):
        count += sum(1 for item in page["Items"] if tenant in item["pk"]["S"])
    return count


#: The forker: imports what a pruner imports, then, for each request (a JSON line on
#: stdin), forks a process that runs a module as ``python -m`` would, with the given
#: arguments and environment, stdout and stderr in the given files; replies its pid.
#: ``{"poll": pid}`` replies its exit status (minus the signal that killed it), or null.
FORKER = r"""
import json, os, runpy, sys, traceback
import boto3, psycopg, redis
import langgraph_durable.cli, langgraph_durable.cli._prune
import langgraph_durable.dynamodb, langgraph_durable.postgres, langgraph_durable.redis

def child(request):
    code = 1
    try:
        os.environ.clear()
        os.environ.update(request["env"])
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        for fd, name in ((1, "out"), (2, "err")):
            os.dup2(os.open(request[name], os.O_WRONLY), fd)
        sys.argv = [request["module"], *request["argv"]]
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit:
            if exit.code is None or isinstance(exit.code, int):
                code = exit.code or 0
            else:
                print(exit.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

for line in sys.stdin:
    request = json.loads(line)
    if "poll" in request:
        pid, status = os.waitpid(request["poll"], os.WNOHANG)
        reply = None if pid == 0 else os.waitstatus_to_exitcode(status)
    else:
        pid = os.fork()
        if pid == 0:
            child(request)
        reply = pid
    print(json.dumps(reply), flush=True)
"""


@dataclass
class Pruner:
    """A pruner process the forker started: its pid, and the files of its stdout and stderr."""

    forker: Forker
    pid: int
    out: Path
    err: Path
    returncode: int | None = None

    def readline(self) -> str:
        """Its first line of output, once written (``""`` if it exits without one)."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            text = self.out.read_text()
            if "\n" in text:
                return text.split("\n", 1)[0] + "\n"
            if self.poll() is not None:
                return self.out.read_text()
            time.sleep(0.002)
        raise TimeoutError(f"pruner {self.pid} wrote no line in {TIMEOUT} s")

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.forker.request({"poll": self.pid})
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)

    def communicate(self, timeout: float) -> tuple[str, str]:
        """Wait for it to exit; its stdout and stderr."""
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"pruner {self.pid} still running after {timeout} s")
            time.sleep(0.005)
        return self.out.read_text(), self.err.read_text()


class Forker:
    """The process that forks the pruners (:data:`FORKER`); one per test module and worker."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.started = 0
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FORKER],
            cwd=REPO_ROOT,
            env=_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def request(self, request: dict[str, Any]) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the forker exited with {self.proc.wait()}"
        return json.loads(line)

    def start(self, module: str, *argv: str) -> Pruner:
        self.started += 1
        out, err = (self.folder / f"{self.started}.{name}" for name in ("out", "err"))
        out.touch()
        err.touch()
        request = {"module": module, "argv": argv, "env": _env(), "out": str(out), "err": str(err)}
        pid = self.request(request)
        return Pruner(self, pid, out, err)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(TIMEOUT)


@pytest.fixture(scope="module")
def forker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forker]:
    f = Forker(tmp_path_factory.mktemp("pruners"))
    yield f
    f.close()


def _worker(forker: Forker, spec: SaverSpec, now: float, batch: int, pause: float) -> Pruner:
    raw = json.dumps({**asdict(spec), "kwargs": dict(spec.kwargs)})
    return forker.start("tests.retention.worker", raw, repr(now), str(batch), str(pause))


def _wait_progress(proc: Pruner) -> None:
    line = proc.readline()
    assert line.startswith("progress"), (line, proc.err.read_text())


def _finish(proc: Pruner) -> dict[str, Any]:
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _cli(forker: Forker, spec: SaverSpec, *flags: str) -> subprocess.CompletedProcess[str]:
    """``python -m langgraph_durable.cli prune`` on the spec's store with ``flags``."""
    args = ["prune", *cli_target(spec), *flags]
    proc = forker.start("langgraph_durable.cli", *args)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode is not None
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def test_a_killed_pruner_rerun_ends_like_an_uninterrupted_run(
    spec: SaverSpec, forker: Forker
) -> None:
    _populate(spec, POLICIES.get)
    assert _raw_mentions(spec, "old") > 0
    now = time.time() + 60
    rng = random.Random(11)
    for _ in range(2):
        proc = _worker(forker, spec, now, batch=2, pause=0.05)
        _wait_progress(proc)
        time.sleep(rng.uniform(0.0, 0.08))
        proc.kill()
        proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == -signal.SIGKILL
        state = _state(spec)
        # whole or gone: every thread has all of its checkpoints or none
        assert all(n in (0, STEPS) for n in state.values()), state
    report = _finish(_worker(forker, spec, now, batch=2, pause=0.0))
    assert not report["locked"] and not report["budget_exhausted"]
    assert _state(spec) == _expected()
    assert _raw_mentions(spec, "old") == 0
    # the uninterrupted run's end state is a fixed point: a further run removes nothing
    again = _finish(_worker(forker, spec, now, batch=2, pause=0.0))
    assert (again["threads"], again["checkpoints"]) == (0, 0)


def test_a_second_pruner_exits_0_saying_another_is_running(spec: SaverSpec, forker: Forker) -> None:
    _populate(spec, POLICIES.get)
    before = _state(spec)
    holder = _worker(forker, spec, time.time() + 60, batch=1, pause=1.0)
    try:
        _wait_progress(holder)
        second = _cli(forker, spec, "--idle", "1s", "--json")
        assert second.returncode == 0, second.stderr
        summary = json.loads(second.stdout)
        assert summary["locked"] is True and summary["threads"] == 0
        text = _cli(forker, spec, "--idle", "1s")
        assert text.returncode == 0, text.stderr
        assert "Another pruner is running" in text.stdout
    finally:
        holder.kill()
        holder.communicate(timeout=TIMEOUT)
    # the second pruner deleted nothing (the holder may have removed "old" threads)
    after = _state(spec)
    assert all(after[k] == before[k] for k in after if k[0] == "young")


def test_cli_dry_run_changes_nothing_and_predicts_the_real_run(
    spec: SaverSpec, forker: Forker
) -> None:
    _populate(spec, Retention(strategy="keep_latest", keep=1))
    before = _state(spec)
    raw_before = _raw_mentions(spec, "young")
    dry = _cli(forker, spec, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    predicted = json.loads(dry.stdout)
    assert predicted["dry_run"] is True and predicted["trimmed"] == 2 * len(THREADS)
    assert _state(spec) == before and _raw_mentions(spec, "young") == raw_before
    text = _cli(forker, spec, "--dry-run")
    assert text.returncode == 0 and "Nothing was changed" in text.stdout
    assert "thread 't00'" in text.stdout
    real = _cli(forker, spec, "--json")
    assert real.returncode == 0, real.stderr
    done = json.loads(real.stdout)
    for field in ("threads", "trimmed", "checkpoints", "bytes", "partitions"):
        assert done[field] == predicted[field], field
    assert set(_state(spec).values()) == {1}
    quiet = _cli(forker, spec)
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""


def test_cli_budget_exit_3_then_a_rerun_finishes(spec: SaverSpec, forker: Forker) -> None:
    _populate(spec, Retention(strategy="keep_latest", keep=1))
    first = _cli(forker, spec, "--max-seconds", "0.000001", "--batch", "1", "--json")
    assert first.returncode == 3, first.stderr
    assert json.loads(first.stdout)["budget_exhausted"] is True
    assert "--max-seconds" in first.stderr
    second = _cli(forker, spec, "--json")
    assert second.returncode == 0, second.stderr
    assert set(_state(spec).values()) == {1}


def test_cli_bad_usage_exits_2(spec: SaverSpec, forker: Forker) -> None:
    for flags in (
        ["--idle", "3 weeks"],
        ["--keep", "0"],
        ["--max-seconds", "-1"],
        ["--strategy", "everything"],
        ["--throttle", "-1"],
    ):
        result = _cli(forker, spec, *flags)
        assert result.returncode == 2, (flags, result.stderr)
        assert "error" in result.stderr


def test_cli_prune_with_flags_deletes_idle_threads(spec: SaverSpec, forker: Forker) -> None:
    _populate(spec, Retention(idle=datetime.timedelta(days=30)))
    time.sleep(1.2)
    result = _cli(forker, spec, "--idle", "1s", "--tenant", "old", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["threads"] == len(THREADS) and summary["checkpoints"] == STEPS * len(THREADS)
    assert _state(spec) == _expected()
    assert _raw_mentions(spec, "old") == 0


def test_throttle_rests_after_each_batch_in_proportion(
    spec: SaverSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``throttle`` makes the pruner rest between batches; 0 runs flat out; bad values fail."""
    from langgraph_durable import _drive
    from langgraph_durable.errors import InvalidInputError

    rests: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(_drive.time, "sleep", lambda s: (rests.append(s), real_sleep(0))[1])
    with_policy = SaverSpec(spec.backend, spec.conn, {**spec.kwargs, "retention": POLICIES.get})
    now = time.time() + 60
    _populate(spec, POLICIES.get)
    with open_saver(with_policy) as saver:
        with pytest.raises(InvalidInputError):
            saver.prune_expired(now=now, throttle=-1)
        flat = saver.prune_expired(now=now, batch=4, throttle=0)
    assert flat.threads == len(THREADS) and rests == []
    _populate(spec, POLICIES.get)
    with open_saver(with_policy) as saver:
        report = saver.prune_expired(now=now, batch=4, throttle=3.0)
    assert report.threads == len(THREADS)
    # a rest after each full batch but the last (10 threads in batches of 4: 2 or more)
    assert len(rests) >= 2 and all(r > 0 for r in rests), rests
    state = _state(spec)  # "young" was written twice
    assert all(n == (0 if tenant == "old" else 2 * STEPS) for (tenant, _t), n in state.items())
