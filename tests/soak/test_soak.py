"""The soak, per backend (tests/soak/harness.py): concurrent threads in worker processes
that are SIGKILLed at random while their connections are cut (PostgreSQL, Redis) or
their DynamoDB calls are throttled and lose replies; every thread's history equals its
uninterrupted reference and every effect happened once or as the journal's policy
explains. Then the RSS of one worker running many steps over many threads.

Settings (``make soak`` sets the long ones): ``LGD_SOAK_SECONDS`` (default 2; soak 1,800),
``LGD_SOAK_THREADS`` (4; soak 16), ``LGD_SOAK_WORKERS`` (2; soak 4),
``LGD_SOAK_RSS_STEPS`` (40; soak 100,000), ``LGD_SOAK_RSS_BOUND`` (the growth allowed
from the first sample after warm-up to the last: 0.5; soak 0.1), ``LGD_SOAK_REPORT``
(a file the per-backend figures are appended to).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest

from tests.effects.zygote import Zygote
from tests.faults.proxy import proxy_to
from tests.redaction_helpers import SaverSpec
from tests.soak.harness import STEPS, Soak, SoakResult

SECONDS = float(os.environ.get("LGD_SOAK_SECONDS", "2"))
THREADS = int(os.environ.get("LGD_SOAK_THREADS", "4"))
WORKERS = int(os.environ.get("LGD_SOAK_WORKERS", "2"))
RSS_STEPS = int(os.environ.get("LGD_SOAK_RSS_STEPS", "40"))
RSS_BOUND = float(os.environ.get("LGD_SOAK_RSS_BOUND", "0.5"))
#: A time limit of the RSS run (0: none): moto serves a few dozen steps a second.
RSS_SECONDS = float(os.environ.get("LGD_SOAK_RSS_SECONDS", "0"))
#: Steps per thread of the RSS run: many threads, so per-thread caches fill.
RSS_PER_THREAD = 4
ROOT = str(pathlib.Path(__file__).resolve().parents[2])
MB = 1 << 20


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote(ROOT, module="tests.soak.zygote")
    yield z
    z.close()


def _report(line: str) -> None:
    print(f"\n{line}")
    target = os.environ.get("LGD_SOAK_REPORT")
    if target:
        with open(target, "a") as handle:
            handle.write(line + "\n")


def _spec(request: pytest.FixtureRequest, backend: str) -> SaverSpec:
    if backend == "postgres":
        kwargs: dict[str, Any] = {"schema": request.getfixturevalue("pg_schema")}
        return SaverSpec("postgres", request.getfixturevalue("pg_url"), kwargs)
    if backend == "redis":
        kwargs = {"prefix": request.getfixturevalue("redis_prefix")}
        return SaverSpec("redis", request.getfixturevalue("redis_url"), kwargs)
    endpoint = request.getfixturevalue("dynamodb_endpoint")
    table = request.getfixturevalue("dynamodb_table")
    return SaverSpec("dynamodb", f"dynamodb://{table}?region=us-east-1&endpoint={endpoint}", {})


def _start_rss(spec: SaverSpec, tmp: pathlib.Path) -> subprocess.Popen[str]:
    """The RSS run in a process of its own, on a namespace of its own."""
    from tests.servers import set_dynamodb_environment

    if spec.backend == "postgres":
        spec = SaverSpec("postgres", spec.conn, {"schema": spec.kwargs["schema"] + "_rss"})
    elif spec.backend == "redis":
        spec = SaverSpec("redis", spec.conn, {"prefix": spec.kwargs["prefix"] + "r"})
    else:
        spec = SaverSpec("dynamodb", spec.conn.replace("://", "://rss-", 1), {})
    env = dict(os.environ)
    set_dynamodb_environment(env)
    argv = [json.dumps(asdict(spec)), str(RSS_STEPS), str(RSS_PER_THREAD), str(tmp / "rss.log")]
    argv.append(str(RSS_SECONDS))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.soak.harness", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _cleanup_rss(spec: SaverSpec) -> None:
    if spec.backend == "postgres":
        import psycopg

        with psycopg.connect(spec.conn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{spec.kwargs["schema"]}_rss" CASCADE')
    elif spec.backend == "redis":
        from tests.servers import delete_redis_keys

        delete_redis_keys(spec.conn, spec.kwargs["prefix"] + "r")
    else:
        from tests.servers import delete_dynamodb_table

        table = spec.conn.split("://", 1)[1].split("?", 1)[0]
        endpoint = spec.conn.split("endpoint=", 1)[1]
        delete_dynamodb_table(endpoint, "rss-" + table)


@pytest.mark.parametrize("backend", ["postgres", "redis", "dynamodb"])
def test_soak(
    request: pytest.FixtureRequest, backend: str, zygote: Zygote, tmp_path: pathlib.Path
) -> None:
    spec = _spec(request, backend)
    rss = _start_rss(spec, tmp_path)
    proxy = None
    worker_spec = spec
    faults: dict[str, float] = {}
    if backend == "postgres":
        proxy = proxy_to(spec.conn, 5432)
    elif backend == "redis":
        proxy = proxy_to(spec.conn, 6379)
    else:
        faults = {"throttle": 0.05, "lose": 0.02}
    if proxy is not None:
        worker_spec = SaverSpec(backend, proxy.url(spec.conn), dict(spec.kwargs))
    seed = f"soak-{backend}-{uuid.uuid4()}"
    marks = tmp_path / "marks"
    marks.mkdir()
    try:
        result: SoakResult = Soak(
            zygote,
            spec,
            worker_spec,
            marks,
            seconds=SECONDS,
            threads=THREADS,
            workers=WORKERS,
            seed=seed,
            proxy=proxy,
            faults=faults,
            # moto serves a few dozen calls a second on a loaded machine, and a new worker
            # spends a while making its client: a kill every 2 s would leave the DynamoDB
            # workers hardly a step between kills
            kill_every=min(8.0 if backend == "dynamodb" else 2.0, SECONDS / 3),
            cut_every=min(1.0, SECONDS / 6),
        ).run()
        out, err = rss.communicate(timeout=RSS_SECONDS + 600 if RSS_SECONDS else RSS_STEPS)
    finally:
        if proxy is not None:
            proxy.close()
        if rss.poll() is None:
            rss.kill()
            rss.wait()
        _cleanup_rss(spec)
    samples = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    _report(f"{result.line()} (seed {seed})")
    assert rss.returncode == 0, err[-3000:]
    # at least two samples after the warm-up, or the growth below says nothing
    assert len(samples) >= 2, (samples, err[-3000:])
    last_sample = samples[-1]
    capped = last_sample["steps"] < RSS_STEPS
    assert not capped or (RSS_SECONDS and last_sample["seconds"] >= RSS_SECONDS)
    first, last = samples[0]["rss"], last_sample["rss"]
    peak = max(s["rss"] for s in samples)
    growth = last / first - 1
    _report(
        f"rss {backend}: {last_sample['steps']} steps on {last_sample['threads']} threads "
        f"in one worker in {last_sample['seconds']:.0f} s"
        f"{f' (stopped by the {RSS_SECONDS:.0f} s limit)' if capped else ''}, "
        f"{len(samples)} samples after warm-up: first {first / MB:.1f} MB, "
        f"last {last / MB:.1f} MB, max {peak / MB:.1f} MB ({growth:+.1%}; bound {RSS_BOUND:.0%})"
    )
    v = result.verdict
    assert result.failures == [], result.failures
    assert result.kills >= 1  # the harness really killed workers
    assert result.cuts >= 1 or result.lost_replies >= 1  # and the storage misbehaved
    assert v.threads == result.started >= THREADS
    assert v.steps == v.threads * STEPS
    assert (v.lost_checkpoints, v.wrong_checkpoints, v.wrong_writes) == (0, 0, 0), "\n".join(
        v.examples
    )
    assert v.lost_effects == 0
    assert v.unexplained == []
    assert growth <= RSS_BOUND
