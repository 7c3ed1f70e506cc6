"""``langgraph-durable verify``: check the hash chain of stored history, on any backend.

The command parses flags, opens the saver with the chain key (``LGD_INTEGRITY_KEY``,
hex) and reports; the checking itself is the saver's ``verify``. Each broken link is
printed on its own line (tenant, thread, namespace, checkpoint id, why), or as one
JSON object per line with ``--json``, followed by a summary. Memory stays bounded by
the largest thread whatever the store's size. Exit codes: 0 every chain holds,
1 a link is broken (or the store failed), 2 bad usage.

Heads: ``--print-heads`` prints each thread's newest checkpoint per namespace and its
chain digest (``HEAD ...`` lines, or ``{"head": ...}`` objects with ``--json``), to be
kept outside the store; ``--heads FILE`` (such ``--json`` output, ``-`` for stdin) and
``--expect-head DIGEST`` (with ``--thread``) check that those heads are still there, so
that removing a thread's newest checkpoints, or the whole thread, is a broken link.
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
            "payload is decrypted. --print-heads exports each thread's head digest to keep "
            "outside the store; --heads / --expect-head check it is still there (removing "
            "a thread's newest checkpoints is otherwise not detectable). Exit codes: 0 every "
            "chain holds, 1 a link is broken (each reported with tenant, thread, namespace "
            "and checkpoint id), 2 bad usage."
        ),
    )
    add_target_arguments(parser)
    parser.add_argument("--tenant", help="only this tenant (default: every tenant)")
    parser.add_argument("--thread", help="only this thread (of --tenant, or the default tenant)")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per broken link, then a summary"
    )
    parser.add_argument(
        "--print-heads",
        action="store_true",
        help="also print each thread's head (newest checkpoint per namespace and its digest) "
        "to keep outside the store",
    )
    parser.add_argument(
        "--heads",
        metavar="FILE",
        help="check the heads in FILE (the output of --print-heads --json; - for stdin) "
        "are still stored: detects removal of the newest checkpoints",
    )
    parser.add_argument(
        "--expect-head",
        metavar="DIGEST",
        help="with --thread: check a checkpoint with this head digest (hex) is still stored",
    )
    parser.set_defaults(handler=run_verify)


def _read_heads(args: argparse.Namespace) -> list[Any]:
    """The anchored heads of ``--heads`` and ``--expect-head`` (CommandError when bad)."""
    from langgraph_durable._core.audit import Head
    from langgraph_durable.errors import InvalidInputError

    heads: list[Any] = []
    if args.expect_head is not None:
        if args.thread is None:
            raise CommandError("--expect-head needs --thread (the thread whose head it is)")
        try:
            digest = bytes.fromhex(args.expect_head.strip())
        except ValueError as exc:
            raise CommandError("--expect-head takes a head digest in hex") from exc
        if len(digest) != 32:
            raise CommandError("--expect-head takes a 32-byte head digest (64 hex digits)")
        tenant = args.tenant
        heads.append(Head(tenant or "", args.thread, "", None, digest))
    if args.heads is not None:
        try:
            if args.heads == "-":
                lines = sys.stdin.read().splitlines()
            else:
                with open(args.heads, encoding="utf-8") as f:
                    lines = f.read().splitlines()
        except OSError as exc:
            raise CommandError(f"--heads: cannot read {args.heads}: {exc.strerror}") from exc
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError as exc:
                raise CommandError(f"--heads: line {n} is not JSON") from exc
            if isinstance(doc, dict) and "head" in doc:  # other lines: broken links, summary
                try:
                    heads.append(Head.from_json(doc["head"]))
                except InvalidInputError as exc:
                    raise CommandError(f"--heads: line {n}: {one_line(exc)}") from exc
        if not heads:
            raise CommandError(f"--heads: {args.heads} holds no head (from --print-heads --json)")
    return heads


def run_verify(args: argparse.Namespace, out: TextIO) -> int:
    """Run ``verify`` once (see the module docstring for output and exit codes)."""
    from langgraph_durable.errors import ConfigurationError, DurableError, InvalidInputError
    from langgraph_durable.protect.integrity import INTEGRITY_KEY_ENV, integrity_from_env

    for name in ("tenant", "thread"):
        value = getattr(args, name)
        if value is not None and not value.strip():
            raise CommandError(f"--{name} must not be empty")
    anchors = _read_heads(args)
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

    def on_head(head: Any) -> None:
        if args.json:
            say(out, json.dumps({"head": head.to_json()}, separators=(",", ":")))
        else:
            say(
                out,
                f"HEAD tenant={head.tenant!r} thread={head.thread!r} ns={head.ns!r} "
                f"checkpoint={head.checkpoint_id} digest={head.digest.hex()}",
            )

    try:
        with open_saver(target, None, chain) as saver:
            tenant = args.tenant or saver.default_tenant
            heads = [
                h if h.tenant else type(h)(tenant, h.thread, h.ns, h.checkpoint_id, h.digest)
                for h in anchors
            ]
            try:
                report = saver.verify(
                    tenant_id=args.tenant,
                    thread_id=args.thread,
                    on_broken=on_broken,
                    progress=progress,
                    heads=heads,
                    on_head=on_head if args.print_heads else None,
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
