"""``langgraph-durable setup``: apply the PostgreSQL saver's schema migrations."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from langgraph_durable.cli._common import (
    URL_ENV_VAR,
    CommandError,
    connect,
    mask_url,
    resolve_url,
    say,
)

__all__ = ["add_parser", "run_setup"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register the ``setup`` subcommand.

    Args:
        subparsers: The object returned by ``ArgumentParser.add_subparsers``.
    """
    parser = subparsers.add_parser(
        "setup",
        help="create or upgrade the saver's tables in a PostgreSQL database",
        description=(
            "Apply the PostgreSQL saver's schema migrations and print the versions this run "
            "applied. Running it again applies nothing; it is safe to run on every deploy."
        ),
    )
    parser.add_argument(
        "--url",
        help=f"PostgreSQL connection URL (default: ${URL_ENV_VAR})",
    )
    parser.add_argument(
        "--schema",
        help="schema that holds the saver's tables (default: the saver's default schema)",
    )
    parser.set_defaults(handler=run_setup)


def run_setup(args: argparse.Namespace, out: TextIO) -> int:
    """Run the saver's migrations against ``args.url`` and report what was applied.

    Args:
        args: Parsed options: ``url`` and ``schema``.
        out: Where to print the report.

    Returns:
        The exit code, 0.

    Raises:
        CommandError: If no URL was given.
        DurableError: If the database is unreachable or a migration fails.
    """
    url = resolve_url(args.url)
    if url is None:
        raise CommandError(f"setup needs a database: pass --url or set ${URL_ENV_VAR}")
    from langgraph_durable.postgres import PostgresSaver
    from langgraph_durable.postgres._schema import validate_schema_name

    kwargs: dict[str, Any] = {}
    if args.schema is not None:
        kwargs["schema"] = validate_schema_name(args.schema)

    with connect(url):  # fail fast, with the URL in the message, if it is unreachable
        pass
    with PostgresSaver.from_conn_string(url, **kwargs) as saver:
        applied = list(saver.setup())
        where = f"schema {saver.schema!r}"
    if applied:
        versions = ", ".join(str(v) for v in applied)
        say(out, f"Applied migrations {versions} to {where} at {mask_url(url)}.")
    else:
        say(out, f"Nothing to apply: {where} at {mask_url(url)} is up to date.")
    return 0
