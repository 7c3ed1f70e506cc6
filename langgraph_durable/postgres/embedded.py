"""A throwaway PostgreSQL server for tests, demos and local development.

:func:`start_embedded_postgres` creates a database cluster with ``initdb`` and
runs ``postgres`` on a free loopback port, with trust authentication and no
Unix socket. It uses the PostgreSQL server binaries installed on the machine
(found on ``PATH`` or in the usual Debian, Red Hat and Homebrew locations)
and falls back to the binaries shipped by the ``pgserver`` wheel (install the
``embedded`` extra). Only the standard library is imported here.

PostgreSQL refuses to run as root. When this process is root, the server runs
as an unprivileged account instead (``nobody`` unless ``run_as`` or the
``LGD_EMBEDDED_PG_USER`` environment variable names another one).

The server is a child of this process. Stop it with
:meth:`EmbeddedPostgres.stop` or a ``with`` block; it is also stopped when
the interpreter exits normally. Settings favour speed over durability
(``fsync=off``): never keep data you care about in it.

Example::

    from langgraph_durable.postgres.embedded import start_embedded_postgres

    with start_embedded_postgres() as pg:
        print(pg.url)  # postgresql://postgres@127.0.0.1:54321/postgres
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from langgraph_durable.errors import ConfigurationError, StorageUnavailableError

__all__ = ["EmbeddedPostgres", "start_embedded_postgres", "find_server_binaries"]

BinarySource = Literal["auto", "system", "wheel"]

_SUPERUSER = "postgres"
_DATABASE = "postgres"
_HOST = "127.0.0.1"
_RUN_AS_ENV = "LGD_EMBEDDED_PG_USER"
_DEFAULT_RUN_AS = "nobody"
_START_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 30.0
_PORT_ATTEMPTS = 5

# Appended to postgresql.conf of a cluster this module creates. Port and
# listen address are passed on the command line instead, so a reused data
# directory can start on a new port.
_SERVER_SETTINGS = """
# --- written by langgraph_durable.postgres.embedded: a throwaway server ---
unix_socket_directories = ''
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
"""

_SYSTEM_BIN_GLOBS = (
    "/usr/lib/postgresql/*/bin",  # Debian, Ubuntu
    "/usr/pgsql-*/bin",  # PGDG packages for Red Hat and friends
    "/usr/local/pgsql/bin",  # built from source
    "/opt/homebrew/opt/postgresql*/bin",  # Homebrew, Apple silicon
    "/usr/local/opt/postgresql*/bin",  # Homebrew, Intel
)


@dataclass(frozen=True)
class ServerBinaries:
    """Where the ``initdb`` and ``postgres`` executables of one installation live.

    Attributes:
        bin_dir: Directory holding ``initdb`` and ``postgres``.
        origin: ``"system"`` for an installed PostgreSQL, ``"wheel"`` for the
            binaries of the ``pgserver`` wheel.
    """

    bin_dir: Path
    origin: Literal["system", "wheel"]

    @property
    def initdb(self) -> Path:
        """Path of the ``initdb`` executable."""
        return self.bin_dir / "initdb"

    @property
    def postgres(self) -> Path:
        """Path of the ``postgres`` server executable."""
        return self.bin_dir / "postgres"


class EmbeddedPostgres:
    """A running throwaway PostgreSQL server, as returned by :func:`start_embedded_postgres`.

    Attributes:
        host: Loopback address the server listens on.
        port: TCP port the server listens on.
        user: Superuser role (trust authentication, no password).
        dbname: Name of a database that exists on the server.
        data_dir: The cluster's data directory.
        binaries: The installation the server runs from.
        log_path: File receiving the server's log output (deleted by ``stop``).
        run_as: OS account the server process runs as.
    """

    def __init__(
        self,
        *,
        process: subprocess.Popen[bytes],
        port: int,
        data_dir: Path,
        binaries: ServerBinaries,
        log_path: Path,
        run_as: str,
        scratch_dir: Path,
    ) -> None:
        self.host = _HOST
        self.port = port
        self.user = _SUPERUSER
        self.dbname = _DATABASE
        self.data_dir = data_dir
        self.binaries = binaries
        self.log_path = log_path
        self.run_as = run_as
        self._process = process
        self._scratch_dir = scratch_dir
        self._lock = threading.Lock()
        self._stopped = False
        atexit.register(self.stop)

    @property
    def url(self) -> str:
        """A libpq connection URL for the server's ``postgres`` database."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.dbname}"

    @property
    def pid(self) -> int:
        """Process id of the server's postmaster."""
        return self._process.pid

    @property
    def running(self) -> bool:
        """Whether the server process is still alive."""
        return self._process.poll() is None

    def stop(self) -> None:
        """Stop the server and delete its temporary directory.

        A ``data_dir`` passed to :func:`start_embedded_postgres` is kept; the
        default temporary cluster is deleted with the log.

        Asks for a fast shutdown (rolls back open transactions, disconnects
        clients), escalating to an immediate shutdown and then a kill if the
        server does not exit in time. Calling it again does nothing.
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        atexit.unregister(self.stop)
        _terminate(self._process)
        shutil.rmtree(self._scratch_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedPostgres:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return (
            f"EmbeddedPostgres(url={self.url!r}, {state}, "
            f"binaries={self.binaries.origin}:{self.binaries.bin_dir})"
        )


def start_embedded_postgres(
    data_dir: str | None = None,
    *,
    source: BinarySource = "auto",
    run_as: str | None = None,
) -> EmbeddedPostgres:
    """Start a throwaway PostgreSQL server on a free loopback port.

    Args:
        data_dir: Directory for the cluster. ``None`` (the default) uses a new
            temporary directory that :meth:`EmbeddedPostgres.stop` deletes.
            A given directory is kept: it is initialised if it is missing or
            empty, and an existing cluster in it is started as it is.
        source: Which binaries to use: ``"system"`` for an installed
            PostgreSQL, ``"wheel"`` for the ``pgserver`` wheel, ``"auto"``
            (the default) for the system's if found, else the wheel's.
        run_as: OS account to run the server as when this process is root.
            Defaults to ``$LGD_EMBEDDED_PG_USER``, else ``nobody``. Ignored
            when not root (the server then runs as the current user).

    Returns:
        The running server; its ``url`` points at the existing ``postgres``
        database as the ``postgres`` superuser.

    Raises:
        ConfigurationError: No usable binaries were found, ``source`` or
            ``run_as`` is invalid, or ``data_dir`` cannot be used.
        StorageUnavailableError: ``initdb`` failed or the server did not
            come up; the message includes the end of its log.
    """
    binaries = find_server_binaries(source)
    account = _resolve_account(run_as)
    # The scratch directory holds the server log, a copy of the binaries when
    # the server account cannot reach the originals, and the cluster itself
    # unless data_dir is given. stop() deletes it.
    scratch = Path(tempfile.mkdtemp(prefix="lgd-pg-"))
    try:
        if account is not None:
            os.chmod(scratch, 0o755)  # the server account must reach what is inside
            binaries = _reachable_binaries(binaries, account, scratch)
        if data_dir is None:
            cluster = scratch / "data"
        else:
            cluster = Path(data_dir).expanduser().resolve()
        _prepare_cluster(binaries, cluster, account, scratch)
        log_path = scratch / "postgres.log"
        process, port = _launch(binaries, cluster, account, log_path)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return EmbeddedPostgres(
        process=process,
        port=port,
        data_dir=cluster,
        binaries=binaries,
        log_path=log_path,
        run_as=account.pw_name if account is not None else pwd.getpwuid(os.geteuid()).pw_name,
        scratch_dir=scratch,
    )


def find_server_binaries(source: BinarySource = "auto") -> ServerBinaries:
    """Locate PostgreSQL server binaries without starting anything.

    Args:
        source: ``"system"``, ``"wheel"`` or ``"auto"`` (system first), as in
            :func:`start_embedded_postgres`.

    Returns:
        The installation found.

    Raises:
        ConfigurationError: Nothing usable was found for ``source``, or
            ``source`` is not one of the three values.
    """
    if source not in ("auto", "system", "wheel"):
        raise ConfigurationError(
            f"source={source!r} is not valid: use 'auto', 'system' or 'wheel'."
        )
    if source in ("auto", "system"):
        found = _system_binaries()
        if found is not None:
            return found
        if source == "system":
            raise ConfigurationError(
                "No PostgreSQL server binaries found: looked for 'initdb' and 'postgres' on "
                f"PATH and in {', '.join(_SYSTEM_BIN_GLOBS)}. Install the PostgreSQL server "
                "(e.g. 'apt-get install postgresql') or use source='wheel'."
            )
    found = _wheel_binaries()
    if found is not None:
        return found
    hint = (
        "Install the PostgreSQL server (e.g. 'apt-get install postgresql') or the pgserver "
        "wheel with \"pip install 'langgraph-durable[embedded]'\"."
    )
    if source == "wheel":
        raise ConfigurationError(f"The pgserver wheel is not installed. {hint}")
    raise ConfigurationError(
        "Cannot start an embedded PostgreSQL: no server binaries ('initdb', 'postgres') on "
        f"PATH or in {', '.join(_SYSTEM_BIN_GLOBS)}, and the pgserver wheel is not installed. "
        + hint
    )


# --------------------------------------------------------------------------- binaries


def _usable_bin_dir(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in ("initdb", "postgres"))


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path))


def _system_binaries() -> ServerBinaries | None:
    candidates: list[Path] = []
    on_path = shutil.which("initdb")
    if on_path:
        # Debian links /usr/bin/initdb etc. to the real directory; follow it so
        # initdb finds the 'postgres' that belongs to it.
        candidates.append(Path(os.path.realpath(on_path)).parent)
        candidates.append(Path(on_path).parent)
    for pattern in _SYSTEM_BIN_GLOBS:
        candidates.extend(
            Path(p) for p in sorted(glob.glob(pattern), key=_version_key, reverse=True)
        )
    for directory in candidates:
        if _usable_bin_dir(directory):
            return ServerBinaries(bin_dir=directory, origin="system")
    return None


def _wheel_binaries() -> ServerBinaries | None:
    # find_spec locates the package without importing it (importing pgserver
    # registers exit hooks and pulls in its own dependencies).
    try:
        spec = importlib.util.find_spec("pgserver")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        directory = Path(location) / "pginstall" / "bin"
        if _usable_bin_dir(directory):
            return ServerBinaries(bin_dir=directory, origin="wheel")
    return None


def _reachable_binaries(
    binaries: ServerBinaries, account: pwd.struct_passwd, scratch: Path
) -> ServerBinaries:
    """Return binaries that ``account`` can execute, copying the wheel's if needed."""
    if _runs_as(binaries.postgres, account):
        return binaries
    if binaries.origin == "system":
        raise ConfigurationError(
            f"The PostgreSQL binaries in {binaries.bin_dir} cannot be executed by the "
            f"unprivileged account {account.pw_name!r} the server must run as (this process "
            f"is root). Make that directory and its parents world-readable, or set "
            f"{_RUN_AS_ENV} to an account that can run them."
        )
    # The wheel sits in a virtualenv the server account cannot enter (e.g. under
    # /root). Copy its installation, and the shared libraries the wheel keeps
    # beside it, keeping their relative layout so the binaries' run paths hold.
    install = binaries.bin_dir.parent  # .../site-packages/pgserver/pginstall
    site = install.parent.parent
    target_site = scratch / "pg"
    shutil.copytree(install, target_site / install.parent.name / install.name, symlinks=True)
    for libs in site.glob(f"{install.parent.name}.libs"):
        shutil.copytree(libs, target_site / libs.name, symlinks=True)
    for path in [scratch, *target_site.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    copied = ServerBinaries(
        bin_dir=target_site / install.parent.name / install.name / "bin", origin="wheel"
    )
    if not _runs_as(copied.postgres, account):
        raise ConfigurationError(
            f"The pgserver binaries cannot be executed by the account {account.pw_name!r} "
            f"even from a copy in {copied.bin_dir}; set {_RUN_AS_ENV} to another account."
        )
    return copied


def _runs_as(executable: Path, account: pwd.struct_passwd) -> bool:
    try:
        done = subprocess.run(
            [str(executable), "--version"],
            capture_output=True,
            timeout=30,
            **_account_kwargs(account),
        )
    except OSError:
        return False
    return done.returncode == 0


# --------------------------------------------------------------------------- accounts


def _resolve_account(run_as: str | None) -> pwd.struct_passwd | None:
    """The account to drop to when root; ``None`` when no switch is needed."""
    if os.geteuid() != 0:
        return None
    name = run_as or os.environ.get(_RUN_AS_ENV) or _DEFAULT_RUN_AS
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        raise ConfigurationError(
            f"PostgreSQL refuses to run as root, and the account {name!r} to run it as does "
            f"not exist. Create an unprivileged account (e.g. 'useradd --system pgtest') and "
            f"pass run_as= or set {_RUN_AS_ENV}, or run as a non-root user."
        ) from None
    if account.pw_uid == 0:
        raise ConfigurationError(
            f"run_as={name!r} is root (uid 0); PostgreSQL refuses to run as root. "
            f"Name an unprivileged account."
        )
    return account


def _account_kwargs(account: pwd.struct_passwd | None) -> dict[str, Any]:
    if account is None:
        return {}
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def _child_env(account: pwd.struct_passwd | None) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PG")
        and key not in ("LANG", "LANGUAGE")
        and not key.startswith("LC_")
    }
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    if account is not None:
        env["HOME"] = account.pw_dir if os.path.isdir(account.pw_dir) else "/"
        env["USER"] = env["LOGNAME"] = account.pw_name
    return env


# --------------------------------------------------------------------------- cluster


def _prepare_cluster(
    binaries: ServerBinaries,
    cluster: Path,
    account: pwd.struct_passwd | None,
    scratch: Path,
) -> None:
    """Run ``initdb`` into ``cluster`` unless it already holds a cluster."""
    if (cluster / "PG_VERSION").is_file():
        return
    if cluster.exists() and (not cluster.is_dir() or any(cluster.iterdir())):
        raise ConfigurationError(
            f"data_dir={str(cluster)!r} exists and is not empty but holds no PostgreSQL "
            f"cluster (no PG_VERSION). Pass an empty or missing directory."
        )
    try:
        cluster.mkdir(mode=0o700, parents=True, exist_ok=True)
        if account is not None:
            os.chown(cluster, account.pw_uid, account.pw_gid)
    except OSError as exc:
        raise ConfigurationError(f"Cannot create data_dir={str(cluster)!r}: {exc}") from exc
    args = [
        str(binaries.initdb),
        "-D",
        str(cluster),
        "-U",
        _SUPERUSER,
        "--auth=trust",
        "--encoding=UTF8",
        "--locale=C",
        "--no-sync",
    ]
    try:
        done = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=300,
            env=_child_env(account),
            cwd=str(scratch),
            **_account_kwargs(account),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StorageUnavailableError(f"initdb could not run ({binaries.initdb}): {exc}") from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        hint = ""
        if account is not None and "ermission denied" in detail:
            hint = (
                f" The server runs as {account.pw_name!r}; every parent directory of "
                f"{str(cluster)!r} must be searchable by that account."
            )
        raise StorageUnavailableError(
            f"initdb failed with exit code {done.returncode} for {str(cluster)!r}:{hint}\n{detail}"
        )
    with open(cluster / "postgresql.conf", "a", encoding="utf-8") as conf:
        conf.write(_SERVER_SETTINGS)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _launch(
    binaries: ServerBinaries,
    cluster: Path,
    account: pwd.struct_passwd | None,
    log_path: Path,
) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``postgres`` on a free port, retrying if another process takes the port."""
    last_error = ""
    for _ in range(_PORT_ATTEMPTS):
        port = _free_port()
        with open(log_path, "ab") as log:
            offset = log.tell()
            if account is not None:
                with contextlib.suppress(OSError):
                    os.chown(log_path, account.pw_uid, account.pw_gid)
            try:
                process = subprocess.Popen(
                    [
                        str(binaries.postgres),
                        "-D",
                        str(cluster),
                        "-p",
                        str(port),
                        "-c",
                        f"listen_addresses={_HOST}",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=_child_env(account),
                    cwd=str(cluster),
                    start_new_session=True,
                    **_account_kwargs(account),
                )
            except OSError as exc:
                raise StorageUnavailableError(f"Cannot execute {binaries.postgres}: {exc}") from exc
        outcome = _wait_ready(process, cluster, port)
        if outcome == "ready":
            return process, port
        _terminate(process)
        last_error = _read_from(log_path, offset)
        if outcome == "exited" and "already in use" in last_error:
            continue  # someone took the port between our probe and the bind
        reason = (
            f"did not accept connections within {_START_TIMEOUT_S:.0f}s"
            if outcome == "timeout"
            else f"exited with code {process.returncode}"
        )
        raise StorageUnavailableError(
            f"The embedded PostgreSQL server ({binaries.postgres}) {reason}. "
            f"Server log ({log_path}):\n{_tail(last_error)}"
        )
    raise StorageUnavailableError(
        f"The embedded PostgreSQL server could not bind a free port on {_HOST} after "
        f"{_PORT_ATTEMPTS} attempts. Last server log:\n{_tail(last_error)}"
    )


def _wait_ready(process: subprocess.Popen[bytes], cluster: Path, port: int) -> str:
    """Wait until the server accepts connections: ``ready``, ``exited`` or ``timeout``."""
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return "exited"
        if _postmaster_ready(cluster, process.pid) and _accepts_tcp(port):
            return "ready"
        time.sleep(0.05)
    return "timeout"


def _postmaster_ready(cluster: Path, pid: int) -> bool:
    """Read ``postmaster.pid``: its first line is the pid, its eighth the status."""
    try:
        lines = (cluster / "postmaster.pid").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    if not lines or lines[0].strip() != str(pid):
        return False
    return len(lines) >= 8 and lines[7].strip() == "ready"


def _accepts_tcp(port: int) -> bool:
    try:
        with socket.create_connection((_HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


def _terminate(process: subprocess.Popen[bytes]) -> None:
    """Fast shutdown (SIGINT), then immediate (SIGQUIT), then SIGKILL."""
    for sig, wait_s in (
        (signal.SIGINT, _STOP_TIMEOUT_S),
        (signal.SIGQUIT, 5.0),
        (signal.SIGKILL, 5.0),
    ):
        if process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait_s)
            return


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:]) or "(empty)"
