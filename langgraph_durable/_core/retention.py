"""Retention: which threads expire, what ``keep_latest`` keeps, what a prune reports.

Pure (no driver, no I/O). Every backend's pruner asks these functions the
questions and only carries out the answers: whether a thread has expired,
which of its checkpoints survive a trim (with everything they still need),
and how a run is summarised. See ``docs/operations.md``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError, InvalidInputError

__all__ = [
    "Retention",
    "RetentionPolicy",
    "PruneRequest",
    "PruneProgress",
    "PruneReport",
    "CheckpointNode",
    "parse_duration",
    "format_duration",
    "resolve_retention",
    "thread_expired",
    "thread_expires_at",
    "keep_set",
    "DELETE",
    "KEEP_LATEST",
    "pruner_identity",
    "holder_gone",
    "LOCK_LEASE_SECONDS",
    "DEFAULT_THROTTLE",
]

#: How long a pruner's lock lasts without renewal (Redis and DynamoDB; the
#: pruner renews it after every batch). PostgreSQL uses a session advisory
#: lock instead, released by the server when the pruner's connection ends.
LOCK_LEASE_SECONDS = 60.0
#: How long a pruner rests after each batch, as a multiple of the batch's own
#: time (0: flat out; 1.0 keeps it busy half the time). See docs/operations.md.
DEFAULT_THROTTLE = 0.0
#: The longest rest after one batch, whatever the batch took (seconds).
MAX_REST_SECONDS = 10.0
#: Threads a dry run lists by id (the counts cover all of them).
DRY_RUN_LISTED = 10_000

DELETE = "delete"
KEEP_LATEST = "keep_latest"
_STRATEGIES = {DELETE: DELETE, KEEP_LATEST: KEEP_LATEST, "keep-latest": KEEP_LATEST}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: Metadata key LangGraph sets on checkpoints whose DeltaChannel values are
#: rebuilt from earlier checkpoints' writes.
DELTA_COUNTERS = "counters_since_delta_snapshot"


def parse_duration(text: str) -> datetime.timedelta:
    """``"90s"``, ``"15m"``, ``"12h"``, ``"30d"`` or ``"2w"`` as a ``timedelta``.

    Raises:
        InvalidInputError: for anything else (the message shows the accepted forms).
    """
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidInputError(
            f"duration {text!r} is not understood: use a number and a unit, "
            "s, m, h, d or w (e.g. 90s, 15m, 12h, 30d)"
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds <= 0:
        raise InvalidInputError(f"duration {text!r} must be longer than zero")
    return datetime.timedelta(seconds=seconds)


def format_duration(delta: datetime.timedelta | None) -> str | None:
    """The shortest ``parse_duration`` form of ``delta`` (None stays None)."""
    if delta is None:
        return None
    seconds = delta.total_seconds()
    for unit in ("w", "d", "h", "m"):
        size = _UNIT_SECONDS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _duration(name: str, value: Any) -> datetime.timedelta | None:
    if value is None:
        return None
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, bool) or not isinstance(value, (datetime.timedelta, int, float)):
        raise ConfigurationError(
            f"Retention {name} must be None, a datetime.timedelta, a number of seconds "
            f"or a duration such as '30d', got {value!r}"
        )
    delta = value if isinstance(value, datetime.timedelta) else datetime.timedelta(seconds=value)
    if delta.total_seconds() <= 0:
        raise ConfigurationError(f"Retention {name} must be longer than zero, got {value!r}")
    return delta


@dataclass(frozen=True)
class Retention:
    """How long threads are kept, and what happens to them when they expire.

    Attributes:
        idle: A thread expires this long after its last write (None: never
            by idleness).
        absolute: A thread expires this long after its creation, however
            busy it is (None: never by age).
        strategy: ``"delete"`` removes an expired thread whole (checkpoints,
            blobs, writes, effect journal, indexes); ``"keep_latest"`` trims it
            to its latest ``keep`` checkpoints per namespace plus everything
            they and their pending writes need.
        keep: Checkpoints per namespace that ``keep_latest`` keeps (>= 1).

    ``delete`` needs ``idle`` or ``absolute`` (a policy that deletes every
    thread is refused); ``keep_latest`` without either trims every thread.
    Durations may be given as ``timedelta``, seconds, or text such as ``"30d"``.
    """

    idle: datetime.timedelta | None = None
    absolute: datetime.timedelta | None = None
    strategy: str = DELETE
    keep: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "idle", _duration("idle", self.idle))
        object.__setattr__(self, "absolute", _duration("absolute", self.absolute))
        strategy = _STRATEGIES.get(self.strategy) if isinstance(self.strategy, str) else None
        if strategy is None:
            raise ConfigurationError(
                f"Retention strategy must be 'delete' or 'keep_latest', got {self.strategy!r}"
            )
        object.__setattr__(self, "strategy", strategy)
        if isinstance(self.keep, bool) or not isinstance(self.keep, int) or self.keep < 1:
            raise ConfigurationError(
                f"Retention keep must be an integer of at least 1, got {self.keep!r}"
            )
        if strategy == DELETE and self.idle is None and self.absolute is None:
            raise ConfigurationError(
                "Retention(strategy='delete') needs idle or absolute (e.g. "
                "idle=timedelta(days=30)): without either it would delete every thread"
            )

    @property
    def idle_seconds(self) -> float | None:
        """``idle`` in seconds, or None."""
        return None if self.idle is None else self.idle.total_seconds()

    @property
    def absolute_seconds(self) -> float | None:
        """``absolute`` in seconds, or None."""
        return None if self.absolute is None else self.absolute.total_seconds()

    @property
    def expires(self) -> bool:
        """Whether threads under this policy expire at all (a time bound is set)."""
        return self.idle is not None or self.absolute is not None

    def to_json(self) -> str:
        """The policy as JSON (what ``setup()`` stores; see :meth:`from_json`)."""
        return json.dumps(
            {
                "idle": self.idle_seconds,
                "absolute": self.absolute_seconds,
                "strategy": self.strategy,
                "keep": self.keep,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Retention:
        """A policy stored by :meth:`to_json`."""
        try:
            data = json.loads(text)
            return cls(
                idle=data.get("idle"),
                absolute=data.get("absolute"),
                strategy=data.get("strategy", DELETE),
                keep=data.get("keep", 1),
            )
        except (ValueError, AttributeError, TypeError) as exc:
            raise ConfigurationError(f"stored retention policy cannot be read: {exc}") from exc

    def describe(self) -> str:
        """One line for people: ``delete after 30d idle or 90d``."""
        bounds = []
        if self.idle is not None:
            bounds.append(f"{format_duration(self.idle)} idle")
        if self.absolute is not None:
            bounds.append(f"{format_duration(self.absolute)} old")
        when = " or ".join(bounds) if bounds else "always"
        what = "delete" if self.strategy == DELETE else f"keep latest {self.keep}"
        return f"{what} when {when}"


RetentionPolicy = Callable[[str], "Retention | None"]


def check_retention(value: Any) -> Retention | RetentionPolicy | None:
    """A saver's ``retention=`` argument, validated."""
    if value is None or isinstance(value, Retention):
        return value
    if callable(value):
        return value  # type: ignore[no-any-return]
    raise ConfigurationError(
        "retention must be None, a langgraph_durable.Retention or a callable "
        f"tenant -> Retention, got {value!r}"
    )


def resolve_retention(setting: Any, tenant: str) -> Retention | None:
    """The policy that applies to ``tenant`` under a saver's ``retention=`` setting."""
    if setting is None or isinstance(setting, Retention):
        return setting
    policy = setting(tenant)
    if policy is not None and not isinstance(policy, Retention):
        raise ConfigurationError(
            f"the retention callable returned {policy!r} for tenant {tenant!r}: "
            "return a langgraph_durable.Retention or None"
        )
    return policy


def thread_expires_at(
    policy: Retention | None, created: float | None, updated: float | None
) -> float | None:
    """When a thread created at ``created`` and last written at ``updated`` expires.

    Times are Unix seconds; None when the policy sets no time bound. A missing
    ``created`` (a record from before retention) counts as ``updated``.
    """
    if policy is None:
        return None
    candidates = []
    if policy.idle is not None and updated is not None:
        candidates.append(updated + policy.idle.total_seconds())
    if policy.absolute is not None:
        start = created if created is not None else updated
        if start is not None:
            candidates.append(start + policy.absolute.total_seconds())
    return min(candidates) if candidates else None


def thread_expired(
    policy: Retention, created: float | None, updated: float | None, now: float
) -> bool:
    """Whether a thread falls under ``policy`` at ``now``.

    A policy without time bounds (``keep_latest`` of every thread) covers every thread.
    """
    if not policy.expires:
        return True
    at = thread_expires_at(policy, created, updated)
    return at is not None and at <= now


@dataclass(frozen=True, slots=True)
class CheckpointNode:
    """What ``keep_set`` needs to know of one stored checkpoint.

    Attributes:
        ns: Its namespace.
        checkpoint_id: Its id.
        parent_id: Its parent's id, or None.
        version: Its checkpoint format (``v``); before 4, pending sends live in
            the parent's writes.
        delta: Whether its metadata says a DeltaChannel value is rebuilt from
            ancestors (``counters_since_delta_snapshot`` present and not all 0).
        parent_sends: Whether its parent has ``__pregel_tasks`` writes.
    """

    ns: str
    checkpoint_id: str
    parent_id: str | None
    version: int = 4
    delta: bool = False
    parent_sends: bool = False


def delta_pending(metadata_index: Mapping[str, Any] | None) -> bool:
    """Whether a checkpoint's clear metadata says a DeltaChannel needs its ancestors."""
    if not metadata_index:
        return False
    # LangGraph writes the key only with non-zero counters and removes it
    # when every delta channel has just been snapshotted.
    return bool(metadata_index.get(DELTA_COUNTERS))


def keep_set(nodes: Iterable[CheckpointNode], keep: int) -> set[tuple[str, str]]:
    """The checkpoints ``keep_latest`` keeps: (namespace, id) pairs.

    Per namespace, the latest ``keep`` checkpoints; then, for every kept one,
    its parent when it needs it: a format before 4 whose parent holds the
    pending sends, or a DeltaChannel value rebuilt from ancestors (followed up
    the chain until a checkpoint that needs no ancestor). Blobs and writes are
    kept for exactly the checkpoints returned.
    """
    by_ns: dict[str, dict[str, CheckpointNode]] = {}
    for node in nodes:
        by_ns.setdefault(node.ns, {})[node.checkpoint_id] = node
    kept: set[tuple[str, str]] = set()
    for ns, members in by_ns.items():
        latest = sorted(members, reverse=True)[:keep]
        todo = list(latest)
        while todo:
            cid = todo.pop()
            if (ns, cid) in kept:
                continue
            kept.add((ns, cid))
            member = members.get(cid)
            if member is None or member.parent_id is None or member.parent_id not in members:
                continue
            if member.delta:
                todo.append(member.parent_id)
            elif member.version < 4 and member.parent_sends:
                kept.add((ns, member.parent_id))
    return kept


@dataclass(frozen=True)
class PruneRequest:
    """One pruner run, as every backend's ``prune_expired`` operation takes it.

    Attributes:
        retention: The policy to apply (flags or the saver's); None: each
            thread's stored expiry (what the saver wrote with its ``retention=``).
        tenant: Only this tenant, or None for every tenant.
        dry_run: Count what would be removed; change nothing.
        now: The clock (Unix seconds) that decides expiry; injectable for tests.
        deadline: ``time.monotonic()`` value after which the run stops between
            batches (None: no budget).
        batch: Threads per batch (each batch is one short transaction where
            the backend has them).
        monotonic: The monotonic clock the deadline is read from.
        throttle: After each batch, rest this many times as long as the batch
            took (0: flat out). A dry run does not rest.
    """

    retention: Retention | None = None
    tenant: str | None = None
    dry_run: bool = False
    now: float = field(default_factory=time.time)
    deadline: float | None = None
    batch: int = 500
    monotonic: Callable[[], float] = time.monotonic
    throttle: float = 0.0

    def out_of_time(self) -> bool:
        """Whether the time budget is spent."""
        return self.deadline is not None and self.monotonic() >= self.deadline

    def rest_after(self, started: float) -> float:
        """Seconds to rest after a batch that started at ``started`` (monotonic).

        ``throttle`` times the batch's time, at most ``MAX_REST_SECONDS``, and
        never past the deadline (the budget is for work, not for resting).
        """
        if self.throttle <= 0 or self.dry_run:
            return 0.0
        now = self.monotonic()
        rest = min((now - started) * self.throttle, MAX_REST_SECONDS)
        if self.deadline is not None:
            rest = min(rest, self.deadline - now)
        return max(rest, 0.0)


@dataclass(frozen=True, slots=True)
class PruneProgress:
    """Emitted by a pruner after each batch (for a progress bar)."""

    done: int
    total: int | None
    threads: int
    checkpoints: int


@dataclass
class PruneReport:
    """What a pruner run removed (or, in a dry run, would remove).

    Attributes:
        threads: Threads deleted whole.
        trimmed: Threads trimmed by ``keep_latest``.
        checkpoints: Checkpoints removed (deleted threads' included).
        bytes: Stored bytes removed (payloads as stored, before compression
            by the database where it applies).
        partitions: PostgreSQL partitions dropped (0 elsewhere).
        index_entries: Stale index entries removed (Redis).
        seconds: Wall time of the run.
        budget_exhausted: The time budget ran out with work left.
        dry_run: Nothing was changed; the counts are what a run would remove.
        locked: Another pruner held the lock; this run did nothing.
        threads_seen: Threads examined.
        moved: Live threads moved forward to a newer epoch so that their old
            epoch's partitions could be dropped whole (PostgreSQL; 0 elsewhere).
        refused: Threads left untrimmed because a link in what ``keep_latest``
            would remove is broken (with ``integrity=``: a trim never signs
            tombstones over a link it cannot verify).
        broken: Those broken links (``langgraph_durable._core.audit.Broken``:
            tenant, thread, namespace, checkpoint id, reason), at most
            :data:`BROKEN_LISTED` of them.
    """

    threads: int = 0
    trimmed: int = 0
    checkpoints: int = 0
    bytes: int = 0
    partitions: int = 0
    index_entries: int = 0
    seconds: float = 0.0
    budget_exhausted: bool = False
    dry_run: bool = False
    locked: bool = False
    threads_seen: int = 0
    moved: int = 0
    thread_ids: list[tuple[str, str]] = field(default_factory=list)
    """(tenant, thread) of the threads deleted or trimmed, recorded in dry runs
    only, at most :data:`DRY_RUN_LISTED` of them."""
    refused: int = 0
    broken: list[Any] = field(default_factory=list)

    def refuse(self, broken: Iterable[Any]) -> None:
        """Note a thread not trimmed because of these broken links."""
        self.refused += 1
        for b in broken:
            if len(self.broken) < BROKEN_LISTED:
                self.broken.append(b)

    def record(self, tenant: str, thread: str) -> None:
        """Note a thread a dry run would remove (bounded, for the printout)."""
        if self.dry_run and len(self.thread_ids) < DRY_RUN_LISTED:
            self.thread_ids.append((tenant, thread))

    def as_dict(self) -> dict[str, Any]:
        """The JSON summary's fields (``thread_ids`` left out)."""
        return {
            "threads": self.threads,
            "trimmed": self.trimmed,
            "checkpoints": self.checkpoints,
            "bytes": self.bytes,
            "partitions": self.partitions,
            "index_entries": self.index_entries,
            "seconds": round(self.seconds, 3),
            "budget_exhausted": self.budget_exhausted,
            "dry_run": self.dry_run,
            "locked": self.locked,
            "threads_seen": self.threads_seen,
            "moved": self.moved,
            "refused": self.refused,
            "broken": [b.to_json() for b in self.broken],
        }


#: Broken links a pruner's report lists (the count of refused threads covers them all).
BROKEN_LISTED = 1000


def pruner_identity() -> str:
    """A lock holder's name: ``host:pid:random`` (see :func:`holder_gone`)."""
    return f"{platform.node()}:{os.getpid()}:{secrets.token_hex(4)}"


def holder_gone(holder: str) -> bool:
    """Whether a lock holder named by :func:`pruner_identity` is a dead process here.

    Only a holder on this host can be checked; one elsewhere counts as alive
    until its lease runs out.
    """
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != platform.node() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
