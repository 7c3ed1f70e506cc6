"""``langgraph-durable prune``: apply retention from cron, on any backend.

The command only parses flags, opens the saver, reports and picks the exit code;
the pruning itself (lock, batches, what expired) is the saver's
``prune_expired``. The policy flags (``--idle``, ``--absolute``, ``--strategy``,
``--keep``), when any is given, replace the policy ``setup()`` stored as a whole
(nothing of the stored one is merged in); without them the stored policy applies;
with neither, each thread's stored expiry (written by a saver with ``retention=``)
decides. Every report says which policy ran and where it came from.

Then it sweeps the long-term memory store's expired items (the store's
``sweep_all_expired``; with ``--tenant`` only that tenant's, ``sweep_expired``):
``store_items`` in the JSON, the number deleted, or null with ``store_sweep``
saying why none ran (a dry run, the time budget spent on threads, another pruner
running, DynamoDB without ``--tenant``, whose native TTL deletes them). Expired
items are never returned whether swept or not.

Quiet for cron: a real run prints nothing unless stdout is a terminal (or
``--json`` asks for the summary line); a dry run always prints what it would
remove. Exit codes: 0 done (also when another pruner holds the lock: it says
so), 3 the time budget ran out with work left, 2 bad usage, 1 an error, or a
thread left untrimmed because a link in what ``keep-latest`` would remove is
broken (with ``LGD_INTEGRITY_KEY``: a trim never signs over a link it cannot
verify; each such link is printed to stderr as ``BROKEN ...``, like ``verify``;
the other threads are pruned).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from langgraph_durable.cli._common import (
    CommandError,
    ProgressBar,
    is_terminal,
    one_line,
    plural,
    say,
)
from langgraph_durable.cli._forget import open_store, store_class
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
            "latest checkpoints with --strategy keep-latest. The policy flags (--idle, "
            "--absolute, --strategy, --keep), when any is given, replace the policy stored "
            "by setup() as a whole; without them the stored policy applies; with neither, "
            "each thread's stored expiry decides. The report says which policy ran. One "
            "pruner runs at a time (a second exits 0 saying so); a run stopped by "
            "--max-seconds or killed is finished by the next run. With $LGD_INTEGRITY_KEY "
            "a thread is trimmed only if what goes verifies; one that does not is left "
            "whole and its broken links printed. Then the store's expired items (long-term "
            "memory) are swept, unless a dry run or the budget ran out. Exit codes: 0 "
            "done, 3 time budget reached "
            "with work left, 2 bad usage, 1 error or a thread left untrimmed over a broken "
            "link."
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
        help="delete expired threads whole (default; needs --idle or --absolute), or trim "
        "them to their latest checkpoints (every thread when no --idle or --absolute)",
    )
    parser.add_argument(
        "--keep",
        type=int,
        help="checkpoints per namespace keep-latest keeps (default 1); "
        "alone it means --strategy keep-latest",
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


def _flag_policy(args: argparse.Namespace) -> Any:
    """The policy the flags give, or None when no policy flag was given.

    Flags replace the stored policy as a whole (nothing of it is merged in):
    ``--keep`` alone means ``--strategy keep-latest``; ``delete`` needs a bound.
    """
    from langgraph_durable._core.retention import Retention, parse_duration
    from langgraph_durable.errors import DurableError

    if all(getattr(args, name) is None for name in ("idle", "absolute", "strategy", "keep")):
        return None
    strategy = args.strategy or ("keep-latest" if args.keep is not None else "delete")
    if strategy == "delete":
        if args.keep is not None:
            raise CommandError("--keep applies to --strategy keep-latest only")
        if args.idle is None and args.absolute is None:
            raise CommandError(
                "--strategy delete needs --idle or --absolute (e.g. --idle 30d): without "
                "either it would delete every thread"
            )
    try:
        return Retention(
            idle=None if args.idle is None else parse_duration(args.idle),
            absolute=None if args.absolute is None else parse_duration(args.absolute),
            strategy=strategy.replace("-", "_"),
            keep=1 if args.keep is None else args.keep,
        )
    except DurableError as exc:
        raise CommandError(one_line(exc)) from exc


def describe(policy: Any) -> str:
    """A policy in words: ``delete when 30d idle``, ``keep latest 1 of every thread``."""
    from langgraph_durable._core.retention import KEEP_LATEST

    if policy.strategy == KEEP_LATEST and not policy.expires:
        return f"keep latest {policy.keep} of every thread"
    return str(policy.describe())


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
    flagged = _flag_policy(args)
    target = resolve_target(args)
    try:
        with open_saver(target, None) as saver:
            stored = saver.stored_retention()
            policy = flagged if flagged is not None else stored
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
        store_items, store_note = _sweep_store(target, args, report)
    except (ConfigurationError, InvalidInputError, CommandError):
        raise  # bad usage: exit 2
    except DurableError as exc:
        print(f"langgraph-durable prune: error: {one_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_ERROR
    source = "flags" if flagged is not None else "stored" if stored is not None else "expiry"
    summary: dict[str, Any] = {
        "command": "prune",
        "backend": target.backend,
        "policy": describe(policy) if policy is not None else "stored expiry",
        "policy_source": source,
        "stored_policy": describe(stored) if stored is not None else None,
        **report.as_dict(),
        "store_items": store_items,
        "store_sweep": store_note,
    }
    ran = _which_policy(summary)
    if args.json:
        say(out, json.dumps(summary, separators=(",", ":")))
    elif report.locked:
        say(out, f"Another pruner is running on {target.where}: nothing done.")
    elif args.dry_run:
        _print_dry_run(out, target, report, ran, store_note)
    elif is_terminal(out):
        say(out, _sentence(target, report, ran, store_items))
    if report.refused:
        for broken in report.broken:
            print(
                f"BROKEN tenant={broken.tenant!r} thread={broken.thread!r} ns={broken.ns!r} "
                f"checkpoint={broken.checkpoint_id}: {broken.reason}",
                file=sys.stderr,
            )
        print(
            f"langgraph-durable prune: {plural(report.refused, 'thread')} not trimmed: a link "
            "in what keep-latest would remove is broken (a trim never signs over it); run "
            "langgraph-durable verify",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_ERROR
    if report.budget_exhausted:
        print(
            f"langgraph-durable prune: stopped after --max-seconds {args.max_seconds:g} with "
            "expired threads left; the next run continues",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_BUDGET
    return 0


def _sweep_store(
    target: Target, args: argparse.Namespace, report: Any
) -> tuple[int | None, str | None]:
    """Delete the store's expired items (long-term memory), after the threads.

    Returns:
        The items deleted (None when no sweep ran) and, when none ran, why.
    """
    if report.locked:
        return None, "not swept: another pruner is running"
    if report.budget_exhausted:
        return None, "not swept: the time budget ran out on threads; the next run sweeps"
    if args.dry_run:
        return None, "not counted: a dry run does not sweep the store's expired items"
    if args.tenant is not None:
        method = "sweep_expired"
    elif store_class(target.backend).supports_sweep_all:
        method = "sweep_all_expired"
    else:  # DynamoDB: the table's native TTL deletes expired items
        return None, "not swept: the table's native TTL deletes expired items"
    with open_store(target, None, args.tenant) as store:
        swept = getattr(store, method)()
    return (sum(swept.values()) if isinstance(swept, dict) else int(swept)), None


def _which_policy(summary: dict[str, Any]) -> str:
    """Which policy ran, in words, for the text reports."""
    if summary["policy_source"] == "expiry":
        return "no policy stored or given: each thread's stored expiry"
    if summary["policy_source"] == "stored":
        return f"the stored policy: {summary['policy']}"
    text = f"from the flags: {summary['policy']}"
    stored = summary["stored_policy"]
    if stored is not None and stored != summary["policy"]:
        text += f"; the stored policy ({stored}) was not used"
    return text


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _sentence(target: Target, report: Any, policy: str, store_items: int | None) -> str:
    parts = [f"{plural(report.threads, 'thread')} deleted"]
    if report.trimmed:
        parts.append(f"{report.trimmed} trimmed")
    parts.append(f"{plural(report.checkpoints, 'checkpoint')} ({_size(report.bytes)})")
    if report.partitions:
        parts.append(f"{plural(report.partitions, 'partition')} dropped")
    if report.moved:
        parts.append(f"{plural(report.moved, 'live thread')} moved to a newer partition")
    if report.index_entries:
        parts.append(f"{plural(report.index_entries, 'index entry', 'index entries')} swept")
    if report.refused:
        parts.append(f"{plural(report.refused, 'thread')} not trimmed (broken link)")
    if store_items:
        parts.append(f"{plural(store_items, 'expired store item')} swept")
    return f"Pruned {target.where} ({policy}): " + ", ".join(parts) + f" in {report.seconds:.1f}s."


def _print_dry_run(
    out: TextIO, target: Target, report: Any, policy: str, store_note: str | None
) -> None:
    what = [f"delete {plural(report.threads, 'thread')}"]
    if report.trimmed:
        what.append(f"trim {report.trimmed}")
    what.append(f"remove {plural(report.checkpoints, 'checkpoint')} ({_size(report.bytes)})")
    if report.partitions:
        what.append(f"drop {plural(report.partitions, 'partition')}")
    if report.moved:
        what.append(f"move {plural(report.moved, 'live thread')} to a newer partition")
    if report.index_entries:
        what.append(f"sweep {plural(report.index_entries, 'index entry', 'index entries')}")
    say(out, f"Dry run on {target.where} ({policy}): a run would " + ", ".join(what) + ".")
    if store_note is not None:
        say(out, f"  store items: {store_note}")
    for tenant, thread in report.thread_ids[:_LISTED]:
        say(out, f"  tenant {tenant!r} thread {thread!r}")
    more = report.threads + report.trimmed - min(len(report.thread_ids), _LISTED)
    if more > 0:
        say(out, f"  ... and {more} more")
    say(out, "Nothing was changed.")
