"""Programs of thread operations, run side by side on a saver and on ``InMemorySaver``.

A *program* (:func:`programs`) is a list of operations on a small chat graph
(:func:`build_graph`): a ``messages`` channel reduced by ``add_messages``, a
``log`` list reduced by ``operator.add`` and the scalars ``turn`` and
``pause``. The operations append messages, replace one by id, remove one with
``RemoveMessage`` (each through ``invoke`` or ``update_state``), fork from an
earlier checkpoint (``invoke`` with new input, ``update_state``, or a replay
with no input), make the node interrupt (then ``Command(resume=...)``) or fail
(so the newest checkpoint holds pending writes), copy the thread with
``copy_thread`` and go on there, switch back to an earlier thread, delete a
run (``delete_for_runs``), prune the thread (``keep_latest`` or ``delete``)
and switch the saver under test to a second instance on the same storage
(another process: its delta tracker knows nothing of what the first one
wrote).

:class:`Run` applies each operation to the reference (``InMemorySaver``, with
``copy_thread``, ``delete_for_runs`` and ``prune`` done by hand on its
dictionaries, since it has none of them) and to the saver under test, then
lists the thread on both. Checkpoint ids are uuid6 values made at run time, so
they differ between the two sides: each new checkpoint gets a label (``c0``,
``c1``, ...) in creation order, the same on both sides, and everything is
compared through the labels (order, parents, ``config``). Channel versions end
in a random fraction, so only their counters are compared; task ids derive
from checkpoint ids, so pending writes are compared per task, in an order of
their own. Message ids are set by the program and compared as they are.
"""

from __future__ import annotations

import asyncio
import hashlib
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from hypothesis import currently_in_test_context, event
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
)
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Interrupt, interrupt
from typing_extensions import TypedDict

__all__ = [
    "Append",
    "Replace",
    "Remove",
    "Fork",
    "Pause",
    "Resume",
    "Copy",
    "Switch",
    "DeleteRun",
    "Prune",
    "OtherProcess",
    "Checks",
    "programs",
    "checks",
    "build_graph",
    "RefSide",
    "SyncSide",
    "AsyncSide",
    "Run",
    "run_program",
]

# ---- the graph ---------------------------------------------------------------------


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    log: Annotated[list[str], operator.add]
    turn: int
    pause: str


def respond(state: State) -> dict[str, Any]:
    """Answers the turn: one AI message (id from the turn) and one log line.

    When ``pause`` is ``"interrupt <turn>"`` it first asks (``interrupt``) and
    answers with the resume value; when it is ``"error <turn>"`` it fails.
    """
    turn = state.get("turn", 0)
    pause = state.get("pause")
    content = f"answer to turn {turn}"
    if pause == f"interrupt {turn}":
        content = f"told {interrupt(f'question of turn {turn}')}"
    elif pause == f"error {turn}":
        raise ValueError(f"turn {turn} failed")
    return {
        "messages": [AIMessage(content=content, id=f"a{turn}")],
        "log": [f"respond {turn}"],
    }


def build_graph(checkpointer: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    return builder.compile(checkpointer=checkpointer)


# ---- programs ----------------------------------------------------------------------

#: Characters of a "large" message (several of them make a list of many kB).
LARGE = 6000


@dataclass(frozen=True)
class Append:
    """Append ``k`` human messages (ids ``h<step>.<j>``); ``large`` makes them long."""

    k: int
    via: str  # "invoke" (the node answers too) or "update" (update_state as the node)
    large: bool = False


@dataclass(frozen=True)
class Replace:
    """Replace the latest state's message at ``pos`` (modulo its length) by id."""

    pos: int
    via: str


@dataclass(frozen=True)
class Remove:
    """Remove the latest state's message at ``pos`` with ``RemoveMessage``."""

    pos: int
    via: str


@dataclass(frozen=True)
class Fork:
    """Go back to the thread's checkpoint at ``back`` (newest first, modulo the history).

    ``via``: "invoke" with ``k`` new messages, "update" (update_state on it),
    or "replay" (invoke with no input: runs what was next there again).
    """

    back: int
    via: str
    k: int = 1


@dataclass(frozen=True)
class Pause:
    """Append ``k`` messages; the node then interrupts, or fails (``kind``)."""

    kind: str  # "interrupt" or "error"
    k: int = 1


@dataclass(frozen=True)
class Resume:
    """``invoke(Command(resume=...))`` on the thread (an interrupt may or may not wait)."""


@dataclass(frozen=True)
class Copy:
    """``copy_thread`` the current thread to a new one and go on there."""


@dataclass(frozen=True)
class Switch:
    """Go on with thread ``thread`` (modulo the threads made so far)."""

    thread: int


@dataclass(frozen=True)
class DeleteRun:
    """``delete_for_runs`` of the run at ``pick`` (modulo the runs made so far)."""

    pick: int


@dataclass(frozen=True)
class Prune:
    """``prune([current thread], strategy=...)``."""

    strategy: str  # "keep_latest" or "delete"


@dataclass(frozen=True)
class OtherProcess:
    """The saver under test switches to its other instance (same storage)."""


@dataclass(frozen=True)
class Checks:
    """Parameters of the final reads: ``list(limit=)``, ``list(before=)``, ``list(filter=)``
    on ``source`` and on ``run_id`` (the run at ``run``, modulo the runs)."""

    limit: int
    before: int
    source: str
    run: int = 0


_via = st.sampled_from(("invoke", "update"))
_append = st.builds(
    Append,
    k=st.integers(1, 3),
    via=_via,
    large=st.sampled_from((False, False, False, True)),
)
_fork = st.builds(
    Fork,
    back=st.integers(0, 60),
    via=st.sampled_from(("invoke", "update", "replay")),
    k=st.integers(1, 2),
)
#: One operation; appends are drawn three times as often as most others, forks twice.
operations = st.one_of(
    _append,
    _append,
    _append,
    st.builds(Replace, pos=st.integers(0, 40), via=_via),
    st.builds(Remove, pos=st.integers(0, 40), via=_via),
    _fork,
    _fork,
    st.builds(Pause, kind=st.sampled_from(("interrupt", "error")), k=st.integers(1, 2)),
    st.just(Resume()),
    st.just(Copy()),
    st.builds(Switch, thread=st.integers(0, 8)),
    st.builds(DeleteRun, pick=st.integers(0, 30)),
    st.builds(Prune, strategy=st.sampled_from(("keep_latest", "keep_latest", "delete"))),
    st.just(OtherProcess()),
)


def programs(max_steps: int) -> st.SearchStrategy[list[Any]]:
    """2-5 appends (a thread to work on), then 2 to ``max_steps`` operations."""
    return st.builds(
        operator.add,
        st.lists(_append, min_size=2, max_size=5),
        st.lists(operations, min_size=2, max_size=max_steps),
    )


checks = st.builds(
    Checks,
    limit=st.integers(1, 5),
    before=st.integers(0, 60),
    source=st.sampled_from(("loop", "input", "update")),
    run=st.integers(0, 30),
)


# ---- the two sides -------------------------------------------------------------------


def thread_config(thread: str, run_id: str | None = None, checkpoint_id: str | None = None) -> Any:
    configurable: dict[str, Any] = {"thread_id": thread}
    if run_id is not None:
        # in configurable, LangGraph copies it into each checkpoint's metadata
        configurable["run_id"] = run_id
    if checkpoint_id is not None:
        configurable["checkpoint_ns"] = ""
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


class RefSide:
    """``InMemorySaver``, with ``copy_thread``, ``delete_for_runs`` and ``prune`` by hand."""

    name = "reference"

    def __init__(self) -> None:
        self.saver = InMemorySaver()
        self.graph = build_graph(self.saver)

    def invoke(self, values: Any, config: Any) -> None:
        self.graph.invoke(values, config, durability="sync")

    def update(self, config: Any, values: Any) -> None:
        self.graph.update_state(config, values, as_node="respond")

    def list(self, config: Any, **kwargs: Any) -> list[CheckpointTuple]:
        return list(self.saver.list(config, **kwargs))

    def get(self, config: Any) -> CheckpointTuple | None:
        return self.saver.get_tuple(config)

    def copy(self, source: str, target: str) -> None:
        """Every checkpoint, write and blob of ``source`` under ``target``, ids kept."""
        s = self.saver
        for ns, checkpoints in list(s.storage[source].items()):
            s.storage[target][ns] = dict(checkpoints)
        for (thread, ns, cid), writes in list(s.writes.items()):
            if thread == source:
                s.writes[(target, ns, cid)] = dict(writes)
        for (thread, ns, channel, version), blob in list(s.blobs.items()):
            if thread == source:
                s.blobs[(target, ns, channel, version)] = blob

    def _drop(self, thread: str, ns: str, checkpoint_id: str) -> None:
        del self.saver.storage[thread][ns][checkpoint_id]
        self.saver.writes.pop((thread, ns, checkpoint_id), None)

    def delete_runs(self, run_ids: Sequence[str]) -> None:
        """Each checkpoint whose metadata names one of the runs, and its writes, go."""
        s = self.saver
        for thread, namespaces in list(s.storage.items()):
            for ns, checkpoints in list(namespaces.items()):
                for cid, (_cp, metadata, _parent) in list(checkpoints.items()):
                    if s.serde.loads_typed(metadata).get("run_id") in run_ids:
                        self._drop(thread, ns, cid)

    def prune(self, threads: Sequence[str], strategy: str) -> None:
        """``keep_latest``: each namespace keeps its newest checkpoint (with its writes);
        ``delete``: the whole thread goes."""
        s = self.saver
        for thread in threads:
            if strategy == "delete":
                s.delete_thread(thread)
                continue
            for ns, checkpoints in list(s.storage[thread].items()):
                if checkpoints:
                    latest = max(checkpoints)
                    for cid in [c for c in checkpoints if c != latest]:
                        self._drop(thread, ns, cid)

    def other_process(self) -> None:
        return None


class SyncSide:
    """A sync saver under test: two instances on the same storage, one in use."""

    def __init__(self, savers: Sequence[Any], name: str) -> None:
        self.savers = list(savers)
        self.graphs = [build_graph(s) for s in self.savers]
        self.current = 0
        self.name = name

    @property
    def saver(self) -> Any:
        return self.savers[self.current]

    @property
    def graph(self) -> Any:
        return self.graphs[self.current]

    def invoke(self, values: Any, config: Any) -> None:
        self.graph.invoke(values, config, durability="sync")

    def update(self, config: Any, values: Any) -> None:
        self.graph.update_state(config, values, as_node="respond")

    def list(self, config: Any, **kwargs: Any) -> list[CheckpointTuple]:
        return list(self.saver.list(config, **kwargs))

    def get(self, config: Any) -> CheckpointTuple | None:
        return self.saver.get_tuple(config)

    def copy(self, source: str, target: str) -> None:
        self.saver.copy_thread(source, target)

    def delete_runs(self, run_ids: Sequence[str]) -> None:
        self.saver.delete_for_runs(list(run_ids))

    def prune(self, threads: Sequence[str], strategy: str) -> None:
        self.saver.prune(list(threads), strategy=strategy)

    def other_process(self) -> None:
        self.current = (self.current + 1) % len(self.savers)


class AsyncSide(SyncSide):
    """An async saver under test, driven through its async methods on ``loop``."""

    def __init__(self, savers: Sequence[Any], name: str, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(savers, name)
        self.loop = loop

    def _wait(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def invoke(self, values: Any, config: Any) -> None:
        self._wait(self.graph.ainvoke(values, config, durability="sync"))

    def update(self, config: Any, values: Any) -> None:
        self._wait(self.graph.aupdate_state(config, values, as_node="respond"))

    def list(self, config: Any, **kwargs: Any) -> list[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.saver.alist(config, **kwargs)]

        return self._wait(collect())  # type: ignore[no-any-return]

    def get(self, config: Any) -> CheckpointTuple | None:
        return self._wait(self.saver.aget_tuple(config))  # type: ignore[no-any-return]

    def copy(self, source: str, target: str) -> None:
        self._wait(self.saver.acopy_thread(source, target))

    def delete_runs(self, run_ids: Sequence[str]) -> None:
        self._wait(self.saver.adelete_for_runs(list(run_ids)))

    def prune(self, threads: Sequence[str], strategy: str) -> None:
        self._wait(self.saver.aprune(list(threads), strategy=strategy))


# ---- normal form -----------------------------------------------------------------------


def _counter(version: Any) -> int:
    """The counter of a channel version (``<counter>.<random fraction>``)."""
    return int(str(version).split(".", 1)[0])


def _short(text: Any) -> Any:
    if isinstance(text, str) and len(text) > 48:
        digest = hashlib.blake2b(text.encode(), digest_size=4).hexdigest()
        return f"{text[:20]}...<{len(text)} chars {digest}>"
    return text


def norm_value(value: Any) -> Any:
    """A comparable, readable form: a message is (class, id, content, the other fields
    that differ from the field's default)."""
    if isinstance(value, BaseMessage):
        fields = type(value).model_fields
        rest = {}
        for key, item in value.model_dump().items():
            field = fields.get(key)
            if key in ("id", "type", "content") or (
                field is not None and item == field.get_default(call_default_factory=True)
            ):
                continue
            rest[key] = item
        return (type(value).__name__, value.id, _short(value.content), rest)
    if isinstance(value, Interrupt):  # its id derives from the task id
        return ("Interrupt", norm_value(value.value))
    if isinstance(value, dict):
        return {k: norm_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [norm_value(v) for v in value]
    return _short(value)


def norm_writes(writes: Sequence[Any] | None) -> list[Any]:
    """Pending writes grouped by task (in their order within a task), groups sorted."""
    groups: dict[str, list[Any]] = {}
    for task_id, channel, value in writes or ():
        groups.setdefault(task_id, []).append((channel, norm_value(value)))
    return sorted(groups.values(), key=repr)


def norm_tuple(tup: CheckpointTuple | None, label: Callable[[str | None], str | None]) -> Any:
    if tup is None:
        return None
    cp = tup.checkpoint
    conf = tup.config["configurable"]
    parent = (tup.parent_config or {}).get("configurable", {})
    return {
        "config": (conf["thread_id"], conf.get("checkpoint_ns", ""), label(conf["checkpoint_id"])),
        "id": label(cp["id"]),
        "v": cp.get("v"),
        "metadata": dict(tup.metadata or {}),
        "parent": (parent.get("thread_id"), label(parent.get("checkpoint_id"))),
        "channel_values": norm_value(cp["channel_values"]),
        "channel_versions": {k: _counter(v) for k, v in cp["channel_versions"].items()},
        "versions_seen": {
            node: {k: _counter(v) for k, v in seen.items()}
            for node, seen in cp.get("versions_seen", {}).items()
        },
        "updated_channels": cp.get("updated_channels"),
        "pending_writes": norm_writes(tup.pending_writes),
    }


def first_difference(want: list[Any], got: list[Any]) -> str:
    """Where two normal forms of a listing part first (for the assertion message)."""
    if len(want) != len(got):
        head = f"{len(want)} checkpoints expected, {len(got)} returned"
    else:
        head = "same length"
    for i, (w, g) in enumerate(zip(want, got, strict=False)):
        if w != g:
            keys = [k for k in w if w.get(k) != g.get(k)] if isinstance(w, dict) else []
            detail = "".join(f"\n  {k}:\n    want {w[k]!r}\n    got  {g.get(k)!r}" for k in keys)
            return f"{head}; first difference at position {i}:{detail or f' {w!r} != {g!r}'}"
    return head


# ---- running a program ------------------------------------------------------------------


class Run:
    """One program applied to the reference and to the saver under test, in lockstep.

    Args:
        ref: The reference side.
        sut: The side under test.
        prefix: Unique per example: thread and run ids start with it.
    """

    def __init__(self, ref: RefSide, sut: Any, prefix: str) -> None:
        self.ref = ref
        self.sut = sut
        self.prefix = prefix
        self.threads = [f"{prefix}-t0"]
        self.current = 0
        self.runs: list[str] = []
        self.ref_labels: dict[str, str] = {}
        self.sut_labels: dict[str, str] = {}
        self.sut_ids: dict[str, str] = {}
        self.trace: list[str] = []

    @property
    def thread(self) -> str:
        return self.threads[self.current]

    # ---- helpers

    def _label(self, labels: dict[str, str]) -> Callable[[str | None], str | None]:
        def label(checkpoint_id: str | None) -> str | None:
            if checkpoint_id is None:
                return None
            return labels.get(checkpoint_id, f"unknown {checkpoint_id}")

        return label

    def norm(self, side: Any, tuples: Sequence[CheckpointTuple | None]) -> list[Any]:
        labels = self.ref_labels if side is self.ref else self.sut_labels
        return [norm_tuple(t, self._label(labels)) for t in tuples]

    def _fail(self, what: str) -> str:
        steps = "\n".join(f"  {line}" for line in self.trace)
        return f"{self.sut.name}: {what}\nsteps so far:\n{steps}"

    def _new_run(self, step: int) -> str:
        run_id = f"{self.prefix}-run{step}"
        self.runs.append(run_id)
        return run_id

    def latest_messages(self) -> list[BaseMessage]:
        tup = self.ref.get(thread_config(self.thread))
        if tup is None:
            return []
        return list(tup.checkpoint["channel_values"].get("messages", []))

    def both(self, action: Callable[[Any], None]) -> None:
        """``action`` on each side; both must fail alike or both succeed."""
        outcome = []
        for side in (self.ref, self.sut):
            try:
                action(side)
                outcome.append(None)
            except Exception as exc:  # the node's own failure, or anything else
                outcome.append(f"{type(exc).__name__}: {exc}")
        assert outcome[0] == outcome[1], self._fail(
            f"reference raised {outcome[0]}, saver under test raised {outcome[1]}"
        )

    def sync(self, thread: str) -> None:
        """Label the thread's new checkpoints and compare its history on both sides."""
        config = thread_config(thread)
        ref, sut = self.ref.list(config), self.sut.list(config)
        ref_new = sorted(
            t.config["configurable"]["checkpoint_id"]
            for t in ref
            if t.config["configurable"]["checkpoint_id"] not in self.ref_labels
        )
        sut_new = sorted(
            t.config["configurable"]["checkpoint_id"]
            for t in sut
            if t.config["configurable"]["checkpoint_id"] not in self.sut_labels
        )
        assert len(ref_new) == len(sut_new), self._fail(
            f"thread {thread}: {len(ref_new)} new checkpoints expected, "
            f"{len(sut_new)} new ones listed"
        )
        for r, s in zip(ref_new, sut_new, strict=True):
            label = f"c{len(self.ref_labels)}"
            self.ref_labels[r] = label
            self.sut_labels[s] = label
            self.sut_ids[label] = s
        want, got = self.norm(self.ref, ref), self.norm(self.sut, sut)
        assert want == got, self._fail(f"list({thread}): {first_difference(want, got)}")

    # ---- operations

    def apply(self, step: int, op: Any) -> None:
        thread = self.thread
        self.trace.append(f"{step}: {op!r} on {thread}")
        if isinstance(op, Append):
            text = "x" * LARGE if op.large else ""
            humans = [
                HumanMessage(content=f"question {step}.{j} {text}", id=f"h{step}.{j}")
                for j in range(op.k)
            ]
            self._write(step, thread, op.via, {"messages": humans, "turn": step})
        elif isinstance(op, (Replace, Remove)):
            messages = self.latest_messages()
            if not messages:
                self.trace[-1] += " (no message: skipped)"
                return
            target = messages[op.pos % len(messages)]
            if isinstance(op, Replace):
                kind = AIMessage if isinstance(target, HumanMessage) else HumanMessage
                new: BaseMessage = kind(content=f"edited in step {step}", id=target.id)
            else:
                new = RemoveMessage(id=target.id)  # type: ignore[arg-type]
            self.trace[-1] += f" (message {target.id})"
            self._write(step, thread, op.via, {"messages": [new], "turn": step})
        elif isinstance(op, Fork):
            self._fork(step, thread, op)
        elif isinstance(op, Pause):
            humans = [
                HumanMessage(content=f"{op.kind} {step}.{j}", id=f"h{step}.{j}")
                for j in range(op.k)
            ]
            values = {"messages": humans, "turn": step, "pause": f"{op.kind} {step}"}
            self._write(step, thread, "invoke", values)
        elif isinstance(op, Resume):
            config = thread_config(thread, self._new_run(step))
            command = Command(resume=f"resume {step}")
            self.both(lambda side: side.invoke(command, config))
        elif isinstance(op, Copy):
            target = f"{self.prefix}-t{len(self.threads)}"
            self.both(lambda side: side.copy(thread, target))
            self.threads.append(target)
            self.current = len(self.threads) - 1
            self.trace[-1] += f" -> {target}"
            self.sync(thread)
        elif isinstance(op, Switch):
            self.current = op.thread % len(self.threads)
            self.trace[-1] += f" -> {self.thread}"
        elif isinstance(op, DeleteRun):
            if not self.runs:
                self.trace[-1] += " (no run yet: skipped)"
                return
            run_id = self.runs[op.pick % len(self.runs)]
            self.trace[-1] += f" ({run_id})"
            self.both(lambda side: side.delete_runs([run_id]))
            for other in self.threads:
                self.sync(other)
        elif isinstance(op, Prune):
            self.both(lambda side: side.prune([thread], op.strategy))
        elif isinstance(op, OtherProcess):
            self.sut.other_process()
        else:
            raise AssertionError(f"unknown operation {op!r}")
        self.sync(self.thread)

    def _write(self, step: int, thread: str, via: str, values: dict[str, Any]) -> None:
        config = thread_config(thread, self._new_run(step))
        if via == "invoke":
            self.both(lambda side: side.invoke(values, config))
        else:
            update = {**values, "log": [f"update {step}"]}
            self.both(lambda side: side.update(config, update))

    def _fork(self, step: int, thread: str, op: Fork) -> None:
        history = self.ref.list(thread_config(thread))
        if not history:
            self.trace[-1] += " (empty thread: skipped)"
            return
        ref_id = history[op.back % len(history)].config["configurable"]["checkpoint_id"]
        label = self.ref_labels[ref_id]
        self.trace[-1] += f" (from {label})"
        run_id = self._new_run(step)
        configs = {
            id(self.ref): thread_config(thread, run_id, ref_id),
            id(self.sut): thread_config(thread, run_id, self.sut_ids[label]),
        }
        humans = [HumanMessage(content=f"fork {step}.{j}", id=f"f{step}.{j}") for j in range(op.k)]
        values = {"messages": humans, "turn": step}
        if op.via == "invoke":
            self.both(lambda side: side.invoke(values, configs[id(side)]))
        elif op.via == "update":
            update = {**values, "log": [f"fork {step}"]}
            self.both(lambda side: side.update(configs[id(side)], update))
        else:
            self.both(lambda side: side.invoke(None, configs[id(side)]))

    # ---- final reads

    def check_reads(self, params: Checks) -> None:
        """Every thread: the listing, ``get_tuple`` of each checkpoint and of the latest,
        and ``list`` with ``limit``, ``before`` and ``filter``."""
        for thread in self.threads:
            self.sync(thread)
            config = thread_config(thread)
            history = self.ref.list(config)
            for tup in history:
                ref_id = tup.config["configurable"]["checkpoint_id"]
                label = self.ref_labels[ref_id]
                want = self.norm(self.ref, [self.ref.get(thread_config(thread, None, ref_id))])
                got = self.norm(
                    self.sut, [self.sut.get(thread_config(thread, None, self.sut_ids[label]))]
                )
                assert want == got, self._fail(
                    f"get_tuple({thread}, {label}): {first_difference(want, got)}"
                )
            want = self.norm(self.ref, [self.ref.get(config)])
            got = self.norm(self.sut, [self.sut.get(config)])
            assert want == got, self._fail(f"get_tuple({thread}): {first_difference(want, got)}")
            queries: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
                (f"limit={params.limit}", {"limit": params.limit}, {"limit": params.limit}),
                (
                    f"filter=source:{params.source}",
                    {"filter": {"source": params.source}},
                    {"filter": {"source": params.source}},
                ),
            ]
            if self.runs:
                run_filter = {"run_id": self.runs[params.run % len(self.runs)]}
                queries.append(
                    (f"filter={run_filter}", {"filter": run_filter}, {"filter": run_filter})
                )
            if history:
                ref_id = history[params.before % len(history)].config["configurable"][
                    "checkpoint_id"
                ]
                label = self.ref_labels[ref_id]
                ref_before = {"before": thread_config(thread, None, ref_id)}
                sut_before = {"before": thread_config(thread, None, self.sut_ids[label])}
                queries.append((f"before={label}", ref_before, sut_before))
                limit = {"limit": params.limit}
                queries.append(
                    (
                        f"before={label}, limit={params.limit}",
                        {**ref_before, **limit},
                        {**sut_before, **limit},
                    )
                )
            for name, ref_kwargs, sut_kwargs in queries:
                want = self.norm(self.ref, self.ref.list(config, **ref_kwargs))
                got = self.norm(self.sut, self.sut.list(config, **sut_kwargs))
                assert want == got, self._fail(
                    f"list({thread}, {name}): {first_difference(want, got)}"
                )


def run_program(ref: RefSide, sut: Any, prefix: str, program: Sequence[Any], params: Checks) -> Run:
    """Apply ``program`` to both sides, comparing after each step, then every read."""
    run = Run(ref, sut, prefix)
    for step, op in enumerate(program):
        run.apply(step, op)
    run.check_reads(params)
    if currently_in_test_context():
        _events(run, program)
    return run


def _events(run: Run, program: Sequence[Any]) -> None:
    """What the example covered (``--hypothesis-show-statistics``)."""
    for line in run.trace:
        kind = line.split(": ", 1)[1].split("(", 1)[0]
        event(f"op {kind}{' skipped' if 'skipped' in line else ''}")
    event(f"threads: {len(run.threads)}")
    event(f"steps: {(len(program) // 5) * 5}+")
    event(f"checkpoints made: {(len(run.ref_labels) // 10) * 10}+")
