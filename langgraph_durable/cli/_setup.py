"""``langgraph-durable setup``: make a store ready for the savers, on any backend.

The URL's scheme picks the saver (see :mod:`._savers`), whose ``setup()`` does the work:

* PostgreSQL: apply the schema migrations (under an advisory lock);
* Redis: check the server version and configuration and load the scripts (keys need no
  schema: nothing is created);
* DynamoDB: create the table (on-demand billing) and enable its TTL when the URL's
  settings need it, or check an existing one.

Each ``setup()`` returns the list of what it changed (empty when the store was ready), so
running the command again prints that there is nothing to do: it is safe on every deploy.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from langgraph_durable.cli._common import plural, say
from langgraph_durable.cli._savers import Target, add_target_arguments, open_saver, resolve_target

__all__ = ["add_parser", "run_setup"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register the ``setup`` subcommand.

    Args:
        subparsers: The object returned by ``ArgumentParser.add_subparsers``.
    """
    parser = subparsers.add_parser(
        "setup",
        help="create or upgrade the saver's schema, table or scripts (any backend)",
        description=(
            "Make a store ready for the savers: on PostgreSQL apply the schema migrations, "
            "on Redis check the server and load the scripts, on DynamoDB create the table "
            "(and enable its TTL when the URL's retention settings need it). Prints what this "
            "run changed. Running it again changes nothing; it is safe to run on every deploy."
        ),
    )
    add_target_arguments(parser)
    parser.set_defaults(handler=run_setup)


def run_setup(args: argparse.Namespace, out: TextIO) -> int:
    """Run the saver's ``setup()`` on the store ``--url`` names and report what changed.

    Args:
        args: Parsed options: ``url``, ``schema`` and ``prefix``.
        out: Where to print the report.

    Returns:
        The exit code, 0.

    Raises:
        CommandError: If no URL was given, or an option does not fit its backend.
        DurableError: If the store is unreachable or the setup fails.
    """
    target = resolve_target(args)
    with _quiet_redis_log(), open_saver(target, None) as saver:
        changes = saver.setup()
    if target.backend == "postgres":
        _report_postgres(out, target, changes)
    elif target.backend == "redis":
        _report_redis(out, target, changes)
    else:
        _report_dynamodb(out, target, changes)
    return 0


def _report_postgres(out: TextIO, target: Target, applied: list[int]) -> None:
    if applied:
        versions = ", ".join(str(v) for v in applied)
        noun = "migration" if len(applied) == 1 else "migrations"
        say(out, f"Applied {noun} {versions} to {target.where}.")
    else:
        say(out, f"Nothing to apply: {target.where} is up to date.")


def _report_redis(out: TextIO, target: Target, result: Any) -> None:
    servers = ", ".join(sorted(set(result.versions)))
    primaries = plural(len(result.versions), "primary", "primaries")
    say(
        out,
        f"Ready: {target.where} (Redis {servers} on {primaries}); scripts loaded, "
        "nothing to create (Redis keys need no schema).",
    )
    for warning in result.warnings:
        say(out, f"Warning: {warning}")


def _report_dynamodb(out: TextIO, target: Target, changes: list[str]) -> None:
    if changes:
        say(out, f"Set up {target.where}: {', '.join(changes)}.")
    else:
        say(out, f"Nothing to do: {target.where} is ready.")


@contextmanager
def _quiet_redis_log() -> Iterator[None]:
    """Keep the Redis saver's configuration warnings off stderr: the report prints them."""
    logger = logging.getLogger("langgraph_durable.redis")
    handler = logging.NullHandler()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
