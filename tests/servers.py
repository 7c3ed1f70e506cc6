"""Real services for the test suite: find one that is running, or start a throwaway one.

For each service the rig resolves an endpoint in this order:

1. the URL in the service's environment variable (e.g. ``LGD_POSTGRES_URL``), used as is;
2. the local default port (``LGD_POSTGRES_PROBE``, ``host:port``, default
   ``127.0.0.1:5432``) if something that speaks the service's protocol answers there;
   set the probe variable to ``off`` to skip this step;
3. a throwaway server started for this process and stopped when it exits
   (or when :meth:`Services.close` is called). For PostgreSQL,
   ``LGD_POSTGRES_EMBEDDED_SOURCE`` (``auto``, ``system`` or ``wheel``) chooses its
   binaries; ``wheel`` rehearses a machine that has only Python.

Only PostgreSQL is wired in so far. A new backend adds one :class:`Provider` to
:data:`PROVIDERS`; the planned ones are:

* ``redis``: ``LGD_REDIS_URL``; probe ``LGD_REDIS_PROBE`` (default ``127.0.0.1:6379``,
  answering ``PING`` with ``+PONG``) giving ``redis://host:port/0``; throwaway via a
  ``redis-server`` binary on a free port with ``--save '' --appendonly no``.
* ``redis-cluster``: ``LGD_REDIS_CLUSTER_URL``; throwaway 3-node cluster from
  ``redis-server --cluster-enabled yes`` plus ``redis-cli --cluster create``.
* ``dynamodb``: ``LGD_DYNAMODB_ENDPOINT``; no probe; throwaway
  ``moto.server.ThreadedMotoServer`` on a free loopback port.

The module imports only the standard library and the package's embedded server
helper, so it can be used outside pytest (benchmarks, the demo) as well.
"""

from __future__ import annotations

import atexit
import os
import socket
import struct
import sys
import threading
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from langgraph_durable.postgres.embedded import BinarySource

__all__ = [
    "Endpoint",
    "Provider",
    "PROVIDERS",
    "Services",
    "SERVICES",
    "parse_probe",
]

#: Set by a process that resolved an endpoint for its children (e.g. the pytest-xdist
#: controller) to say where the URL it exported came from.
SOURCE_SUFFIX = "_SOURCE"


@dataclass(frozen=True)
class Endpoint:
    """A resolved service.

    Attributes:
        service: Provider name, e.g. ``"postgres"``.
        url: Connection URL (or endpoint URL) for clients.
        source: Human-readable account of where the URL came from.
        kind: ``"env"``, ``"local"`` or ``"throwaway"``.
    """

    service: str
    url: str
    source: str
    kind: str


@dataclass(frozen=True)
class Throwaway:
    """A server started by the rig: its URL, a description, and how to stop it."""

    url: str
    description: str
    stop: Callable[[], None]


@dataclass(frozen=True)
class Provider:
    """How to find or start one kind of service.

    Attributes:
        name: Short service name used in messages and as a key.
        url_env: Environment variable holding an explicit URL.
        probe_env: Environment variable holding ``host:port`` to probe (``off`` disables
            probing); ``None`` when the service has no conventional local port.
        default_probe: ``host:port`` probed when ``probe_env`` is unset.
        answers: ``answers(host, port)`` is true when the service's protocol answers there.
        url_for: Builds the URL for a probed ``host, port``.
        start: Starts a throwaway server; receives the settings mapping.
        describe_start: Says, without starting anything, what ``start`` would run.
    """

    name: str
    url_env: str
    probe_env: str | None
    default_probe: str | None
    answers: Callable[[str, int], bool]
    url_for: Callable[[str, int], str]
    start: Callable[[Mapping[str, str]], Throwaway]
    describe_start: Callable[[Mapping[str, str]], str]


def parse_probe(value: str) -> tuple[str, int] | None:
    """Parse ``host:port`` (or ``[v6]:port``); ``off``, ``no``, ``0`` or empty disable probing.

    Args:
        value: The probe setting.

    Returns:
        ``(host, port)``, or ``None`` when probing is disabled.

    Raises:
        ValueError: The value is not of the form ``host:port``.
    """
    text = value.strip()
    if text.lower() in ("", "off", "no", "none", "0", "false"):
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"probe address {value!r} is not of the form host:port")
    return host.strip("[]"), int(port)


# --------------------------------------------------------------------------- postgres

# An SSLRequest packet: length 8, then the magic request code 80877103. A PostgreSQL
# server answers with a single byte, 'S' or 'N', without needing credentials.
_PG_SSL_REQUEST = struct.pack("!ii", 8, 80877103)


def _postgres_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2.0) as sock:
            sock.settimeout(2.0)
            sock.sendall(_PG_SSL_REQUEST)
            return sock.recv(1) in (b"S", b"N")
    except OSError:
        return False


def _postgres_url_for(host: str, port: int) -> str:
    netloc = f"[{host}]" if ":" in host else host
    return f"postgresql://postgres@{netloc}:{port}/test"


def _postgres_binaries_source(environ: Mapping[str, str]) -> BinarySource:
    value = environ.get("LGD_POSTGRES_EMBEDDED_SOURCE", "") or "auto"
    return cast("BinarySource", value)  # find_server_binaries rejects anything else


def _postgres_start(environ: Mapping[str, str]) -> Throwaway:
    from langgraph_durable.postgres.embedded import start_embedded_postgres

    server = start_embedded_postgres(source=_postgres_binaries_source(environ))
    return Throwaway(
        url=server.url,
        description=(
            f"throwaway server ({server.binaries.origin} binaries {server.binaries.bin_dir}, "
            f"pid {server.pid})"
        ),
        stop=server.stop,
    )


def _postgres_describe_start(environ: Mapping[str, str]) -> str:
    from langgraph_durable.postgres.embedded import find_server_binaries

    try:
        binaries = find_server_binaries(_postgres_binaries_source(environ))
    except Exception as exc:  # a description must not fail the run; using it will
        return f"throwaway server, but none can be started: {exc}"
    return f"throwaway server, started on first use ({binaries.origin} binaries {binaries.bin_dir})"


POSTGRES = Provider(
    name="postgres",
    url_env="LGD_POSTGRES_URL",
    probe_env="LGD_POSTGRES_PROBE",
    default_probe="127.0.0.1:5432",
    answers=_postgres_answers,
    url_for=_postgres_url_for,
    start=_postgres_start,
    describe_start=_postgres_describe_start,
)

#: Every service the rig knows, by name.
PROVIDERS: dict[str, Provider] = {POSTGRES.name: POSTGRES}


# --------------------------------------------------------------------------- resolution


@dataclass
class Services:
    """Resolves and owns the services of one process.

    Args:
        environ: Where settings are read from (``os.environ`` by default). Tests of the
            rig pass their own mapping.
        providers: The known services (``PROVIDERS`` by default).
        log: Receives one line per resolution and per throwaway server stopped.
    """

    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    providers: Mapping[str, Provider] = field(default_factory=lambda: PROVIDERS)
    log: Callable[[str], None] = field(
        default=lambda line: print(line, file=sys.stderr, flush=True)
    )
    _endpoints: dict[str, Endpoint] = field(default_factory=dict, init=False)
    _throwaways: dict[str, Throwaway] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def endpoint(self, name: str) -> Endpoint:
        """Resolve ``name`` (once per instance), starting a throwaway server if needed.

        Args:
            name: A key of ``providers``.

        Returns:
            The endpoint to use.
        """
        with self._lock:
            found = self._endpoints.get(name)
            if found is None:
                found = self._resolve(self.providers[name])
                self._endpoints[name] = found
                self.log(f"[lgd test rig] {name}: {found.url} ({found.source})")
            return found

    def postgres(self) -> Endpoint:
        """Shorthand for ``endpoint("postgres")``."""
        return self.endpoint("postgres")

    def plan(self, name: str) -> str:
        """Say where ``name`` would come from, without starting anything.

        Args:
            name: A key of ``providers``.

        Returns:
            A one-line description (the resolved source if already resolved).
        """
        with self._lock:
            if name in self._endpoints:
                found = self._endpoints[name]
                return f"{found.url} ({found.source})"
        provider = self.providers[name]
        url = self.environ.get(provider.url_env)
        if url:
            return f"{url} ({self._env_source(provider)})"
        probed = self._probe(provider)
        if probed is not None:
            return f"{probed.url} ({probed.source})"
        return provider.describe_start(self.environ)

    def export(self, name: str, target: MutableMapping[str, str]) -> Endpoint:
        """Resolve ``name`` and publish it in ``target`` for child processes.

        Children that read ``target`` (typically ``os.environ`` before pytest-xdist
        starts its workers) then share this process's server instead of starting
        their own.

        Args:
            name: A key of ``providers``.
            target: Environment mapping to write to.

        Returns:
            The endpoint exported.
        """
        found = self.endpoint(name)
        provider = self.providers[name]
        target[provider.url_env] = found.url
        target[provider.url_env + SOURCE_SUFFIX] = found.source
        return found

    def close(self) -> None:
        """Stop every throwaway server this instance started."""
        with self._lock:
            throwaways, self._throwaways = self._throwaways, {}
            for name in throwaways:
                self._endpoints.pop(name, None)
        for name, server in throwaways.items():
            server.stop()
            self.log(f"[lgd test rig] {name}: stopped the throwaway server at {server.url}")

    # ------------------------------------------------------------------ internals

    def _env_source(self, provider: Provider) -> str:
        told = self.environ.get(provider.url_env + SOURCE_SUFFIX)
        return f"${provider.url_env}" + (f", from {told}" if told else "")

    def _probe(self, provider: Provider) -> Endpoint | None:
        if provider.probe_env is None:
            return None
        setting = self.environ.get(provider.probe_env, provider.default_probe or "off")
        address = parse_probe(setting)
        if address is None or not provider.answers(*address):
            return None
        host, port = address
        return Endpoint(
            service=provider.name,
            url=provider.url_for(host, port),
            source=f"local server answering on {host}:{port}",
            kind="local",
        )

    def _resolve(self, provider: Provider) -> Endpoint:
        url = self.environ.get(provider.url_env)
        if url:
            return Endpoint(provider.name, url, self._env_source(provider), "env")
        probed = self._probe(provider)
        if probed is not None:
            return probed
        server = provider.start(self.environ)
        self._throwaways[provider.name] = server
        return Endpoint(provider.name, server.url, server.description, "throwaway")


#: The services of this process, read from ``os.environ``; stopped at interpreter exit.
SERVICES = Services()
atexit.register(SERVICES.close)
