"""The Agent Server tables of docs/postgres.md, redis.md and dynamodb.md name exactly the
variables each backend's checkpointer factory reads."""

from __future__ import annotations

import importlib
import re
from typing import Any

import pytest

from tests.docs.harness import REPO

#: backend -> (its page, the variable holding the required URL, a valid URL)
BACKENDS = {
    "postgres": ("docs/postgres.md", "LGD_POSTGRES_URL", "postgresql://app@db/agents"),
    "redis": ("docs/redis.md", "LGD_REDIS_URL", "redis://cache:6379/0"),
    "dynamodb": ("docs/dynamodb.md", "LGD_DYNAMODB_URL", "dynamodb://checkpoints?region=eu-west-1"),
}


class RecordingEnvironment(dict[str, str]):
    """An environment that remembers every variable asked for."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return super().__contains__(key)


def variables_read(backend: str, url_variable: str, url: str) -> set[str]:
    server = importlib.import_module(f"langgraph_durable.{backend}.server")
    env = RecordingEnvironment({url_variable: url})
    server.settings_from_env(env)
    return {name for name in env.read if name.startswith("LGD_")}


def table_variables(page: str) -> set[str]:
    text = (REPO / page).read_text(encoding="utf-8")
    section = text.split("## LangGraph Agent Server", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `LGD_")]
    assert rows, f"{page}: the Agent Server section has no table of variables"
    return {name for row in rows for name in re.findall(r"`(LGD_[A-Z0-9_]+)`", row.split("|")[1])}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_agent_server_table_is_complete_and_true(backend: str) -> None:
    page, url_variable, url = BACKENDS[backend]
    read = variables_read(backend, url_variable, url)
    assert {"LGD_INTEGRITY_KEY", "LGD_KEYRING", url_variable} <= read  # the recorder works
    documented = table_variables(page)
    assert sorted(read - documented) == [], f"{page} leaves out variables its factory reads"
    assert sorted(documented - read) == [], f"{page} names variables its factory does not read"
