"""``setup`` and ``prune`` on real PostgreSQL, Redis and DynamoDB, and what they print.

* ``setup`` takes a URL of any backend: it applies PostgreSQL's migrations, checks Redis,
  creates the DynamoDB table; each saver's ``setup()`` returns the list of schema changes
  it made, empty the second time.
* ``prune``'s policy flags replace the stored policy (nothing merged in) and every report
  says which policy ran; ``--strategy delete`` without a bound names the flags to pass.
* ``threads_seen`` in the prune JSON counts the same threads on every backend.
* An unreachable PostgreSQL gives one error of ours, at once, without the pool's log lines.
* Counts in the output are singular or plural as they should be.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from langgraph_durable import Retention
from langgraph_durable.cli import main
from langgraph_durable.cli._common import plural
from langgraph_durable.errors import ConfigurationError, StorageUnavailableError
from tests.effects.conftest import BACKENDS, make_spec
from tests.helpers import cfg, cli_target, put_chain
from tests.redaction_helpers import SaverSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 240
URL_VARS = ("LGD_POSTGRES_URL", "LGD_REDIS_URL", "LGD_DYNAMODB_URL")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*URL_VARS, "LGD_POSTGRES_SCHEMA", "LGD_REDIS_PREFIX", "LGD_INTEGRITY_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


def _env() -> dict[str, str]:
    from tests.servers import set_dynamodb_environment

    env = {k: v for k, v in os.environ.items() if k not in URL_VARS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    set_dynamodb_environment(env)
    return env


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``langgraph-durable ARGS`` in a fresh interpreter, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "langgraph_durable.cli", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=_env(),
        cwd=REPO_ROOT,
    )


def saver_class(backend: str) -> Any:
    if backend == "postgres":
        from langgraph_durable.postgres import PostgresSaver

        return PostgresSaver
    if backend == "redis":
        from langgraph_durable.redis import RedisSaver

        return RedisSaver
    from langgraph_durable.dynamodb import DynamoDBSaver

    return DynamoDBSaver


@contextmanager
def saver_of(spec: SaverSpec, **kwargs: Any) -> Iterator[Any]:
    """A sync saver on ``spec``'s store, *not* set up."""
    with saver_class(spec.backend).from_conn_string(spec.conn, **spec.kwargs, **kwargs) as saver:
        yield saver


def _dynamodb_client(spec: SaverSpec) -> Any:
    import boto3

    query = {k: v[0] for k, v in parse_qs(urlsplit(spec.conn).query).items()}
    return boto3.client("dynamodb", region_name=query["region"], endpoint_url=query["endpoint"])


def _refused_url() -> str:
    """A PostgreSQL URL on a loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://postgres:hunter2@127.0.0.1:{port}/nowhere"


def prune_json(spec: SaverSpec, capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    """The JSON summary of ``langgraph-durable prune --json FLAGS``, run in-process."""
    capsys.readouterr()
    code = main(["prune", *cli_target(spec), "--json", *flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def prune_text(spec: SaverSpec, capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    capsys.readouterr()
    code = main(["prune", *cli_target(spec), *flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


# ---------------------------------------------------------------------------- setup


def test_setup_makes_every_backend_ready_then_changes_nothing(spec: SaverSpec) -> None:
    if spec.backend == "dynamodb":
        from botocore.exceptions import ClientError

        with pytest.raises(ClientError):  # a fresh name: no table yet
            _dynamodb_client(spec).describe_table(TableName=urlsplit(spec.conn).netloc)

    first = run_cli("setup", *cli_target(spec))
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stderr == ""
    second = run_cli("setup", *cli_target(spec))
    assert second.returncode == 0, second.stdout + second.stderr
    if spec.backend == "postgres":
        schema = spec.kwargs["schema"]
        assert re.fullmatch(
            rf"Applied migrations 1(, \d+)+ to schema '{schema}' at \S+\.\n", first.stdout
        ), first.stdout
        assert second.stdout.startswith(f"Nothing to apply: schema '{schema}'")
    elif spec.backend == "redis":
        for out in (first.stdout, second.stdout):
            assert out.startswith(f"Ready: prefix '{spec.kwargs['prefix']}'"), out
            assert re.search(r"\(Redis \d+\.\d+\.\d+ on 1 primary\); scripts loaded", out), out
    else:
        table = urlsplit(spec.conn).netloc
        assert first.stdout.startswith(f"Set up table '{table}' at dynamodb://"), first.stdout
        assert first.stdout.rstrip().endswith(": created table.")
        assert second.stdout.startswith(f"Nothing to do: table '{table}'")
        desc = _dynamodb_client(spec).describe_table(TableName=table)["Table"]
        assert desc["TableStatus"] == "ACTIVE"
        assert {k["AttributeName"]: k["KeyType"] for k in desc["KeySchema"]} == {
            "pk": "HASH",
            "sk": "RANGE",
        }

    # a saver that never calls setup() (and, on DynamoDB, may not create the table) works
    options = {"create_table": False} if spec.backend == "dynamodb" else {}
    with saver_of(spec, **options) as saver:
        configs = put_chain(saver, "after-setup", 2)
        assert saver.get_tuple(cfg("after-setup")).config == configs[-1]


def test_setup_reads_the_url_from_the_environment(
    spec: SaverSpec, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    variable = {"postgres": "LGD_POSTGRES_URL", "redis": "LGD_REDIS_URL"}.get(
        spec.backend, "LGD_DYNAMODB_URL"
    )
    monkeypatch.setenv(variable, spec.conn)
    if spec.backend == "postgres":
        monkeypatch.setenv("LGD_POSTGRES_SCHEMA", spec.kwargs["schema"])
    elif spec.backend == "redis":
        monkeypatch.setenv("LGD_REDIS_PREFIX", spec.kwargs["prefix"])
    assert main(["setup"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(("Applied migrations", "Ready:", "Set up table")), out


def test_setup_options_must_fit_the_backend(redis_url: str) -> None:
    proc = run_cli("setup", "--url", redis_url, "--schema", "s")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "langgraph-durable setup: error: --schema applies to PostgreSQL URLs only"
    )
    proc = run_cli("setup", "--url", "mysql://db/x")
    assert proc.returncode == 2
    assert "unsupported URL scheme 'mysql://'" in proc.stderr


async def test_every_savers_setup_returns_its_schema_changes_then_nothing(
    spec: SaverSpec,
) -> None:
    """The list of what changed: migrations, or the table; always empty on Redis;
    and empty for every saver once the store is ready (sync and async alike)."""
    with saver_of(spec) as saver:
        first = saver.setup()
        again = saver.setup()
    assert isinstance(first, list) and isinstance(again, list)
    assert again == []
    if spec.backend == "postgres":
        assert first and first == sorted(first) and all(isinstance(v, int) for v in first)
    elif spec.backend == "redis":
        assert first == []  # keys need no schema
        found: Any = first  # a redis.SetupResult: what it found is on the side
        assert found.versions and not found.warnings
    else:
        assert first == ["created table"]
    async_class = {
        "postgres": "AsyncPostgresSaver",
        "redis": "AsyncRedisSaver",
        "dynamodb": "AsyncDynamoDBSaver",
    }[spec.backend]
    module = __import__(f"langgraph_durable.{spec.backend}", fromlist=[async_class])
    async with getattr(module, async_class).from_conn_string(spec.conn, **spec.kwargs) as asaver:
        assert await asaver.setup() == []


# ---------------------------------------------------------------------------- prune policy

THREADS = ("t1", "t2", "t3")


def _populate_under_30_days(spec: SaverSpec) -> None:
    """Three threads of three checkpoints, by a saver that stores a 30-day policy."""
    with saver_of(spec, retention=Retention(idle=datetime.timedelta(days=30))) as saver:
        saver.setup()
        for thread in THREADS:
            put_chain(saver, thread, 3)


def _counts(spec: SaverSpec) -> dict[str, int]:
    with saver_of(spec) as saver:
        return {thread: len(list(saver.list(cfg(thread)))) for thread in THREADS}


def test_prune_flags_replace_the_stored_policy_and_the_report_says_so(
    spec: SaverSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    _populate_under_30_days(spec)
    # no flag: the stored policy runs (and trims nothing: nothing is 30 days idle)
    stored = prune_json(spec, capsys)
    assert (stored["policy"], stored["policy_source"]) == ("delete when 30d idle", "stored")
    assert (stored["threads"], stored["trimmed"]) == (0, 0)
    dry = prune_text(spec, capsys, "--dry-run")
    assert "(the stored policy: delete when 30d idle)" in dry

    # flags: keep-latest of every thread, not merged with the stored 30 days
    dry = prune_text(spec, capsys, "--strategy", "keep-latest", "--keep", "1", "--dry-run")
    assert (
        "(from the flags: keep latest 1 of every thread; the stored policy "
        "(delete when 30d idle) was not used): a run would delete 0 threads, trim 3, "
        "remove 6 checkpoints"
    ) in dry
    assert _counts(spec) == {thread: 3 for thread in THREADS}
    ran = prune_json(spec, capsys, "--strategy", "keep-latest", "--keep", "1")
    assert ran["policy"] == "keep latest 1 of every thread"
    assert (ran["policy_source"], ran["stored_policy"]) == ("flags", "delete when 30d idle")
    assert (ran["threads"], ran["trimmed"], ran["checkpoints"]) == (0, 3, 6)
    assert _counts(spec) == {thread: 1 for thread in THREADS}

    # --keep alone means keep-latest
    alone = prune_json(spec, capsys, "--keep", "2")
    assert (alone["policy"], alone["trimmed"]) == ("keep latest 2 of every thread", 0)


def test_prune_without_a_stored_policy_says_each_threads_expiry_decides(
    spec: SaverSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    with saver_of(spec) as saver:
        saver.setup()
        put_chain(saver, "t1", 1)
    summary = prune_json(spec, capsys)
    assert (summary["policy_source"], summary["stored_policy"]) == ("expiry", None)
    dry = prune_text(spec, capsys, "--dry-run")
    assert "(no policy stored or given: each thread's stored expiry)" in dry


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--strategy", "delete"],
            "--strategy delete needs --idle or --absolute (e.g. --idle 30d): without "
            "either it would delete every thread",
        ),
        (["--strategy", "delete", "--idle", "1d", "--keep", "2"], "--keep applies to "),
        (["--idle", "3 weeks"], "--idle: duration '3 weeks' is not understood: use a number"),
    ],
)
def test_prune_bad_policy_flags_name_the_flags(pg_url: str, flags: list[str], message: str) -> None:
    proc = run_cli("prune", "--url", pg_url, *flags)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("langgraph-durable prune: error: "), lines
    assert message in lines[0]
    assert "Retention(" not in lines[0]


# ---------------------------------------------------------------------------- threads_seen


def test_threads_seen_counts_the_same_threads_on_every_backend(
    request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    """One scenario on the three backends: two threads idle past the bound, three
    live (one of them a single checkpoint). ``threads_seen`` is the threads the
    run found expired: 2 under ``--idle`` (the live ones left out); once those are
    deleted, under keep-latest of every thread, the 3 left (the one already within
    ``--keep`` included)."""
    specs = [make_spec(request, backend) for backend in BACKENDS]
    for spec in specs:
        with saver_of(spec) as saver:
            saver.setup()
            for thread in ("old1", "old2"):
                put_chain(saver, thread, 2)
    time.sleep(4.5)
    seen: dict[str, list[tuple[int, int, int, int]]] = {}
    for spec in specs:  # the live threads are written just before their backend's runs
        with saver_of(spec) as saver:
            for thread, steps in (("live1", 2), ("live2", 2), ("live3", 1)):
                put_chain(saver, thread, steps)
        runs = [
            prune_json(spec, capsys, "--idle", "4s", "--dry-run"),
            prune_json(spec, capsys, "--idle", "4s"),
            prune_json(spec, capsys, "--keep", "1", "--dry-run"),
            prune_json(spec, capsys, "--keep", "1"),
        ]
        seen[spec.backend] = [
            (r["threads_seen"], r["threads"], r["trimmed"], r["checkpoints"]) for r in runs
        ]
    expected = [(2, 2, 0, 4), (2, 2, 0, 4), (3, 0, 2, 2), (3, 0, 2, 2)]
    assert seen == {backend: expected for backend in BACKENDS}


# ---------------------------------------------------------------------------- unreachable


def test_an_unreachable_postgres_fails_at_once_without_pool_log_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver

    url = _refused_url()
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError, match="cannot connect to PostgreSQL") as info:
        with PostgresSaver.from_conn_string(url):
            pass
    assert "127.0.0.1" in str(info.value) and "hunter2" not in str(info.value)

    async def open_async() -> None:
        async with AsyncPostgresSaver.from_conn_string(url):
            pass

    with pytest.raises(StorageUnavailableError, match="cannot connect to PostgreSQL"):
        asyncio.run(open_async())
    assert time.monotonic() - started < 10  # the pool's wait is 30 s
    assert [r for r in caplog.records if r.name.startswith("psycopg")] == []


def test_a_url_of_another_kind_is_a_configuration_error_that_hides_the_password(
    redis_url: str,
) -> None:
    from langgraph_durable.postgres import PostgresSaver

    url = redis_url.replace("redis://", "redis://:hunter2@", 1)
    with pytest.raises(ConfigurationError, match="invalid PostgreSQL connection string") as info:
        PostgresSaver(url)
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("command", ["setup", "prune", "verify", "rotate-keys"])
def test_the_cli_on_an_unreachable_postgres_prints_one_line(command: str) -> None:
    url = _refused_url()
    env = {"verify": "LGD_INTEGRITY_KEY", "rotate-keys": "LGD_KEYRING"}
    extra = {"LGD_INTEGRITY_KEY": "ab" * 32, "LGD_KEYRING": "A=" + "A" * 43 + "="}
    proc = subprocess.run(
        [sys.executable, "-m", "langgraph_durable.cli", command, "--url", url],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**_env(), **({env[command]: extra[env[command]]} if command in env else {})},
        cwd=REPO_ROOT,
    )
    assert proc.returncode in (1, 2), proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"langgraph-durable {command}: error: cannot connect to PostgreSQL")
    assert "127.0.0.1" in lines[0] and "hunter2" not in proc.stdout + proc.stderr


# ---------------------------------------------------------------------------- counts


def test_plural() -> None:
    assert plural(0, "thread") == "0 threads"
    assert plural(1, "thread") == "1 thread"
    assert plural(2, "thread") == "2 threads"
    assert plural(1, "index entry", "index entries") == "1 index entry"
    assert plural(3, "index entry", "index entries") == "3 index entries"


def test_counts_of_one_are_singular_in_prune_and_verify(
    pg_url: str, pg_schema: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_durable.postgres import PostgresSaver
    from langgraph_durable.protect.integrity import integrity_from_env

    key = {"LGD_INTEGRITY_KEY": "cd" * 32}
    chain = integrity_from_env(key)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, integrity=chain) as saver:
        saver.setup()
        put_chain(saver, "only", 1)
    monkeypatch.setenv("LGD_INTEGRITY_KEY", key["LGD_INTEGRITY_KEY"])
    assert main(["verify", "--url", pg_url, "--schema", pg_schema]) == 0
    out = capsys.readouterr().out
    assert "Verified 1 checkpoint in 1 thread on " in out, out
    monkeypatch.delenv("LGD_INTEGRITY_KEY")
    time.sleep(1.1)
    assert main(["prune", "--url", pg_url, "--schema", pg_schema, "--idle", "1s", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "a run would delete 1 thread, remove 1 checkpoint (" in out, out
    assert re.search(r"\b1 (thread|checkpoint)s\b", out) is None
