"""The request a Postgres operation yields: one SQL statement (pure, no psycopg import)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Query"]


@dataclass(frozen=True, slots=True)
class Query:
    """One SQL statement for the driver to run.

    Attributes:
        sql: The statement, with psycopg placeholders.
        params: Its parameters.
        fetch: ``"all"`` rows, ``"one"`` row (or None), or ``"none"`` (row count).
        prepare: Whether it may be a prepared statement (hot-path statements);
            DDL and multi-statement scripts are never prepared.
        settings: ``(name, value)`` pairs the driver sets transaction-locally
            (``set_config(name, value, true)``) in the same round trip, right
            before the statement (row-level security sends the tenant so).
        retry: Whether the driver may run the statement once more, on another
            connection, when its connection broke (a network cut, a server
            restart): only for a statement that, applied twice, leaves what
            applying it once leaves, and whose operation reads either result
            right (a put that finds its checkpoint stored compares it).
    """

    sql: str
    params: Sequence[Any] | dict[str, Any] = ()
    fetch: str = "none"
    prepare: bool = True
    settings: tuple[tuple[str, str], ...] = ()
    retry: bool = False

    def setter(self) -> tuple[str, list[str]]:
        """The statement that sets :attr:`settings`, and its parameters."""
        calls = ", ".join("set_config(%s, %s, true)" for _ in self.settings)
        return f"SELECT {calls}", [part for pair in self.settings for part in pair]
