"""A recorded error replays without importing or calling what the record names."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from langgraph_durable.effects._flow import rebuild_error
from langgraph_durable.errors import EffectFailedError


def test_a_builtin_error_replays_as_itself() -> None:
    error = rebuild_error({"type": "builtins.ValueError", "message": "no", "args": ["no"]})
    assert type(error) is ValueError and error.args == ("no",)


def test_a_planted_module_name_is_not_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"lgd_planted_{uuid.uuid4().hex}"
    marker = tmp_path / "imported"
    (tmp_path / f"{name}.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nclass Boom(Exception):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    error = rebuild_error({"type": f"{name}.Boom", "message": "boom", "args": ["boom"]})

    assert isinstance(error, EffectFailedError) and error.error_type == f"{name}.Boom"
    assert name not in sys.modules and not marker.exists()


def test_a_record_naming_a_function_does_not_call_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[object, ...]] = []
    monkeypatch.setattr("os.system", lambda *args: calls.append(args) or 0)

    error = rebuild_error({"type": "os.system", "message": "x", "args": ["echo planted"]})

    assert isinstance(error, EffectFailedError) and calls == []


def test_an_exception_class_of_an_imported_module_is_rebuilt() -> None:
    # The tool's own module is imported by the process that replays it.
    error = rebuild_error(
        {"type": f"{__name__}.DeclinedError", "message": "declined", "args": ["declined"]}
    )
    assert type(error) is DeclinedError and str(error) == "declined"


class DeclinedError(Exception):
    pass
