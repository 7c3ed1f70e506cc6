"""Helpers shared by the ``langgraph-durable`` subcommands.

Nothing here imports a database driver at module import time; the commands
import what they need when they run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

from langgraph_durable.errors import ConfigurationError, StorageError, StorageUnavailableError

__all__ = [
    "URL_ENV_VAR",
    "CommandError",
    "ProgressBar",
    "connect",
    "mask_url",
    "one_line",
    "plural",
    "resolve_url",
    "is_terminal",
    "say",
]

#: Environment variable read when a command gets no ``--url``.
URL_ENV_VAR = "LGD_POSTGRES_URL"

#: Seconds to wait for a database connection before giving up with a clear message.
CONNECT_TIMEOUT = 10


class CommandError(Exception):
    """A command cannot go on; the message is printed as one line and the exit code is 2."""


def resolve_url(url: str | None) -> str | None:
    """Return the database URL to use: the ``--url`` value, else ``$LGD_POSTGRES_URL``.

    Args:
        url: The value given with ``--url``, or ``None``.

    Returns:
        The URL, or ``None`` when neither the option nor the variable is set.
    """
    if url:
        return url
    return os.environ.get(URL_ENV_VAR) or None


def mask_url(url: str) -> str:
    """Return ``url`` with its password replaced by ``***``, for printing.

    Args:
        url: A ``postgresql://`` URL or a libpq ``key=value`` string.

    Returns:
        The same connection string without its password.
    """
    if "://" not in url:
        return re.sub(r"(password\s*=\s*)(\S+)", r"\1***", url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    masked = url
    if parts.password:
        user = parts.username or ""
        host = parts.netloc.rsplit("@", 1)[1]
        masked = urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    return re.sub(r"(password=)([^&]+)", r"\1***", masked)


def one_line(exc: BaseException) -> str:
    """Render an exception as one line: its message with line breaks folded.

    Args:
        exc: The exception to describe.

    Returns:
        The message, or the exception's type name when it has none.
    """
    text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    return text or type(exc).__name__


def plural(count: int, word: str, words: str | None = None) -> str:
    """A count with its noun in the right number: ``1 thread``, ``2 threads``.

    Args:
        count: How many.
        word: The noun in the singular.
        words: The plural, when it is not ``word + "s"``.

    Returns:
        ``"<count> <noun>"``.
    """
    if count == 1:
        return f"{count} {word}"
    return f"{count} {words if words is not None else word + 's'}"


def say(out: TextIO, text: str = "") -> None:
    """Print one line to ``out`` and flush it, so output interleaves with child processes.

    Args:
        out: The stream to write to.
        text: The line, without its newline.
    """
    print(text, file=out, flush=True)


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is an open terminal.

    Args:
        stream: A file object (``sys.stdin``, ``sys.stderr``...).

    Returns:
        ``True`` if its ``isatty()`` says so; ``False`` for anything else.
    """
    isatty = getattr(stream, "isatty", None)
    if isatty is None:
        return False
    try:
        return bool(isatty())
    except (OSError, ValueError):  # closed or detached
        return False


class ProgressBar:
    """A one-line ``[#####     ] 12/40 tenants`` bar, redrawn in place with ``\\r``.

    It draws only when its stream is a terminal, so redirected output and logs stay
    free of control characters.

    Args:
        stream: Where to draw (``sys.stderr``).
        total: The count that completes the bar.
        unit: What is counted, after the numbers.
        width: Characters inside the brackets.
    """

    def __init__(self, stream: TextIO, total: int, unit: str, width: int = 30) -> None:
        self.stream = stream
        self.total = total
        self.unit = unit
        self.width = width
        self.enabled = is_terminal(stream) and total > 0
        self._drawn = False

    def update(self, done: int) -> None:
        """Redraw the bar at ``done`` of ``total``.

        Args:
            done: How many are complete.
        """
        if not self.enabled:
            return
        filled = self.width * min(done, self.total) // self.total
        bar = "#" * filled + " " * (self.width - filled)
        self.stream.write(f"\r[{bar}] {done}/{self.total} {self.unit}")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """End the bar's line, so what follows starts on a line of its own."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


@contextmanager
def connect(url: str) -> Iterator[Any]:
    """Open one short autocommit psycopg connection, translating failures into our errors.

    Commands call it before opening a saver, so an unreachable database fails fast with
    one clear message instead of a connection pool retrying in the background.

    Args:
        url: The PostgreSQL URL or ``key=value`` connection string.

    Yields:
        The open ``psycopg.Connection``, closed on exit.

    Raises:
        StorageUnavailableError: If the server cannot be reached or refuses the login.
        ConfigurationError: If ``url`` is not a valid connection string.
        StorageError: If a statement run on the connection fails.
    """
    import psycopg

    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
    except psycopg.OperationalError as exc:
        raise StorageUnavailableError(
            f"cannot connect to {mask_url(url)}: {one_line(exc)}"
        ) from exc
    except psycopg.Error as exc:
        raise ConfigurationError(f"invalid database URL {mask_url(url)}: {one_line(exc)}") from exc
    try:
        with conn:
            yield conn
    except psycopg.Error as exc:
        raise StorageError(one_line(exc)) from exc
