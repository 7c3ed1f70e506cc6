"""End-to-end tests of the ``langgraph-durable`` command line against a real PostgreSQL.

Commands run in a subprocess (``python -m langgraph_durable.cli``), as a user runs them;
``main()`` is also called in-process where its return value is the point of the test.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import langgraph_durable
from langgraph_durable.cli import main
from langgraph_durable.cli._common import mask_url, one_line

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 240


def _env(**overrides: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LGD_POSTGRES_URL"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_cli(*args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    """Run ``langgraph-durable ARGS`` in a fresh interpreter and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "langgraph_durable.cli", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=_env(**env),
        cwd=REPO_ROOT,
    )


def _refused_url() -> str:
    """A URL on a loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://postgres:hunter2@127.0.0.1:{port}/nowhere"


def _assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0]


# ---------------------------------------------------------------------------- --version


def test_version() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"langgraph-durable {langgraph_durable.__version__}"


def test_version_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert langgraph_durable.__version__ in capsys.readouterr().out


def test_importing_the_cli_imports_no_driver_or_langgraph() -> None:
    code = (
        "import sys, langgraph_durable.cli; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('psycopg', 'psycopg_pool', 'langgraph', 'langchain_core', 'pgserver')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------- demo


def test_demo_kills_the_child_and_resumes(pg_url: str, pg_schema: str) -> None:
    proc = run_cli(
        "demo", "--url", pg_url, "--schema", pg_schema, "--steps", "4", "--crash-at", "3", "--keep"
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr

    # Part 1: a child process ran steps 1-3 and was killed in the tool call of step 3.
    child = re.findall(r"\[child pid (\d+)\] (.*)", out)
    assert len({pid for pid, _ in child}) == 1
    assert [text for _, text in child] == [
        "step 1  agent: asks the tool for square(1)",
        "step 1  tools: square(1) = 1",
        "step 2  agent: asks the tool for square(2)",
        "step 2  tools: square(2) = 4",
        "step 3  agent: asks the tool for square(3)",
        "step 3  tools: square(3) is running (a slow call) ...",
    ]
    child_pid = child[0][0]
    assert f"Sent SIGKILL to child pid {child_pid}" in out
    assert "exited with status -9" in out

    # Part 2: this process resumed from a checkpoint and ran only what was left.
    assert re.search(r"Resuming from the last checkpoint, \S+ \(.*next node: tools\)", out)
    resumed = re.findall(r"\[resumed pid (\d+)\] (.*)", out)
    assert {pid for pid, _ in resumed} != {child_pid}
    assert [text for _, text in resumed] == [
        "step 3  tools: square(3) = 9",
        "step 4  agent: asks the tool for square(4)",
        "step 4  tools: square(4) = 16",
        "final   agent: answers 30",
    ]
    assert "FAILED" not in out
    assert out.count("  ok     ") == 4
    assert "The sum of the squares of 1..4 is 30." in out
    assert "Demo passed" in out
    assert out.index("Sent SIGKILL") < out.index("Resuming from") < out.index("Demo passed")

    # The finished thread is in PostgreSQL (--keep), readable by a fresh saver.
    thread_id = re.search(r"Thread:\s+(\S+)", out).group(1)  # type: ignore[union-attr]
    from langgraph_durable.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
        saved = saver.get_tuple({"configurable": {"thread_id": thread_id}})
    assert saved is not None
    messages = saved.checkpoint["channel_values"]["messages"]
    assert [m.content for m in messages][-2:] == ["16", "The sum of the squares of 1..4 is 30."]
    assert len(messages) == 10


def test_demo_drops_its_schema(pg_url: str, pg_schema: str) -> None:
    import psycopg

    proc = run_cli("demo", "--url", pg_url, "--schema", pg_schema, "--steps", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Dropped schema {pg_schema}." in proc.stdout
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (pg_schema,))
        assert row.fetchone() is None


def test_demo_reads_the_url_from_the_environment(pg_url: str, pg_schema: str) -> None:
    proc = run_cli("demo", "--schema", pg_schema, "--steps", "2", LGD_POSTGRES_URL=pg_url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(from $LGD_POSTGRES_URL)" in proc.stdout
    assert "Demo passed" in proc.stdout


def test_demo_on_embedded_postgres() -> None:
    from langgraph_durable.errors import ConfigurationError
    from langgraph_durable.postgres.embedded import find_server_binaries

    try:
        find_server_binaries()
    except ConfigurationError as exc:
        pytest.skip(f"no PostgreSQL server binaries for the embedded server: {exc}")
    proc = run_cli("demo", "--steps", "2", "--crash-at", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "starting an embedded PostgreSQL" in proc.stdout
    assert "Database: embedded PostgreSQL" in proc.stdout
    assert "Demo passed" in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--steps", "0"], "argument --steps: must be between 1 and 100"),
        (["--steps", "many"], "argument --steps: expected a whole number"),
        (["--steps", "3", "--crash-at", "4"], "--crash-at 4 is past the last step"),
        (["--schema", "bad-name;"], "schema name 'bad-name;' is not allowed"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
)
def test_demo_bad_arguments(args: list[str], needle: str) -> None:
    proc = run_cli("demo", "--url", "postgresql://unused", *args)
    _assert_one_line_error(proc, "langgraph-durable", needle)
    assert proc.stdout == ""


def test_demo_unreachable_database() -> None:
    url = _refused_url()
    proc = run_cli("demo", "--url", url)
    _assert_one_line_error(proc, "langgraph-durable demo: error:", "127.0.0.1")
    assert "hunter2" not in proc.stdout + proc.stderr


# ---------------------------------------------------------------------------- setup


def test_setup_applies_then_is_idempotent(pg_url: str, pg_schema: str) -> None:
    first = run_cli("setup", "--url", pg_url, "--schema", pg_schema)
    assert first.returncode == 0, first.stdout + first.stderr
    match = re.search(r"Applied migrations ([\d, ]+) to schema '(\w+)'", first.stdout)
    assert match, first.stdout
    assert match.group(2) == pg_schema
    assert [int(v) for v in match.group(1).split(", ")]

    second = run_cli("setup", "--url", pg_url, "--schema", pg_schema)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Nothing to apply" in second.stdout
    assert "up to date" in second.stdout


def test_setup_in_process(pg_url: str, pg_schema: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["setup", "--url", pg_url, "--schema", pg_schema]) == 0
    assert "Applied migrations" in capsys.readouterr().out
    assert main(["setup", "--url", pg_url, "--schema", pg_schema]) == 0
    assert "Nothing to apply" in capsys.readouterr().out


def test_setup_unreachable_database(capsys: pytest.CaptureFixture[str]) -> None:
    url = _refused_url()
    proc = run_cli("setup", "--url", url, "--schema", "s")
    _assert_one_line_error(proc, "langgraph-durable setup: error:", "127.0.0.1")
    assert "hunter2" not in proc.stdout + proc.stderr

    assert main(["setup", "--url", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_setup_needs_a_url() -> None:
    proc = run_cli("setup", LGD_REDIS_URL=None, LGD_DYNAMODB_URL=None)
    _assert_one_line_error(
        proc, "pass --url or set one of $LGD_POSTGRES_URL, $LGD_REDIS_URL, $LGD_DYNAMODB_URL"
    )


def test_unknown_command_and_no_command() -> None:
    _assert_one_line_error(run_cli("frobnicate"), "invalid choice: 'frobnicate'")
    proc = run_cli()
    assert proc.returncode == 2
    assert "usage: langgraph-durable" in proc.stderr


# ---------------------------------------------------------------------------- helpers


def test_mask_url_hides_passwords() -> None:
    assert mask_url("postgresql://me:s3cret@db:5432/x") == "postgresql://me:***@db:5432/x"
    assert mask_url("postgresql://me@db/x?password=s3cret") == "postgresql://me@db/x?password=***"
    assert mask_url("host=db password=s3cret") == "host=db password=***"
    assert mask_url("postgresql://db/x") == "postgresql://db/x"


def test_one_line_folds_multiline_messages() -> None:
    assert one_line(ValueError("first\n  second\n\n")) == "first second"
    assert one_line(KeyError()) == "KeyError"
