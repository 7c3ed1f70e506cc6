"""``langgraph-durable verify``: check the hash chain of stored history, on any backend.

The command parses flags, opens the saver with the chain key (``LGD_INTEGRITY_KEY``,
hex) and reports; the checking itself is the saver's ``verify``. Each broken link is
printed on its own line (tenant, thread, namespace, checkpoint id, why), or as one
JSON object per line with ``--json``, followed by a summary. Memory stays bounded by
the largest thread whatever the store's size. Exit codes: 0 every chain holds,
1 a link is broken (or the store failed), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from langgraph_durable.cli._common import CommandError, is_terminal, one_line, plural, say
from langgraph_durable.cli._savers import add_target_arguments, open_saver, resolve_target

__all__ = ["add_parser", "run_verify", "EXIT_BROKEN"]

#: Exit code when a link is broken or the store failed.
EXIT_BROKEN = 1


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register the ``verify`` subcommand."""
    parser = subparsers.add_parser(
        "verify",
        help="check that stored history was not altered (hash chain)",
        description=(
            "Check every stored checkpoint's integrity tag and its link to its parent "
            "(or to the tombstone a trim left), thread by thread. Needs the chain key in "
            "$LGD_INTEGRITY_KEY (hex), the key the savers were given as integrity=. No "
            "payload is decrypted. Exit codes: 0 every chain holds, 1 a link is broken "
            "(each reported with tenant, thread, namespace and checkpoint id), 2 bad usage."
        ),
    )
    add_target_arguments(parser)
    parser.add_argument("--tenant", help="only this tenant (default: every tenant)")
    parser.add_argument("--thread", help="only this thread (of --tenant, or the default tenant)")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per broken link, then a summary"
    )
    parser.set_defaults(handler=run_verify)


def run_verify(args: argparse.Namespace, out: TextIO) -> int:
    """Run ``verify`` once (see the module docstring for output and exit codes)."""
    from langgraph_durable.errors import ConfigurationError, DurableError, InvalidInputError
    from langgraph_durable.protect.integrity import INTEGRITY_KEY_ENV, integrity_from_env

    for name in ("tenant", "thread"):
        value = getattr(args, name)
        if value is not None and not value.strip():
            raise CommandError(f"--{name} must not be empty")
    chain = integrity_from_env()
    if chain is None:
        raise CommandError(
            f"verify needs the chain key: set ${INTEGRITY_KEY_ENV} to the hex key the savers "
            "were given as integrity="
        )
    target = resolve_target(args)
    terminal = is_terminal(sys.stderr)
    drawn = False

    def progress(report: Any) -> None:
        # the total is not known in advance: a running count, redrawn in place
        nonlocal drawn
        if terminal:
            sys.stderr.write(
                f"\rverify: {plural(report.threads, 'thread')}, "
                f"{plural(report.checkpoints, 'checkpoint')}, {report.broken} broken"
            )
            sys.stderr.flush()
            drawn = True

    def on_broken(broken: Any) -> None:
        if args.json:
            say(out, json.dumps({"broken": broken.to_json()}, separators=(",", ":")))
        else:
            say(
                out,
                f"BROKEN tenant={broken.tenant!r} thread={broken.thread!r} ns={broken.ns!r} "
                f"checkpoint={broken.checkpoint_id}: {broken.reason}",
            )

    try:
        with open_saver(target, None, chain) as saver:
            try:
                report = saver.verify(
                    tenant_id=args.tenant,
                    thread_id=args.thread,
                    on_broken=on_broken,
                    progress=progress,
                )
            finally:
                if drawn:
                    sys.stderr.write("\n")
                    sys.stderr.flush()
    except (ConfigurationError, InvalidInputError, CommandError):
        raise  # bad usage: exit 2
    except DurableError as exc:
        print(f"langgraph-durable verify: error: {one_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_BROKEN
    summary = {"command": "verify", "backend": target.backend, **report.to_json()}
    if args.json:
        say(out, json.dumps(summary, separators=(",", ":")))
    else:
        state = "every chain holds" if report.ok else plural(report.broken, "broken link")
        say(
            out,
            f"Verified {plural(report.checkpoints, 'checkpoint')} in "
            f"{plural(report.threads, 'thread')} on {target.where}: {state}.",
        )
    return 0 if report.ok else EXIT_BROKEN
