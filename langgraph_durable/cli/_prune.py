"""``langgraph-durable prune``: apply retention from cron, on any backend.

The command only parses flags, opens the saver, reports and picks the exit code;
the pruning itself (lock, batches, what expired) is the saver's
``prune_expired``. Flags override the policy ``setup()`` stored; with neither,
each thread's stored expiry (written by a saver with ``retention=``) decides.

Quiet for cron: a real run prints nothing unless stdout is a terminal (or
``--json`` asks for the summary line); a dry run always prints what it would
remove. Exit codes: 0 done (also when another pruner holds the lock: it says
so), 3 the time budget ran out with work left, 2 bad usage, 1 an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from langgraph_durable.cli._common import CommandError, ProgressBar, is_terminal, one_line, say
from langgraph_durable.cli._savers import Target, add_target_arguments, open_saver, resolve_target

__all__ = ["add_parser", "run_prune", "EXIT_BUDGET", "EXIT_ERROR"]

#: Exit code when ``--max-seconds`` ran out with expired threads left.
EXIT_BUDGET = 3
#: Exit code when the store failed (unreachable, refused, corrupt).
EXIT_ERROR = 1
#: Thread ids a dry run prints (the counts cover them all).
_LISTED = 50


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register the ``prune`` subcommand."""
    parser = subparsers.add_parser(
        "prune",
        help="delete or trim expired threads (run it from cron)",
        description=(
            "Apply retention: delete threads idle or older than the limits (whole: "
            "checkpoints, blobs, writes, effect journal, indexes), or trim them to their "
            "latest checkpoints with --strategy keep-latest. Flags override the policy "
            "stored by setup(); with neither, each thread's stored expiry decides. One "
            "pruner runs at a time (a second exits 0 saying so); a run stopped by "
            "--max-seconds or killed is finished by the next run. Exit codes: 0 done, "
            "3 time budget reached with work left, 2 bad usage, 1 error."
        ),
    )
    add_target_arguments(parser)
    parser.add_argument(
        "--idle", help="expire threads not written for this long (90s, 15m, 12h, 30d)"
    )
    parser.add_argument("--absolute", help="expire threads created longer ago than this")
    parser.add_argument(
        "--strategy",
        choices=("delete", "keep-latest"),
        help="delete expired threads whole (default), or keep their latest checkpoints",
    )
    parser.add_argument(
        "--keep", type=int, help="checkpoints per namespace keep-latest keeps (default 1)"
    )
    parser.add_argument("--tenant", help="only this tenant (default: every tenant)")
    parser.add_argument(
        "--dry-run", action="store_true", help="change nothing; print what a run would remove"
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        help="stop between batches after this many seconds (exit 3 if work is left)",
    )
    parser.add_argument("--batch", type=int, default=500, help="threads per batch (default 500)")
    parser.add_argument(
        "--throttle",
        type=float,
        help="after each batch, rest this many times as long as the batch took "
        "(default 0: flat out; 1: busy half the time)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON summary line")
    parser.set_defaults(handler=run_prune)


def _policy(args: argparse.Namespace, stored: str | None) -> Any:
    """The policy to apply: flags over the stored one; None when there is neither."""
    from langgraph_durable._core.retention import Retention, parse_duration
    from langgraph_durable.errors import DurableError

    given = any(
        getattr(args, name) is not None for name in ("idle", "absolute", "strategy", "keep")
    )
    base = Retention.from_json(stored) if stored else None
    if not given:
        return base
    try:
        fields: dict[str, Any] = {
            "idle": base.idle if base else None,
            "absolute": base.absolute if base else None,
            "strategy": base.strategy if base else "delete",
            "keep": base.keep if base else 1,
        }
        if args.idle is not None:
            fields["idle"] = parse_duration(args.idle)
        if args.absolute is not None:
            fields["absolute"] = parse_duration(args.absolute)
        if args.strategy is not None:
            fields["strategy"] = args.strategy.replace("-", "_")
        if args.keep is not None:
            fields["keep"] = args.keep
        return Retention(**fields)
    except DurableError as exc:
        raise CommandError(one_line(exc)) from exc


def _check_flags(args: argparse.Namespace) -> None:
    from langgraph_durable._core.retention import parse_duration
    from langgraph_durable.errors import DurableError

    for name in ("idle", "absolute"):
        value = getattr(args, name)
        if value is not None:
            try:
                parse_duration(value)
            except DurableError as exc:
                raise CommandError(f"--{name}: {one_line(exc)}") from exc
    if args.keep is not None and args.keep < 1:
        raise CommandError(f"--keep must be at least 1, got {args.keep}")
    if args.max_seconds is not None and not args.max_seconds > 0:
        raise CommandError(f"--max-seconds must be a positive number, got {args.max_seconds}")
    if not 1 <= args.batch <= 10_000:
        raise CommandError(f"--batch must be from 1 to 10000, got {args.batch}")
    if args.throttle is not None and not 0 <= args.throttle <= 100:
        raise CommandError(f"--throttle must be from 0 to 100, got {args.throttle:g}")
    if args.tenant is not None and not args.tenant.strip():
        raise CommandError("--tenant must not be empty")


def run_prune(args: argparse.Namespace, out: TextIO) -> int:
    """Run the pruner once (see the module docstring for output and exit codes)."""
    from langgraph_durable.errors import ConfigurationError, DurableError, InvalidInputError
    from langgraph_durable.retention import DEFAULT_THROTTLE

    _check_flags(args)
    target = resolve_target(args)
    try:
        with open_saver(target, None) as saver:
            stored = saver._run(saver._ops.retention_get())
            policy = _policy(args, stored)
            bar: ProgressBar | None = None

            def progress(step: Any) -> None:
                nonlocal bar
                if bar is None:
                    bar = ProgressBar(sys.stderr, int(step.total or 0), "threads")
                bar.update(step.done)

            try:
                report = saver.prune_expired(
                    policy,
                    tenant_id=args.tenant,
                    dry_run=args.dry_run,
                    max_seconds=args.max_seconds,
                    batch=args.batch,
                    throttle=DEFAULT_THROTTLE if args.throttle is None else args.throttle,
                    progress=progress,
                )
            finally:
                if bar is not None:
                    bar.close()
    except (ConfigurationError, InvalidInputError, CommandError):
        raise  # bad usage: exit 2
    except DurableError as exc:
        print(f"langgraph-durable prune: error: {one_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_ERROR
    summary = {
        "command": "prune",
        "backend": target.backend,
        "policy": policy.describe() if policy is not None else "stored expiry",
        **report.as_dict(),
    }
    if args.json:
        say(out, json.dumps(summary, separators=(",", ":")))
    elif report.locked:
        say(out, f"Another pruner is running on {target.where}: nothing done.")
    elif args.dry_run:
        _print_dry_run(out, target, report, summary["policy"])
    elif is_terminal(out):
        say(out, _sentence(target, report, summary["policy"]))
    if report.budget_exhausted:
        print(
            f"langgraph-durable prune: stopped after --max-seconds {args.max_seconds:g} with "
            "expired threads left; the next run continues",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_BUDGET
    return 0


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _sentence(target: Target, report: Any, policy: str) -> str:
    parts = [f"{report.threads} threads deleted"]
    if report.trimmed:
        parts.append(f"{report.trimmed} trimmed")
    parts.append(f"{report.checkpoints} checkpoints ({_size(report.bytes)})")
    if report.partitions:
        parts.append(f"{report.partitions} partitions dropped")
    if report.moved:
        parts.append(f"{report.moved} live threads moved to a newer partition")
    if report.index_entries:
        parts.append(f"{report.index_entries} index entries swept")
    return f"Pruned {target.where} ({policy}): " + ", ".join(parts) + f" in {report.seconds:.1f}s."


def _print_dry_run(out: TextIO, target: Target, report: Any, policy: str) -> None:
    what = [f"delete {report.threads} threads"]
    if report.trimmed:
        what.append(f"trim {report.trimmed}")
    what.append(f"remove {report.checkpoints} checkpoints ({_size(report.bytes)})")
    if report.partitions:
        what.append(f"drop {report.partitions} partitions")
    if report.moved:
        what.append(f"move {report.moved} live threads to a newer partition")
    if report.index_entries:
        what.append(f"sweep {report.index_entries} index entries")
    say(out, f"Dry run on {target.where} ({policy}): a run would " + ", ".join(what) + ".")
    for tenant, thread in report.thread_ids[:_LISTED]:
        say(out, f"  tenant {tenant!r} thread {thread!r}")
    more = report.threads + report.trimmed - min(len(report.thread_ids), _LISTED)
    if more > 0:
        say(out, f"  ... and {more} more")
    say(out, "Nothing was changed.")
