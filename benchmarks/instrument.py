"""Measurement helpers: per-call timing, call recording, and a round-trip counting proxy.

Timing and recording work by replacing methods on the saver *instance* (not by wrapping the
saver in another object), so the saver stays the same class, ``isinstance`` checks inside
LangGraph keep working, and ``functools.wraps`` keeps the signatures LangGraph inspects.
"""

from __future__ import annotations

import copy
import functools
import inspect
import selectors
import socket
import threading
import time
from collections import defaultdict
from typing import Any

SYNC_TIMED = ("put", "put_writes", "get_tuple", "list")
ASYNC_TIMED = ("aput", "aput_writes", "aget_tuple", "alist")


class CallTimes:
    """Latency samples (seconds) per method name. ``list.append`` is atomic under the GIL."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = defaultdict(list)

    def add(self, name: str, seconds: float) -> None:
        self.samples[name].append(seconds)

    def clear(self) -> None:
        self.samples.clear()


def _canonical(name: str) -> str:
    """aput -> put, aget_tuple -> get_tuple, ... so sync and async savers report alike."""
    return name[1:] if name in ASYNC_TIMED else name


def install_timing(saver: Any, times: CallTimes) -> None:
    """Time put/put_writes/get_tuple (and their async twins) on this saver instance."""
    for name in SYNC_TIMED + ASYNC_TIMED:
        if name in ("list", "alist"):
            continue  # iterators; timed explicitly by the history measurement
        orig = getattr(saver, name, None)
        if orig is None:
            continue
        key = _canonical(name)
        if inspect.iscoroutinefunction(orig):

            def make_async(orig: Any = orig, key: str = key) -> Any:
                @functools.wraps(orig)
                async def timed(*args: Any, **kwargs: Any) -> Any:
                    t0 = time.perf_counter()
                    try:
                        return await orig(*args, **kwargs)
                    finally:
                        times.add(key, time.perf_counter() - t0)

                return timed

            setattr(saver, name, make_async())
        else:

            def make_sync(orig: Any = orig, key: str = key) -> Any:
                @functools.wraps(orig)
                def timed(*args: Any, **kwargs: Any) -> Any:
                    t0 = time.perf_counter()
                    try:
                        return orig(*args, **kwargs)
                    finally:
                        times.add(key, time.perf_counter() - t0)

                return timed

            setattr(saver, name, make_sync())


def install_recorder(saver: Any, calls: list[tuple]) -> None:
    """Record every put / put_writes made on a (sync) saver, deep-copied at call time.

    Entries: ("put", config, checkpoint, metadata, new_versions) and
    ("put_writes", config, writes, task_id, task_path).
    """
    orig_put = saver.put
    orig_put_writes = saver.put_writes

    @functools.wraps(orig_put)
    def put(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        calls.append(
            (
                "put",
                copy.deepcopy(config),
                copy.deepcopy(checkpoint),
                copy.deepcopy(metadata),
                copy.deepcopy(new_versions),
            )
        )
        return orig_put(config, checkpoint, metadata, new_versions)

    @functools.wraps(orig_put_writes)
    def put_writes(config: Any, writes: Any, task_id: str, task_path: str = "") -> Any:
        calls.append(
            ("put_writes", copy.deepcopy(config), copy.deepcopy(list(writes)), task_id, task_path)
        )
        return orig_put_writes(config, writes, task_id, task_path)

    saver.put = put
    saver.put_writes = put_writes


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no samples."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, int(round(q / 100.0 * len(ordered) + 0.4999)))
    return ordered[min(rank, len(ordered)) - 1]


class RoundTripProxy:
    """A TCP relay between the client and PostgreSQL that counts protocol round trips.

    A *round trip* is counted each time the server starts sending after the client has sent
    something since the server last sent: one client->server burst answered by one
    server->client burst. Pipelined statements sent together therefore count once, a
    statement that waits for its answer before the next is sent counts once each. Pool
    housekeeping (e.g. a ROLLBACK when a connection is returned) is on the wire and is
    counted too. Bytes in both directions are counted as well.

    The relay adds latency, so it is used only in a separate, sequential counting pass and
    never while throughput or latency is being timed.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        # A host starting with "/" is a Unix-socket directory, as in libpq.
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self.round_trips = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accept_thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._accept_thread.start()

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return self.round_trips, self.bytes_up, self.bytes_down

    def _accept_loop(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = self._connect_target()
            except OSError:
                client.close()
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if server.family != socket.AF_UNIX:
                server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t = threading.Thread(target=self._relay, args=(client, server), daemon=True)
            t.start()
            self._threads.append(t)

    def _connect_target(self) -> socket.socket:
        host, port = self.target
        if host.startswith("/"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(f"{host}/.s.PGSQL.{port}")
            return sock
        return socket.create_connection((host, port))

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, "up")
        sel.register(server, selectors.EVENT_READ, "down")
        client_spoke = False
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.2):
                    src = key.fileobj
                    data = src.recv(1 << 16)  # type: ignore[union-attr]
                    if not data:
                        return
                    if key.data == "up":
                        with self._lock:
                            self.bytes_up += len(data)
                        client_spoke = True
                        server.sendall(data)
                    else:
                        with self._lock:
                            self.bytes_down += len(data)
                            if client_spoke:
                                self.round_trips += 1
                        client_spoke = False
                        client.sendall(data)
        except OSError:
            return
        finally:
            sel.close()
            client.close()
            server.close()

    def close(self) -> None:
        self._stop.set()
        try:
            self._listener.close()
        except OSError:
            pass
        self._accept_thread.join(timeout=1)
        for t in self._threads:
            t.join(timeout=1)
