#!/usr/bin/env python
"""Run the store tests of the langgraph repository against our stores.

The PyPI sdists of ``langgraph-checkpoint`` and ``langgraph-checkpoint-postgres`` ship
their ``tests/``. This script, like ``run_suite.py`` (whose helpers it uses):

1. takes the sdists of the *installed* versions from the cache under
   ``.lgd/langgraph-suite/``, where ``make setup`` put them (``--fetch-only``); nothing
   is downloaded at test time unless they are missing;
2. unpacks each one's ``tests/`` and ``pyproject.toml`` into a fresh work directory,
   copies ``conftest_durable.py`` and ``store_adapter.py`` (next to this file) into
   that ``tests/`` package and patches the store test modules so that their stores are
   ours (see ``store_adapter.py``);
3. runs pytest there on the store test files: ``langgraph-checkpoint``'s
   ``tests/test_store.py`` (the ``InMemoryStore`` tests, only the ``BaseStore``
   interface) with ``PostgresStore``, ``RedisStore`` and ``DynamoDBStore``;
   ``langgraph-checkpoint-postgres``'s ``tests/test_store.py`` with the same sync
   stores and its ``tests/test_async_store.py`` with ``AsyncPostgresStore``,
   ``AsyncRedisStore`` and ``AsyncDynamoDBStore`` (DynamoDB there only with
   ``--backend dynamodb`` or ``LGD_STORE_TESTS_SLOW=1``: moto is slow);
4. prints per file and backend how many tests passed, failed and were deselected, and
   every deselected test that does not apply to our stores with the reason
   (``store_adapter.INCOMPATIBLE``); exits non-zero if a test failed or if no test
   ran for a backend.

Usage (from the repository root, with the project's virtualenv)::

    python tests/langgraph_suite/run_store_tests.py                  # everything
    python tests/langgraph_suite/run_store_tests.py --backend pg     # PostgreSQL only
    python tests/langgraph_suite/run_store_tests.py --package postgres -- -x -k ttl
    LGD_STORE_TESTS_SLOW=1 python tests/langgraph_suite/run_store_tests.py  # + load tests
                                        # and DynamoDB on the PostgreSQL store tests

Services come from the test rig as for ``run_suite.py``: PostgreSQL, Redis and
DynamoDB (moto's server unless ``LGD_DYNAMODB_ENDPOINT`` is set).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def _load_run_suite() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_lgd_run_suite", HERE / "run_suite.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rs = _load_run_suite()
SuiteError = rs.SuiteError

BACKENDS = ("pg", "redis", "dynamodb")
SERVICE_OF = {"pg": "postgres", "redis": "redis", "dynamodb": "dynamodb"}


def log(msg: str) -> None:
    print(f"[store-tests] {msg}", file=sys.stderr, flush=True)


class Package:
    """One sdist: its distribution name, the key the adapter knows it by, its files."""

    def __init__(
        self,
        dist: str,
        key: str,
        files: dict[str, str],
        default_backends: tuple[str, ...] = BACKENDS,
    ) -> None:
        self.dist = dist
        self.key = key
        # Without --backend, the backends run (every one with LGD_STORE_TESTS_SLOW=1).
        self.default_backends = default_backends
        # test file -> the lines appended to it (names rebound to the adapter's)
        self.files = files

    @property
    def version(self) -> str:
        return metadata.version(self.dist)


_IMPORT = "from tests.lgd_store_adapter import (  # noqa: E402,F401 (run_store_tests.py)\n"
PACKAGES = {
    "checkpoint": Package("langgraph-checkpoint", "cp", {"test_store.py": ""}),
    "postgres": Package(
        "langgraph-checkpoint-postgres",
        "pg",
        {
            "test_store.py": _IMPORT
            + "    sync_store_fixture as store,\n"
            + "    sync_vector_store_fixture as vector_store,\n"
            + "    create_sync_vector_store as _create_vector_store,\n)\n",
            "test_async_store.py": _IMPORT
            + "    async_store_fixture as store,\n"
            + "    async_vector_store_fixture as vector_store,\n"
            + "    create_async_vector_store as _create_vector_store,\n)\n",
        },
        # DynamoDB (moto) costs more than the rest together on these files (a test puts
        # 201 items, one call each): with --backend dynamodb or LGD_STORE_TESTS_SLOW=1.
        default_backends=("pg", "redis"),
    ),
}
CONFTEST_LINE = (
    "from tests.lgd_store_adapter import (  # noqa: E402,F401 (run_store_tests.py)\n"
    "    no_clear_test_db as clear_test_db,\n"
    "    no_conn as conn,\n"
    ")\n"
)


def fetch(cache: Path) -> list[Path]:
    return [rs.fetch_sdist(p.version, cache, p.dist) for p in PACKAGES.values()]


def prepare(package: Package, cache: Path, workdir: Path) -> None:
    sdist = rs.fetch_sdist(package.version, cache, package.dist)
    rs.unpack(sdist, workdir, need_conftest=False)
    tests = workdir / "tests"
    for name in package.files:
        if not (tests / name).is_file():
            raise SuiteError(f"{sdist.name} has no tests/{name}")
    shutil.copyfile(HERE / "conftest_durable.py", tests / "conftest_durable.py")
    shutil.copyfile(HERE / "store_adapter.py", tests / "lgd_store_adapter.py")
    for name, lines in package.files.items():
        if lines:
            with open(tests / name, "a", encoding="utf-8") as out:
                out.write("\n\n" + lines)
    conftest = tests / "conftest.py"
    if conftest.exists():
        with open(conftest, "a", encoding="utf-8") as out:
            out.write("\n\n" + CONFTEST_LINE)
    for name in [*package.files, "conftest.py"]:
        if (tests / name).exists():
            compile((tests / name).read_text(encoding="utf-8"), str(tests / name), "exec")
    rs.tweak_pyproject(workdir / "pyproject.toml")
    # Their addopts print every test name (-vv) and the slowest five: keep -vv out.
    text = (workdir / "pyproject.toml").read_text(encoding="utf-8")
    (workdir / "pyproject.toml").write_text(text.replace(" -vv", ""), encoding="utf-8")


def backend_of(name: str) -> str | None:
    """The backend in a test id's parameters (``test_x[lgd-pg-foo]``)."""
    found = re.search(r"[\[-]lgd-(pg|redis|dynamodb)(?=[\]-])", name)
    return found.group(1) if found else None


#: (test, reason) -> cases: the expected failures (store_adapter.KNOWN_BUGS) of the run.
XFAILED: dict[tuple[str, str], int] = {}


def count(junit: Path, deselected: list[tuple[str, str]]) -> dict[tuple[str, str], list[int]]:
    """(file, backend) -> [passed, failed, skipped, deselected, xfailed]."""
    rows: dict[tuple[str, str], list[int]] = {}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            backend = backend_of(case.get("name", ""))
            file = case.get("classname", "").rpartition(".")[2] + ".py"
            row = rows.setdefault((file, backend or "-"), [0, 0, 0, 0, 0])
            if case.find("failure") is not None or case.find("error") is not None:
                row[1] += 1
            elif (skipped := case.find("skipped")) is not None:
                xfail = "xfail" in (skipped.get("type") or "")
                row[4 if xfail else 2] += 1
                if xfail:
                    test = f"{file}::{case.get('name', '').partition('[')[0]}"
                    reason = (skipped.get("message") or "").removeprefix("reported bug: ")
                    XFAILED[(test, reason)] = XFAILED.get((test, reason), 0) + 1
            else:
                row[0] += 1
    for nodeid, _reason in deselected:
        file = nodeid.split("::")[0].rpartition("/")[2]
        row = rows.setdefault((file, backend_of(nodeid) or "-"), [0, 0, 0, 0, 0])
        row[3] += 1
    return rows


def read_deselected(path: Path) -> list[tuple[str, str]]:
    """The adapter's list (each xdist worker writes it whole): unique, in order."""
    if not path.exists():
        return []
    seen: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        nodeid, _, reason = line.partition("\t")
        seen.setdefault(nodeid, reason)
    return list(seen.items())


def run_package(
    name: str,
    package: Package,
    cache: Path,
    backends: list[str],
    args: argparse.Namespace,
    passthrough: list[str],
    env: dict[str, str],
) -> tuple[int, dict[tuple[str, str], list[int]], list[tuple[str, str]]]:
    workdir = Path(tempfile.mkdtemp(dir=cache, prefix=f"store-{name}-{package.version}-"))
    try:
        prepare(package, cache, workdir)
        junit = workdir / "junit.xml"
        deselected_file = workdir / "deselected.tsv"
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
        cmd += ["-p", "tests.lgd_store_adapter"]
        cmd += ["--rootdir", str(workdir), "-c", str(workdir / "pyproject.toml")]
        cmd += ["-q", "-rfE", "--tb=short", f"--junitxml={junit}"]
        cmd += ["-o", "asyncio_default_fixture_loop_scope=function"]
        if args.workers not in ("0", "") and rs._has_module("xdist"):
            cmd += ["-n", args.workers]
        if args.timeout and rs._has_module("pytest_timeout"):
            cmd += [f"--timeout={args.timeout}"]
        cmd += [f"tests/{f}" for f in package.files]
        cmd += passthrough
        run_env = {
            **env,
            "LGD_STORE_TESTS_PACKAGE": package.key,
            "LGD_STORE_TESTS_BACKENDS": ",".join(backends),
            "LGD_STORE_TESTS_DESELECTED": str(deselected_file),
        }
        log(f"{package.dist} {package.version}: {' '.join(package.files)}")
        log("running: " + " ".join(cmd[1:]))
        started = time.monotonic()
        code = subprocess.call(cmd, cwd=workdir, env=run_env)
        log(f"pytest exited {code} after {time.monotonic() - started:.0f}s")
        deselected = read_deselected(deselected_file)
        return code, count(junit, deselected), deselected
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"kept {workdir}")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    passthrough: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, passthrough = argv[:i], argv[i + 1 :]
    parser = argparse.ArgumentParser(
        description="Run the langgraph repository's store tests against our stores.",
        epilog="Arguments after '--' go to pytest unchanged.",
    )
    parser.add_argument(
        "--backend", action="append", choices=BACKENDS, help="repeatable; default: all"
    )
    parser.add_argument(
        "--package",
        action="append",
        choices=list(PACKAGES),
        help="checkpoint (InMemoryStore tests) or postgres (PostgresStore tests); "
        "repeatable; default: both",
    )
    parser.add_argument(
        "-n",
        "--workers",
        default="0",
        help="pytest-xdist workers (default 0: in-process, the tests are short)",
    )
    parser.add_argument("--timeout", type=int, default=120, help="per-test timeout (s)")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("LGD_SUITE_CACHE", rs.DEFAULT_CACHE)),
        help="where the sdists and work directories go (default: .lgd/langgraph-suite)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    parser.add_argument(
        "--fetch-only",
        action="store_true",
        help="download the sdists into the cache (if not there yet) and exit",
    )
    args, unknown = parser.parse_known_args(argv)
    return args, unknown + passthrough


def main(argv: list[str] | None = None) -> int:
    args, passthrough = parse_args(sys.argv[1:] if argv is None else argv)
    cache = args.cache_dir.resolve()
    try:
        if args.fetch_only:
            for path in fetch(cache):
                print(path)
            return 0
        backends = list(dict.fromkeys(args.backend or BACKENDS))
        packages = list(dict.fromkeys(args.package or PACKAGES))
        services = {SERVICE_OF[b] for b in backends}
        rs.check_dependencies(services)
        for name in packages:
            rs.fetch_sdist(PACKAGES[name].version, cache, PACKAGES[name].dist)
    except SuiteError as exc:
        log(f"ERROR: {exc}")
        return 2

    service_of = {b: SERVICE_OF[b] for b in backends}
    codes: list[int] = []
    rows: dict[tuple[str, str], list[int]] = {}
    deselected: list[tuple[str, str]] = []
    try:
        with rs.services_for(backends, service_of) as service_env:
            env = {**os.environ, **service_env}
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (env.get("PYTHONPATH"), str(rs.REPO_ROOT)) if p
            )
            for name in packages:
                chosen = backends
                if not args.backend and os.environ.get("LGD_STORE_TESTS_SLOW") != "1":
                    chosen = [b for b in backends if b in PACKAGES[name].default_backends]
                code, counts, dropped = run_package(
                    name, PACKAGES[name], cache, chosen, args, passthrough, env
                )
                codes.append(code)
                for (file, backend), row in counts.items():
                    rows[(f"{PACKAGES[name].key}:{file}", backend)] = row
                deselected += dropped
    except SuiteError as exc:
        log(f"ERROR: {exc}")
        return 2

    # One line per test function and reason, with the backends and the number of cases.
    grouped: dict[tuple[str, str], list[str]] = {}
    for nodeid, reason in deselected:
        if reason.startswith("incompatible: "):
            test = nodeid.partition("[")[0]
            grouped.setdefault((test, reason.removeprefix("incompatible: ")), []).append(
                backend_of(nodeid) or "-"
            )
    if grouped:
        log("deselected, not applicable to our stores (test: backends, cases; reason):")
        for (test, reason), where in grouped.items():
            backends_seen = ",".join(dict.fromkeys(where))
            log(f"  {test} [{backends_seen}; {len(where)}]: {reason}")
    others: dict[str, int] = {}
    for _nodeid, reason in deselected:
        if not reason.startswith("incompatible: "):
            kind = reason.split(":")[0].split(" (")[0]
            others[kind] = others.get(kind, 0) + 1
    for kind, n in others.items():
        log(f"deselected, {kind}: {n}")
    if XFAILED:
        log("expected failures, bugs of ours reported and not fixed yet (test: cases; reason):")
        for (test, reason), n in XFAILED.items():
            log(f"  {test} [{n}]: {reason}")
    head = f"{'file':24s} {'backend':9s} {'passed':>6s} {'failed':>6s} {'skipped':>7s}"
    log(f"{head} {'xfailed':>7s} deselected")
    for (file, backend), (passed, failed, skipped, dropped_n, xfailed) in sorted(rows.items()):
        log(
            f"{file:24s} {backend:9s} {passed:6d} {failed:6d} {skipped:7d} {xfailed:7d} "
            f"{dropped_n:10d}"
        )
    code = next((c for c in codes if c != 0), 0)
    if code == 5:
        log("ERROR: pytest collected no test")
        return 1
    idle = [b for b in backends if not any(r[0] for (_, be), r in rows.items() if be == b)]
    if code == 0 and idle:
        log(f"ERROR: no test passed for {', '.join(idle)}")
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
