"""docs/cli.md names every command and every option the CLI has (the parser is the truth)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from langgraph_durable.cli import build_parser

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:  # argparse keeps its sub-parsers on this action only
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the CLI has no sub-commands")


def _section(text: str, command: str) -> str:
    """The page's section for ``command``: from its heading to the next one of that level."""
    match = re.search(rf"^(#+) `?{re.escape(command)}`?\s*$", text, re.MULTILINE)
    assert match, f"docs/cli.md has no section headed {command!r}"
    level = match.group(1)
    rest = text[match.end() :]
    end = re.search(rf"^{level} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def test_every_command_is_in_the_command_table() -> None:
    text = PAGE.read_text(encoding="utf-8")
    table = text[: text.index("\n\n", text.index("| Command |"))]
    missing = [name for name in _commands() if f"`{name}`" not in table]
    assert not missing, f"docs/cli.md's command table leaves out {missing}"


def test_every_option_of_every_command_is_in_its_section() -> None:
    text = PAGE.read_text(encoding="utf-8")
    missing = []
    for name, parser in _commands().items():
        section = _section(text, name)
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:  # internal (the demo's child process)
                continue
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help" and f"`{flag}" not in section:
                    missing.append(f"{name} {flag}")
    assert not missing, f"docs/cli.md does not document {missing}"
