"""The pure core must not import drivers or do I/O."""

from __future__ import annotations

import ast
import pathlib

import langgraph_durable

PKG = pathlib.Path(langgraph_durable.__file__).parent
FORBIDDEN = {"psycopg", "psycopg_pool", "redis", "boto3", "botocore", "aiobotocore", "socket"}
#: Every module of the Redis package but its driver, savers and server helper.
REDIS_IMPURE = {"__init__.py", "_driver.py", "saver.py", "server.py"}
#: Every module of the PostgreSQL package but its driver, savers and server helpers.
POSTGRES_IMPURE = {"__init__.py", "_driver.py", "saver.py", "server.py", "embedded.py"}
PURE_MODULES = (
    sorted((PKG / "_core").glob("*.py"))
    + [
        PKG / "dynamodb" / "_ops.py",
        PKG / "dynamodb" / "_items.py",
        PKG / "dynamodb" / "_calls.py",
        PKG / "dynamodb" / "_threads.py",
        PKG / "dynamodb" / "_writes.py",
        PKG / "dynamodb" / "_reads.py",
        PKG / "dynamodb" / "_effects.py",
        PKG / "dynamodb" / "_admin.py",
        PKG / "dynamodb" / "_prune.py",
        PKG / "dynamodb" / "_deltas.py",
        PKG / "dynamodb" / "_objects.py",
        PKG / "effects" / "_flow.py",
    ]
    + sorted(p for p in (PKG / "redis").glob("*.py") if p.name not in REDIS_IMPURE)
    + sorted(p for p in (PKG / "postgres").glob("*.py") if p.name not in POSTGRES_IMPURE)
)


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_pure_modules_exist() -> None:
    assert len(PURE_MODULES) >= 5
    names = {p.name for p in PURE_MODULES if p.parent.name == "redis"}
    assert {"_ops.py", "_prune.py", "_keys.py", "_scripts.py"} <= names
    names = {p.name for p in PURE_MODULES if p.parent.name == "postgres"}
    assert {"_ops.py", "_prune.py", "_writes.py", "_reads.py", "_schema.py"} <= names


def test_pure_modules_import_no_driver() -> None:
    offenders = {
        str(p.relative_to(PKG)): sorted(_imports(p) & FORBIDDEN)
        for p in PURE_MODULES
        if _imports(p) & FORBIDDEN
    }
    assert offenders == {}


def test_importing_the_package_imports_no_driver() -> None:
    import subprocess
    import sys

    code = (
        "import sys, langgraph_durable, langgraph_durable.errors; "
        "from langgraph_durable import idempotent, current_effect, IdempotentToolNode; "
        "from langgraph_durable import Retention, PruneReport; "
        "print(sorted(m for m in ('psycopg', 'redis', 'boto3') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
