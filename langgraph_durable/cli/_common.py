"""Helpers shared by the ``langgraph-durable`` subcommands.

Nothing here imports a database driver at module import time; the commands
import what they need when they run.
"""

from __future__ import annotations

import os
import re
from typing import TextIO
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "URL_ENV_VAR",
    "CommandError",
    "mask_url",
    "one_line",
    "resolve_url",
    "say",
]

#: Environment variable read when a command gets no ``--url``.
URL_ENV_VAR = "LGD_POSTGRES_URL"

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


def say(out: TextIO, text: str = "") -> None:
    """Print one line to ``out`` and flush it, so output interleaves with child processes.

    Args:
        out: The stream to write to.
        text: The line, without its newline.
    """
    print(text, file=out, flush=True)
