"""The crash harness: run a graph in worker processes, SIGKILL them, resume, check effects.

A trial runs one thread to its end. Each worker process (forked from the
zygote) resumes the thread; the harness kills it at a random moment: after a
random number of new effect lines plus a random delay, so kills land before,
inside and after effects, and between an effect and the checkpoint that would
record its node. A new worker resumes until one finishes. Then the trial
compares the thread's final state with an uncrashed run's, and every effect's
executions with what the journal allows:

* lost: an expected effect that never happened;
* duplicate: an effect that happened more than once. It is *explained* when
  each execution but the last ran in a process the harness killed, and the
  next execution knew the earlier one never recorded a result (its
  ``attempt`` is greater than 1: the journal found an expired claim): the
  ambiguous window, which the policy decides.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.effects.graphs import EffectLog, line_effects, line_expected
from tests.effects.zygote import Zygote
from tests.redaction_helpers import SaverSpec, open_saver

#: Kills per trial at most (the last worker runs undisturbed).
MAX_KILLS = 4
#: Seconds a worker may take before the harness calls the trial stuck.
WORKER_TIMEOUT = 60.0


@dataclass
class TrialResult:
    kills: int = 0
    outages: int = 0
    state_ok: bool = False
    lost: list[str] = field(default_factory=list)
    explained: int = 0
    unexplained: list[str] = field(default_factory=list)
    executions: Counter[str] = field(default_factory=Counter)


def _storage_outage(job: dict[str, Any], pid: int) -> bool:
    """Whether worker ``pid`` stopped on ``StorageUnavailableError`` (its last report)."""
    try:
        with open(job["output"]) as handle:
            text = handle.read()
    except OSError:
        return False
    last = text.rsplit(f"worker {pid} failed", 1)
    return len(last) == 2 and "langgraph_durable.errors.StorageUnavailableError" in last[1]


def run_trial(
    zygote: Zygote, job: dict[str, Any], rng: random.Random, eager: bool = False
) -> TrialResult:
    """One thread, crashed and resumed until it finishes; the verdict.

    ``eager``: kill each worker as soon as it logs its next effect (at most once
    per trial), the moment that makes an unjournaled effect repeat.
    """
    log = EffectLog(job["log"])
    result = TrialResult()
    killed: set[str] = set()
    while True:
        pid = zygote.start(job)
        if result.kills < (1 if eager else MAX_KILLS) and (eager or rng.random() < 0.85):
            seen = sum(1 for p in log.lines() if p and p[0] == "effect")
            target = seen + (1 if eager else rng.randint(0, 3))
            deadline = time.monotonic() + WORKER_TIMEOUT
            while time.monotonic() < deadline and zygote.running(pid):
                if sum(1 for p in log.lines() if p and p[0] == "effect") >= target:
                    break
                time.sleep(0.001)
            if not eager:
                time.sleep(rng.uniform(0, 0.02))
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            status = zygote.wait(pid)
            if status == -signal.SIGKILL:
                result.kills += 1
                killed.add(str(pid))
                continue
        else:
            status = zygote.wait(pid)
        if status != 0:
            if _storage_outage(job, pid):
                # the service did not answer (a loaded test machine): to the journal this
                # is a crash like the harness's own, and the next worker resumes
                result.outages += 1
                killed.add(str(pid))
                if result.outages > MAX_KILLS:
                    raise AssertionError(f"storage kept failing; see {job.get('output')}")
                continue
            raise AssertionError(f"worker {pid} exited with {status}; see {job.get('output')}")
        if any(p and p[0] == "finished" for p in log.lines()):
            break
    return judge(job, log, killed, result)


def judge(
    job: dict[str, Any], log: EffectLog, killed: set[str], result: TrialResult
) -> TrialResult:
    lines = [p for p in log.lines() if p and p[0] == "effect"]
    result.executions = Counter(f"{p[1]}:{p[2]}" for p in lines)
    expected = line_effects()
    # lost: fewer distinct executions than expected (by name and arguments)
    by_key: dict[str, list[list[str]]] = {}
    for p in lines:
        by_key.setdefault(p[5] if p[5] != "-" else f"{p[1]}:{p[2]}:{len(by_key)}", []).append(p)
    distinct = Counter(f"{runs[0][1]}:{runs[0][2]}" for runs in by_key.values())
    for what, count in expected.items():
        if distinct[what] < count:
            result.lost.append(what)
    if job.get("wrapped", True):
        for key, runs in by_key.items():
            for earlier, later in zip(runs, runs[1:], strict=False):
                if earlier[4] in killed and int(later[3]) > 1:
                    result.explained += 1
                else:
                    result.unexplained.append(f"{key}: {earlier} then {later}")
    else:
        result.unexplained = [w for w, c in result.executions.items() if c > expected[w]]
    spec = SaverSpec(**job["spec"])
    with open_saver(spec) as saver:
        from tests.effects.graphs import Effects, build_line_graph

        graph = build_line_graph(Effects(log), checkpointer=saver)
        state = graph.get_state({"configurable": {"thread_id": job["thread"]}})
        result.state_ok = state.values == line_expected() and not state.next
    return result


def ledger_counts(pg_url: str, ledger: str) -> Counter[str]:
    """Rows per effect key in a transactional trial's ledger table."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(f"SELECT effect_key, what FROM {ledger}").fetchall()
    return Counter(f"{what}|{key}" for key, what in rows)
