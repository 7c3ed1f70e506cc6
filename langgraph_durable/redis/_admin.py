"""The saver's administrative operations on Redis.

``setup`` (check the servers, load every script, warn about eviction),
deletes (``delete_thread``, ``delete_for_runs``), ``copy_thread``, pruning
(``prune`` and ``prune_expired``, carried out by ``_prune``) and the stored
retention policy. Pure: no redis import, no I/O.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any

from .._core.audit import check_trim
from .._core.retention import PruneRequest, Retention
from .._core.sansio import operation
from ..errors import InvalidInputError, StorageError
from . import _prune
from ._base import OpsBase
from ._keys import SEP, _ident, _is_meta
from ._records import _effect_fields, _pairs, _text
from ._requests import BATCH_SIZE, Batch, Command, Script, _chunks, _first_error
from ._scripts import (
    DELETE_RUNS,
    DROP,
    EFFECT_WRITE,
    MERGE,
    PRUNE_SCRIPTS,
    PRUNE_TRIM,
    READ_ALL,
    SCRIPTS,
)
from ._tombstones import Links, signed_trims

__all__ = ["AdminOps", "SetupResult"]

log = logging.getLogger("langgraph_durable.redis")

#: Attempts of ``delete_for_runs`` on a thread written to while it signs tombstones.
_RUN_RETRIES = 5


def _run_links(fields: Sequence[Any], pairs: Sequence[Any]) -> Links:
    """``_tombstones.Links`` from ``DELETE_RUNS``' reply: the header-hash fields it
    would delete, and (survivor field, its parent's field) pairs."""
    removed: dict[str, list[str]] = {}
    for f in fields:
        ns, _, cid = bytes(f).decode().partition(SEP)
        removed.setdefault(ns, []).append(cid)
    found: Links = {}
    for j in range(0, len(pairs) - 1, 2):
        ns, _, survivor = bytes(pairs[j]).decode().partition(SEP)
        _ns, _, parent = bytes(pairs[j + 1]).decode().partition(SEP)
        survivors, _ids = found.setdefault(ns, ({}, sorted(removed.get(ns, ()))))
        survivors[survivor] = parent
    return found


#: Payload bytes per script call when copying a thread.
COPY_CHUNK_BYTES = 8 * 1024 * 1024
#: The oldest server the scripts run on (script flags need 7.0).
MIN_SERVER_VERSION = (7, 0)
#: ``maxmemory-policy`` values that evict keys.
EVICTING_POLICIES = frozenset(
    {
        "allkeys-lru",
        "allkeys-lfu",
        "allkeys-random",
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
    }
)


class SetupResult(list[str]):
    """What ``setup()`` changed, and what it found on the servers.

    Like every saver's ``setup()`` result, it is the list of the changes the call
    made to the store's schema, empty when there was nothing to do. Redis keys need
    no schema, so on Redis the list is always empty (loading the scripts into the
    servers' cache and storing the retention policy are not schema changes; neither
    are they on PostgreSQL or DynamoDB).

    Attributes:
        versions: The server version of each primary.
        warnings: Configuration problems it logged (also sent to the
            ``langgraph_durable.redis`` logger).
    """

    def __init__(
        self,
        changes: Iterable[str] = (),
        *,
        versions: tuple[str, ...] = (),
        warnings: tuple[str, ...] = (),
    ) -> None:
        super().__init__(changes)
        self.versions = versions
        self.warnings = warnings

    def __repr__(self) -> str:
        return (
            f"SetupResult({list(self)!r}, versions={self.versions!r}, warnings={self.warnings!r})"
        )


class AdminOps(OpsBase):
    """Setup, deletes, copies, pruning and the stored retention policy."""

    @operation
    def setup(
        self, ttl_set: bool, retention: str | None = None
    ) -> Generator[Any, Any, SetupResult]:
        """Check the servers, load the scripts, warn about unsafe configuration.

        Args:
            ttl_set: Whether threads may have an expiry (for the eviction check).
            retention: The saver's retention policy as JSON, stored for the CLI
                (None leaves a stored one as it is).
        """
        infos = yield Command(("INFO", "server"), every_primary=True)
        versions = tuple(_server_version(info) for info in infos)
        for text in versions:
            if _version_tuple(text) < MIN_SERVER_VERSION:
                raise StorageError(
                    f"Redis {text} is too old: the saver needs Redis 7.0 or later (or "
                    "Valkey 7.2 or later) for its Lua script flags"
                )
        for script in (*SCRIPTS, *PRUNE_SCRIPTS):
            yield Command(("SCRIPT LOAD", script.source))
        if retention is not None:
            yield Command(("SET", self.keys.retention(), retention))
        warnings: list[str] = []
        try:
            configs = yield Command(
                ("CONFIG GET", "maxmemory-policy", "save", "appendonly"), every_primary=True
            )
        except StorageError as exc:  # managed services often disable CONFIG
            log.info("cannot read the Redis configuration (%s); eviction check skipped", exc)
            configs = []
        for config in configs:
            message = _eviction_warning(_config_dict(config), ttl_set)
            if message and message not in warnings:
                warnings.append(message)
                log.warning("%s", message)
        return SetupResult(versions=versions, warnings=tuple(warnings))

    @operation
    def index_problems(self, tenant: str, thread_id: str) -> Generator[Any, Any, list[str]]:
        """What is wrong with a thread's checkpoint indexes, for ``verify``: one round trip.

        Both sorted sets order their members by name with every score 0 (checkpoint
        ids sort in time order): a member with another score changes which checkpoint
        a read takes as the latest, while every record stays intact.
        """
        keys = self.keys.thread(_ident(tenant, "tenant id"), _ident(thread_id, "thread_id"))
        index_keys = (keys[4], keys[5])
        found = yield Batch(
            (
                *(
                    Command(("ZRANGEBYSCORE", key, low, high))
                    for key in index_keys
                    for low, high in (("-inf", "(0"), ("(0", "+inf"))
                ),
                Command(("HKEYS", keys[0])),
                Command(("ZRANGE", keys[4], 0, -1)),
                Command(("ZRANGE", keys[5], 0, -1)),
            )
        )
        for result in found:
            if isinstance(result, BaseException):
                raise result
        problems = []
        for n, result in enumerate(found[:4]):
            for member in result or ():
                name = _text(member).replace(SEP, "/")
                problems.append(
                    f"index {'in'[n // 2]!r} has member {name!r} with a score other than 0 "
                    "(it changes which checkpoint reads as the latest)"
                )
        # every stored checkpoint ("<ns>\0<id>" in the header hash) is in both indexes
        stored = {_text(f) for f in found[4] or () if not _is_meta(_raw(f))}
        by_ns = set(map(_text, found[5] or ()))
        by_id = set()
        for member in map(_text, found[6] or ()):
            cid, _sep, ns = member.partition(SEP)
            by_id.add(ns + SEP + cid)
        for what, have in (("i", by_ns), ("n", by_id)):
            for field in sorted(stored - have):
                problems.append(
                    f"checkpoint {field.replace(SEP, '/')!r} is missing from index {what!r} "
                    "(reads and listings skip it)"
                )
            for field in sorted(have - stored):
                problems.append(
                    f"index {what!r} names checkpoint {field.replace(SEP, '/')!r}, which is "
                    "not stored"
                )
        return problems

    @operation
    def delete_thread(self, tenant: str, thread_id: str) -> Generator[Any, Any, None]:
        """Delete every key of one thread (all namespaces, effect journal): one round trip."""
        yield from self._delete_threads(tenant, [thread_id])
        return None

    def _delete_threads(self, tenant: str, thread_ids: Sequence[str]) -> Generator[Any, Any, None]:
        tenant = _ident(tenant, "tenant id")
        index = self.keys.tenant_index(tenant)
        threads = [_ident(t, "thread_id") for t in thread_ids]
        for chunk in _chunks(threads, BATCH_SIZE):
            requests: list[Command | Script] = []
            for thread in chunk:
                self._pending_marks.pop((tenant, thread), None)
                self.codec.forget_thread(tenant, thread)
                requests.append(Script(DROP, self.keys.thread(tenant, thread)))
                requests.append(Command(("ZREM", index, thread)))
            _first_error((yield Batch(tuple(requests))))
        return None

    @operation
    def delete_for_runs(self, tenant: str, run_ids: Sequence[str]) -> Generator[Any, Any, int]:
        """Delete the checkpoints (and their writes) made by the given runs.

        Visits every thread in the tenant's index, a pipeline per ``BATCH_SIZE``
        threads; each thread's script is atomic. A thread where a checkpoint that
        stays would lose its parent is deleted with chain tombstones
        (:meth:`_trim_under_survivors`), and looked at again, up to
        ``_RUN_RETRIES`` times, when it was written to meanwhile.
        """
        ids = [str(r) for r in run_ids]
        if not ids:
            return 0
        tenant = _ident(tenant, "tenant id")
        threads = yield from self._threads(tenant)
        total = 0
        gone: list[tuple[str, bytes]] = []
        for chunk in _chunks(threads, BATCH_SIZE):
            pending = list(chunk)
            for _attempt in range(_RUN_RETRIES):
                results = yield Batch(
                    tuple(
                        Script(DELETE_RUNS, self.keys.thread(tenant, t), tuple(ids))
                        for t, _ in pending
                    )
                )
                _first_error(results)
                orphaned: list[tuple[str, bytes, list[Any]]] = []
                for (thread, score), reply in zip(pending, results, strict=True):
                    if int(reply[0]) < 0:
                        orphaned.append((thread, score, reply))
                        continue
                    total += int(reply[0])
                    if not int(reply[1]):
                        gone.append((thread, score))
                if not orphaned:
                    break
                deleted, pending = yield from self._trim_under_survivors(tenant, orphaned)
                total += deleted
                if not pending:
                    break
            else:
                raise StorageError(
                    f"delete_for_runs: {len(pending)} thread(s) of tenant {tenant!r} kept "
                    f"changing while their chain tombstones were written ({_RUN_RETRIES} "
                    "attempts); nothing of them was deleted, call it again"
                )
        yield from self._forget(tenant, gone)
        return total

    def _trim_under_survivors(
        self, tenant: str, orphaned: list[tuple[str, bytes, list[Any]]]
    ) -> Generator[Any, Any, tuple[int, list[tuple[str, bytes]]]]:
        """The run delete of threads where a checkpoint that stays loses its parent.

        Such a survivor gets a chain tombstone, as in a ``keep_latest`` trim:
        ``DELETE_RUNS`` named the checkpoints to delete and the survivors (and
        deleted nothing); the survivors' and their parents' payloads are read
        (one round trip, ``_tombstones.signed_trims``; without the chain key a
        chained survivor raises ``ChainKeyRequiredError``) and ``PRUNE_TRIM``
        writes the tombstones and deletes, atomically per thread and only if
        the thread is as it was read. Returns (checkpoints deleted, the threads
        written to since they were read: to be looked at again).
        """
        trims = [(tenant, thread, _run_links(reply[4], reply[5])) for thread, _s, reply in orphaned]
        signed = yield from signed_trims(self.keys, self.codec.chain, trims)
        results = yield Batch(
            tuple(
                Script(
                    PRUNE_TRIM,
                    self.keys.thread(tenant, thread),
                    (int(reply[2]), reply[3], "0", len(args) // 3, *args, *reply[4]),
                )
                for (thread, _score, reply), args in zip(orphaned, signed, strict=True)
            )
        )
        _first_error(results)
        deleted, again = 0, []
        for (thread, score, _reply), (status, checkpoints, _size) in zip(
            orphaned, results, strict=True
        ):
            if int(status) == 1:
                deleted += int(checkpoints)
            elif int(status) < 0:
                again.append((thread, score))
        return deleted, again

    @operation
    def copy_thread(self, tenant: str, source: str, target: str) -> Generator[Any, Any, None]:
        """Copy every checkpoint, blob and write of a thread to another thread id.

        One read of the source (a consistent snapshot), then writes to the
        target in chunks of about ``COPY_CHUNK_BYTES``, blobs and writes first
        and checkpoints last, so a checkpoint is never visible before its parts.
        Entries the target already has are kept. Effect-journal entries are
        copied first (a thread may have some before its first checkpoint).
        """
        if source == target:
            raise InvalidInputError("copy_thread: source and target thread ids are the same")
        tenant = _ident(tenant, "tenant id")
        source = _ident(source, "source thread_id")
        target = _ident(target, "target thread_id")
        h, c, b, w, fx = yield Script(READ_ALL, self.keys.thread(tenant, source))
        yield from self._copy_effects(tenant, target, fx)
        payloads = dict(_pairs(c))
        records = [(f, hdr, payloads.get(f, b"")) for f, hdr in _pairs(h) if not _is_meta(f)]
        if not records:
            return None
        blobs = list(_pairs(b))
        task_fields: list[tuple[bytes, bytes]] = []
        task_lists: list[tuple[bytes, bytes]] = []
        for f, value in _pairs(w):
            (task_fields if f.count(b"\x00") == 2 else task_lists).append((f, value))
        keys = self.keys.thread(tenant, target)
        result: Any = None
        for counts, args in _copy_chunks(blobs, task_fields, task_lists, records):
            result = yield Script(
                MERGE,
                keys,
                (self._write_spec(tenant), self._mark_flag(tenant, target), *counts, *args),
            )
        yield from self._register(tenant, target, result)
        return None

    @operation
    def prune(
        self, tenant: str, thread_ids: Sequence[str], strategy: str
    ) -> Generator[Any, Any, None]:
        """Prune threads: ``keep_latest`` or ``delete`` everything.

        ``keep_latest`` keeps ``keep_set(..., 1)``: each namespace's latest
        checkpoint with what it needs (the parent holding a format-1..3
        checkpoint's sends; the ancestors a DeltaChannel value is rebuilt
        from), and the blobs those read, delta bases included. Each thread is
        trimmed by one script (a thread written between the read and the trim
        is read again). With ``integrity=``, a survivor whose parent is trimmed
        gets a chain tombstone in that same script (one more round trip per
        batch reads the bodies first; see ``_tombstones``).
        """
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(
                f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'"
            )
        threads = [str(t) for t in thread_ids]
        if strategy == "delete":
            yield from self._delete_threads(tenant, threads)
            return None
        tenant = _ident(tenant, "tenant id")
        threads = [_ident(t, "thread_id") for t in threads]
        yield from _prune.trim_threads(
            self.keys, tenant, threads, 1, self.codec.chain, self._trim_check()
        )
        return None

    @operation
    def prune_expired(
        self, request: PruneRequest, policy: Callable[[str], Retention | None] | None
    ) -> Generator[Any, Any, None]:
        """Delete or trim the threads retention says have expired; sweep the indexes.

        Emits a ``PruneProgress`` after each batch, then one ``PruneReport``
        (see ``_prune``). ``policy`` None: threads expire natively and the
        run only removes the index entries of threads that are gone.
        """
        yield from _prune.prune_expired(
            self.keys, request, policy, self._forget_deleted, self.codec.chain, self._trim_check()
        )
        return None

    def _trim_check(self) -> _prune.TrimCheck | None:
        """With ``integrity=``: the check a trim passes before it signs tombstones."""
        chain = self.codec.chain
        if chain is None:
            return None
        return lambda tenant, thread, gone: check_trim(self, chain, tenant, thread, gone)

    @operation
    def thread_page(
        self, tenant: str | None, cursor: Any, limit: int
    ) -> Generator[Any, Any, tuple[builtins.list[tuple[str, str]], Any]]:
        """Up to ``limit`` (tenant, thread) pairs of threads with a checkpoint, and a cursor.

        ``tenant`` None: every tenant. Start with ``cursor`` None; the cursor
        returned is None after the last page (see ``_prune.thread_page``:
        a SCAN of every primary, memory bounded by ``limit``).
        """
        return (yield from _prune.thread_page(self.keys, tenant, cursor, limit))

    @operation
    def retention_get(self) -> Generator[Any, Any, str | None]:
        """The retention policy ``setup()`` stored (JSON), or None."""
        raw = yield Command(("GET", self.keys.retention()))
        return None if raw is None else _text(raw)

    @operation
    def retention_set(self, text: str | None) -> Generator[Any, Any, None]:
        """Store a retention policy (JSON of ``Retention.to_json``); None deletes it.

        Raises:
            ConfigurationError: ``text`` is not a stored policy.
        """
        key = self.keys.retention()
        if text is None:
            yield Command(("DEL", key))
            return None
        policy = Retention.from_json(text)  # refuses what could not be read back
        yield Command(("SET", key, policy.to_json()))
        return None

    def _copy_effects(
        self, tenant: str, target: str, entries: Sequence[Any]
    ) -> Generator[Any, Any, None]:
        """Write the entries READ_ALL read to ``target``, keeping those it has."""
        if not entries:
            return None
        keys = (*self.keys.thread(tenant, target), self.keys.effects(tenant, target))
        args: builtins.list[Any] = []
        size = 0
        spec = self._write_spec(tenant)
        for raw_id, values in entries:
            item = _effect_fields(_text(raw_id), values)
            item_size = sum(len(part) for part in item)
            if args and size + item_size > COPY_CHUNK_BYTES:
                yield Script(EFFECT_WRITE, keys, (spec, "0", *args))
                args, size = [], 0
            args.extend(item)
            size += item_size
        yield Script(EFFECT_WRITE, keys, (spec, "0", *args))
        return None


def _copy_chunks(
    blobs: Sequence[tuple[bytes, bytes]],
    task_fields: Sequence[tuple[bytes, bytes]],
    task_lists: Sequence[tuple[bytes, bytes]],
    records: Sequence[tuple[bytes, bytes, bytes]],
) -> Iterator[tuple[tuple[int, int, int], list[bytes]]]:
    """MERGE calls of at most ``COPY_CHUNK_BYTES`` each, sections in order."""
    sections: list[list[tuple[bytes, ...]]] = [
        list(blobs),
        list(task_fields),
        list(task_lists),
        list(records),
    ]
    counts = [0, 0, 0]
    args: list[bytes] = []
    size = 0
    for number, section in enumerate(sections):
        for item in section:
            item_size = sum(len(part) for part in item)
            if args and size + item_size > COPY_CHUNK_BYTES:
                yield (counts[0], counts[1], counts[2]), args
                counts, args, size = [0, 0, 0], [], 0
            if number < 3:
                counts[number] += 1
            args.extend(item)
            size += item_size
    yield (counts[0], counts[1], counts[2]), args


# ---------------------------------------------------------------- setup helpers


def _info_dict(info: Any) -> dict[str, Any]:
    if isinstance(info, dict):
        return info
    text = _text(info)
    out: dict[str, Any] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            out[name.strip()] = value.strip()
    return out


def _server_version(info: Any) -> str:
    """The Redis-compatible version a server reports (Valkey reports one too)."""
    data = _info_dict(info)
    version = data.get("redis_version") or data.get("valkey_version")
    if version is None:
        raise StorageError("the server's INFO reports no redis_version: is this Redis?")
    return str(version)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _config_dict(config: Any) -> dict[str, str]:
    if isinstance(config, dict):
        return {_text(k): _text(v) for k, v in config.items()}
    items = list(config or [])
    return {_text(items[j]): _text(items[j + 1]) for j in range(0, len(items) - 1, 2)}


def _eviction_warning(config: dict[str, str], ttl_set: bool) -> str | None:
    """A warning when the server may drop checkpoints on its own, else None."""
    policy = config.get("maxmemory-policy", "")
    if policy not in EVICTING_POLICIES:
        return None
    if policy.startswith("volatile-") and not ttl_set:
        return None  # only keys with a TTL are evicted, and this saver sets none
    persistent = bool(config.get("save", "").strip()) or config.get("appendonly") == "yes"
    fix = (
        "set maxmemory-policy to noeviction (writes then fail loudly when memory is full) "
        "or give the server enough memory"
    )
    if persistent:
        return (
            f"Redis maxmemory-policy is {policy}: checkpoints can be evicted under memory "
            f"pressure; {fix}"
        )
    return (
        f"Redis maxmemory-policy is {policy} and persistence is off (no RDB save points, "
        "appendonly no): checkpoints can silently vanish under memory pressure or on a "
        f"restart; {fix}, and enable appendonly yes"
    )


def _raw(field: Any) -> bytes:
    return field if isinstance(field, bytes) else str(field).encode()
