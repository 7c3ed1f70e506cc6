"""The LangGraph suite runner's second run of failed tests, on a tiny suite of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "langgraph_suite"))

import run_suite  # noqa: E402

FLAKY = """
import os, pytest

@pytest.mark.parametrize("saver", ["durable_redis"])
def test_timing(saver):
    marker = os.path.join(os.path.dirname(__file__), "ran-once")
    first = not os.path.exists(marker)
    open(marker, "w").close()
    assert not first, "slow the first time"

@pytest.mark.parametrize("saver", ["durable_pg"])
def test_broken(saver):
    assert False, "fails every time"

@pytest.mark.parametrize("saver", ["durable_pg"])
def test_fine(saver):
    pass
"""


def make_suite(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "test_suite.py").write_text(FLAKY)
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    return tmp_path


def first_run(workdir: Path) -> Path:
    junit = workdir / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    cmd += ["--rootdir", str(workdir), "-c", str(workdir / "pyproject.toml")]
    cmd += [f"--junitxml={junit}", "tests/test_suite.py"]
    assert subprocess.call(cmd, cwd=workdir) == 1
    return junit


def test_a_test_that_passes_its_second_run_counts_as_passed(tmp_path: Path) -> None:
    workdir = make_suite(tmp_path)
    junit = first_run(workdir)
    savers = ["durable_redis", "durable_pg"]
    failed = run_suite.failed_node_ids(junit, workdir)
    assert failed == [
        "tests/test_suite.py::test_timing[durable_redis]",
        "tests/test_suite.py::test_broken[durable_pg]",
    ]
    counts = run_suite.summarise_junit(junit, savers)
    assert counts["durable_redis"]["failed"] == 1
    # Only the flaky one again: it passes, and the counts say so.
    code, rerun = run_suite.rerun_failed(
        [sys.executable, "-m", "pytest"], workdir, failed[:1], savers, {}
    )
    assert code == 0
    merged = run_suite.merge_rerun(counts, rerun)
    assert merged["durable_redis"] == {
        "tests": 1,
        "passed": 1,
        "failed": 0,
        "skipped": 0,
        "seconds": merged["durable_redis"]["seconds"],
    }


def test_a_test_that_fails_twice_fails_the_run(tmp_path: Path) -> None:
    workdir = make_suite(tmp_path)
    junit = first_run(workdir)
    savers = ["durable_redis", "durable_pg"]
    failed = run_suite.failed_node_ids(junit, workdir)
    code, rerun = run_suite.rerun_failed(
        [sys.executable, "-m", "pytest"], workdir, failed, savers, {}
    )
    assert code == 1
    merged = run_suite.merge_rerun(run_suite.summarise_junit(junit, savers), rerun)
    assert merged["durable_pg"]["failed"] == 1
    assert merged["durable_redis"]["failed"] == 0
