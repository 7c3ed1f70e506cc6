"""``langgraph-durable demo``: kill a running LangGraph agent, then resume it from PostgreSQL.

The parent process prepares a schema, starts a child process (this same command with the
hidden ``--child`` option) that runs the demo graph on a fresh thread, and sends it SIGKILL
while a tool call of step ``--crash-at`` is in flight. The parent then resumes the thread from
its last checkpoint in-process, and checks that the run finished with the right state, that
every node run completed before the crash was not run again, and that the interrupted call was.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import langgraph_durable
from langgraph_durable.cli._common import (
    URL_ENV_VAR,
    CommandError,
    connect,
    mask_url,
    one_line,
    plural,
    resolve_url,
    say,
)
from langgraph_durable.errors import DurableError

if TYPE_CHECKING:
    from langgraph_durable.cli._demo_graph import WorkLog

__all__ = ["add_parser", "run_demo"]

DEFAULT_STEPS = 4
MAX_STEPS = 100
#: How long the parent waits for the child to reach the crash point, in seconds.
CHILD_TIMEOUT = 120.0
#: How long the parent waits for the crash-point checkpoint to be visible, in seconds.
CHECKPOINT_TIMEOUT = 30.0
_POLL = 0.05


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register the ``demo`` subcommand.

    Args:
        subparsers: The object returned by ``ArgumentParser.add_subparsers``.
    """
    parser = subparsers.add_parser(
        "demo",
        help="crash an agent with SIGKILL mid-run, then resume it from its last checkpoint",
        description=(
            "Run an agent-like LangGraph graph (no LLM) on PostgreSQL in a child process, kill "
            "the child with SIGKILL in the middle of a tool call, then resume the same thread "
            "here from its last checkpoint and check the result. Without --url or "
            f"${URL_ENV_VAR} it starts an embedded PostgreSQL (needs the 'embedded' extra)."
        ),
    )
    parser.add_argument(
        "--url",
        help=f"PostgreSQL connection URL (default: ${URL_ENV_VAR}, else an embedded PostgreSQL)",
    )
    parser.add_argument(
        "--schema",
        help="schema to use (default: a new lgd_demo_<random> schema for this run)",
    )
    parser.add_argument(
        "--steps",
        type=_positive_int,
        default=DEFAULT_STEPS,
        metavar="N",
        help=f"tool calls the agent makes before it answers (default: {DEFAULT_STEPS})",
    )
    parser.add_argument(
        "--crash-at",
        type=_positive_int,
        metavar="K",
        help="kill the child during the tool call of step K (default: N // 2 + 1)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the demo's schema and checkpoints instead of dropping them at the end",
    )
    # Used by the parent to start the child; not part of the public interface.
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--thread-id", help=argparse.SUPPRESS)
    parser.add_argument("--work-log", help=argparse.SUPPRESS)
    parser.set_defaults(handler=run_demo)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= value <= MAX_STEPS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_STEPS}, got {value}")
    return value


def run_demo(args: argparse.Namespace, out: TextIO) -> int:
    """Run the demo (or, with ``--child``, the child's half of it).

    Args:
        args: Parsed options of the ``demo`` subcommand.
        out: Where to print progress.

    Returns:
        0 if the resumed run finished correctly, 1 if any check failed.

    Raises:
        CommandError: If the options are inconsistent.
        DurableError: If the database cannot be reached or used.
    """
    crash_at = args.crash_at if args.crash_at is not None else args.steps // 2 + 1
    if crash_at > args.steps:
        raise CommandError(f"--crash-at {crash_at} is past the last step (--steps {args.steps})")
    if args.schema is not None:
        from langgraph_durable.postgres._schema import validate_schema_name

        validate_schema_name(args.schema)
    if args.child:
        return _run_child(args, crash_at, out)

    say(out, "langgraph-durable demo: kill an agent mid-run, then resume it from PostgreSQL")
    say(out)
    url = resolve_url(args.url)
    if url is not None:
        source = "--url" if args.url else f"${URL_ENV_VAR}"
        say(out, f"Database: {mask_url(url)} (from {source})")
        return _run_parent(url, args, crash_at, out)

    from langgraph_durable.postgres.embedded import start_embedded_postgres

    say(out, f"Database: no --url and no ${URL_ENV_VAR}; starting an embedded PostgreSQL ...")
    with start_embedded_postgres() as server:
        origin = getattr(getattr(server, "binaries", None), "origin", None)
        how = f" ({origin} binaries)" if origin else ""
        say(out, f"Database: embedded PostgreSQL{how} at {mask_url(server.url)}")
        return _run_parent(server.url, args, crash_at, out)


def _run_parent(url: str, args: argparse.Namespace, crash_at: int, out: TextIO) -> int:
    from langgraph_durable.postgres import PostgresSaver

    schema = args.schema or f"lgd_demo_{secrets.token_hex(4)}"
    existed = _schema_exists(url, schema)
    drop = not existed and not args.keep
    if existed:
        say(out, f"Schema:   {schema} (already exists; the demo will not drop it)")
    else:
        end = "dropped at the end" if drop else "kept because of --keep"
        say(out, f"Schema:   {schema} (created for this run; {end})")
    thread_id = f"demo-{secrets.token_hex(6)}"
    say(out, f"Thread:   {thread_id}")
    work_dir = Path(tempfile.mkdtemp(prefix="lgd-demo-"))
    try:
        with PostgresSaver.from_conn_string(url, schema=schema) as saver:
            applied = list(saver.setup())
            done = ", ".join(map(str, applied)) if applied else "none (already up to date)"
            say(out, f"Migrations applied: {done}")
            return _crash_and_resume(
                saver, url, schema, thread_id, args.steps, crash_at, work_dir, out
            )
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
        if drop:
            _drop_schema(url, schema, out)


def _crash_and_resume(
    saver: Any,
    url: str,
    schema: str,
    thread_id: str,
    steps: int,
    crash_at: int,
    work_dir: Path,
    out: TextIO,
) -> int:
    from langgraph_durable.cli import _demo_graph as demo

    log = demo.WorkLog(work_dir / "work.log")
    config: dict[str, Any] = {
        "configurable": {"thread_id": thread_id},
        "recursion_limit": 2 * steps + 10,
    }
    me = os.getpid()
    graph = demo.build_graph(
        saver, steps=steps, work_log=log, say=lambda text: say(out, f"  [resumed pid {me}] {text}")
    )

    say(out)
    say(out, f"== 1. Run the agent in a child process ({steps} steps; killed in step {crash_at})")
    with _child(url, schema, thread_id, steps, crash_at, log, out) as child:
        _wait_for(
            lambda: any(
                r == demo.NodeRun("start", "tools", crash_at, child.pid) for r in log.read()
            ),
            child,
            CHILD_TIMEOUT,
            f"the child to start the tool call of step {crash_at}",
        )
        _wait_for(
            lambda: _at_crash_point(graph, config, crash_at),
            child,
            CHECKPOINT_TIMEOUT,
            f"the checkpoint before the tool call of step {crash_at}",
        )
        child.send_signal(getattr(signal, "SIGKILL", signal.SIGTERM))
        status = child.wait()
    say(out, f"Sent SIGKILL to child pid {child.pid} in the middle of step {crash_at}'s tool call;")
    say(out, f"it exited with status {status}: no cleanup, no final write.")
    count = sum(1 for _ in saver.list(config))
    say(out, f"PostgreSQL holds {plural(count, 'checkpoint')} for thread {thread_id}.")

    say(out)
    say(out, "== 2. Resume the same thread in this process")
    state = graph.get_state(config)
    say(
        out,
        f"Resuming from the last checkpoint, {state.config['configurable']['checkpoint_id']} "
        f"(LangGraph step {state.metadata['step']}, "
        f"{plural(len(state.values['messages']), 'message')}, next node: {', '.join(state.next)})",
    )
    result = graph.invoke(None, config, durability="sync")

    say(out)
    say(out, "== 3. Result")
    messages = result["messages"]
    say(out, f"Final state: {plural(len(messages), 'message')}")
    for message in messages:
        say(out, f"  {demo.describe(message)}")
    ok = _check(
        log=log,
        child_pid=child.pid,
        parent_pid=me,
        status=status,
        messages=messages,
        steps=steps,
        crash_at=crash_at,
        out=out,
    )
    say(out)
    if ok:
        say(out, "Demo passed: the agent survived SIGKILL and finished from its last checkpoint.")
        return 0
    say(out, "Demo FAILED: the resumed run is not what an uninterrupted run produces.")
    return 1


def _at_crash_point(graph: Any, config: dict[str, Any], crash_at: int) -> bool:
    state = graph.get_state(config)
    messages = state.values.get("messages") or []
    return state.next == ("tools",) and bool(messages) and messages[-1].id == f"ai-{crash_at}"


def _check(
    *,
    log: WorkLog,
    child_pid: int,
    parent_pid: int,
    status: int,
    messages: list[Any],
    steps: int,
    crash_at: int,
    out: TextIO,
) -> bool:
    from langgraph_durable.cli import _demo_graph as demo

    runs = log.read()

    def completed(pid: int) -> list[tuple[str, int]]:
        return [(r.node, r.step) for r in runs if r.event == "end" and r.pid == pid]

    def label(pairs: list[tuple[str, int]]) -> str:
        return ", ".join("final answer" if s > steps else f"{n} {s}" for n, s in pairs) or "none"

    before, after = completed(child_pid), completed(parent_pid)
    started = [(r.node, r.step) for r in runs if r.event == "start" and r.pid == child_pid]
    interrupted = [pair for pair in started if pair not in before]
    expected = demo.expected_runs(steps)
    killed = hasattr(signal, "SIGKILL") and status == -signal.SIGKILL
    checks = [
        (
            killed and interrupted == [("tools", crash_at)],
            f"the child was killed by SIGKILL in the middle of: {label(interrupted)}",
        ),
        (
            before == expected[: 2 * crash_at - 1],
            f"completed before the crash: {label(before)}",
        ),
        (
            before + after == expected,
            f"run after the resume: {label(after)} "
            "(nothing completed was run again; the interrupted call was)",
        ),
        (
            list(map(demo.summarize, messages))
            == list(map(demo.summarize, demo.expected_messages(steps))),
            f"final state equals an uninterrupted run's; answer: {messages[-1].content}",
        ),
    ]
    say(out, "Checks:")
    for ok, text in checks:
        say(out, f"  {'ok    ' if ok else 'FAILED'} {text}")
    return all(ok for ok, _ in checks)


@contextmanager
def _child(
    url: str, schema: str, thread_id: str, steps: int, crash_at: int, log: WorkLog, out: TextIO
) -> Iterator[subprocess.Popen[str]]:
    """Start the child process, forward its output, and make sure it is gone afterwards."""
    cmd = [
        sys.executable,
        "-m",
        "langgraph_durable.cli",
        "demo",
        "--child",
        f"--schema={schema}",
        f"--steps={steps}",
        f"--crash-at={crash_at}",
        f"--thread-id={thread_id}",
        f"--work-log={log.path}",
    ]
    # The URL goes through the environment, not argv, so a password stays out of `ps`.
    # The child must import this same copy of the package, installed or not.
    package_root = str(Path(langgraph_durable.__file__).resolve().parent.parent)
    python_path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, URL_ENV_VAR: url, "PYTHONPATH": python_path, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        errors="replace",
    )
    assert proc.stdout is not None
    pump = threading.Thread(target=_forward, args=(proc.stdout, out), daemon=True)
    pump.start()
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        pump.join(timeout=5)


def _forward(stream: TextIO, out: TextIO) -> None:
    for line in stream:
        say(out, line.rstrip("\n"))


def _wait_for(
    condition: Callable[[], bool], child: subprocess.Popen[str], timeout: float, what: str
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        code = child.poll()
        if code is not None:
            raise CommandError(f"the demo's child process exited (status {code}) before {what}")
        if time.monotonic() > deadline:
            raise CommandError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(_POLL)


def _run_child(args: argparse.Namespace, crash_at: int, out: TextIO) -> int:
    url = resolve_url(args.url)
    if url is None or not args.schema or not args.thread_id or not args.work_log:
        raise CommandError("--child is internal to the demo; run 'langgraph-durable demo'")
    from langgraph_durable.cli import _demo_graph as demo
    from langgraph_durable.postgres import PostgresSaver

    me = os.getpid()
    config = {"configurable": {"thread_id": args.thread_id}, "recursion_limit": 2 * args.steps + 10}
    with PostgresSaver.from_conn_string(url, schema=args.schema) as saver:
        graph = demo.build_graph(
            saver,
            steps=args.steps,
            work_log=demo.WorkLog(Path(args.work_log)),
            say=lambda text: say(out, f"  [child pid {me}] {text}"),
            hang_at=crash_at,
        )
        graph.invoke({"messages": [demo.question(args.steps)]}, config, durability="sync")
    return 1  # not reached: the parent kills this process during step `crash_at`


def _schema_exists(url: str, schema: str) -> bool:
    with connect(url) as conn:
        row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    return row is not None


def _drop_schema(url: str, schema: str, out: TextIO) -> None:
    """Drop the demo's schema; a failure is reported, not raised (it must not hide another)."""
    from psycopg import sql

    try:
        with connect(url) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    except DurableError as exc:
        say(out, f"Could not drop schema {schema}: {one_line(exc)}")
    else:
        say(out, f"Dropped schema {schema}.")
