"""The ``langgraph-durable`` command line.

Subcommands:

* ``demo``: kill a LangGraph agent with SIGKILL mid-run and resume it from PostgreSQL.
* ``setup``: make a store ready for the savers (PostgreSQL migrations, Redis server
  checks and scripts, the DynamoDB table).
* ``rotate-keys``: rewrap the tenants' data keys under the keyring's active key
  (PostgreSQL, Redis or DynamoDB).
* ``shred``: crypto-shred a tenant by deleting its data keys.
* ``prune``: delete or trim expired threads (retention, from cron); exit 3 when its
  time budget ran out with work left, 1 when the store failed.
* ``verify``: check the hash chain of stored history (``integrity=``); exit 1 when a
  link is broken.
* ``forget``: delete a tenant's long-term memory (store items, all or under a namespace
  prefix) and, when asked, threads, reporting what was removed; exit 1 when the store
  failed.

Importing this package imports no database driver and no LangGraph; each command imports what
it needs when it runs. Errors the user can act on (bad options, an unreachable database) are
printed as one line on stderr with exit code 2, without a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from langgraph_durable import __version__
from langgraph_durable.cli import _demo, _forget, _keys, _prune, _setup, _verify
from langgraph_durable.cli._common import CommandError, one_line
from langgraph_durable.errors import DurableError

__all__ = ["main", "build_parser"]

PROG = "langgraph-durable"

# Missing optional dependencies, and the extra that installs each.
_EXTRAS = {
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "pgserver": "embedded",
    "redis": "redis",
    "boto3": "dynamodb",
    "botocore": "dynamodb",
    "langgraph": "all",
    "langchain_core": "all",
}


# Drivers whose errors, when one escapes translation, are still reported in one line.
_DRIVERS = ("psycopg", "psycopg_pool", "redis", "botocore", "boto3")


class _UsageError(Exception):
    """Raised instead of argparse's print-usage-and-exit, so ``main`` controls the output."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{self.prog}: error: {message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of ``langgraph-durable`` and its subcommands.

    Returns:
        The parser; each subcommand stores its handler as ``handler`` in the parsed namespace.
    """
    parser = _Parser(
        prog=PROG,
        description="Production checkpoint savers for LangGraph: command-line tools.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _demo.add_parser(subparsers)
    _setup.add_parser(subparsers)
    _keys.add_parsers(subparsers)
    _prune.add_parser(subparsers)
    _verify.add_parser(subparsers)
    _forget.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``langgraph-durable`` with ``argv`` (default: ``sys.argv[1:]``).

    Args:
        argv: The command-line arguments, without the program name.

    Returns:
        The exit code: 0 on success, 1 if a command ran but its result is wrong (a failed
        demo check), 2 for bad arguments, missing dependencies or an unusable database,
        130 if interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        return _fail(str(exc))
    except SystemExit as exc:  # --help and --version print and exit
        return exc.code if isinstance(exc.code, int) else 0
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.handler(args, sys.stdout))
    except (DurableError, CommandError) as exc:
        return _fail(f"{PROG} {args.command}: error: {one_line(exc)}")
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top not in _EXTRAS:
            raise
        return _fail(
            f"{PROG} {args.command}: error: {top} is not installed; "
            f"install it with: pip install 'langgraph-durable[{_EXTRAS[top]}]'"
        )
    except KeyboardInterrupt:
        return _fail(f"{PROG} {args.command}: interrupted", code=130)
    except Exception as exc:
        # A driver error that escaped translation still deserves a one-line message.
        if type(exc).__module__.partition(".")[0] not in _DRIVERS:
            raise
        return _fail(f"{PROG} {args.command}: database error: {one_line(exc)}")


def _fail(message: str, code: int = 2) -> int:
    print(message, file=sys.stderr, flush=True)
    return code
