"""The crash harness: run a graph in worker processes, SIGKILL them, resume, check effects.

A trial runs one thread to its end. Each worker process (forked from the
zygote) resumes the thread; the harness kills it at a planned moment: once the
log holds a number of effect lines, plus a delay drawn inside the effect or after
it, so kills land before, inside and after effects, and between an effect and the
checkpoint that would record its node (:class:`KillPlans` spreads a run's kills over
every such moment). A new worker resumes until one finishes. Then the trial
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


#: Where a planned kill lands: once the log holds ``position`` effect lines (0: before
#: the first effect; up to all seven of the line graph), then either at once, inside the
#: effect (it pauses 5 ms after its line, before the journal records its result), or
#: later, after it (recording the result, the checkpoint, the next node).
POSITIONS = range(sum(line_effects().values()) + 1)
INSIDE, AFTER = (0.0, 0.003), (0.007, 0.02)


class KillPlans:
    """Kill moments for the trials of one run, stratified so that a short run still
    reaches every moment the harness draws from.

    The cells are every (position, inside or after) pair: 16. Each trial gets
    ``MAX_KILLS`` cells (its workers are killed at those moments, in order of position;
    the next worker runs undisturbed), so every 4 trials kill once in every cell, in a
    shuffled grouping; the next 4 trials take the same groups one trial later, so that
    every cell is also killed in a worker of the other flavour (trials alternate sync
    and async). The delay within each half is drawn anew every time. 8 trials kill
    twice in every cell; longer runs reshuffle every 8 trials.
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.groups: list[list[tuple[int, tuple[float, float]]]] = []
        self.trial = 0

    def next(self) -> list[tuple[int, float]]:
        """The next trial's kills: (effect lines to wait for, then seconds to wait)."""
        cells = [(position, delay) for position in POSITIONS for delay in (INSIDE, AFTER)]
        per_round = len(cells) // MAX_KILLS
        index = self.trial % (2 * per_round)
        if index == 0:
            self.rng.shuffle(cells)
            self.groups = [cells[i : i + MAX_KILLS] for i in range(0, len(cells), MAX_KILLS)]
        # the second round: group g goes to trial g + 1, the other flavour
        group = self.groups[index if index < per_round else (index - per_round - 1) % per_round]
        self.trial += 1
        return [(position, self.rng.uniform(*delay)) for position, delay in sorted(group)]


def run_trial(
    zygote: Zygote,
    job: dict[str, Any],
    plan: list[tuple[int, float]] | None = None,
    eager: bool = False,
) -> TrialResult:
    """One thread, crashed and resumed until it finishes; the verdict.

    ``plan``: the workers' kills, in order (:meth:`KillPlans.next`); after the last,
    a worker runs undisturbed. ``eager``: kill the first worker as soon as it logs its
    next effect, the moment that makes an unjournaled effect repeat.
    """
    kills = [(1, 0.0)] if eager else list(plan or [])
    log = EffectLog(job["log"])
    result = TrialResult()
    killed: set[str] = set()
    while True:
        # a job's "resume_pause" (if any) replaces its "pause" once a worker was killed
        resumed = killed and "resume_pause" in job
        pid = zygote.start({**job, "pause": job["resume_pause"]} if resumed else job)
        if kills:
            target, delay = kills.pop(0)
            if eager:
                target += sum(1 for p in log.lines() if p and p[0] == "effect")
            deadline = time.monotonic() + WORKER_TIMEOUT
            while time.monotonic() < deadline and zygote.running(pid):
                if sum(1 for p in log.lines() if p and p[0] == "effect") >= target:
                    break
                time.sleep(0.001)
            time.sleep(delay)
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
