"""The DynamoDB pruner: retention carried out on one table (``DynamoDBOps.prune_expired``).

Pure like the other modules of the package (no boto3, no I/O, no clock but the request's): a
:class:`Pruner` is one run, a generator of :class:`~._calls.Call` requests that
emits a ``PruneProgress`` after each batch of threads and one ``PruneReport``
last. Which threads expire and what ``keep_latest`` keeps is decided by
``langgraph_durable._core.retention``; this module finds the threads, takes
the lock and carries the decisions out.

One run:

1. takes the lock item (``##meta`` / ``lock#prune``: holder and lease end; a
   lease that ran out, or a holder that is a dead process of this host, is
   taken over), renewed after every batch and deleted at the end;
2. reads the table with a consistent, paginated Scan that projects only keys
   and times, and sums up each thread (its head, its items' write times and
   TTL stamps): a thread is found by its head or, without one, by any item;
   A run that runs out of time leaves a cursor (``##meta`` / ``cursor#...``)
   where it stopped; the next run of the same scope goes on from there;
3. per batch of threads decides: a thread its head says is gone or expired,
   or whose head is missing while its checkpoints carry a TTL (what an
   interrupted delete or DynamoDB's own TTL left), is deleted whatever the
   policy; otherwise the policy of its tenant decides from its creation and
   last write (without a policy: nothing else is removed);
4. deletes a thread by first making it unreadable in one conditional write
   (its head marked ``gone``, on condition no write came since the decision),
   then its items (pointers first), then its head; trims one to
   :func:`trim_plan` (pointers first, payloads after), with ``integrity=``
   after writing a tombstone into each kept checkpoint whose parent goes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.serde.types import TASKS

from .._core.audit import Broken, check_trim
from .._core.retention import (
    DELETE,
    LOCK_LEASE_SECONDS,
    CheckpointNode,
    PruneProgress,
    PruneReport,
    PruneRequest,
    Retention,
    delta_pending,
    holder_gone,
    keep_set,
    pruner_identity,
    thread_expired,
)
from .._core.sansio import Blocking, Emit, Sleep
from ..errors import StorageError
from ._calls import ConditionFailedError
from ._deltas import item_chain, parse_refs
from ._items import (
    HEAD_SK,
    HEADED,
    LOCK_SK,
    META_PK,
    PRUNER_ROLE,
    TTL_ATTRIBUTE,
    N,
    S,
    _float,
    _num,
    _str,
    blob_base_sk,
    blob_sk,
    head_live,
    is_pointer_sk,
    is_thread_pk,
    item_size,
    parse_checkpoint_sk,
    split_pk,
    tenant_prefix,
    uuid6_seconds,
)
from ._objects import object_keys_of, tenant_object_prefix

if TYPE_CHECKING:
    from ._chain import ChainOps

__all__ = ["Pruner", "trim_plan", "trim_breaks", "data_size"]

#: Attributes the pruner's Scan reads: keys, write times, TTL stamps, the head's state.
SCANNED = (
    "pk",
    "sk",
    "ts",
    "created",
    "completed",
    TTL_ATTRIBUTE,
    HEADED,
    "live_until",
    "dies_at",
    "gone",
    "gb",
    "gr",
    "gu",
)

KEEP, PURGE, TRIM = "keep", "purge", "trim"


def trim_plan(items: Iterable[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """The items ``keep_latest`` removes from one thread (as read by a Query).

    Kept: the checkpoints :func:`keep_set` returns (the latest ``keep`` of each
    namespace and what they need: the parent holding old-format pending sends,
    the ancestors a DeltaChannel value is rebuilt from) with their chunks and
    writes, and the blobs they reference (a delta's whole chain down to its
    full copy, as its blob item's ``bc`` names it). Removed: every other checkpoint
    with its chunks and writes, writes and chunks left without their
    checkpoint older than the namespace's newest one (what an interrupted
    prune left), and every blob no kept checkpoint references. Effect-journal
    entries and the head stay. Pointers come first in the result.
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    pointers: dict[tuple[str, str], dict[str, Any]] = {}
    blobs: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        sk = item["sk"]["S"]
        if sk.startswith("c#"):
            ik = parse_checkpoint_sk(sk)
            groups.setdefault((ik.ns, ik.checkpoint_id), []).append(item)
            if ik.kind == "pointer":
                pointers[(ik.ns, ik.checkpoint_id)] = item
        elif sk.startswith("b#"):
            blobs.setdefault(blob_base_sk(sk), []).append(item)
    nodes = []
    for (ns, cid), pointer in pointers.items():
        parent = _str(pointer, "p")
        sends = parent is not None and any(
            _str(i, "ch") == TASKS and parse_checkpoint_sk(i["sk"]["S"]).kind == "write"
            for i in groups.get((ns, parent), ())
        )
        index = json.loads(_str(pointer, "mi", "{}") or "{}")
        nodes.append(
            CheckpointNode(
                ns, cid, parent, _num(pointer, "fv", 1) or 1, delta_pending(index), sends
            )
        )
    kept = keep_set(nodes, keep)
    newest: dict[str, str] = {}
    for ns, cid in pointers:
        if cid > newest.get(ns, ""):
            newest[ns] = cid
    referenced: set[str] = set()
    for ns, cid in kept:
        if (ns, cid) not in pointers:
            continue
        for channel, version, _n, _hint in parse_refs(_str(pointers[(ns, cid)], "refs")):
            bsk = blob_sk(ns, channel, version)
            referenced.add(bsk)
            # a delta needs its whole chain (the blob item names it)
            main = next((i for i in blobs.get(bsk, ()) if i["sk"]["S"] == bsk), None)
            chain = None if main is None else item_chain(main, f"blob {bsk!r}")
            referenced.update(blob_sk(ns, channel, base) for base, _c in chain or ())
    doomed: list[dict[str, Any]] = []
    for (ns, cid), members in groups.items():
        if (ns, cid) in pointers:
            if (ns, cid) not in kept:
                doomed.extend(members)
        elif cid < newest.get(ns, ""):
            doomed.extend(members)  # writes or chunks of a checkpoint already deleted
    doomed.extend(i for base, members in blobs.items() if base not in referenced for i in members)
    doomed.sort(key=lambda i: not is_pointer_sk(i["sk"]["S"]))
    return doomed


def trim_breaks(
    ops: ChainOps, pk: str, doomed: Sequence[dict[str, Any]]
) -> Generator[Any, Any, list[Broken]]:
    """With ``integrity=``, the broken links of what a trim removes (before it signs).

    The thread is listed as ``verify`` lists it (``_core.audit.check_trim``);
    empty without the chain key or when nothing is broken.
    """
    chain = ops.codec.chain
    if chain is None:
        return []
    gone: set[tuple[str, str]] = set()
    for item in doomed:
        sk = item["sk"]["S"]
        if is_pointer_sk(sk):
            ik = parse_checkpoint_sk(sk)
            gone.add((ik.ns, ik.checkpoint_id))
    tenant, thread = split_pk(pk)
    return (yield from check_trim(ops, chain, tenant, thread, gone))


def data_size(item: dict[str, Any]) -> int:
    """The size :class:`PruneReport` counts for an item (bookkeeping attributes left out)."""
    return item_size({k: v for k, v in item.items() if k != HEADED})


def _least(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _most(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass
class Seen:
    """One thread as the Scan found it (only small attributes, no payloads).

    Attributes:
        pk: Its partition key.
        head: Its head item, if it has one.
        first: The earliest write time (``ts``) of its checkpoint, write and
            blob items.
        last: The latest such time.
        entries_first: The earliest time of its effect-journal entries
            (``created`` / ``completed``, the effect layer's clock); entries_last
            the latest. Used only for a thread of entries alone.
        oldest_id: Its oldest checkpoint id; newest_id: its newest.
        ttl_data: Whether one of its checkpoint or blob items carries a TTL
            (only written together with a head: without one, a leftover).
        stamped: Items with a TTL; plain: items without.
        latest_expiry: The latest TTL of its items.
        unstamped: Sort keys of its checkpoint pointers that readers show
            without consulting the head (no TTL, no ``hd`` mark).
    """

    pk: str
    head: dict[str, Any] | None = None
    last_sk: str = ""
    first: float | None = None
    last: float | None = None
    entries_first: float | None = None
    entries_last: float | None = None
    oldest_id: str | None = None
    newest_id: str | None = None
    ttl_data: bool = False
    stamped: int = 0
    plain: int = 0
    latest_expiry: float = 0.0
    unstamped: list[str] = field(default_factory=list)

    @property
    def tenant(self) -> str:
        return split_pk(self.pk)[0]

    @property
    def thread(self) -> str:
        return split_pk(self.pk)[1]

    def add(self, item: dict[str, Any]) -> None:
        sk = item["sk"]["S"]
        self.last_sk = max(self.last_sk, sk)
        if sk == HEAD_SK:
            self.head = item
            return
        if sk.startswith("e#"):
            for name in ("created", "completed"):
                at = _float(item, name)
                self.entries_first = _least(self.entries_first, at)
                self.entries_last = _most(self.entries_last, at)
        else:
            self.first = _least(self.first, _float(item, "ts"))
            self.last = _most(self.last, _float(item, "ts"))
        expiry = _float(item, TTL_ATTRIBUTE)
        if expiry is None:
            self.plain += 1
        else:
            self.stamped += 1
            self.latest_expiry = max(self.latest_expiry, expiry)
            if sk.startswith(("c#", "b#")):
                self.ttl_data = True
        if is_pointer_sk(sk):
            cid = parse_checkpoint_sk(sk).checkpoint_id
            if self.oldest_id is None or cid < self.oldest_id:
                self.oldest_id = cid
            if self.newest_id is None or cid > self.newest_id:
                self.newest_id = cid
            if expiry is None and HEADED not in item:
                self.unstamped.append(sk)

    def times(self) -> tuple[float | None, float | None]:
        """(creation, last write) in Unix seconds, or None where nothing says.

        The head's ``created`` and ``ts`` (kept by every write under a
        retention policy) together with the items' own write times: the
        earliest and the latest. A thread with neither (written by another
        saver) falls back to the time in its oldest and newest checkpoint ids
        (LangGraph's ids are version-6 UUIDs), and a thread of journal entries
        alone to the entries' times.
        """
        created = [t for t in (_float(self.head, "created"), self.first) if t is not None]
        updated = [t for t in (_float(self.head, "ts"), self.last) if t is not None]
        first = min(created) if created else uuid6_seconds(self.oldest_id)
        last = max(updated) if updated else uuid6_seconds(self.newest_id)
        if first is None and last is None:
            return self.entries_first, self.entries_last
        return first, last


class Pruner:
    """One run of the pruner over a table (see the module docstring).

    Args:
        ops: The table's operations (calls, retries, deletes).
        request: The run: dry run, tenant, clock, budget, batch size.
        policy: The retention policy of a tenant, or None to go by each
            thread's stored expiry alone.
    """

    def __init__(
        self,
        ops: ChainOps,
        request: PruneRequest,
        policy: Callable[[str], Retention | None] | None,
    ) -> None:
        self.ops = ops
        self.request = request
        self.policy = policy
        self.report = PruneReport(dry_run=request.dry_run)
        self.holder = pruner_identity()
        self.start = request.monotonic()
        self.renewed = self.start

    def clock(self) -> float:
        """The run's time: ``request.now`` advanced by the time the run has taken."""
        return self.request.now + (self.request.monotonic() - self.start)

    def run(self) -> Generator[Any, Any, None]:
        """The whole run; emits progress after each batch and the report last."""
        if self.request.dry_run:
            yield from self._scan()  # changes nothing: no lock either
            yield from self._sweep_objects()
        elif not (yield from self._take_lock()):
            self.report.locked = True
        else:
            try:
                yield from self._scan()
                yield from self._sweep_objects()
            except Exception:
                try:
                    yield from self._release_lock()
                except StorageError:
                    pass  # the lease runs out by itself
                raise
            yield from self._release_lock()
        self.report.seconds = self.request.monotonic() - self.start
        yield Emit(self.report)
        return None

    def _sweep_objects(self) -> Generator[Any, Any, None]:
        """Delete S3 objects no item references, older than the grace period.

        Only with a bucket, and only when the table's scan finished within the
        budget. Their bytes count in the report's ``bytes``.
        """
        ops, request = self.ops, self.request
        if ops.bucket is None or self.report.budget_exhausted:
            return None
        prefix = ops.object_prefix
        if request.tenant is not None:
            prefix = tenant_object_prefix(prefix, request.tenant)
        _count, size = yield from ops._orphans(prefix, request.now, request.dry_run)
        self.report.bytes += size
        return None

    # ---- the lock ------------------------------------------------------------------

    def _lock_key(self) -> dict[str, Any]:
        return {"pk": S(META_PK), "sk": S(LOCK_SK)}

    def _take_lock(self) -> Generator[Any, Any, bool]:
        """Take the pruner lock: free, its lease over, or its holder a dead process here."""
        previous: str | None = None
        for _ in range(3):
            now = self.clock()
            condition = "attribute_not_exists(#sk) OR #u <= :now"
            names = {"#sk": "sk", "#u": "until"}
            values: dict[str, Any] = {":now": N(now)}
            if previous is not None:
                condition += " OR #h = :old"
                names["#h"] = "holder"
                values[":old"] = S(previous)
            try:
                yield from self.ops._call(
                    "put_item",
                    {
                        "TableName": self.ops.table,
                        "Item": {
                            **self._lock_key(),
                            "holder": S(self.holder),
                            "until": N(now + LOCK_LEASE_SECONDS),
                            "since": N(now),
                        },
                        "ConditionExpression": condition,
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    },
                )
                self.renewed = self.request.monotonic()
                return True
            except ConditionFailedError as exc:
                held = exc.item
            if held is None:
                resp = yield from self.ops._call(
                    "get_item",
                    {"TableName": self.ops.table, "Key": self._lock_key(), "ConsistentRead": True},
                )
                held = resp.get("Item")
                if held is None:
                    continue  # released meanwhile
            holder = _str(held, "holder") or ""
            if holder == previous or not (yield Blocking(holder_gone, (holder,))):
                return False
            previous = holder  # a dead process of this host: take its lock over
        return False

    def _renew_lock(self) -> Generator[Any, Any, None]:
        now = self.clock()
        try:
            yield from self.ops._call(
                "update_item",
                {
                    "TableName": self.ops.table,
                    "Key": self._lock_key(),
                    "UpdateExpression": "SET #u = :until",
                    "ConditionExpression": "#h = :me",
                    "ExpressionAttributeNames": {"#u": "until", "#h": "holder"},
                    "ExpressionAttributeValues": {
                        ":until": N(now + LOCK_LEASE_SECONDS),
                        ":me": S(self.holder),
                    },
                },
            )
        except ConditionFailedError as exc:
            raise StorageError(
                f"the pruner {self.holder} lost its lock (its lease of {LOCK_LEASE_SECONDS:g} s "
                "ran out and another pruner took it over); this run stopped: run it again"
            ) from exc
        self.renewed = self.request.monotonic()
        return None

    def _release_lock(self) -> Generator[Any, Any, None]:
        try:
            yield from self.ops._call(
                "delete_item",
                {
                    "TableName": self.ops.table,
                    "Key": self._lock_key(),
                    "ConditionExpression": "#h = :me",
                    "ExpressionAttributeNames": {"#h": "holder"},
                    "ExpressionAttributeValues": {":me": S(self.holder)},
                },
            )
        except ConditionFailedError:
            pass  # taken over: not ours to delete
        return None

    # ---- finding threads ------------------------------------------------------------

    def _scan(self) -> Generator[Any, Any, None]:
        """Scan the table page by page; act on each batch of threads seen whole.

        Items of one partition key come together in a Scan, so every thread
        but the last of a page is complete; the last waits for the next page.
        """
        request = self.request
        names = {f"#a{i}": name for i, name in enumerate(SCANNED)}
        params: dict[str, Any] = {
            "TableName": self.ops.table,
            "ConsistentRead": True,
            "ProjectionExpression": ", ".join(names),
            "ExpressionAttributeNames": names,
        }
        if request.tenant is not None:
            params["FilterExpression"] = "begins_with(#a0, :t)"
            params["ExpressionAttributeValues"] = {":t": S(tenant_prefix(request.tenant))}
        cursor = None if request.dry_run else (yield from self._cursor())
        if cursor is not None:
            params["ExclusiveStartKey"] = cursor
        pending: dict[str, Seen] = {}
        done: set[str] = set()
        walked = 0
        while True:
            resp = yield from self.ops._call("scan", params)
            for item in resp.get("Items") or []:
                pk = item["pk"]["S"]
                if pk in done or not is_thread_pk(pk):
                    continue
                pending.setdefault(pk, Seen(pk)).add(item)
            last = resp.get("LastEvaluatedKey")
            open_pk = last["pk"]["S"] if last else None
            ready = [pk for pk in pending if pk != open_pk]
            while ready and (len(ready) >= request.batch or not last):
                chunk, ready = ready[: request.batch], ready[request.batch :]
                threads = [pending.pop(pk) for pk in chunk]
                started = request.monotonic()
                yield from self._batch(threads)
                done.update(chunk)
                report = self.report
                walked += len(chunk)
                yield Emit(
                    PruneProgress(
                        done=walked,
                        total=None,
                        threads=report.threads + report.trimmed,
                        checkpoints=report.checkpoints,
                    )
                )
                if request.out_of_time() and (pending or last):
                    self.report.budget_exhausted = True
                    if not request.dry_run:  # the next run goes on from here
                        yield from self._cursor({"pk": S(chunk[-1]), "sk": S(threads[-1].last_sk)})
                    return None
                if not request.dry_run:
                    yield from self._renew_lock()
                rest = request.rest_after(started)
                if rest > 0:
                    yield Sleep(rest)
            if not last:
                if cursor is not None:
                    yield from self._cursor(None)  # a whole round is done
                return None
            params = {**params, "ExclusiveStartKey": last}

    def _cursor(self, key: Any = False) -> Generator[Any, Any, dict[str, Any] | None]:
        """Where an earlier run that ran out of time stopped (``key`` False: read it),
        or store where this one stops (``key``; None: forget it).

        One cursor per scope (every tenant, or one), in ``##meta``.
        """
        scope = "*" if self.request.tenant is None else tenant_prefix(self.request.tenant)
        ident = {"pk": S(META_PK), "sk": S(f"cursor#{scope}")}
        table = self.ops.table
        if key is False:
            resp = yield from self.ops._call(
                "get_item", {"TableName": table, "Key": ident, "ConsistentRead": True}
            )
            item = resp.get("Item")
            if item is None:
                return None
            return {"pk": item["cpk"], "sk": item["csk"]}
        if key is None:
            yield from self.ops._call("delete_item", {"TableName": table, "Key": ident})
        else:
            item = {**ident, "cpk": key["pk"], "csk": key["sk"], "ts": N(self.clock())}
            yield from self.ops._call("put_item", {"TableName": table, "Item": item})
        return None

    def _batch(self, threads: Sequence[Seen]) -> Generator[Any, Any, None]:
        for seen in threads:
            action, readable, keep = self._verdict(seen)
            if action != KEEP:
                # found expired: the count PostgreSQL's pruner keeps (live threads left out)
                self.report.threads_seen += 1
            if action == PURGE:
                yield from self._purge(seen, readable)
            elif action == TRIM:
                yield from self._trim(seen, keep)
            if (
                not self.request.dry_run
                and self.request.monotonic() - self.renewed > LOCK_LEASE_SECONDS / 3
            ):
                yield from self._renew_lock()
        return None

    def _verdict(self, seen: Seen) -> tuple[str, bool, int]:
        """What to do with a thread: (KEEP, PURGE or TRIM; whether readers still see
        it; how many checkpoints per namespace a trim keeps)."""
        now = self.request.now
        head = seen.head
        if head is not None and not head_live(head, now):
            return PURGE, False, 0  # marked gone, or expired by its stored expiry
        if head is None and seen.ttl_data:
            return PURGE, False, 0  # its checkpoints carry a TTL: written with a head
        if self.policy is None:
            if head is None and seen.stamped and not seen.plain and seen.latest_expiry <= now:
                return PURGE, False, 0  # journal entries alone, all expired
            return KEEP, True, 0
        policy = self.policy(seen.tenant)
        if policy is None:
            return KEEP, True, 0
        created, updated = seen.times()
        if not thread_expired(policy, created, updated, now):
            return KEEP, True, 0
        if policy.strategy == DELETE:
            return PURGE, True, 0
        return TRIM, True, policy.keep

    # ---- deleting and trimming ------------------------------------------------------

    def _count(self, seen: Seen, items: Sequence[dict[str, Any]]) -> bool:
        """Count what goes of a thread (its head left out); whether anything does."""
        data = [i for i in items if i["sk"]["S"] != HEAD_SK]
        if not data:
            return False
        self.report.checkpoints += sum(1 for i in data if is_pointer_sk(i["sk"]["S"]))
        self.report.bytes += sum(data_size(i) for i in data)
        self.report.record(seen.tenant, seen.thread)
        return True

    def _purge(self, seen: Seen, readable: bool) -> Generator[Any, Any, None]:
        """Delete a thread whole: unreadable first, then its items, its head last."""
        ops, pk = self.ops, seen.pk
        if self.request.dry_run:
            items = yield from ops._query_all(pk)
            self.report.threads += self._count(seen, items)
            return None
        now = self.clock()
        head = seen.head
        marked = False
        last_write = None if head is None else head.get("ts")
        if head is None:
            # Readers consult no head of this thread: give it one (still live when
            # readers see the thread, already gone when they do not).
            created, updated = seen.times()
            item: dict[str, Any] = {"pk": S(pk), "sk": S(HEAD_SK)}
            if created is not None:
                item["created"] = N(int(created))
            if readable and updated is not None:
                item["ts"] = last_write = N(int(updated))
            if not readable:
                item.update(
                    gone=N(now),
                    gb=S(self.holder),
                    gr=S(PRUNER_ROLE),
                    gu=N(now + LOCK_LEASE_SECONDS),
                )
                marked = True
            try:
                yield from ops._call(
                    "put_item",
                    {
                        "TableName": ops.table,
                        "Item": item,
                        "ConditionExpression": "attribute_not_exists(#sk)",
                        "ExpressionAttributeNames": {"#sk": "sk"},
                    },
                )
            except ConditionFailedError:
                return None  # written to meanwhile: the next run decides again
        if readable and seen.unstamped:
            yield from self._mark_pointers(pk, seen.unstamped)
        if not marked:
            marked = yield from ops._mark_gone(
                pk, self.holder, PRUNER_ROLE, now, None, readable, last_write
            )
            if not marked:
                return None  # written to, or being deleted by a writer, meanwhile
        items = yield from ops._query_all(pk)
        self.report.threads += self._count(seen, items)
        ops._forget_thread(seen.tenant, seen.thread)
        yield from ops._purge_marked(pk, self.holder, items)
        return None

    def _mark_pointers(self, pk: str, sks: Sequence[str]) -> Generator[Any, Any, None]:
        """Make readers of these checkpoints consult the thread's head (``hd``)."""
        updates = [
            {
                "Update": {
                    "TableName": self.ops.table,
                    "Key": {"pk": S(pk), "sk": S(sk)},
                    "UpdateExpression": "SET #hd = :one",
                    "ConditionExpression": "attribute_exists(#sk)",
                    "ExpressionAttributeNames": {"#hd": HEADED, "#sk": "sk"},
                    "ExpressionAttributeValues": {":one": N(1)},
                }
            }
            for sk in sks
        ]
        yield from self.ops._transact_updates(updates)
        return None

    def _trim(self, seen: Seen, keep: int) -> Generator[Any, Any, None]:
        """Trim a thread to the checkpoints ``keep_latest`` keeps (pointers first).

        With ``integrity=`` the thread is checked first (:func:`trim_breaks`): a
        broken link in what would go leaves it whole, reported in ``refused``.
        """
        items = yield from self.ops._query_all(seen.pk)
        doomed = trim_plan(items, keep)
        if not doomed:
            return None
        if not self.request.dry_run:
            broken = yield from trim_breaks(self.ops, seen.pk, doomed)
            if broken:
                self.report.refuse(broken)
                return None
        self._count(seen, doomed)
        self.report.trimmed += 1
        if not self.request.dry_run:
            self.ops._forget_thread(seen.tenant, seen.thread)
            # with integrity=: tombstones in the survivors first (bodies read above)
            yield from self.ops._tombstone_trim(seen.pk, items, doomed)
            yield from self.ops._delete_keys(seen.pk, [i["sk"]["S"] for i in doomed])
            yield from self.ops._delete_objects([k for i in doomed for k in object_keys_of(i)])
        return None
