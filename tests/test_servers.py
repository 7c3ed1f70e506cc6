"""The test rig's service discovery, including starting its own PostgreSQL."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.servers import Services, parse_probe


def _closed_port() -> int:
    """A loopback port that nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def not_postgres() -> Iterator[int]:
    """A loopback listener that answers like a web server, not like PostgreSQL."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(5)
    server.close()


def test_rig_starts_and_stops_its_own_postgres_when_nothing_answers() -> None:
    port = _closed_port()
    lines: list[str] = []
    services = Services(environ={"LGD_POSTGRES_PROBE": f"127.0.0.1:{port}"}, log=lines.append)
    assert "throwaway" in services.plan("postgres")

    endpoint = services.postgres()
    data_directory = ""
    try:
        assert endpoint.kind == "throwaway"
        assert services.postgres() is endpoint  # resolved once, not a second server
        url = urlsplit(endpoint.url)
        assert url.hostname == "127.0.0.1" and url.port not in (port, 5432)
        with psycopg.connect(endpoint.url, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT 40 + 2, current_setting('port')::int, current_setting('data_directory')"
            ).fetchone()
        assert row is not None
        answer, server_port, data_directory = row
        assert answer == 42 and server_port == url.port
        assert Path(data_directory).is_dir()
        assert any("throwaway" in line for line in lines), lines
    finally:
        services.close()

    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(endpoint.url, connect_timeout=5).close()
    assert data_directory and not Path(data_directory).exists()
    assert any("stopped" in line for line in lines), lines


def test_rig_uses_a_postgres_answering_on_the_probed_port() -> None:
    # A throwaway server stands in for "the local default port"; it runs from the
    # pgserver wheel, as on a machine that has only Python.
    starter = Services(
        environ={"LGD_POSTGRES_PROBE": "off", "LGD_POSTGRES_EMBEDDED_SOURCE": "wheel"},
        log=lambda _: None,
    )
    assert "wheel binaries" in starter.plan("postgres")
    local = starter.postgres()
    try:
        assert local.kind == "throwaway" and "wheel binaries" in local.source
        port = urlsplit(local.url).port
        services = Services(environ={"LGD_POSTGRES_PROBE": f"127.0.0.1:{port}"}, log=lambda _: None)
        endpoint = services.postgres()
        assert endpoint.kind == "local"
        assert endpoint.url == f"postgresql://postgres@127.0.0.1:{port}/test"
        services.close()  # it started nothing, so the server must still be up
        with psycopg.connect(local.url, connect_timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        starter.close()


def test_rig_ignores_a_port_that_does_not_speak_postgres(not_postgres: int) -> None:
    services = Services(environ={"LGD_POSTGRES_PROBE": f"127.0.0.1:{not_postgres}"})
    assert not services.providers["postgres"].answers("127.0.0.1", not_postgres)
    assert "throwaway" in services.plan("postgres")


def test_rig_prefers_the_url_in_the_environment_and_probes_nothing() -> None:
    url = "postgresql://someone@db.invalid:6543/app"

    def must_not_probe(host: str, port: int) -> bool:
        raise AssertionError("probed although LGD_POSTGRES_URL is set")

    from dataclasses import replace

    from tests.servers import PROVIDERS

    provider = replace(PROVIDERS["postgres"], answers=must_not_probe)
    services = Services(
        environ={"LGD_POSTGRES_URL": url, "LGD_POSTGRES_URL_SOURCE": "the CI job"},
        providers={"postgres": provider},
        log=lambda _: None,
    )
    endpoint = services.postgres()
    assert (endpoint.url, endpoint.kind) == (url, "env")
    assert "LGD_POSTGRES_URL" in endpoint.source and "the CI job" in endpoint.source

    exported: dict[str, str] = {}
    services.export("postgres", exported)
    assert exported == {"LGD_POSTGRES_URL": url, "LGD_POSTGRES_URL_SOURCE": endpoint.source}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:5432", ("127.0.0.1", 5432)),
        ("db.local:6000", ("db.local", 6000)),
        ("[::1]:5433", ("::1", 5433)),
        ("off", None),
        ("", None),
    ],
)
def test_parse_probe(value: str, expected: tuple[str, int] | None) -> None:
    assert parse_probe(value) == expected


@pytest.mark.parametrize("value", ["5432", "localhost", "host:port"])
def test_parse_probe_rejects_malformed_addresses(value: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        parse_probe(value)
