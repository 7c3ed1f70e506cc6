"""A loopback TCP proxy that cuts connections on command, for the fault tests.

Each client connection gets its own connection to the target and two threads that
copy bytes both ways. :meth:`FaultProxy.reset_all` closes every connection open
through it with a TCP reset (``SO_LINGER`` 0) on both sides, as a network cut or a
server restart does to a pooled connection; new connections go through as before.
:meth:`FaultProxy.lose_next_reply` cuts the connection that next receives bytes from
the server, instead of passing them on: a statement applied whose reply was lost. Bytes
a client sends that hold ``poison`` cut its connection before they reach the server. With
``black_hole`` set, new connections are accepted and never answered, and bytes on open
ones are dropped without closing them (a partition that drops packets).
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["FaultProxy", "proxy_to", "step_args"]

_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 seconds: close() sends RST


class FaultProxy:
    """Relay 127.0.0.1:<port> to ``target``; cut every open connection on command."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self.resets = 0
        self._lose_reply = threading.Event()
        #: While True, new connections are accepted and then never answered, and open
        #: ones carry nothing either way (their bytes are dropped, nothing is closed).
        self.black_hole = False
        self._held: list[socket.socket] = []
        self.lost_replies = 0
        #: Bytes that, sent by a client, cut its connection before they reach the server
        #: (a statement that breaks its connection every time it is sent).
        self.poison: bytes | None = None
        self.poisoned = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def lose_next_reply(self) -> None:
        """Cut the connection that next gets bytes from the server, dropping them."""
        self._lose_reply.set()

    def url(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        parts = urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (userinfo + "@" if userinfo else "") + f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.black_hole:  # accept, then never answer (a partition: no reset, no reply)
                with self._lock:
                    self._held.append(client)
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, server))
            for a, b, replies in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pump, args=(a, b, replies), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                if self.black_hole:  # open connections too: bytes vanish, nothing is closed
                    continue
                if not replies and self.poison is not None and self.poison in data:
                    self.poisoned += 1
                    self._sever(src, dst)
                    return
                if replies and self._lose_reply.is_set():
                    self._lose_reply.clear()
                    self.lost_replies += 1
                    self._sever(src, dst)
                    return
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _sever(self, src: socket.socket, dst: socket.socket) -> None:
        """Cut the one connection whose sockets are ``src`` and ``dst``."""
        with self._lock:
            self._pairs = [p for p in self._pairs if src not in p]
        _cut(src)
        _cut(dst)

    def reset_all(self) -> int:
        """Cut every connection open through the proxy; how many were cut."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                _cut(s)
        self.resets += len(pairs)
        return len(pairs)

    def close(self) -> None:
        self._listener.close()
        self.reset_all()
        for s in self._held:
            _cut(s)


def _cut(s: socket.socket) -> None:
    """Reset one side: shutdown wakes the pump blocked in recv on it (a close alone would
    wait for that recv), then close with SO_LINGER 0 sends the reset."""
    for step in ("linger", "shutdown", "close"):
        try:
            if step == "linger":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            elif step == "shutdown":
                s.shutdown(socket.SHUT_RDWR)
            else:
                s.close()
        except OSError:
            pass


def proxy_to(url: str, default_port: int) -> FaultProxy:
    """A proxy in front of the server of ``url``."""
    parts = urlsplit(url)
    return FaultProxy(parts.hostname or "127.0.0.1", parts.port or default_port)


def step_args(step: int, parent: Any) -> tuple[Any, ...]:
    """``put``'s arguments for checkpoint ``step`` of a chain under ``parent``'s config."""
    from tests.helpers import versioned_cp

    cp = versioned_cp(step=step, payload={"step": step})
    return parent, cp, {"step": step, "source": "loop"}, cp["channel_versions"]
