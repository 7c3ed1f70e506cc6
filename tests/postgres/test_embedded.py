"""The throwaway PostgreSQL server of langgraph_durable.postgres.embedded."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from langgraph_durable.errors import ConfigurationError
from langgraph_durable.postgres import embedded
from langgraph_durable.postgres.embedded import find_server_binaries, start_embedded_postgres


def _query(url: str, statement: str) -> tuple:
    with psycopg.connect(url, connect_timeout=10, autocommit=True) as conn:
        row = conn.execute(statement).fetchone()
    assert row is not None
    return tuple(row)


def test_wheel_binaries_start_a_server_that_is_gone_after_stop() -> None:
    # The pgserver wheel is part of the test environment (extra "embedded"), so the
    # fallback used on machines without a PostgreSQL installation is exercised here.
    with start_embedded_postgres(source="wheel") as pg:
        assert pg.binaries.origin == "wheel"
        assert pg.running
        (version,) = _query(pg.url, "SHOW server_version")
        assert version
        (port,) = _query(pg.url, "SELECT current_setting('port')::int")
        assert port == pg.port
        (in_database,) = _query(pg.url, "SELECT current_database()")
        assert in_database == pg.dbname
        data_dir = pg.data_dir
        if os.geteuid() == 0:
            # PostgreSQL refuses root; the server must run as an unprivileged account.
            assert data_dir.stat().st_uid != 0
            assert pg.run_as != "root"
    assert not pg.running
    assert not data_dir.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pg.url, connect_timeout=5).close()
    pg.stop()  # a second stop is harmless


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A temporary directory that an unprivileged server account can enter.

    pytest's ``tmp_path`` lives under a directory only its owner may enter, which a
    server dropped from root to ``nobody`` cannot reach.
    """
    path = Path(tempfile.mkdtemp(prefix="lgd-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_given_data_dir_is_kept_and_restarted_with_its_data(open_dir: Path) -> None:
    cluster = open_dir / "cluster"
    with start_embedded_postgres(str(cluster)) as first:
        with psycopg.connect(first.url, connect_timeout=10, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept AS SELECT 7 AS n")
    assert (cluster / "PG_VERSION").is_file()
    with start_embedded_postgres(str(cluster)) as second:
        assert _query(second.url, "SELECT n FROM kept") == (7,)


def test_a_non_empty_directory_that_is_no_cluster_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a database")
    with pytest.raises(ConfigurationError, match="not empty"):
        start_embedded_postgres(str(tmp_path))


def test_missing_binaries_are_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(embedded, "_SYSTEM_BIN_GLOBS", ())
    monkeypatch.setattr(embedded, "_wheel_binaries", lambda: None)
    with pytest.raises(ConfigurationError, match="pgserver") as caught:
        start_embedded_postgres()
    assert "initdb" in str(caught.value) and "langgraph-durable[embedded]" in str(caught.value)
    with pytest.raises(ConfigurationError, match="No PostgreSQL server binaries"):
        find_server_binaries("system")


def test_system_binaries_are_found_in_a_directory_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("initdb", "postgres"):
        exe = tmp_path / name
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    found = find_server_binaries("system")
    assert (found.bin_dir, found.origin) == (tmp_path, "system")


@pytest.mark.parametrize("source", ["docker", ""])
def test_an_unknown_source_is_refused(source: str) -> None:
    with pytest.raises(ConfigurationError, match="source="):
        start_embedded_postgres(source=source)  # type: ignore[arg-type]


def test_as_root_an_unusable_account_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(ConfigurationError, match="does not exist"):
        start_embedded_postgres(run_as="lgd-no-such-account")
    with pytest.raises(ConfigurationError, match="uid 0"):
        start_embedded_postgres(run_as="root")
