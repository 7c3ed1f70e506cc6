"""Crash recovery, interrupts across processes, and racing workers, on every backend.

Workers are forked from a zygote process (``zygote.py``) and SIGKILLed at planned
moments by the harness (``crash.py``: every trial kills four workers, and every 8
trials kill twice at each moment, sync and async). ``LGD_CRASH_TRIALS`` sets the
trials per backend (8 by default; ``make soak`` runs 500).

A claim's lease is 0.1 s: the workers of a trial run one at a time (the next starts once
the last was killed), so the lease only decides how long a resumed worker waits for the
claim a killed one left, and a longer one would only slow the trials down.
"""

from __future__ import annotations

import os
import pathlib
import random
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import psycopg
import pytest

from tests.effects.conftest import BACKENDS, make_spec
from tests.effects.crash import (
    AFTER,
    INSIDE,
    MAX_KILLS,
    POSITIONS,
    KillPlans,
    TrialResult,
    ledger_counts,
    run_trial,
)
from tests.effects.graphs import EffectLog, line_effects
from tests.effects.worker import _graph as worker_graph
from tests.effects.zygote import Zygote
from tests.redaction_helpers import SaverSpec, open_saver

TRIALS = int(os.environ.get("LGD_CRASH_TRIALS", "8"))
ROOT = str(pathlib.Path(__file__).resolve().parents[2])
#: DynamoDB trials per moto server in a long run: moto's memory grows with every
#: transaction it serves (about 8 MB per crashed-and-resumed thread here, faster
#: on one table), so a soak restarts it with an empty store now and then.
MOTO_TRIALS = 50


@contextmanager
def fresh_moto() -> Iterator[str]:
    """A moto server in a process of its own (``tests.servers.MotoServer``); its URL."""
    from tests.servers import set_dynamodb_environment

    env = dict(os.environ)
    set_dynamodb_environment(env)
    code = (
        "import sys\n"
        "from tests.servers import MotoServer\n"
        "server = MotoServer().start()\n"
        "print(server.url, flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _specs(request: pytest.FixtureRequest, backend: str) -> Iterator[tuple[int, SaverSpec]]:
    """(trials, spec) chunks covering ``TRIALS``: one spec, or DynamoDB's moto restarted."""
    if backend != "dynamodb" or TRIALS <= MOTO_TRIALS:
        yield TRIALS, _prepare(make_spec(request, backend))
        return
    from tests.servers import set_dynamodb_environment

    set_dynamodb_environment(os.environ)  # what the rig sets for its own moto (setdefault)
    for start in range(0, TRIALS, MOTO_TRIALS):
        with fresh_moto() as url:
            conn = f"dynamodb://crash?region=us-east-1&endpoint={url}"
            yield min(MOTO_TRIALS, TRIALS - start), _prepare(SaverSpec("dynamodb", conn, {}))


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote(ROOT)
    yield z
    z.close()


def _job(spec: SaverSpec, tmp: pathlib.Path, thread: str, **extra: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "spec": asdict(spec),
        "graph": "line",
        "thread": thread,
        "log": str(tmp / f"{thread}.log"),
        "output": str(tmp / f"{thread}.out"),
        "lease": 0.1,
        "pause": 0.005,
    }
    job.update(extra)
    return job


def _prepare(spec: SaverSpec) -> SaverSpec:
    with open_saver(spec):  # setup() once, before the workers race to it
        pass
    return spec


def _report(line: str) -> None:
    """Print a trial summary, and append it to ``$LGD_CRASH_REPORT`` (``make soak`` reads it)."""
    print(f"\n{line}")
    target = os.environ.get("LGD_CRASH_REPORT")
    if target:
        with open(target, "a") as handle:
            handle.write(line + "\n")


def _summary(results: list[TrialResult]) -> str:
    kills = sum(r.kills for r in results)
    explained = sum(r.explained for r in results)
    outages = sum(r.outages for r in results)
    return (
        f"{len(results)} trials, {kills} kills, {outages} storage outages, "
        f"{explained} explained duplicates"
    )


def test_every_8_trials_kill_at_every_moment_in_both_flavours() -> None:
    """The stratified plans: a short CI run reaches every kill moment a soak does."""
    plans = KillPlans(random.Random("plans"))
    for _ in range(3):  # and again after each reshuffle
        seen: Counter[tuple[int, bool, bool]] = Counter()
        for trial in range(8):
            plan = plans.next()
            assert len(plan) == MAX_KILLS
            assert [p for p, _ in plan] == sorted(p for p, _ in plan)
            for position, delay in plan:
                inside = INSIDE[0] <= delay <= INSIDE[1]
                assert inside or AFTER[0] <= delay <= AFTER[1]
                seen[(position, inside, trial % 2 == 1)] += 1
        assert seen == Counter(
            {
                (p, inside, flavour): 1
                for p in POSITIONS
                for inside in (True, False)
                for flavour in (True, False)
            }
        )
    assert list(POSITIONS) == list(range(sum(line_effects().values()) + 1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_crash_trials_default_policy(
    request: pytest.FixtureRequest, backend: str, zygote: Zygote, tmp_path: pathlib.Path
) -> None:
    seed = f"crash-{backend}-{uuid.uuid4()}"
    plans = KillPlans(random.Random(seed))
    results: list[TrialResult] = []
    for trials, spec in _specs(request, backend):
        for _ in range(trials):
            trial = len(results)
            job = _job(spec, tmp_path, f"crash-{trial}", **{"async": trial % 2 == 1})
            results.append(run_trial(zygote, job, plans.next()))
    _report(f"{backend}: {_summary(results)} (seed {seed})")
    assert sum(r.kills for r in results) >= TRIALS  # the harness really crashed workers
    assert [r for r in results if not r.state_ok] == []
    assert [r.lost for r in results if r.lost] == []
    assert [r.unexplained for r in results if r.unexplained] == []


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_crash_trials_transactional_postgres_exactly_once(
    pg_url: str, pg_schema: str, flavour: str, zygote: Zygote, tmp_path: pathlib.Path
) -> None:
    spec = _prepare(SaverSpec("postgres", pg_url, {"schema": pg_schema}))
    ledger = f'"{pg_schema}".effect_ledger'
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {ledger} (effect_key text, what text, pid integer)")
    seed = f"tx-{uuid.uuid4()}"
    plans = KillPlans(random.Random(seed))
    results = []
    trials = max(TRIALS // 2, 8)
    for trial in range(trials):
        job = _job(
            spec,
            tmp_path,
            f"tx-{trial}",
            transactional=True,
            ledger=ledger,
            **{"async": flavour == "async"},
        )
        results.append(run_trial(zygote, job, plans.next()))
    _report(f"postgres transactional {flavour}: {_summary(results)} (seed {seed})")
    assert sum(r.kills for r in results) >= trials
    assert [r for r in results if not r.state_ok] == []
    rows = ledger_counts(pg_url, ledger)
    # exactly once: one committed row per effect of every trial, none twice
    assert max(rows.values()) == 1
    assert sum(rows.values()) == trials * sum(line_effects().values())
    per_effect = Counter(key.split("|")[0] for key in rows)
    assert per_effect == Counter(
        {k.split(":", 1)[1]: v * trials for k, v in line_effects().items()}
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_unwrapped_effects_repeat_after_a_crash(
    request: pytest.FixtureRequest, backend: str, zygote: Zygote, tmp_path: pathlib.Path
) -> None:
    """The gap the journal closes: kill a worker right after a plain effect, resume."""
    spec = _prepare(make_spec(request, backend))
    results = [
        run_trial(
            zygote,
            # a long pause in the effect, so that the kill lands inside it; none after
            _job(spec, tmp_path, f"gap-{trial}", wrapped=False, pause=0.2, resume_pause=0.0),
            eager=True,
        )
        for trial in range(3)
    ]
    assert all(r.state_ok for r in results)
    duplicates = [r.unexplained for r in results]
    assert all(duplicates), duplicates  # every crashed trial repeated an effect


@pytest.mark.parametrize("backend", BACKENDS)
def test_eight_workers_resume_one_thread_at_once(
    request: pytest.FixtureRequest, backend: str, zygote: Zygote, tmp_path: pathlib.Path
) -> None:
    spec = _prepare(make_spec(request, backend))
    job = _job(spec, tmp_path, "race", lease=30.0, pause=0.05, interrupt_before=["n1"])
    first = zygote.start(job)
    assert zygote.wait(first) == 0  # ran n0, paused before n1
    log = EffectLog(job["log"])
    assert log.effects() == Counter({"charge:n0-1": 1})
    pids = [zygote.start({**job, "async": i % 2 == 1}) for i in range(8)]
    statuses = [zygote.wait(pid) for pid in pids]
    assert statuses == [0] * 8, open(job["output"]).read()[-3000:]
    assert log.effects() == line_effects()  # every effect once, across 8 racing workers
    # A worker logs "finished" when the thread's latest checkpoint, read after its own
    # run, is final; one that ends while another is still writing may read that
    # other's intermediate checkpoint. After all of them, the thread is finished.
    finished = [p for p in log.lines() if p[0] == "finished"]
    assert 1 <= len(finished) <= 8
    with open_saver(spec) as saver:
        graph = worker_graph(job, saver)  # built only: no node runs
        state = graph.get_state({"configurable": {"thread_id": job["thread"]}})
        assert state.next == () and state.values


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("graph", "node", "expected"),
    [
        ("tools", "ToolNode", {"refund:o1": 1, "email:ops-o1": 1}),
        ("plain_tools", "idempotent", {"ship:o2": 1}),
        ("plain_tools", "ToolNode", {"ship:o2": 2}),
    ],
)
def test_effect_then_interrupt_resumes_in_a_new_process(
    request: pytest.FixtureRequest,
    backend: str,
    graph: str,
    node: str,
    expected: dict[str, int],
    zygote: Zygote,
    tmp_path: pathlib.Path,
) -> None:
    spec = _prepare(make_spec(request, backend))
    job = _job(spec, tmp_path, f"hitl-{graph}-{node}", graph=graph, node=node)
    assert zygote.wait(zygote.start(job)) == 0  # effects, then the interrupt
    assert zygote.wait(zygote.start({**job, "resume": "yes", "async": True})) == 0
    log = EffectLog(job["log"])
    assert [p[0] for p in log.lines()].count("finished") == 1
    # the plain ToolNode repeats the finished sibling: the gap IdempotentToolNode closes
    assert log.effects() == Counter(expected)
