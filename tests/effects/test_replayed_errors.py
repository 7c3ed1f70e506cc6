"""A recorded error is data: it replays as itself only when its type is on the allowlist
(builtin exception types, langgraph_durable.errors, ``replay_errors=``), else as
``EffectFailedError`` carrying the type's name; nothing the record names is imported,
called or built."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from langgraph_durable.effects import idempotent
from langgraph_durable.effects._flow import rebuild_error
from langgraph_durable.errors import ConfigurationError, EffectFailedError, InvalidInputError


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


def test_a_class_of_an_imported_module_is_not_built_unless_allowed() -> None:
    # The class is importable and imported; the record still only names it.
    record = {"type": f"{__name__}.DeclinedError", "message": "declined", "args": ["declined"]}
    error = rebuild_error(record)
    assert isinstance(error, EffectFailedError)
    assert error.error_type == f"{__name__}.DeclinedError" and "declined" in str(error)
    assert DeclinedError.built == 0
    # listed in @idempotent(replay_errors=...): built again from the recorded arguments
    error = rebuild_error(record, (DeclinedError,))
    assert type(error) is DeclinedError and str(error) == "declined"


def test_package_errors_are_on_the_allowlist() -> None:
    error = rebuild_error(
        {"type": "langgraph_durable.errors.InvalidInputError", "message": "x", "args": ["x"]}
    )
    assert type(error) is InvalidInputError


def test_arguments_that_are_not_plain_values_are_not_passed() -> None:
    error = rebuild_error({"type": "builtins.ValueError", "message": "m", "args": [{"a": 1}]})
    assert isinstance(error, EffectFailedError) and error.error_type == "builtins.ValueError"


def test_replay_errors_must_be_exception_classes() -> None:
    with pytest.raises(ConfigurationError):
        idempotent(replay_errors=("ValueError",))(lambda: None)


class DeclinedError(Exception):
    built = 0

    def __init__(self, *args: object) -> None:
        DeclinedError.built += 1
        super().__init__(*args)
