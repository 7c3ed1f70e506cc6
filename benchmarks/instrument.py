"""Measurement helpers: per-call timing, call recording, and a round-trip counting proxy.

Timing and recording work by replacing methods on the saver *instance* (not by wrapping the
saver in another object), so the saver stays the same class, ``isinstance`` checks inside
LangGraph keep working, and ``functools.wraps`` keeps the signatures LangGraph inspects.
"""

from __future__ import annotations

import copy
import functools
import inspect
import select
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


def _readable(sock: socket.socket) -> bool:
    """Whether bytes (or EOF) are waiting on ``sock`` right now."""
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return False


class RoundTripProxy:
    """A TCP relay between the client and a server that counts protocol round trips.

    A *round trip* is counted each time the server starts sending after the client has sent
    something since the server last sent: one client->server burst answered by one
    server->client burst. Pipelined statements sent together therefore count once, a
    statement that waits for its answer before the next is sent counts once each. Pool
    housekeeping (e.g. a ROLLBACK when a connection is returned) is on the wire and is
    counted too. Bytes in both directions are counted as well.

    The relay adds latency, so it is used only in a separate, sequential counting pass and
    never while throughput or latency is being timed.

    A client may write one burst in several pieces (redis-py writes a pipeline's large
    values separately), and a server may answer its first commands before the rest has
    arrived (Redis answers ``+QUEUED`` per command inside ``MULTI``). An answer that
    comes while more of the client's bytes are already waiting at the relay is therefore
    not counted: the client was not waiting for it. ``recv_size`` is how much the relay
    reads at once (Redis is relayed with 1 MB reads).

    Setting ``delay`` (seconds) holds each answer that starts a round trip for that long
    before passing it on: a network between client and server, emulated on loopback.
    """

    def __init__(self, target_host: str, target_port: int, recv_size: int = 1 << 16) -> None:
        # A host starting with "/" is a Unix-socket directory, as in libpq.
        self.target = (target_host, target_port)
        self.recv_size = recv_size
        self.delay = 0.0  # seconds added to every round trip (0: none)
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
                    data = src.recv(self.recv_size)  # type: ignore[union-attr]
                    if not data:
                        return
                    if key.data == "up":
                        with self._lock:
                            self.bytes_up += len(data)
                        client_spoke = True
                        server.sendall(data)
                    else:
                        # An answer while the client is still sending (its next bytes
                        # are already waiting here) is not one it waited for: the
                        # round trip ends with the answer to the rest of its burst.
                        answered = client_spoke and not _readable(client)
                        with self._lock:
                            self.bytes_down += len(data)
                            if answered:
                                self.round_trips += 1
                        if answered:
                            client_spoke = False
                            if self.delay:
                                time.sleep(self.delay)  # an emulated network round trip
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


# --------------------------------------------------------------------------- AWS API calls

# DynamoDB operations that write, for write units.
WRITE_OPS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
)


def _number_size(text: str) -> int:
    digits = text.lstrip("-").replace(".", "").split("e")[0].split("E")[0].strip("0") or "0"
    return (len(digits) + 1) // 2 + 1


def _value_size(value: dict[str, Any]) -> int:
    """Bytes of one attribute value by DynamoDB's item-size rules."""
    ((kind, v),) = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "B":
        return len(v) if isinstance(v, (bytes, bytearray, memoryview)) else len(str(v).encode())
    if kind == "N":
        return _number_size(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(x.encode()) for x in v)
    if kind == "NS":
        return sum(_number_size(x) for x in v)
    if kind == "BS":
        return sum(len(x) for x in v)
    if kind == "L":
        return 3 + sum(_value_size(x) + 1 for x in v)
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(x) + 1 for k, x in v.items())
    return 0


def item_size(item: dict[str, Any]) -> int:
    """Bytes of an item (attribute names plus values), as DynamoDB sizes it."""
    return sum(len(name.encode()) + _value_size(v) for name, v in item.items())


def _units(size: int) -> int:
    return max(1, -(-size // 1024))


def write_units(op: str, params: dict[str, Any]) -> int:
    """Write capacity units a DynamoDB write request consumes, from its items' sizes.

    A standard write costs one unit per KB of item (rounded up); a write inside a
    transaction costs two. An update is sized by its key and the values it sets (a lower
    bound: DynamoDB charges the larger of the item before and after); a delete, a
    ``ConditionCheck``, or a conditional write whose condition fails are charged as
    one KB (not exact when the item is larger).
    """
    if op == "PutItem":
        return _units(item_size(params.get("Item", {})))
    if op == "UpdateItem":
        return _units(
            item_size(params.get("Key", {}))
            + item_size(params.get("ExpressionAttributeValues", {}))
        )
    if op == "DeleteItem":
        return 1
    if op == "BatchWriteItem":
        total = 0
        for requests in params.get("RequestItems", {}).values():
            for r in requests:
                total += _units(item_size(r["PutRequest"]["Item"])) if "PutRequest" in r else 1
        return total
    if op == "TransactWriteItems":
        total = 0
        for action in params.get("TransactItems", []):
            if "Put" in action:
                total += 2 * _units(item_size(action["Put"]["Item"]))
            elif "Update" in action:
                u = action["Update"]
                size = item_size(u.get("Key", {})) + item_size(
                    u.get("ExpressionAttributeValues", {})
                )
                total += 2 * _units(size)
            else:  # Delete, ConditionCheck
                total += 2
        return total
    return 0


class ApiCallCounter:
    """Counts the AWS API calls made through boto3 clients, with botocore event hooks.

    Per client: ``before-parameter-build`` counts each API call once (botocore's own
    retries happen below it; a saver that retries by calling again is counted again),
    sizes DynamoDB writes into write units (``write_units``) and asks DynamoDB to return
    its consumed capacity; ``before-send`` counts HTTP requests (retries included);
    ``after-call`` adds up the write capacity the server reported (moto reports a
    constant per item, not one based on size). Keys of ``snapshot()``: ``calls``
    (DynamoDB), ``s3_calls``, ``http_requests``, ``write_units``,
    ``reported_write_units``, ``op:<Operation>`` and ``action:<Put|Update|...>``
    (actions inside TransactWriteItems).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.totals: dict[str, float] = defaultdict(float)

    def attach(self, client: Any) -> None:
        events = client.meta.events
        events.register("before-parameter-build", self._before_build)
        events.register("before-send", self._before_send)
        events.register("after-call", self._after_call)

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self.totals)

    def _add(self, **amounts: float) -> None:
        with self._lock:
            for k, v in amounts.items():
                self.totals[k] += v

    def _before_build(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        service = model.service_model.service_name
        op = model.name
        if service != "dynamodb":
            other: dict[str, float] = {f"op:{service}.{op}": 1}
            if service == "s3":
                other["s3_calls"] = 1
            self._add(**other)
            return
        if "ReturnConsumedCapacity" in model.input_shape.members:
            params.setdefault("ReturnConsumedCapacity", "TOTAL")
        amounts: dict[str, float] = {"calls": 1, f"op:{op}": 1}
        if op in WRITE_OPS:
            amounts["write_units"] = write_units(op, params)
        if op == "TransactWriteItems":
            for action in params.get("TransactItems", []):
                for kind in action:
                    amounts[f"action:{kind}"] = amounts.get(f"action:{kind}", 0) + 1
        self._add(**amounts)

    def _before_send(self, **_: Any) -> None:
        self._add(http_requests=1)

    def _after_call(self, parsed: Any, model: Any, **_: Any) -> None:
        if model.service_model.service_name != "dynamodb" or model.name not in WRITE_OPS:
            return
        reported = parsed.get("ConsumedCapacity") if isinstance(parsed, dict) else None
        if isinstance(reported, dict):
            reported = [reported]
        units = sum(float(c.get("CapacityUnits") or 0) for c in reported or [])
        self._add(reported_write_units=units)
