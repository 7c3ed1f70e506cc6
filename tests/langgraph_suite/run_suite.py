#!/usr/bin/env python
"""Run LangGraph's own test suite against our checkpoint savers.

The ``langgraph`` sdist on PyPI ships the full ``tests/`` directory of its release. This
script:

1. reads the installed ``langgraph`` version and takes that version's sdist from the
   cache under ``.lgd/langgraph-suite/`` in the repository root (git ignores it), where
   ``make setup`` put it (``--fetch-only``); it is downloaded with ``pip download`` only if
   it is missing, so after ``make setup`` the suite runs with no network;
2. copies the sdist's ``tests/`` and ``pyproject.toml`` into a fresh work directory, so
   that the *installed* ``langgraph`` is the one under test;
3. copies ``conftest_durable.py`` (next to this file) into that ``tests/`` package and
   patches the suite's ``tests/conftest.py`` so that its ``sync_checkpointer`` and
   ``async_checkpointer`` fixtures also take our saver names, and its ``sync_store`` and
   ``async_store`` fixtures our store names (``durable_store_pg``, ...), and dispatch
   them to ``conftest_durable``. Our stores run only with the in-memory checkpointer
   (``memory``), our savers only with the suite's in-memory store;
4. runs pytest there with ``NO_DOCKER=true``, ``-k`` selecting the chosen savers, on the
   test files that use those fixtures, and exits with pytest's code (except that "no
   tests collected" is a failure);
5. runs the tests that failed once more, one at a time, when there are at most
   ``RERUN_MAX`` of them: a few of the suite's tests assert wall-clock timings (e.g. a
   chunk must arrive within 0.5-0.8 s), which a loaded machine can miss. A test passes
   only if its second run passes; every rerun is named in the log.

Usage (from the repository root, with the project's virtualenv)::

    python tests/langgraph_suite/run_suite.py                      # all our savers
    python tests/langgraph_suite/run_suite.py --saver redis        # both Redis savers
    python tests/langgraph_suite/run_suite.py --saver durable_pg   # sync PG saver only
    python tests/langgraph_suite/run_suite.py --saver durable_pg_all  # ... every protection on
    python tests/langgraph_suite/run_suite.py --saver upstream     # stock savers (baseline)
    python tests/langgraph_suite/run_suite.py --saver durable_pg --store redis  # + Redis stores
    python tests/langgraph_suite/run_suite.py --files test_pregel.py --extra-k interrupt
    python tests/langgraph_suite/run_suite.py -- -x --lf           # after "--": to pytest

Services come from the test rig (``tests/servers.py``), only those the chosen savers
need, resolved once here and handed to pytest (and its xdist workers) through the
environment: PostgreSQL (``LGD_POSTGRES_URL``, else 127.0.0.1:5432 if it answers, else a
throwaway server), Redis (``LGD_REDIS_URL``, else 127.0.0.1:6379 if it answers, else a
throwaway ``redis-server``) and DynamoDB (``LGD_DYNAMODB_ENDPOINT``, else moto's server,
run inside this process). Throwaway servers are stopped when the run ends.

Test dependencies (besides pytest): pytest-mock, syrupy, pycryptodome, redis,
langgraph-checkpoint-sqlite, langgraph-checkpoint-postgres, and for the DynamoDB savers
boto3 and moto[server]; pytest-xdist and pytest-timeout are used when installed.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
DEFAULT_CACHE = REPO_ROOT / ".lgd" / "langgraph-suite"

# The suite's fixtures that take a checkpointer or a store; a test file is run when it
# uses one.
FIXTURES = ("sync_checkpointer", "async_checkpointer", "sync_store", "async_store")
ALIASES = {
    "durable": (
        "durable_pg",
        "durable_pg_async",
        "durable_redis",
        "durable_redis_async",
        "durable_dynamodb",
        "durable_dynamodb_async",
        "durable_pg_all",
        "durable_redis_all_async",
        "durable_dynamodb_all_async",
    ),
    "postgres": ("durable_pg", "durable_pg_async", "durable_pg_all"),
    "redis": ("durable_redis", "durable_redis_async", "durable_redis_all_async"),
    "dynamodb": ("durable_dynamodb", "durable_dynamodb_async", "durable_dynamodb_all_async"),
    "protected": ("durable_pg_all", "durable_redis_all_async", "durable_dynamodb_all_async"),
    "upstream": ("upstream_pg", "upstream_pg_async"),
}
STORE_ALIASES = {
    "durable": (
        "durable_store_pg",
        "durable_store_pg_async",
        "durable_store_redis",
        "durable_store_redis_async",
        "durable_store_dynamodb",
        "durable_store_dynamodb_async",
    ),
    "postgres": ("durable_store_pg", "durable_store_pg_async"),
    "redis": ("durable_store_redis", "durable_store_redis_async"),
    "dynamodb": ("durable_store_dynamodb", "durable_store_dynamodb_async"),
    "none": (),
}
#: The one checkpointer our stores run with (the suite's in-memory saver).
STORE_CHECKPOINTER = "memory"
REQUIRED_MODULES = {
    "pytest_mock": "pytest-mock",
    "syrupy": "syrupy",
    "Crypto": "pycryptodome",
    "redis": "redis",
    "langgraph.checkpoint.sqlite": "langgraph-checkpoint-sqlite",
    "langgraph.checkpoint.postgres": "langgraph-checkpoint-postgres",
    "anyio": "anyio",
    "psycopg": "psycopg",
}


class SuiteError(RuntimeError):
    """The harness could not be prepared (not a test failure)."""


def log(msg: str) -> None:
    print(f"[langgraph-suite] {msg}", file=sys.stderr, flush=True)


def load_factories() -> ModuleType:
    """conftest_durable.py, loaded by path (it imports nothing heavy at module level)."""
    spec = importlib.util.spec_from_file_location(
        "_lgd_conftest_durable", HERE / "conftest_durable.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the sdist ------------------------------------------------------------------


def fetch_sdist(version: str, cache: Path, package: str = "langgraph") -> Path:
    """``package``'s sdist of ``version`` from ``cache``, downloaded into it if missing."""
    cache.mkdir(parents=True, exist_ok=True)
    for existing in sorted(cache.glob(f"{package}-{version}.tar.gz")):
        return existing
    log(f"downloading the {package} {version} sdist")
    with tempfile.TemporaryDirectory(dir=cache, prefix="download-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"{package}=={version}",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--disable-pip-version-check",
            "-d",
            tmp,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SuiteError(f"pip download failed:\n{proc.stdout}\n{proc.stderr}")
        found = [p for p in Path(tmp).iterdir() if p.name.endswith(".tar.gz")]
        if len(found) != 1:
            raise SuiteError(f"expected one .tar.gz from pip download, got {found}")
        target = cache / f"{package}-{version}.tar.gz"
        os.replace(found[0], target)
    return target


def unpack(sdist: Path, workdir: Path, need_conftest: bool = True) -> None:
    """Copy the sdist's tests/ and pyproject.toml (not the package source) to workdir."""
    with tarfile.open(sdist) as tar:
        members = []
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if len(parts) < 2:
                continue
            rel = parts[1:]
            if rel == ("pyproject.toml",) or rel[0] == "tests":
                if not (member.isfile() or member.isdir()):
                    continue
                if any(p in ("..", "") for p in rel) or Path(member.name).is_absolute():
                    raise SuiteError(f"unsafe path in sdist: {member.name}")
                member.name = str(Path(*rel))
                members.append(member)
        if not any(m.name == "pyproject.toml" for m in members):
            raise SuiteError(f"{sdist.name} has no pyproject.toml")
        if need_conftest and not any(
            m.name == os.path.join("tests", "conftest.py") for m in members
        ):
            raise SuiteError(f"{sdist.name} has no tests/conftest.py")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(workdir, members=members, filter="data")
        else:  # pragma: no cover - Python < 3.10.12
            tar.extractall(workdir, members=members)


# --- the patch ------------------------------------------------------------------

IMPORT_LINE = (
    "from tests.conftest_durable import (\n"
    "    ASYNC_NAMES as _LGD_ASYNC_NAMES,\n"
    "    ASYNC_STORE_NAMES as _LGD_ASYNC_STORE_NAMES,\n"
    "    SYNC_NAMES as _LGD_SYNC_NAMES,\n"
    "    SYNC_STORE_NAMES as _LGD_SYNC_STORE_NAMES,\n"
    "    async_checkpointer_for as _lgd_async_checkpointer_for,\n"
    "    async_store_for as _lgd_async_store_for,\n"
    "    sync_checkpointer_for as _lgd_sync_checkpointer_for,\n"
    "    sync_store_for as _lgd_sync_store_for,\n"
    ")\n"
)
DISPATCH = {
    "sync_checkpointer": (
        "if request.param in _LGD_SYNC_NAMES:\n"
        "    with _lgd_sync_checkpointer_for(request.param) as checkpointer:\n"
        "        yield checkpointer\n"
        "    return\n"
    ),
    "async_checkpointer": (
        "if request.param in _LGD_ASYNC_NAMES:\n"
        "    async with _lgd_async_checkpointer_for(request.param) as checkpointer:\n"
        "        yield checkpointer\n"
        "    return\n"
    ),
    "sync_store": (
        "if request.param in _LGD_SYNC_STORE_NAMES:\n"
        "    with _lgd_sync_store_for(request.param) as store:\n"
        "        yield store\n"
        "    return\n"
    ),
    "async_store": (
        "if request.param in _LGD_ASYNC_STORE_NAMES:\n"
        "    async with _lgd_async_store_for(request.param) as store:\n"
        "        yield store\n"
        "    return\n"
    ),
}
NAMES_VAR = {
    "sync_checkpointer": "_LGD_SYNC_NAMES",
    "async_checkpointer": "_LGD_ASYNC_NAMES",
    "sync_store": "_LGD_SYNC_STORE_NAMES",
    "async_store": "_LGD_ASYNC_STORE_NAMES",
}


def _offset(lines: list[str], lineno: int, col: int) -> int:
    """Character offset of an AST (1-based line, 0-based UTF-8 byte column) position."""
    line = lines[lineno - 1]
    return sum(len(x) for x in lines[: lineno - 1]) + len(
        line.encode("utf-8")[:col].decode("utf-8")
    )


def patch_conftest(path: Path) -> None:
    """Add our names to the checkpointer and store fixtures' params and dispatch them to
    our module.

    Works on the syntax tree, so formatting changes upstream do not matter; anything
    structural it does not find (a fixture, its ``params=``, the ``request`` argument)
    is an error, never a silent no-op.
    """
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), by char offset

    functions = {
        node.name: node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    for fixture, dispatch in DISPATCH.items():
        func = functions.get(fixture)
        if func is None:
            raise SuiteError(f"{path.name}: fixture {fixture!r} not found")
        want_async = fixture.startswith("async_")
        if isinstance(func, ast.AsyncFunctionDef) != want_async:
            raise SuiteError(f"{path.name}: {fixture!r} is not {'async ' * want_async}def")
        if "request" not in [a.arg for a in func.args.args]:
            raise SuiteError(f"{path.name}: {fixture!r} takes no 'request' argument")
        params = [
            kw.value
            for deco in func.decorator_list
            if isinstance(deco, ast.Call)
            for kw in deco.keywords
            if kw.arg == "params"
        ]
        if len(params) != 1:
            raise SuiteError(f"{path.name}: {fixture!r} has no single 'params=' argument")
        value = params[0]
        assert value.end_lineno is not None and value.end_col_offset is not None
        start = _offset(lines, value.lineno, value.col_offset)
        end = _offset(lines, value.end_lineno, value.end_col_offset)
        edits.append((start, end, f"[*({source[start:end]}), *{NAMES_VAR[fixture]}]"))

        first = func.body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
            and len(func.body) > 1
        ):
            first = func.body[1]  # keep a docstring first
        indent = " " * first.col_offset
        at = _offset(lines, first.lineno, 0)
        body = "".join(indent + line for line in dispatch.splitlines(keepends=True))
        edits.append((at, at, body))

    # Our import goes right after the module's last top-level import.
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    if not imports:
        raise SuiteError(f"{path.name}: no top-level import found")
    last = imports[-1]
    assert last.end_lineno is not None
    at = _offset(lines, last.end_lineno + 1, 0) if last.end_lineno < len(lines) else len(source)
    edits.append((at, at, IMPORT_LINE))

    for start, end, text in sorted(edits, key=lambda e: e[0], reverse=True):
        source = source[:start] + text + source[end:]
    compile(source, str(path), "exec")  # fail here, not at collection time
    path.write_text(source, encoding="utf-8")


def tweak_pyproject(path: Path) -> None:
    """Drop --full-trace from the suite's addopts: it forces pages-long tracebacks and
    makes --tb ineffective. Everything else (--strict-markers, --strict-config...) stays."""
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("--full-trace ", "").replace(" --full-trace", ""), "utf-8")


def prepare(version: str, cache: Path, workdir: Path) -> None:
    sdist = fetch_sdist(version, cache)
    unpack(sdist, workdir)
    shutil.copyfile(HERE / "conftest_durable.py", workdir / "tests" / "conftest_durable.py")
    patch_conftest(workdir / "tests" / "conftest.py")
    tweak_pyproject(workdir / "pyproject.toml")


def discover_files(tests_dir: Path) -> list[str]:
    found = []
    for path in sorted(tests_dir.glob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if any(name in text for name in FIXTURES):
            found.append(path.name)
    return found


# --- services -------------------------------------------------------------------


def _usable(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def _ensure_database(url: str) -> None:
    """Create the URL's database if the server answers but the database is missing."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    if _usable(url):
        return
    dbname = conninfo_to_dict(url).get("dbname")
    if not dbname:
        raise SuiteError(f"cannot connect to {url}")
    admin = make_conninfo(url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(dbname))))
    if not _usable(url):
        raise SuiteError(f"cannot connect to {url}")


@contextlib.contextmanager
def services_for(savers: list[str], service_of: dict[str, str]) -> Iterator[dict[str, str]]:
    """Resolve the services the chosen savers need; yield the environment to hand on.

    Each service comes from its environment variable if set, else from the test rig
    (local port probe, else a throwaway server, stopped when the block exits).
    """
    rig = _load_rig()
    env: dict[str, str] = {}
    services = rig.Services()
    try:
        for name in dict.fromkeys(service_of[saver] for saver in savers):
            if name == "dynamodb":
                rig.set_dynamodb_environment(env)
                for key, value in env.items():  # boto3 here (moto) and in pytest
                    os.environ.setdefault(key, value)
            try:
                endpoint = services.export(name, env)
            except Exception as exc:
                raise SuiteError(f"no {name} server: {exc}") from exc
            if name == "postgres" and endpoint.kind == "local":
                _ensure_database(endpoint.url)
        yield env
    finally:
        services.close()


def _load_rig() -> ModuleType:
    """The test rig's ``tests.servers`` module of this checkout."""
    if not (REPO_ROOT / "tests" / "servers.py").exists():
        raise SuiteError("tests/servers.py (the test rig) is missing")
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    import tests.servers as servers  # imported only when needed

    if not hasattr(servers, "Services"):
        raise SuiteError("tests/servers.py has no Services class")
    return servers


# --- running --------------------------------------------------------------------


def keyword_expr(
    chosen: list[str],
    all_names: list[str],
    stores: list[str] | None = None,
    all_stores: list[str] | None = None,
) -> str:
    """-k expression matching exactly the chosen saver names, and the chosen stores.

    -k matches substrings, so for each chosen name exclude the known names that contain
    it (``durable_pg`` would otherwise also select ``durable_pg_async``). Our savers
    run with the suite's stores (``in_memory``), never with ours; our stores run only
    with the in-memory checkpointer (``STORE_CHECKPOINTER``), or alone in the tests
    that take a store and no checkpointer."""
    stores, all_stores = stores or [], all_stores or []
    not_ours = ["not durable_store_"] if all_stores else []
    terms = []
    for name in chosen:
        longer = [n for n in all_names if n != name and name in n]
        terms.append(" and ".join([name] + [f"not {n}" for n in longer] + not_ours))
    # Every checkpointer but the in-memory one has a name that is not a substring of
    # a store name and that "memory" does not contain: exclude them by name.
    others = sorted({"sqlite", "postgres", "redis", *all_names} - {STORE_CHECKPOINTER})
    for name in stores:
        longer = [n for n in all_stores if n != name and name in n]
        excluded = [n for n in others if n not in name]
        terms.append(" and ".join([name] + [f"not {n}" for n in longer + excluded]))
    return " or ".join(f"({t})" for t in terms)


def resolve_savers(
    requested: list[str] | None,
    all_names: list[str],
    aliases: dict[str, tuple[str, ...]] = ALIASES,
    what: str = "saver",
) -> list[str]:
    chosen: list[str] = []
    for item in requested or ["durable"]:
        if item == "all":
            names = list(all_names)
        else:
            names = list(aliases.get(item, (item,)))
        for name in names:
            if name not in all_names:
                raise SuiteError(
                    f"unknown {what} {name!r}; known: {', '.join(all_names)}, "
                    f"or {', '.join(aliases)}, all"
                )
            if name not in chosen:
                chosen.append(name)
    return chosen


def saver_of(test_name: str, savers: list[str]) -> str | None:
    """The saver in a test id's parameters (``test_x[durable_redis-True]``), longest match."""
    params = test_name.partition("[")[2]
    found = [
        name
        for name in savers
        if re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", params)
    ]
    return max(found, key=len) if found else None


#: Most failed tests run a second time (more failures than this are not timing noise).
RERUN_MAX = 5


def failed_node_ids(path: Path, workdir: Path) -> list[str]:
    """pytest node ids of the failed or errored test cases in a junit report."""
    import xml.etree.ElementTree as ET

    out: list[str] = []
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        parts = case.get("classname", "").split(".")
        name = case.get("name", "")
        for split in (len(parts), len(parts) - 1):
            module = workdir.joinpath(*parts[:split]).with_suffix(".py")
            if split > 0 and module.is_file():
                node = "/".join(parts[:split]) + ".py"
                out.append("::".join([node, *parts[split:], name]))
                break
    return out


def merge_rerun(
    counts: dict[str, dict[str, float]], rerun: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Counts after a rerun: a test rerun and passed moves from failed to passed."""
    for saver, row in rerun.items():
        passed = int(row.get("passed", 0))
        base = counts.setdefault(
            saver, {"tests": 0, "passed": 0, "failed": 0, "skipped": 0, "seconds": 0.0}
        )
        base["passed"] += passed
        base["failed"] -= passed
    return counts


def summarise_junit(path: Path, savers: list[str]) -> dict[str, dict[str, float]]:
    """Per saver: tests, passed, failed (failures and errors), skipped, and summed seconds."""
    import xml.etree.ElementTree as ET

    counts: dict[str, dict[str, float]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        saver = saver_of(case.get("name", ""), savers)
        if saver is None:
            continue
        row = counts.setdefault(
            saver, {"tests": 0, "passed": 0, "failed": 0, "skipped": 0, "seconds": 0.0}
        )
        row["tests"] += 1
        row["seconds"] += float(case.get("time") or 0.0)
        if case.find("failure") is not None or case.find("error") is not None:
            row["failed"] += 1
        elif case.find("skipped") is not None:
            row["skipped"] += 1
        else:
            row["passed"] += 1
    return counts


def rerun_failed(
    python_pytest: list[str],
    workdir: Path,
    failed: list[str],
    savers: list[str],
    env: dict[str, str],
) -> tuple[int, dict[str, dict[str, float]]]:
    """Run the failed tests once more, serially; (exit code, per-saver counts)."""
    log(f"{len(failed)} test(s) failed; running them once more, one at a time:")
    for node in failed:
        log(f"  rerun: {node}")
    junit = workdir / "junit-rerun.xml"
    cmd = [*python_pytest, "-p", "no:asyncio", "-p", "no:cacheprovider"]
    cmd += ["--rootdir", str(workdir), "-c", str(workdir / "pyproject.toml")]
    cmd += ["-ra", "--tb=short", f"--junitxml={junit}", *failed]
    code = subprocess.call(cmd, cwd=workdir, env=env)
    log(f"rerun: pytest exited {code}" + (" (all passed the second time)" if code == 0 else ""))
    return code, summarise_junit(junit, savers) if junit.exists() else {}


def format_summary(counts: dict[str, dict[str, float]], savers: list[str]) -> list[str]:
    head = f"{'saver / store':28s} {'tests':>6s} {'passed':>6s} {'failed':>6s} {'skipped':>7s}"
    lines = [f"{head} test-s"]
    for saver in savers:
        row = counts.get(saver, {})
        lines.append(
            f"{saver:28s} {int(row.get('tests', 0)):6d} {int(row.get('passed', 0)):6d} "
            f"{int(row.get('failed', 0)):6d} {int(row.get('skipped', 0)):7d} "
            f"{row.get('seconds', 0.0):6.0f}"
        )
    return lines


def check_dependencies(services: set[str]) -> None:
    required = dict(REQUIRED_MODULES)
    if "dynamodb" in services:
        required["boto3"] = "boto3"
        if not os.environ.get("LGD_DYNAMODB_ENDPOINT"):
            required["moto.server"] = "moto[server]"
    missing = [dist for mod, dist in required.items() if not _has_module(mod)]
    if missing:
        raise SuiteError(f"missing test dependencies: {' '.join(missing)}")


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    passthrough: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, passthrough = argv[:i], argv[i + 1 :]
    parser = argparse.ArgumentParser(
        description="Run LangGraph's own test suite against our checkpoint savers.",
        epilog="Arguments after '--' go to pytest unchanged.",
    )
    parser.add_argument(
        "--saver",
        action="append",
        metavar="NAME",
        help="saver to run (repeatable): durable_pg, durable_pg_async, durable_redis, "
        "durable_redis_async, durable_dynamodb, durable_dynamodb_async, and one saver per "
        "backend with every protection on (encryption, integrity, redaction; row-level "
        "security on PostgreSQL): durable_pg_all, durable_redis_all_async, "
        "durable_dynamodb_all_async; the stock upstream_pg, upstream_pg_async; or the "
        "groups 'durable' (default: all of ours), 'postgres', 'redis', 'dynamodb', "
        "'protected', 'upstream', 'all'",
    )
    parser.add_argument(
        "--store",
        action="append",
        metavar="NAME",
        help="store to run in the tests that take a store (sync_store / async_store; "
        "repeatable), with the in-memory checkpointer: durable_store_pg, "
        "durable_store_pg_async, durable_store_redis, durable_store_redis_async, "
        "durable_store_dynamodb, durable_store_dynamodb_async, or the groups 'durable', "
        "'postgres', 'redis', 'dynamodb', 'none'. Default: all of ours when --saver is "
        "not given, else none",
    )
    parser.add_argument(
        "--files",
        nargs="+",
        metavar="FILE",
        help="test files (names under the suite's tests/; globs allowed). "
        "Default: every test_*.py that uses a checkpointer fixture",
    )
    parser.add_argument("--extra-k", metavar="EXPR", help="and-ed with the saver -k expression")
    parser.add_argument(
        "-n",
        "--workers",
        default="2",
        help="pytest-xdist workers (default 2; 0 runs in-process; ignored without xdist)",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=300,
        help="per-test timeout in seconds with pytest-timeout (default 300; 0 = none)",
    )
    parser.add_argument("--langgraph-version", help="default: the installed version")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("LGD_SUITE_CACHE", DEFAULT_CACHE)),
        help="where the sdist and work directories go (default: .lgd/langgraph-suite)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory after the run")
    parser.add_argument(
        "--fetch-only",
        action="store_true",
        help="download the sdist into the cache (if it is not there yet) and exit: "
        "`make setup` runs this so that the suite later runs with no network",
    )
    parser.add_argument(
        "--prepare-only",
        action="store_true",
        help="download and patch, print the work directory, do not run pytest",
    )
    args, unknown = parser.parse_known_args(argv)
    return args, unknown + passthrough


def main(argv: list[str] | None = None) -> int:
    args, passthrough = parse_args(sys.argv[1:] if argv is None else argv)
    if args.fetch_only:
        version = args.langgraph_version or metadata.version("langgraph")
        try:
            print(fetch_sdist(version, args.cache_dir.resolve()))
        except SuiteError as exc:
            log(f"ERROR: {exc}")
            return 2
        return 0
    factories = load_factories()
    all_names = [*factories.SYNC_NAMES, *factories.ASYNC_NAMES]
    all_stores = [*factories.SYNC_STORE_NAMES, *factories.ASYNC_STORE_NAMES]
    try:
        savers = resolve_savers(args.saver, all_names)
        stores = resolve_savers(
            args.store or (["none"] if args.saver else ["durable"]),
            all_stores,
            STORE_ALIASES,
            "store",
        )
        check_dependencies({factories.SERVICE_OF[name] for name in savers + stores})
        version = args.langgraph_version or metadata.version("langgraph")
        cache = args.cache_dir.resolve()
        cache.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(dir=cache, prefix=f"run-{version}-"))
        prepare(version, cache, workdir)
    except SuiteError as exc:
        log(f"ERROR: {exc}")
        return 2

    try:
        if args.prepare_only:
            print(workdir)
            args.keep = True
            return 0
        tests_dir = workdir / "tests"
        if args.files:
            files: list[str] = []
            for pattern in args.files:
                matched = sorted(p.name for p in tests_dir.glob(Path(pattern).name))
                if not matched:
                    log(f"ERROR: no test file matches {pattern!r}")
                    return 2
                files.extend(f for f in matched if f not in files)
        else:
            files = discover_files(tests_dir)
        if not files:
            log("ERROR: no test file uses a checkpointer fixture")
            return 2

        kexpr = keyword_expr(savers, all_names, stores, all_stores)
        if args.extra_k:
            kexpr = f"({kexpr}) and ({args.extra_k})"
        cmd = [sys.executable, "-m", "pytest", "-p", "no:asyncio", "-p", "no:cacheprovider"]
        cmd += ["--rootdir", str(workdir), "-c", str(workdir / "pyproject.toml")]
        cmd += ["-k", kexpr, "-ra", "--tb=short"]
        junit = workdir / "junit.xml"
        cmd += [f"--junitxml={junit}"]
        if args.workers not in ("0", "") and _has_module("xdist"):
            cmd += ["-n", args.workers]
        if args.timeout and _has_module("pytest_timeout"):
            cmd += [f"--timeout={args.timeout}"]
        cmd += [f"tests/{f}" for f in files]
        cmd += passthrough

        with services_for(savers + stores, factories.SERVICE_OF) as service_env:
            env = {**os.environ, **service_env}
            env["NO_DOCKER"] = "true"
            # Our package from this checkout, after the suite's own paths.
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (env.get("PYTHONPATH"), str(REPO_ROOT)) if p
            )
            log(f"langgraph {version}; savers: {', '.join(savers)}")
            if stores:
                log(f"stores (with the {STORE_CHECKPOINTER} checkpointer): {', '.join(stores)}")
            log(f"files: {' '.join(files)}")
            log(f"work dir: {workdir}")
            log("running: " + " ".join(cmd[1:]))
            started = time.monotonic()
            code = subprocess.call(cmd, cwd=workdir, env=env)
            log(f"pytest exited {code} after {time.monotonic() - started:.0f}s")
            if code == 5:
                log("ERROR: pytest collected no test for the chosen savers")
                return 1
            names = savers + stores
            counts = summarise_junit(junit, names) if junit.exists() else {}
            failed = failed_node_ids(junit, workdir) if code == 1 and junit.exists() else []
            if failed and len(failed) <= RERUN_MAX:
                code, rerun = rerun_failed(cmd[:3], workdir, failed, names, env)
                counts = merge_rerun(counts, rerun)
        for line in format_summary(counts, names):
            log(line)
        idle = [name for name in names if not counts.get(name, {}).get("tests")]
        if code == 0 and idle:
            log(f"ERROR: no test ran for {', '.join(idle)}")
            return 1
        return code
    except SuiteError as exc:
        log(f"ERROR: {exc}")
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
