"""Run the fenced blocks of README.md and docs/*.md, in page order, one namespace per page.

Every fenced block of a page goes through :func:`fence_parser`, which picks what to do by
the block's info string:

=================================  ==========================================================
``python``                         executed (top-level ``await`` allowed); the blocks of a
                                   page share one namespace, in page order
``sh``, ``bash``, ``shell``        executed by ``bash -euo pipefail``; must exit 0
``console``                        each ``$ `` line (with ``\\`` continuations) executed as
                                   above; the other lines are output and not compared
``json``                           parsed; a ``"checkpointer"`` or ``"store"``
                                   ``{"path": "package.module.name"}`` must import, read
                                   as the Agent Server reads it (split at the last ``.``)
``sql``                            executed on the page's PostgreSQL database
anything else, or no info string   a failure, unless marked as an excerpt
=================================  ==========================================================

A block that cannot run here (it needs AWS, a network, a deployment, or it shows output)
is marked as an excerpt with the reason, on the line before it::

    <!-- skip: next "needs a real AWS KMS key" -->

(Sybil's skip directive; a skip without a reason, or a ``skip: start`` range, is refused.)

The pages run with the services of the test rig (``tests/servers.py``), each in
isolation: a database of its own on the rig's PostgreSQL, a Redis server of its own, an
AWS account of its own on the rig's moto server. The environment of a page is what a
user's shell would have (see :func:`page_environment` in ``conftest.py``), and
its namespace starts with ``builder`` (a ``StateGraph`` of one node over
``MessagesState``, not compiled) and ``inputs`` (its input), the two names the pages use
for "your graph".
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import SkipTest

from sybil import Document, Example, Region
from sybil.evaluators.python import pad
from sybil.parsers.markdown import SkipParser
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

__all__ = [
    "PAGES",
    "PageRun",
    "REPO",
    "fence_lines",
    "fence_parser",
    "is_excerpt_marker",
    "parse_page",
    "run_page",
    "starting_namespace",
]

REPO = Path(__file__).resolve().parents[2]

#: The pages whose blocks run: the README and every page of docs/.
PAGES: tuple[Path, ...] = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))

SHELL_LANGUAGES = frozenset({"sh", "bash", "shell"})
#: Seconds one shell block may take.
SHELL_TIMEOUT = 120

_INFO = re.compile(r"(?P<info>[^\n]*)$\n", re.MULTILINE)
_DIRECTIVE = re.compile(r"<!--+\s*skip:?[ \t]*(?P<arguments>.*?)\s*--+>")


class UnmarkedBlockError(AssertionError):
    """A fenced block that is neither run by the harness nor marked as an excerpt."""


# --------------------------------------------------------------------------- evaluators


def run_python(example: Example) -> None:
    """Execute a ``python`` block in the page's namespace (top-level ``await`` allowed)."""
    source = pad(example.parsed, example.line + example.parsed.line_offset)
    code = compile(
        source, str(example.path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    result = eval(code, example.namespace)
    if inspect.iscoroutine(result):
        asyncio.run(result)
    example.namespace.pop("__builtins__", None)


def _shell(script: str, where: str) -> None:
    completed = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=SHELL_TIMEOUT,
        env=dict(os.environ),
    )
    if completed.returncode != 0:
        raise AssertionError(
            f"{where}: exit status {completed.returncode}\n--- script\n{script}\n"
            f"--- stdout\n{completed.stdout}\n--- stderr\n{completed.stderr}"
        )


def run_shell(example: Example) -> None:
    """Execute an ``sh`` block with ``bash -euo pipefail``; it must exit 0."""
    _shell(str(example.parsed), f"{example.path}:{example.line}")


def console_commands(text: str) -> str:
    """The commands of a ``console`` block: its ``$ `` lines with their ``\\`` continuations."""
    commands: list[str] = []
    continuing = False
    for line in text.splitlines():
        if continuing:
            commands[-1] += "\n" + line
        elif line.startswith("$ "):
            commands.append(line[2:])
        else:
            continue
        continuing = line.endswith("\\")
    if not commands:
        raise AssertionError("a console block without a `$ ` command line")
    return "\n".join(commands) + "\n"


def run_console(example: Example) -> None:
    """Execute the ``$ `` commands of a ``console`` block; the output lines are not compared."""
    _shell(console_commands(str(example.parsed)), f"{example.path}:{example.line}")


def check_json(example: Example) -> None:
    """Parse a ``json`` block; a checkpointer or store path in it must import.

    The Agent Server (langgraph-api) reads a path that is not a file (``./x.py:name``)
    as a module and an attribute split at the last ``.``: ``package.module:name`` is
    not found there, so it fails here too.
    """
    document = json.loads(str(example.parsed))
    for setting in ("checkpointer", "store"):
        entry = document.get(setting) if isinstance(document, dict) else None
        if not (isinstance(entry, dict) and "path" in entry):
            continue
        path = str(entry["path"])
        assert ":" not in path, f"{path}: the Agent Server wants package.module.name here"
        module, _, name = path.rpartition(".")
        factory = getattr(importlib.import_module(module), name)
        assert callable(factory), f"{path} is not callable"


def run_sql(example: Example) -> None:
    """Execute an ``sql`` block on the page's database (``LGD_POSTGRES_URL``)."""
    import psycopg

    with psycopg.connect(os.environ["LGD_POSTGRES_URL"], autocommit=True) as conn:
        conn.execute(str(example.parsed).encode())


def unmarked(example: Example) -> None:
    """The evaluator of a block the harness cannot run: it fails unless skipped."""
    info = example.region.lexemes.get("info") or "(no info string)"
    raise UnmarkedBlockError(
        f"a ```{info} block is neither run by the docs tests "
        'nor marked as an excerpt: put <!-- skip: next "why it cannot run" --> before it'
    )


EVALUATORS: dict[str, Callable[[Example], None]] = {
    "python": run_python,
    **dict.fromkeys(SHELL_LANGUAGES, run_shell),
    "console": run_console,
    "json": check_json,
    "sql": run_sql,
}


# --------------------------------------------------------------------------- parsers


def fence_parser(document: Document) -> Iterable[Region]:
    """Every fenced block of the page, with the evaluator its info string selects."""
    lexer = RawFencedCodeBlockLexer(info_pattern=_INFO)
    for region in lexer(document):
        info = str(region.lexemes["info"]).strip()
        language = info.split()[0] if info else ""
        region.parsed = region.lexemes["source"]
        region.evaluator = EVALUATORS.get(language, unmarked)
        yield region


_SKIP = SkipParser()


def _fenced_spans(document: Document) -> list[tuple[int, int]]:
    return [(r.start, r.end) for r in RawFencedCodeBlockLexer(info_pattern=_INFO)(document)]


def skip_parser(document: Document) -> Iterable[Region]:
    """Sybil's skip directive (outside fenced blocks), restricted to ``skip: next "reason"``."""
    fenced = _fenced_spans(document)
    for region in _SKIP(document):
        if any(start <= region.start < end for start, end in fenced):
            continue  # a directive shown inside a block
        action, reason = region.parsed
        line = document.text.count("\n", 0, region.start) + 1
        if action != "next":
            raise ValueError(
                f'{document.path}:{line}: only `skip: next "reason"` marks an excerpt '
                f"(got `skip: {action}`)"
            )
        try:
            text = ast.literal_eval(reason) if reason else None
        except (ValueError, SyntaxError):
            text = None
        if not isinstance(text, str) or not text.strip():
            raise ValueError(
                f"{document.path}:{line}: an excerpt needs its reason: "
                '<!-- skip: next "why it cannot run" -->'
            )
        yield region


def is_excerpt_marker(region: Region) -> bool:
    """Whether ``region`` is a skip directive (rather than a fenced block)."""
    return region.evaluator is _SKIP.skipper


def parse_page(path: Path) -> Document:
    """The page with a region for every fenced block and every skip directive."""
    document = Document.parse(str(path), fence_parser, skip_parser)
    fenced = _fenced_spans(document)
    directives = sum(
        1
        for match in _DIRECTIVE.finditer(document.text)
        if not any(start <= match.start() < end for start, end in fenced)
    )
    skips = sum(1 for _, region in document.regions if is_excerpt_marker(region))
    if directives != skips:
        raise ValueError(f"{path}: a skip directive is malformed (Sybil read {skips} of them)")
    return document


# --------------------------------------------------------------------------- running


def starting_namespace() -> dict[str, Any]:
    """``builder`` and ``inputs``: the graph a page calls "your graph", and its input."""
    from langgraph.graph import START, MessagesState, StateGraph

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [("ai", f"you said: {state['messages'][-1].content}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return {"builder": builder, "inputs": {"messages": [("user", "hi")]}}


@dataclass
class PageRun:
    """What running a page did: the blocks run and the excerpts with their reasons."""

    path: Path
    ran: list[int] = field(default_factory=list)
    seconds: dict[int, float] = field(default_factory=dict)
    excerpts: list[tuple[int, str]] = field(default_factory=list)


def run_page(path: Path, namespace: dict[str, Any] | None = None) -> PageRun:
    """Run every block of ``path`` in order; raise at the first that fails.

    Args:
        path: A Markdown page.
        namespace: The names the page's Python blocks start with
            (default: :func:`starting_namespace`).

    Returns:
        The lines of the blocks that ran and of the excerpts (with their reasons).
    """
    document = parse_page(path)
    document.namespace.update(starting_namespace() if namespace is None else namespace)
    document.namespace["__name__"] = "__docs__"
    run = PageRun(path)
    for example in document.examples():
        if is_excerpt_marker(example.region):
            example.evaluate()
            continue
        started = time.perf_counter()
        try:
            example.evaluate()
        except SkipTest as excerpt:
            run.excerpts.append((example.line, str(excerpt)))
            continue
        except Exception as exc:
            where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}"
            raise AssertionError(
                f"{where}:{example.line}: block failed: {type(exc).__name__}: {exc}"
            ) from exc
        run.ran.append(example.line)
        run.seconds[example.line] = time.perf_counter() - started
    return run


def fence_lines(text: str) -> list[int]:
    """Lines of the fences that open a block, found independently of Sybil (for a check)."""
    lines: list[int] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.lstrip()
        if fence is None:
            match = re.match(r"(`{3,}|~{3,})", stripped)
            if match:
                fence = match.group(1)
                lines.append(number)
        elif stripped.startswith(fence) and not stripped[len(fence) :].strip():
            fence = None
    return lines


if __name__ == "__main__":  # pragma: no cover - a quick look at what a page holds
    for page in sys.argv[1:]:
        for example in parse_page(Path(page)).examples():
            print(page, example.line, getattr(example.region.evaluator, "__name__", "skip"))
