"""The soak harness: many threads run by worker processes that are SIGKILLed, over
connections that are cut; then every thread's history and every effect is checked.

One run (:class:`Soak`) is on one backend. ``threads`` thread slots are shared out
among ``workers`` processes forked from a zygote (``tests/effects/zygote.py``, with
this module as its worker: :func:`run`); each worker runs its slots at the same time
(sync workers: one Python thread per slot on a sync saver; async workers: one task
per slot on an async saver). A slot runs threads one after another (``<slot>-<gen>``),
each a :func:`soak_graph` of ``STEPS`` steps whose every step performs one journaled
effect (``@idempotent``): a line appended to the slot's effect file, which survives a
SIGKILL. Until the deadline, the harness SIGKILLs a random worker now and then and
starts a new one on the same slots, which resumes their threads; and it cuts every
connection through a :class:`~tests.faults.proxy.FaultProxy` now and then (PostgreSQL,
Redis), or the workers' botocore clients throttle calls and lose replies of calls the
server applied (DynamoDB). A worker retries a thread whose run raised (a storage
outage) in the same process.

Each finished thread is then judged (:func:`judge`): its history (values, pending
writes, step and source of every checkpoint) against the same graph's uninterrupted
run on LangGraph's ``InMemorySaver``, and its effects: every step's effect ran, and
a second execution is *explained* only when the journal's ``on_ambiguous="retry"``
policy allows it: the earlier execution died before recording its result (its
process was SIGKILLed, or its run failed on a storage outage) and the later one
knew it (``attempt`` > 1). Judged threads are deleted, so storage stays small.

:func:`rss_main` is the memory half: one process runs ``steps`` graph steps over many
threads on one saver and samples its resident set size.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import pathlib
import random
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any
from urllib.parse import parse_qs, urlsplit

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.constants import ERROR
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_durable.effects import current_effect, idempotent
from tests.dynamodb.helpers import Faults, history_signature, make_client
from tests.effects.crash import _storage_outage
from tests.effects.graphs import EffectLog
from tests.faults.test_dynamodb_cuts import LoseReplies
from tests.redaction_helpers import SaverSpec, aopen_saver, open_saver

#: Steps (and effects) per thread.
STEPS = 12
#: A claim's lease: a slot's threads run in one worker at a time, so the lease only
#: decides how long a resumed worker waits for the claim a killed one left.
LEASE = 0.3
#: Seconds a run may go on past its deadline (the last threads finishing) before the
#: harness calls it stuck.
GRACE = 300.0


# ---- the graph ---------------------------------------------------------------------


class SoakState(TypedDict):
    count: int
    receipts: Annotated[list[str], operator.add]


def _attempt() -> tuple[int, str]:
    try:
        effect = current_effect()
    except Exception:  # noqa: BLE001 - outside a durable run (the reference)
        return 0, "-"
    return effect.attempt, effect.key


def soak_graph(log: EffectLog | None, steps: int = STEPS, checkpointer: Any = None) -> Any:
    """``steps`` steps of one node; step ``n`` charges ``(thread, n)`` once (journaled)."""

    @idempotent(name="charge", lease=LEASE)
    def charge(thread: str, n: int) -> str:
        attempt, key = _attempt()
        if log is not None:
            log.write(f"effect {thread} {n} {attempt} {os.getpid()} {key}")
        if (thread, n) == ("s0-0", 3) and attempt <= 1:
            time.sleep(0.3)  # where the harness's first kill lands: inside an effect
        return f"receipt-{n}"

    def step(state: SoakState, config: RunnableConfig) -> dict[str, Any]:
        n = state["count"] + 1
        return {"count": n, "receipts": [charge(config["configurable"]["thread_id"], n)]}

    def again(state: SoakState) -> str:
        return "step" if state["count"] < steps else END

    builder = StateGraph(SoakState)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", again, ["step", END])
    return builder.compile(checkpointer=checkpointer)


INPUT: dict[str, Any] = {"count": 0, "receipts": []}


def reference(steps: int = STEPS) -> list[tuple[Any, ...]]:
    """The history of an uninterrupted run on ``InMemorySaver`` (the same for every thread)."""
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "reference"}}
    soak_graph(None, steps, saver).invoke(INPUT, config, durability="sync")
    return history_signature(saver, config)


# ---- the worker (runs in a process forked from the zygote) -------------------------


def _open_dynamodb(job: dict[str, Any], use_async: bool) -> Any:
    """A DynamoDB saver whose client throttles and loses replies at random (botocore
    event hooks, as tests/dynamodb/test_faults.py and tests/faults/test_dynamodb_cuts.py)."""
    from langgraph_durable.dynamodb import AsyncDynamoDBSaver, DynamoDBSaver

    parts = urlsplit(job["spec"]["conn"])
    endpoint = parse_qs(parts.query)["endpoint"][0]
    client = make_client(endpoint)
    faults = job.get("faults", {})
    if faults.get("throttle"):
        Faults(client, parts.netloc, throttle=faults["throttle"], seed=os.getpid())
    if faults.get("lose"):
        lost = RandomLostReplies(client, faults["lose"], os.getpid(), job["marks"])
        del lost  # the client's hooks hold it
    cls = AsyncDynamoDBSaver if use_async else DynamoDBSaver
    return cls(client, table=parts.netloc, retry_base_delay=0.005, retry_max_delay=0.05)


class RandomLostReplies(LoseReplies):
    """Every DynamoDB call is sent; a fraction ``rate`` of them then fail with
    ``ConnectionClosedError`` (applied by the server, the reply lost). Each loss is
    counted in the file ``<marks>/lost-<pid>``."""

    OPERATIONS = (
        "TransactWriteItems",
        "Query",
        "BatchGetItem",
        "GetItem",
        "UpdateItem",
        "PutItem",
        "DeleteItem",
        "BatchWriteItem",
    )

    def __init__(self, client: Any, rate: float, seed: int, marks: str) -> None:
        super().__init__(client, *self.OPERATIONS)
        self.rate = rate
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.counter = EffectLog(os.path.join(marks, f"lost-{os.getpid()}"))

    def _send(self, request: Any, **kwargs: Any) -> None:
        with self.lock:
            if self.rng.random() < self.rate:
                self.left = 1
            if self.left <= 0:
                return
        self.counter.write("lost")
        super()._send(request, **kwargs)


class Slot:
    """The state of one slot on disk: ``<marks>/slot-<n>`` holds ``start <gen>`` and
    ``finished <gen>`` lines; its effects go to ``<marks>/slot-<n>.effects``."""

    def __init__(self, marks: str, slot: int) -> None:
        self.slot = slot
        self.marks = EffectLog(os.path.join(marks, f"slot-{slot}"))
        self.effects = EffectLog(os.path.join(marks, f"slot-{slot}.effects"))

    def state(self) -> tuple[int, bool]:
        """(the first generation not finished, whether it was started)."""
        started: set[int] = set()
        finished: set[int] = set()
        for p in self.marks.lines():
            (started if p[0] == "start" else finished).add(int(p[1]))
        gen = len(finished)
        return gen, gen in started

    def thread(self, gen: int) -> str:
        return f"s{self.slot}-{gen}"


def _next_thread(slot: Slot, deadline: float) -> str | None:
    gen, started = slot.state()
    if not started:
        if gen > 0 and time.time() >= deadline:  # every slot runs one thread at least
            return None
        slot.marks.write(f"start {gen}")
    return slot.thread(gen)


def _finished(state: Any) -> bool:
    """Whether a thread ran to its end. Not ``next`` alone: a task whose writes were saved
    but whose step's checkpoint was not (a SIGKILL in between) is applied to the values
    and left out of ``next``, but is still one of the state's ``tasks``."""
    return bool(state.values) and not state.next and not state.tasks


def _note(slot: Slot, thread: str, state: Any) -> None:
    """What a worker found when it (re)started a thread:
    ``read <thread> <pid> <count> <next> <tasks>``."""
    count = state.values.get("count", "-") if state.values else "-"
    tasks = len(state.tasks)
    slot.effects.write(f"read {thread} {os.getpid()} {count} {','.join(state.next) or '-'} {tasks}")


def _run_slot_sync(saver: Any, slot: Slot, deadline: float) -> None:
    graph = soak_graph(slot.effects, STEPS, saver)
    while (thread := _next_thread(slot, deadline)) is not None:
        config = {"configurable": {"thread_id": thread}}
        while True:
            try:
                state = graph.get_state(config)
                _note(slot, thread, state)
                if not _finished(state):
                    graph.invoke(INPUT if not state.values else None, config, durability="sync")
                break
            except Exception as exc:  # noqa: BLE001 - an outage: retry the thread here
                slot.effects.write(f"outage {thread} {os.getpid()} {type(exc).__name__}")
                time.sleep(0.05)
        slot.marks.write(f"finished {thread.rsplit('-', 1)[1]}")


async def _run_slot_async(saver: Any, slot: Slot, deadline: float) -> None:
    graph = soak_graph(slot.effects, STEPS, saver)
    while (thread := _next_thread(slot, deadline)) is not None:
        config = {"configurable": {"thread_id": thread}}
        while True:
            try:
                state = await graph.aget_state(config)
                _note(slot, thread, state)
                if not _finished(state):
                    value = INPUT if not state.values else None
                    await graph.ainvoke(value, config, durability="sync")
                break
            except Exception as exc:  # noqa: BLE001 - an outage: retry the thread here
                slot.effects.write(f"outage {thread} {os.getpid()} {type(exc).__name__}")
                await asyncio.sleep(0.05)
        slot.marks.write(f"finished {thread.rsplit('-', 1)[1]}")


def _count_kept_claims(marks: str) -> None:
    """Count, in ``<marks>/kept-<pid>``, each claim taken over that this worker kept when
    its execution stopped before a result was recorded (``_core.effects.releasable``):
    the case whose entry was deleted before issue 27's fix, so that the next execution
    ran the effect again as attempt 1."""
    from langgraph_durable.effects import _flow

    original = _flow.releasable
    log = EffectLog(os.path.join(marks, f"kept-{os.getpid()}"))

    def releasable(token: int) -> bool:
        release = original(token)
        if not release:
            log.write(f"kept {token}")
        return release

    _flow.releasable = releasable  # type: ignore[assignment]  # this worker process only


def run(job: dict[str, Any]) -> int:
    """A worker: run the job's slots until the deadline, then finish the threads started."""
    slots = [Slot(job["marks"], n) for n in job["slots"]]
    _count_kept_claims(job["marks"])
    spec = SaverSpec(**job["spec"])
    if job["async"]:

        async def main() -> None:
            if spec.backend == "dynamodb":
                saver = _open_dynamodb(job, use_async=True)
                await saver.setup()
                await asyncio.gather(*(_run_slot_async(saver, s, job["deadline"]) for s in slots))
                return
            async with aopen_saver(spec) as saver:
                await asyncio.gather(*(_run_slot_async(saver, s, job["deadline"]) for s in slots))

        asyncio.run(main())
        return 0

    def run_all(saver: Any) -> None:
        workers = [
            threading.Thread(target=_run_slot_sync, args=(saver, s, job["deadline"])) for s in slots
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    if spec.backend == "dynamodb":
        saver = _open_dynamodb(job, use_async=False)
        saver.setup()
        run_all(saver)
    else:
        with open_saver(spec) as saver:
            run_all(saver)
    return 0


# ---- the judge ---------------------------------------------------------------------


@dataclass
class Verdict:
    threads: int = 0
    steps: int = 0
    lost_checkpoints: int = 0
    wrong_checkpoints: int = 0
    lost_effects: int = 0
    explained_after_kill: int = 0
    explained_after_outage: int = 0
    unexplained: list[str] = field(default_factory=list)
    outages: int = 0
    error_writes: int = 0
    superseded_writes: int = 0
    wrong_writes: int = 0
    examples: list[str] = field(default_factory=list)


def _checkpoint(entry: tuple[Any, ...]) -> tuple[str, list[Any], int]:
    """(step, source and values; pending writes without errors; the errors recorded)."""
    writes = [w for w in entry[3] if w[0] != ERROR]
    return repr(entry[:3]), writes, len(entry[3]) - len(writes)


def judge(
    saver: Any,
    thread: str,
    lines: list[list[str]],
    killed: set[str],
    expected: list[tuple[Any, ...]],
    verdict: Verdict,
    steps: int = STEPS,
) -> None:
    """Judge one finished thread into ``verdict``: history and effects (see the module)."""
    config = {"configurable": {"thread_id": thread}}
    outages = [p for p in lines if p[0] == "outage" and p[1] == thread]
    outage_pids = {p[2] for p in outages}
    verdict.outages += len(outages)
    # a process that ran the thread died (SIGKILL) or saw its run fail (an outage)
    ran = {p[2] for p in lines if p[0] == "read" and p[1] == thread}
    interrupted = bool(outages) or bool(ran & killed)
    ours = [_checkpoint(entry) for entry in history_signature(saver, config)]
    ref = [_checkpoint(entry) for entry in expected]
    lost = Counter(key for key, _, _ in ref) - Counter(key for key, _, _ in ours)
    wrong = Counter(key for key, _, _ in ours) - Counter(key for key, _, _ in ref)
    verdict.threads += 1
    verdict.steps += steps
    verdict.lost_checkpoints += sum(lost.values())
    verdict.wrong_checkpoints += sum(wrong.values())
    if (lost or wrong) and len(verdict.examples) < 5:
        verdict.examples.append(f"{thread}: lost {list(lost)[:2]} wrong {list(wrong)[:2]}")
    expected_writes = {key: writes for key, writes, _ in ref}
    for index, (key, writes, errors) in enumerate(ours):
        # history is newest first: index > 0 has a successor
        if errors:
            # a task whose run raised (an outage) has its error recorded as a pending
            # write next to the writes of its successful retry (LangGraph keeps both)
            if interrupted:
                verdict.error_writes += errors
            else:
                verdict.wrong_writes += errors
        if key not in expected_writes or writes == expected_writes[key]:
            continue
        if not writes and index > 0 and interrupted:
            # LangGraph saves a task's writes in the background (put_writes is submitted
            # to its executor) while it goes on to put the next checkpoint: a worker
            # killed in between leaves that checkpoint's writes unsaved, superseded by
            # the next checkpoint, which holds their result
            verdict.superseded_writes += 1
            continue
        verdict.wrong_writes += 1
        if len(verdict.examples) < 5:
            verdict.examples.append(f"{thread}: writes of {key}: {writes}")
    runs: dict[int, list[list[str]]] = {}
    for p in lines:
        if p[0] == "effect" and p[1] == thread:
            runs.setdefault(int(p[2]), []).append(p)
    for n in range(1, steps + 1):
        executions = runs.get(n, [])
        if not executions:
            verdict.lost_effects += 1
            continue
        for earlier, later in zip(executions, executions[1:], strict=False):
            if int(later[3]) > 1 and earlier[4] in killed:
                verdict.explained_after_kill += 1
            elif int(later[3]) > 1 and earlier[4] in outage_pids:
                verdict.explained_after_outage += 1
            else:
                verdict.unexplained.append(
                    f"{thread} step {n}: {earlier} then {later} (the earlier's process "
                    f"{'killed' if earlier[4] in killed else 'not killed'}; outages in "
                    f"{sorted(outage_pids) or 'none'})"
                )


# ---- the driver (in the test process) ----------------------------------------------


@dataclass
class SoakResult:
    backend: str
    seconds: float
    threads: int
    workers: int
    kills: int = 0
    cuts: int = 0
    lost_replies: int = 0
    kept_claims: int = 0
    open_outages: int = 0
    started: int = 0
    failures: list[str] = field(default_factory=list)
    verdict: Verdict = field(default_factory=Verdict)

    def line(self) -> str:
        v = self.verdict
        faults = (
            f"{self.cuts} connection cuts"
            if self.backend != "dynamodb"
            else f"{self.lost_replies} lost replies"
        )
        return (
            f"soak {self.backend}: {self.seconds:.0f} s, {self.threads} concurrent threads in "
            f"{self.workers} workers, {v.threads} threads checked of {self.started} started "
            f"({v.steps} steps), {self.kills} worker SIGKILLs, {faults}, "
            f"{v.outages} storage outages retried in the worker ({v.error_writes} recorded "
            f"as a task's error write), {self.open_outages} workers that could not open "
            f"the saver; {v.lost_checkpoints} lost checkpoints, "
            f"{v.wrong_checkpoints} differing checkpoints, {v.wrong_writes} differing "
            f"pending writes ({v.superseded_writes} checkpoints superseded before their "
            f"writes were saved, in an interrupted run), {v.lost_effects} lost effects, "
            f"{v.explained_after_kill + v.explained_after_outage} explained duplicate effects "
            f"(on_ambiguous='retry': {v.explained_after_kill} after a SIGKILL, "
            f"{v.explained_after_outage} after an outage; {self.kept_claims} claims taken "
            f"over kept after their run failed before a result), {len(v.unexplained)} "
            f"unexplained duplicate effects, {len(self.failures)} worker failures"
        )


class Cutter:
    """Cut every connection through ``proxy`` at random intervals (mean ``every`` s)."""

    def __init__(self, proxy: Any, every: float, rng: random.Random) -> None:
        self.proxy, self.every, self.rng = proxy, every, rng
        self.stop = threading.Event()
        self.cuts = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        # the first cut as soon as a connection is open (a short run has one too)
        while not self.stop.wait(0.01 if not self.cuts else self.rng.expovariate(1 / self.every)):
            self.cuts += self.proxy.reset_all()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


class Soak:
    """One backend's soak run; :meth:`run` returns its :class:`SoakResult`.

    Args:
        zygote: A zygote started with ``module="tests.soak.zygote"``.
        spec: The saver, as the judge opens it (directly).
        worker_spec: The saver as the workers open it (through the proxy, if any).
        marks: A directory for the slots' files.
        proxy: The :class:`~tests.faults.proxy.FaultProxy` to cut, or None.
        faults: DynamoDB client faults for the workers (``throttle``, ``lose``).
        kill_every: Mean seconds between SIGKILLs; ``cut_every``: between cuts.
    """

    def __init__(
        self,
        zygote: Any,
        spec: SaverSpec,
        worker_spec: SaverSpec,
        marks: pathlib.Path,
        *,
        seconds: float,
        threads: int,
        workers: int,
        seed: str,
        proxy: Any = None,
        faults: dict[str, float] | None = None,
        kill_every: float = 2.0,
        cut_every: float = 1.0,
    ) -> None:
        self.zygote, self.spec, self.worker_spec = zygote, spec, worker_spec
        self.marks = marks
        self.seconds, self.threads, self.workers = seconds, threads, workers
        self.rng = random.Random(seed)
        self.proxy, self.faults = proxy, faults or {}
        self.kill_every, self.cut_every = kill_every, cut_every
        self.killed: set[str] = set()
        self.judged: set[str] = set()
        self.expected = reference()

    def _job(self, index: int, deadline: float) -> dict[str, Any]:
        return {
            "spec": asdict(self.worker_spec),
            "slots": list(range(index, self.threads, self.workers)),
            "async": index % 2 == 1,
            "deadline": deadline,
            "marks": str(self.marks),
            "faults": self.faults,
            "output": str(self.marks / f"worker-{index}.out"),
        }

    def _judge_finished(self, saver: Any, result: SoakResult) -> None:
        for slot in range(self.threads):
            s = Slot(str(self.marks), slot)
            done = [int(p[1]) for p in s.marks.lines() if p[0] == "finished"]
            todo = [s.thread(g) for g in done if s.thread(g) not in self.judged]
            if not todo:
                continue
            lines = s.effects.lines()
            for thread in todo:
                judge(saver, thread, lines, self.killed, self.expected, result.verdict)
                self.judged.add(thread)
                saver.delete_thread(thread)

    def run(self) -> SoakResult:
        result = SoakResult(self.spec.backend, self.seconds, self.threads, self.workers)
        with open_saver(self.spec):  # setup() once, before the workers race to it
            pass
        start = time.time()
        deadline = start + self.seconds
        jobs = [self._job(i, deadline) for i in range(self.workers)]
        pids = [self.zygote.start(job) for job in jobs]
        cutter = Cutter(self.proxy, self.cut_every, self.rng) if self.proxy else None
        next_kill = time.time() + self.rng.expovariate(1 / self.kill_every)
        next_judge = time.time() + 5.0
        done = [False] * self.workers
        first = Slot(str(self.marks), 0).effects
        try:
            with open_saver(self.spec) as saver:
                while not all(done):
                    now = time.time()
                    if now > deadline + GRACE:
                        raise AssertionError(f"the soak did not end; see {self.marks}")
                    if not result.kills and not done[0] and len(first.lines()) >= 4:
                        # a first kill in the middle of slot 0's first thread, so that even
                        # a short run on a loaded machine has one
                        try:
                            os.kill(pids[0], signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    if now >= next_kill and now < deadline:
                        victim = self.rng.randrange(self.workers)
                        if not done[victim]:
                            try:
                                os.kill(pids[victim], signal.SIGKILL)
                            except ProcessLookupError:
                                pass
                        next_kill = now + self.rng.expovariate(1 / self.kill_every)
                    for i, pid in enumerate(pids):
                        if done[i] or self.zygote.running(pid):
                            continue
                        status = self.zygote.wait(pid)
                        if status == -signal.SIGKILL:
                            result.kills += 1
                            self.killed.add(str(pid))
                        elif status != 0 and _storage_outage(jobs[i], pid):
                            # the saver could not open (a cut during setup()): to the
                            # threads this is a crash like a SIGKILL; a new worker resumes
                            result.open_outages += 1
                            self.killed.add(str(pid))
                        elif status != 0:
                            out = pathlib.Path(jobs[i]["output"]).read_text()
                            tail = out.rsplit(f"worker {pid} failed", 1)[-1][-2000:]
                            result.failures.append(f"worker {pid} exited with {status}: {tail}")
                            self.killed.add(str(pid))  # it died: as good as killed
                        elif time.time() >= deadline:
                            done[i] = True
                            continue
                        pids[i] = self.zygote.start(jobs[i])
                    if now >= next_judge:
                        self._judge_finished(saver, result)
                        next_judge = time.time() + 5.0
                    time.sleep(0.02)
                if cutter:
                    cutter.close()
                    cutter = None
                self._judge_finished(saver, result)
        finally:
            if cutter:
                cutter.close()
        result.cuts = self.proxy.resets if self.proxy else 0
        result.lost_replies = sum(len(EffectLog(str(p)).lines()) for p in self.marks.glob("lost-*"))
        result.kept_claims = sum(len(EffectLog(str(p)).lines()) for p in self.marks.glob("kept-*"))
        result.started = sum(
            1
            for slot in range(self.threads)
            for p in Slot(str(self.marks), slot).marks.lines()
            if p[0] == "start"
        )
        result.seconds = time.time() - start
        return result


# ---- the RSS run (a process of its own) --------------------------------------------


def rss_bytes() -> int:
    """This process's resident set size (``/proc/self/statm``)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rss_run(
    saver: Any,
    steps: int,
    per_thread: int,
    log: EffectLog,
    report: Callable[[dict], None],
    seconds: float = 0.0,
) -> None:
    """Run ``steps`` steps, ``per_thread`` per thread (a new thread each time), sampling
    RSS after a warm-up about 50 times, and at the end. ``seconds``: stop there if not
    done (0: no limit). The warm-up is the first 10% of the steps or, with a time limit,
    of the time, whichever ends first (a slow backend still gets samples after it), and
    a sample is taken every 2% of either."""
    graph = soak_graph(log, per_thread, saver)
    warm = max(steps // 10, per_thread)
    every = max(steps // 50, per_thread)
    start = time.monotonic()
    done = thread = 0
    warmed = False
    sampled_at = (0, 0.0)  # the steps and the time of the last sample

    def sample() -> None:
        nonlocal sampled_at
        elapsed = round(time.monotonic() - start, 1)
        report({"steps": done, "threads": thread, "rss": rss_bytes(), "seconds": elapsed})
        sampled_at = (done, time.monotonic() - start)

    while done < steps and not (seconds and time.monotonic() - start >= seconds):
        graph.invoke(INPUT, {"configurable": {"thread_id": f"rss-{thread}"}})
        thread += 1
        done += per_thread
        now = time.monotonic() - start
        if not warmed:
            if done >= warm or (seconds and now >= seconds / 10):
                warmed = True
                sample()
        elif (
            done - sampled_at[0] >= every
            or (seconds and now - sampled_at[1] >= seconds / 50)
            or done >= steps
        ):
            sample()
    if sampled_at[0] != done:  # stopped by the time limit: a last sample
        sample()


def rss_main(argv: list[str]) -> int:
    """``python -m tests.soak.harness <spec json> <steps> <per thread> <log> <seconds>``:
    the samples as JSON lines."""
    spec = SaverSpec(**json.loads(argv[0]))
    steps, per_thread, log = int(argv[1]), int(argv[2]), EffectLog(argv[3])
    seconds = float(argv[4])

    def report(sample: dict) -> None:
        print(json.dumps(sample), flush=True)

    try:
        with open_saver(spec) as saver:
            rss_run(saver, steps, per_thread, log, report, seconds)
    except Exception:  # noqa: BLE001 - reported to the test
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(rss_main(sys.argv[1:]))
