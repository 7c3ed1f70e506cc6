"""Every DynamoDB item, key and request of the saver, and the operations that use them.

This module is pure (no boto3 import, no I/O, no clock but the injected ``now``):
each saver operation is a generator that yields :class:`Call` requests (a
low-level boto3 client method and its parameters) or :class:`Sleep` requests
(a backoff pause) and receives their results (see
``langgraph_durable._core.sansio``). ``DynamoDBSaver`` and
``AsyncDynamoDBSaver`` run the same generators through a sync or async driver.
Every retry decision (throttling, unprocessed batch items, transaction
conflicts) is made here, once.

Table: partition key ``pk`` (S), sort key ``sk`` (S), optional TTL attribute
``expires_at`` (N). Every item of one thread shares one partition key,
``<tenant>#<thread>`` with both parts escaped (:func:`enc`), so distinct pairs
never collide. Sort keys (``<ns>``, ``<id>``, ... escaped the same way):

* ``c#<ns>#<id>#`` the checkpoint (pointer) item: body, metadata, clear
  metadata index, parent id, run id and the blob references (and ``hd`` when
  it has no ``expires_at`` yet readers must consult the thread's head: the
  pruner sets it before deleting a thread written without retention);
* ``c#<ns>#<id>#k#<field>#<i>`` its payload chunks, when it exceeds one item;
* ``c#<ns>#<id>#w#<task>#<idx>`` one pending write (``#k#v#<i>`` its chunks);
* ``b#<ns>#<channel>#<version>`` a channel value (``#k#d#<i>`` its chunks),
  shared by every checkpoint of the namespace that references the version;
* ``e#<effect id>`` one effect-journal entry (see "effect journal" in
  :class:`DynamoDBOps`): the claim's state, fencing token, attempt and lease,
  the sealed request and, once done, the outcome and the sealed result;
* ``h`` the thread's head, only when the tenant has a retention policy:
  ``created`` (first write), ``ts`` (last write), and with a time bound the
  deadlines readers honour (``live_until``: last write + idle; ``dies_at``:
  creation + absolute) and when its items were last swept (``swept_at``).
  A thread being deleted has ``gone`` (when it was marked), ``gb`` / ``gr`` /
  ``gu`` (who deletes it, ``"p"`` pruner or ``"w"`` writer, and that lease's
  end): readers treat it as absent at once, writers wait until it is gone.

Table-wide items live in the partition ``##meta`` (an escaped thread id holds
no ``#``, so no thread's partition key starts with ``##``): ``retention`` (the
policy ``setup()`` stored, JSON), ``lock#prune`` (the pruner's lock) and
``cursor#<scope>`` (where a pruner run that ran out of time stopped). No
thread operation reads them (their sort keys match no thread item's).

Escaped components never contain ``#`` and every character in them sorts above
``#``, so ``c#<ns>#`` prefixes one namespace exactly, and a checkpoint's writes
and chunks sort directly after its pointer: read newest first, a namespace is
``writes, chunks, pointer`` per checkpoint, newest checkpoint first.

Envelope encryption keeps each tenant's wrapped data keys in a partition of
its own, ``<tenant>##keys`` (tenant escaped): under the tenant's ``<tenant>#``
prefix (``dynamodb:LeadingKeys`` policies that confine a role to its tenant
cover its keys), yet never a thread's partition, since an escaped thread id
holds no ``#``. One item per data-key version, sort key the version as ten
digits, with ``key_id``, ``wrapped`` (B; removed when shredded, ``key_id`` then
empty), ``created`` (N), and ``rotated_at`` / ``shredded_at`` (N) once done.
No thread operation reads, deletes or stamps them with a TTL (their sort keys
match neither ``c#`` nor ``b#``).
"""

from __future__ import annotations

import builtins
import datetime
import hashlib
import json
import math
import random
import secrets
import uuid
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.serde.types import TASKS

from .._core.codec import CheckpointCodec, StoredCheckpoint, ThreadKey
from .._core.effects import CLAIMED, DONE, StoredEffect
from .._core.filters import metadata_matches, normalize_filter
from .._core.records import Sealed, StoredDataKey
from .._core.retention import (
    DELETE,
    LOCK_LEASE_SECONDS,
    CheckpointNode,
    PruneRequest,
    Retention,
    delta_pending,
    holder_gone,
    keep_set,
    pruner_identity,
)
from .._core.sansio import Blocking, Emit, Sleep, operation
from ..errors import (
    ConfigurationError,
    CorruptRecordError,
    InvalidInputError,
    SchemaError,
    StorageError,
    StorageUnavailableError,
)

__all__ = [
    "Call",
    "Sleep",
    "RetryPolicy",
    "DynamoDBOps",
    "RetryableError",
    "TableNotFoundError",
    "TableInUseError",
    "TransactionCanceledError",
    "ConditionFailedError",
    "enc",
    "dec",
    "validate_table_name",
    "ITEM_LIMIT",
    "TRANSACTION_ITEMS",
    "TRANSACTION_BYTES",
    "CHUNK_BYTES",
    "TTL_ATTRIBUTE",
]

#: DynamoDB's hard limits that shape the design.
ITEM_LIMIT = 400 * 1024  # one item, attribute names included
TRANSACTION_ITEMS = 100  # actions in one TransactWriteItems
TRANSACTION_BYTES = 4 * 1024 * 1024  # aggregate item size of one TransactWriteItems
BATCH_WRITE_ITEMS = 25
BATCH_GET_KEYS = 100
PK_LIMIT = 2048
SK_LIMIT = 1024

#: Payload bytes per chunk item, and the size an item may reach before its
#: payloads move to chunks (both leave room for keys and attribute names).
CHUNK_BYTES = 380_000
ITEM_BUDGET = 395_000

TTL_ATTRIBUTE = "expires_at"
HEAD_SK = "h"
#: Set on a checkpoint item written without a TTL whose thread's head readers
#: must consult (the pruner sets it before deleting such a thread).
HEADED = "hd"
#: The partition of table-wide items, and their sort keys.
META_PK = "##meta"
RETENTION_SK = "retention"
LOCK_SK = "lock#prune"
#: Roles of a thread's deleter (head attribute ``gr``).
PRUNER_ROLE = "p"
WRITER_ROLE = "w"
#: Longest a write waits for another process to finish deleting its thread.
PURGE_WAIT_SECONDS = 2 * LOCK_LEASE_SECONDS

#: Error codes DynamoDB asks clients to retry with backoff.
RETRYABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
        "TransactionInProgressException",
    }
)
#: Cancellation reasons of a transaction that a retry may clear.
RETRYABLE_REASONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)


# ---- requests and errors ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    """One DynamoDB API call for the driver: ``client.<operation>(**params)``.

    Attributes:
        operation: The boto3 low-level client method, e.g. ``"transact_write_items"``.
        params: Its keyword arguments.
    """

    operation: str
    params: dict[str, Any]


class RetryableError(StorageUnavailableError):
    """DynamoDB throttled a call or failed it transiently; a retry may succeed.

    Attributes:
        code: The DynamoDB error code.
    """

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class TableNotFoundError(SchemaError):
    """The saver's table does not exist."""


class TableInUseError(StorageError):
    """The table is being created, updated or deleted (``ResourceInUseException``)."""


class ConditionFailedError(StorageError):
    """A single-item write's ``ConditionExpression`` was false; nothing was written.

    Attributes:
        item: The stored item, when the call asked for it with
            ``ReturnValuesOnConditionCheckFailure=ALL_OLD`` and it exists.
    """

    def __init__(self, message: str, item: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.item = item


class TransactionCanceledError(StorageError):
    """DynamoDB cancelled a transaction; nothing of it was written.

    Attributes:
        reasons: One cancellation code per action (``"None"`` for actions
            that were not the cause), in the order of the request.
    """

    def __init__(self, message: str, reasons: Sequence[str]) -> None:
        super().__init__(message)
        self.reasons = tuple(reasons)

    @property
    def retryable(self) -> bool:
        """Whether every cause is transient (conflict or throttling)."""
        causes = {r for r in self.reasons if r not in ("None", "")}
        return bool(causes) and causes <= RETRYABLE_REASONS


@dataclass(frozen=True)
class RetryPolicy:
    """How throttled calls and unprocessed batch items are retried.

    Attributes:
        max_attempts: Attempts per call (the first one included).
        base_delay: Seconds of the first backoff; each retry doubles it.
        max_delay: Upper bound of one backoff.
        rand: Source of jitter in [0, 1) (the pause is between half and all of
            the current bound).
    """

    max_attempts: int = 10
    base_delay: float = 0.05
    max_delay: float = 2.0
    rand: Callable[[], float] = random.random

    def delay(self, attempt: int) -> float:
        """Backoff before retry number ``attempt`` (1 for the first retry)."""
        bound = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return bound * (0.5 + 0.5 * self.rand())


# ---- keys ------------------------------------------------------------------------

_TABLE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def validate_table_name(table: str) -> str:
    """Check a DynamoDB table name (3-255 of ``[A-Za-z0-9_.-]``) and return it."""
    if not isinstance(table, str) or not 3 <= len(table) <= 255 or not set(table) <= _TABLE_CHARS:
        raise ConfigurationError(
            f"DynamoDB table name {table!r} is not allowed: use 3 to 255 letters, digits, "
            "'_', '-' or '.' (e.g. 'langgraph_checkpoints')"
        )
    return table


def enc(value: str) -> str:
    """Escape one key component: ``%XX`` for ``%`` and every character up to ``#``.

    The result never contains ``#`` (the separator) and all its characters
    sort above ``#``, so a component followed by ``#`` orders like the
    component itself and ``<prefix>#`` matches one component exactly.
    """
    if "%" not in value and min(value, default="~") > "#":
        return value
    return "".join(f"%{ord(ch):02X}" if ch <= "#" or ch == "%" else ch for ch in value)


def dec(value: str) -> str:
    """Undo :func:`enc`."""
    if "%" not in value:
        return value
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "%":
            out.append(chr(int(value[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _utf8_len(value: str, what: str) -> int:
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{what} {value!r} is not valid Unicode text: {exc}") from exc


def thread_pk(tenant: str, thread: str) -> str:
    """The partition key of one (tenant, thread)."""
    pk = f"{enc(tenant)}#{enc(thread)}"
    if _utf8_len(pk, "thread id") > PK_LIMIT:
        raise InvalidInputError(
            f"tenant and thread id are too long for a DynamoDB partition key "
            f"({len(pk.encode())} bytes escaped, at most {PK_LIMIT}): use a shorter thread id"
        )
    return pk


def tenant_prefix(tenant: str) -> str:
    """The partition-key prefix of every thread of a tenant."""
    return f"{enc(tenant)}#"


def split_pk(pk: str) -> tuple[str, str]:
    """(tenant, thread) of a partition key."""
    tenant, _, thread = pk.partition("#")
    return dec(tenant), dec(thread)


#: The end of a data-key partition key (``<tenant>##keys``). Thread partition
#: keys hold one ``#`` and never two in a row.
DATA_KEYS_MARK = "##keys"


def data_keys_pk(tenant: str) -> str:
    """The partition key of one tenant's data keys."""
    pk = enc(tenant) + DATA_KEYS_MARK
    if _utf8_len(pk, "tenant id") > PK_LIMIT:
        raise InvalidInputError(
            f"tenant id is too long for a DynamoDB partition key ({len(pk.encode())} bytes "
            f"escaped, at most {PK_LIMIT}): use a shorter tenant id"
        )
    return pk


def data_keys_tenant(pk: str) -> str:
    """The tenant whose data keys a ``<tenant>##keys`` partition holds."""
    return dec(pk[: -len(DATA_KEYS_MARK)])


def data_key_sk(version: int) -> str:
    """The sort key of one data-key version (zero-padded: sorts by version)."""
    return f"{int(version):010d}"


def ns_prefix(ns: str) -> str:
    """Sort-key prefix of every checkpoint item of one namespace."""
    return f"c#{enc(ns)}#"


def pointer_sk(ns: str, checkpoint_id: str) -> str:
    """Sort key of a checkpoint (pointer) item; also the prefix of its writes and chunks."""
    return _check_sk(f"c#{enc(ns)}#{enc(checkpoint_id)}#")


def write_sk(ns: str, checkpoint_id: str, task_id: str, idx: int) -> str:
    """Sort key of one pending write."""
    return _check_sk(f"c#{enc(ns)}#{enc(checkpoint_id)}#w#{enc(task_id)}#{int(idx)}")


def blob_sk(ns: str, channel: str, version: str) -> str:
    """Sort key of one channel value at one version."""
    return _check_sk(f"b#{enc(ns)}#{enc(channel)}#{enc(version)}")


def chunk_sk(owner_sk: str, name: str, index: int) -> str:
    """Sort key of chunk ``index`` of payload ``name`` of the item at ``owner_sk``."""
    sep = "" if owner_sk.endswith("#") else "#"
    return f"{owner_sk}{sep}k#{name}#{index:05d}"


def _check_sk(sk: str) -> str:
    # room for the chunk suffix "#k#x#00000"
    if _utf8_len(sk, "key") > SK_LIMIT - 12:
        raise InvalidInputError(
            f"namespace, checkpoint id, channel or task id too long for a DynamoDB sort key "
            f"({len(sk.encode())} bytes escaped, at most {SK_LIMIT - 12}): {sk[:80]!r}..."
        )
    return sk


@dataclass(frozen=True, slots=True)
class CheckpointItemKey:
    """What a sort key under ``c#`` says: namespace, checkpoint id and the rest."""

    ns: str
    checkpoint_id: str
    kind: str  # "pointer", "chunk" (of the pointer), "write", "write_chunk"
    task_id: str = ""
    idx: int = 0
    name: str = ""  # chunk payload name
    index: int = 0  # chunk index


def parse_checkpoint_sk(sk: str) -> CheckpointItemKey:
    """Parse a ``c#`` sort key (see the module docstring)."""
    parts = sk.split("#")
    # c, ns, id, then: "" | k,name,i | w,task,idx | w,task,idx,k,name,i
    ns, cid = dec(parts[1]), dec(parts[2])
    rest = parts[3:]
    if rest == [""]:
        return CheckpointItemKey(ns, cid, "pointer")
    if rest[0] == "k":
        return CheckpointItemKey(ns, cid, "chunk", name=rest[1], index=int(rest[2]))
    if rest[0] == "w" and len(rest) == 3:
        return CheckpointItemKey(ns, cid, "write", task_id=dec(rest[1]), idx=int(rest[2]))
    if rest[0] == "w" and len(rest) == 6:
        return CheckpointItemKey(
            ns,
            cid,
            "write_chunk",
            task_id=dec(rest[1]),
            idx=int(rest[2]),
            name=rest[4],
            index=int(rest[5]),
        )
    raise CorruptRecordError(f"unexpected sort key {sk!r} in the checkpoint range")


def is_pointer_sk(sk: str) -> bool:
    """Whether a sort key is a checkpoint pointer's (``c#<ns>#<id>#``)."""
    return sk.startswith("c#") and sk.endswith("#") and sk.count("#") == 3


def blob_base_sk(sk: str) -> str:
    """The blob item a ``b#`` sort key belongs to (itself, or the owner of a chunk)."""
    return "#".join(sk.split("#")[:4])


# ---- attribute values and sizes ----------------------------------------------------


def S(value: str) -> dict[str, Any]:  # noqa: N802 - DynamoDB's type letters
    """A string attribute value."""
    return {"S": value}


def N(value: int | float) -> dict[str, Any]:  # noqa: N802
    """A number attribute value."""
    return {"N": str(value)}


def B(value: bytes) -> dict[str, Any]:  # noqa: N802
    """A binary attribute value."""
    return {"B": value}


def _num(item: dict[str, Any], name: str, default: int | None = None) -> int | None:
    value = item.get(name)
    return default if value is None else int(float(value["N"]))


def _str(item: dict[str, Any], name: str, default: str | None = None) -> str | None:
    value = item.get(name)
    return default if value is None else str(value["S"])


def stored_data_key(item: dict[str, Any]) -> StoredDataKey:
    """The data-key version one ``<tenant>##keys`` item holds (``wrapped`` None if shredded)."""
    wrapped = item.get("wrapped")
    created = item.get("created")
    return StoredDataKey(
        version=int(item["sk"]["S"]),
        key_id=_str(item, "key_id", "") or "",
        wrapped=None if wrapped is None else bytes(wrapped["B"]),
        created=0.0 if created is None else float(created["N"]),
    )


def value_size(value: dict[str, Any]) -> int:
    """Upper bound of the size DynamoDB counts for one attribute value."""
    ((kind, data),) = value.items()
    if kind == "S":
        return len(data.encode("utf-8"))
    if kind == "B":
        return len(data)
    if kind == "N":
        return 21
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + value_size(v) for k, v in data.items())
    raise TypeError(f"unsupported DynamoDB attribute type {kind!r}")


def item_size(item: dict[str, Any]) -> int:
    """Upper bound of the size DynamoDB counts for one item."""
    return sum(len(name.encode("utf-8")) + value_size(v) for name, v in item.items())


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"


# ---- payloads: inline or chunked ---------------------------------------------------


def with_payloads(
    base: dict[str, Any],
    payloads: dict[str, bytes],
    stamp: dict[str, Any],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An item with its payloads inline, or moved to chunk items when too large.

    Payloads stay inline (attribute ``<name>``) while the item fits
    :data:`ITEM_BUDGET`; otherwise the largest move out, each described on the
    item by ``<name>_n`` (chunk count), ``<name>_len`` and ``<name>_h``
    (SHA-256) so a reader can reassemble and check it.

    Args:
        base: The item's key and clear attributes.
        payloads: Payload name -> bytes.
        stamp: Attributes every written item carries (``expires_at``).

    Returns:
        The item and its chunk items (to be written in the same transaction).
    """
    item = dict(base)
    item.update(stamp)
    for name, data in payloads.items():
        item[name] = B(data)
    chunks: list[dict[str, Any]] = []
    for name in sorted(payloads, key=lambda n: -len(payloads[n])):
        if item_size(item) <= ITEM_BUDGET:
            break
        data = payloads[name]
        del item[name]
        pieces = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
        item[f"{name}_n"] = N(len(pieces))
        item[f"{name}_len"] = N(len(data))
        item[f"{name}_h"] = S(hashlib.sha256(data).hexdigest())
        for i, piece in enumerate(pieces):
            chunks.append(
                {
                    "pk": base["pk"],
                    "sk": S(chunk_sk(base["sk"]["S"], name, i)),
                    "d": B(piece),
                    **stamp,
                }
            )
    if item_size(item) > ITEM_BUDGET:
        raise InvalidInputError(
            f"the clear attributes of item {base['sk']['S'][:80]!r} need "
            f"{item_size(item)} bytes, more than a DynamoDB item holds ({ITEM_LIMIT}): "
            "the checkpoint metadata is too large"
        )
    return item, chunks


def chunk_count(item: dict[str, Any], name: str) -> int:
    """How many chunks payload ``name`` of ``item`` has (0 when inline)."""
    return _num(item, f"{name}_n", 0) or 0


def read_payload(
    item: dict[str, Any], name: str, chunks: dict[int, bytes], what: str
) -> bytes | None:
    """Payload ``name`` of ``item``, reassembled from ``chunks`` and checked.

    Returns None when the item has no such payload.

    Raises:
        CorruptRecordError: A chunk is missing or the length or hash differ.
    """
    inline = item.get(name)
    if inline is not None:
        return bytes(inline["B"])
    count = chunk_count(item, name)
    if not count:
        return None
    try:
        data = b"".join(bytes(chunks[i]) for i in range(count))
    except KeyError as exc:
        raise CorruptRecordError(f"{what}: chunk {exc.args[0]} of {count} is missing") from exc
    if len(data) != _num(item, f"{name}_len") or (
        hashlib.sha256(data).hexdigest() != _str(item, f"{name}_h")
    ):
        raise CorruptRecordError(f"{what}: reassembled payload fails its length or hash check")
    return data


# ---- stored checkpoints ----------------------------------------------------------


@dataclass
class _Group:
    """The items of one checkpoint id in one namespace, as read."""

    pk: str
    ns: str
    checkpoint_id: str
    pointer: dict[str, Any] | None = None
    chunks: dict[str, dict[int, bytes]] = field(default_factory=dict)
    writes: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    write_chunks: dict[tuple[str, int], dict[int, bytes]] = field(default_factory=dict)

    def add(self, key: CheckpointItemKey, item: dict[str, Any]) -> None:
        if key.kind == "pointer":
            self.pointer = item
        elif key.kind == "chunk":
            self.chunks.setdefault(key.name, {})[key.index] = item["d"]["B"]
        elif key.kind == "write":
            self.writes[(key.task_id, key.idx)] = item
        else:
            self.write_chunks.setdefault((key.task_id, key.idx), {})[key.index] = item["d"]["B"]

    def metadata_index(self) -> dict[str, Any]:
        assert self.pointer is not None
        return json.loads(_str(self.pointer, "mi", "{}") or "{}")  # type: ignore[no-any-return]

    def refs(self) -> list[tuple[str, str, int]]:
        """(channel, version, known chunk count or -1) of every referenced blob."""
        assert self.pointer is not None
        return [(c, v, int(n)) for c, v, n in json.loads(_str(self.pointer, "refs", "[]") or "[]")]


def _is_live(item: dict[str, Any], now: float) -> bool:
    expires = item.get(TTL_ATTRIBUTE)
    return expires is None or float(expires["N"]) > now


def _sort_key_desc(entry: tuple[str, _Group]) -> tuple[str, str, str]:
    _tenant, g = entry
    return (g.checkpoint_id, split_pk(g.pk)[1], g.ns)


def _float(item: dict[str, Any] | None, name: str) -> float | None:
    value = None if item is None else item.get(name)
    return None if value is None else float(value["N"])


def head_live(head: dict[str, Any], now: float) -> bool:
    """Whether a thread's head lets readers see the thread at ``now``.

    Not when it is marked gone (being deleted), nor once ``live_until`` (last
    write + idle) or ``dies_at`` (creation + absolute) has passed.
    """
    if "gone" in head:
        return False
    for name in ("live_until", "dies_at"):
        at = _float(head, name)
        if at is not None and at <= now:
            return False
    return True


def is_thread_pk(pk: str) -> bool:
    """Whether a partition key is a thread's (``<tenant>#<thread>``: exactly one ``#``)."""
    return pk.count("#") == 1


def uuid6_seconds(checkpoint_id: str | None) -> float | None:
    """The Unix time a version-6 UUID (LangGraph's checkpoint ids) was made at, or None."""
    if not checkpoint_id:
        return None
    try:
        value = uuid.UUID(checkpoint_id)
    except ValueError:
        return None
    if value.version != 6:
        return None
    ticks = ((value.int >> 80) << 12) | ((value.int >> 64) & 0x0FFF)
    return (ticks - 0x01B21DD213814000) / 1e7


@dataclass(frozen=True, slots=True)
class Expiry:
    """What writes of one tenant carry under its retention policy.

    Attributes:
        idle: Seconds a thread lives after its last write (``live_until``), or None.
        absolute: Seconds a thread lives after its creation (``dies_at``), or None.
        refresh: Seconds between sweeps that extend the items' ``expires_at``
            (idle policies; also the margin every stamp adds).
        ttl: Whether items carry ``expires_at`` for DynamoDB's own deletion
            (``delete`` policies; ``keep_latest`` threads are trimmed, never
            deleted whole).
    """

    idle: int | None
    absolute: int | None
    refresh: int
    ttl: bool

    @classmethod
    def of(cls, policy: Retention, refresh: int | None) -> Expiry:
        if policy.strategy != DELETE or not policy.expires:
            return cls(None, None, 0, False)
        idle = None if policy.idle_seconds is None else math.ceil(policy.idle_seconds)
        absolute = None if policy.absolute_seconds is None else math.ceil(policy.absolute_seconds)
        if idle is None:
            return cls(None, absolute, refresh or 0, True)  # no sweeps: stamps outlive it
        return cls(idle, absolute, refresh or max(1, idle // 2), True)

    def stamp(self, now: float) -> dict[str, Any]:
        """The ``expires_at`` of an item written at ``now`` (empty without TTL).

        Never before the thread's own expiry: a thread expires at the latest
        ``bound`` after any write (the absolute bound counts from its creation,
        which is earlier), and sweeps extend the items of an active thread.
        """
        if not self.ttl:
            return {}
        bound = min(b for b in (self.idle, self.absolute) if b is not None)
        return {TTL_ATTRIBUTE: N(int(now) + bound + self.refresh)}


def trim_plan(items: Iterable[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """The items ``keep_latest`` removes from one thread (as read by a Query).

    Kept: the checkpoints :func:`keep_set` returns (the latest ``keep`` of each
    namespace and what they need: the parent holding old-format pending sends,
    the ancestors a DeltaChannel value is rebuilt from) with their chunks and
    writes, and the blobs they reference. Removed: every other checkpoint
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
    referenced = {
        blob_sk(ns, channel, version)
        for ns, cid in kept
        if (ns, cid) in pointers
        for channel, version, _n in json.loads(_str(pointers[(ns, cid)], "refs", "[]") or "[]")
    }
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


def data_size(item: dict[str, Any]) -> int:
    """The size :class:`PruneReport` counts for an item (bookkeeping attributes left out)."""
    return item_size({k: v for k, v in item.items() if k != HEADED})


# ---- the operations ----------------------------------------------------------------


class DynamoDBOps:
    """The saver's operations on one table, as sans-IO generators.

    Args:
        table: The table name (validated).
        codec: The checkpoint codec (owns the record pipeline).
        now: The clock (seconds since the epoch); injected so tests control time.
        ttl: Seconds a thread stays readable after its last write, or None
            (the same as ``retention`` giving every tenant ``Retention(idle=ttl)``).
        ttl_refresh: How often (seconds) an active thread's items get their
            ``expires_at`` extended; defaults to half of the idle bound.
        retention: The retention policy of a tenant (None: no retention), asked
            on every write; or None for no retention at all.
        ttl_needed: Whether ``setup()`` enables (or demands) the table's TTL;
            default: whenever ``ttl`` or ``retention`` is set.
        retry: The retry policy of every call.
        get_page_items: Items of the first page read for a latest checkpoint.
        list_page_items: Items per page of a history listing.
    """

    def __init__(
        self,
        table: str,
        codec: CheckpointCodec,
        *,
        now: Callable[[], float],
        ttl: int | None = None,
        ttl_refresh: int | None = None,
        retention: Callable[[str], Retention | None] | None = None,
        ttl_needed: bool | None = None,
        retry: RetryPolicy | None = None,
        get_page_items: int = 16,
        list_page_items: int = 300,
    ) -> None:
        self.table = validate_table_name(table)
        self.codec = codec
        self.now = now
        self.ttl = ttl
        self.ttl_refresh = ttl_refresh
        self.refresh = (ttl_refresh or max(1, ttl // 2)) if ttl else 0
        if retention is None and ttl:
            fixed = Retention(idle=datetime.timedelta(seconds=ttl))
            retention = lambda _tenant: fixed  # noqa: E731
        self.retention = retention
        self.ttl_needed = (retention is not None) if ttl_needed is None else ttl_needed
        self.retry = retry or RetryPolicy()
        self.get_page_items = get_page_items
        self.list_page_items = list_page_items

    # ---- calls with retries ------------------------------------------------------

    def _call(self, operation: str, params: dict[str, Any]) -> Generator[Any, Any, Any]:
        """One API call, retried with backoff while DynamoDB throttles it."""
        attempt = 1
        while True:
            try:
                return (yield Call(operation, params))
            except (RetryableError, TransactionCanceledError) as exc:
                if isinstance(exc, TransactionCanceledError) and "ClientRequestToken" in params:
                    # a cancelled transaction is retried as a new request
                    params = {**params, "ClientRequestToken": new_token()}
                if isinstance(exc, TransactionCanceledError) and not exc.retryable:
                    raise
                if attempt >= self.retry.max_attempts:
                    code = getattr(exc, "code", None) or ",".join(getattr(exc, "reasons", ()) or ())
                    raise StorageUnavailableError(
                        f"DynamoDB refused {operation} on table {self.table!r} {attempt} times "
                        f"({code}): raise the table's capacity or the saver's max_attempts"
                    ) from exc
                yield Sleep(self.retry.delay(attempt))
                attempt += 1

    def _batch_write(self, requests: Sequence[dict[str, Any]]) -> Generator[Any, Any, None]:
        """Write or delete items, 25 per BatchWriteItem; unprocessed ones are resent."""
        for start in range(0, len(requests), BATCH_WRITE_ITEMS):
            pending: dict[str, Any] = {
                self.table: list(requests[start : start + BATCH_WRITE_ITEMS])
            }
            attempt = 1
            while pending:
                resp = yield from self._call("batch_write_item", {"RequestItems": pending})
                pending = {k: v for k, v in (resp.get("UnprocessedItems") or {}).items() if v}
                if not pending:
                    break
                if attempt >= self.retry.max_attempts:
                    left = sum(len(v) for v in pending.values())
                    raise StorageUnavailableError(
                        f"DynamoDB left {left} items of a BatchWriteItem on table "
                        f"{self.table!r} unprocessed after {attempt} attempts"
                    )
                yield Sleep(self.retry.delay(attempt))
                attempt += 1

    def _batch_get(
        self, keys: Iterable[tuple[str, str]]
    ) -> Generator[Any, Any, dict[tuple[str, str], dict[str, Any]]]:
        """Items by (pk, sk), 100 keys per BatchGetItem; unprocessed keys are resent."""
        unique = list(dict.fromkeys(keys))
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for start in range(0, len(unique), BATCH_GET_KEYS):
            request: dict[str, Any] = {
                self.table: {
                    "Keys": [{"pk": S(pk), "sk": S(sk)} for pk, sk in unique[start : start + 100]],
                    "ConsistentRead": True,
                }
            }
            attempt = 1
            while request:
                resp = yield from self._call("batch_get_item", {"RequestItems": request})
                for item in (resp.get("Responses") or {}).get(self.table, []):
                    found[(item["pk"]["S"], item["sk"]["S"])] = item
                request = {
                    k: v for k, v in (resp.get("UnprocessedKeys") or {}).items() if v.get("Keys")
                }
                if not request:
                    break
                if attempt >= self.retry.max_attempts:
                    raise StorageUnavailableError(
                        f"DynamoDB left keys of a BatchGetItem on table {self.table!r} "
                        f"unprocessed after {attempt} attempts"
                    )
                yield Sleep(self.retry.delay(attempt))
                attempt += 1
        return found

    def _query_all(
        self, pk: str, prefix: str | None = None, projection: Sequence[str] | None = None
    ) -> Generator[Any, Any, list[dict[str, Any]]]:
        """Every item of a partition (under a sort-key prefix), all pages."""
        params = self._query_params(pk, prefix)
        if projection:
            names = {f"#a{i}": name for i, name in enumerate(projection)}
            params["ProjectionExpression"] = ", ".join(names)
            params["ExpressionAttributeNames"] = {**params["ExpressionAttributeNames"], **names}
        items: list[dict[str, Any]] = []
        while True:
            resp = yield from self._call("query", params)
            items.extend(resp.get("Items") or [])
            last = resp.get("LastEvaluatedKey")
            if not last:
                return items
            params = {**params, "ExclusiveStartKey": last}

    def _query_params(self, pk: str, prefix: str | None) -> dict[str, Any]:
        params: dict[str, Any] = {
            "TableName": self.table,
            "ConsistentRead": True,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": "pk"},
            "ExpressionAttributeValues": {":pk": S(pk)},
        }
        if prefix:
            params["KeyConditionExpression"] += " AND begins_with(#sk, :prefix)"
            params["ExpressionAttributeNames"]["#sk"] = "sk"
            params["ExpressionAttributeValues"][":prefix"] = S(prefix)
        return params

    # ---- setup -------------------------------------------------------------------

    @operation
    def setup(self, create: bool, retention: str | None = None) -> Generator[Any, Any, list[str]]:
        """Create the table (and enable TTL) if asked, then check it.

        Args:
            create: Create a missing table and enable its TTL (else only check).
            retention: The saver's retention policy as JSON, stored for the
                command line (``meta`` item ``retention``); None stores nothing.

        Returns:
            What this call changed (e.g. ``["created table", "enabled TTL"]``).
        """
        done: list[str] = []
        table = self.table
        try:
            desc = yield from self._call("describe_table", {"TableName": table})
        except TableNotFoundError:
            if not create:
                raise TableNotFoundError(
                    f"DynamoDB table {table!r} does not exist: call setup() with "
                    "create_table=True, or create it with partition key 'pk' (S) and sort key "
                    "'sk' (S)"
                ) from None
            try:
                yield from self._call(
                    "create_table",
                    {
                        "TableName": table,
                        "KeySchema": [
                            {"AttributeName": "pk", "KeyType": "HASH"},
                            {"AttributeName": "sk", "KeyType": "RANGE"},
                        ],
                        "AttributeDefinitions": [
                            {"AttributeName": "pk", "AttributeType": "S"},
                            {"AttributeName": "sk", "AttributeType": "S"},
                        ],
                        "BillingMode": "PAY_PER_REQUEST",
                    },
                )
                done.append("created table")
            except TableInUseError:
                pass  # another process is creating it
            desc = yield from self._wait_active()
        status = desc["Table"].get("TableStatus")
        if status == "CREATING":
            desc = yield from self._wait_active()
        self._check_key_schema(desc["Table"])
        if self.ttl_needed:
            ttl = yield from self._call("describe_time_to_live", {"TableName": table})
            info = ttl.get("TimeToLiveDescription") or {}
            state, attribute = info.get("TimeToLiveStatus"), info.get("AttributeName")
            if attribute not in (None, TTL_ATTRIBUTE) and state in ("ENABLED", "ENABLING"):
                raise SchemaError(
                    f"table {table!r} has TTL on attribute {attribute!r}, but the saver stamps "
                    f"{TTL_ATTRIBUTE!r} (a table has one TTL attribute): use another table, or "
                    "disable that TTL first"
                )
            if state not in ("ENABLED", "ENABLING"):
                if not create:
                    raise SchemaError(
                        f"table {table!r} has TTL {state or 'DISABLED'}, but the saver was "
                        "given a retention policy that expires threads: enable TTL on "
                        f"attribute {TTL_ATTRIBUTE!r} (or call setup() with create_table=True, "
                        "which does)"
                    )
                if state == "DISABLING":
                    raise SchemaError(
                        f"table {table!r} is still disabling its TTL; DynamoDB allows enabling "
                        "it again about an hour later: retry setup() then"
                    )
                try:
                    yield from self._call(
                        "update_time_to_live",
                        {
                            "TableName": table,
                            "TimeToLiveSpecification": {
                                "Enabled": True,
                                "AttributeName": TTL_ATTRIBUTE,
                            },
                        },
                    )
                    done.append("enabled TTL")
                except StorageError:
                    # another process may have enabled it a moment ago
                    again = yield from self._call("describe_time_to_live", {"TableName": table})
                    info = again.get("TimeToLiveDescription") or {}
                    if info.get("AttributeName") != TTL_ATTRIBUTE or info.get(
                        "TimeToLiveStatus"
                    ) not in ("ENABLED", "ENABLING"):
                        raise
        if retention is not None:
            yield from self.retention_set(retention).steps
        return done

    @operation
    def retention_get(self) -> Generator[Any, Any, str | None]:
        """The retention policy ``setup()`` stored (JSON), or None: one GetItem."""
        resp = yield from self._call(
            "get_item",
            {
                "TableName": self.table,
                "Key": {"pk": S(META_PK), "sk": S(RETENTION_SK)},
                "ConsistentRead": True,
            },
        )
        return _str(resp.get("Item") or {}, "policy")

    @operation
    def retention_set(self, text: str) -> Generator[Any, Any, None]:
        """Store the table's retention policy (JSON): one PutItem."""
        item = {
            "pk": S(META_PK),
            "sk": S(RETENTION_SK),
            "policy": S(text),
            "ts": N(int(self.now())),
        }
        yield from self._call("put_item", {"TableName": self.table, "Item": item})
        return None

    def _wait_active(self) -> Generator[Any, Any, Any]:
        for _ in range(300):
            desc = yield from self._call("describe_table", {"TableName": self.table})
            if desc["Table"].get("TableStatus") == "ACTIVE":
                return desc
            yield Sleep(1.0)
        raise StorageUnavailableError(f"table {self.table!r} did not become ACTIVE in 5 minutes")

    def _check_key_schema(self, table: dict[str, Any]) -> None:
        keys = {k["AttributeName"]: k["KeyType"] for k in table.get("KeySchema", [])}
        types = {
            a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])
        }
        problems = []
        if keys.get("pk") != "HASH" or types.get("pk") != "S":
            problems.append("partition key must be 'pk' of type S")
        if keys.get("sk") != "RANGE" or types.get("sk") != "S":
            problems.append("sort key must be 'sk' of type S")
        if len(keys) != 2 and not problems:
            problems.append("key schema must be exactly pk (HASH) and sk (RANGE)")
        if problems:
            found = ", ".join(f"{n} ({k}, {types.get(n, '?')})" for n, k in keys.items())
            raise SchemaError(
                f"table {self.table!r} cannot hold checkpoints: its "
                + " and its ".join(problems)
                + f"; it has {found or 'no keys'}. Use another table name (setup() creates it)"
            )

    # ---- retention: stamps, the thread head, sweeps, purges ------------------------

    def _expiry(self, tenant: str) -> Expiry | None:
        """What writes of ``tenant`` carry under its policy (None: no retention)."""
        if self.retention is None:
            return None
        policy = self.retention(tenant)
        if policy is None:
            return None
        if not isinstance(policy, Retention):
            raise ConfigurationError(
                f"the retention policy of tenant {tenant!r} is {policy!r}: "
                "use a langgraph_durable.Retention or None"
            )
        return Expiry.of(policy, self.ttl_refresh)

    @staticmethod
    def _stamp(exp: Expiry | None, now: float) -> dict[str, Any]:
        """The ``expires_at`` every item written now carries (empty without TTL)."""
        return {} if exp is None else exp.stamp(now)

    def _head_action(self, pk: str, now: float, exp: Expiry) -> dict[str, Any]:
        """Record a write on the thread's head; fails if the thread expired, is being
        deleted, or is due a sweep (or its items carry a TTL it no longer wants).

        ``created`` is kept from the first write; ``live_until`` is the last write
        + idle, ``dies_at`` the creation + absolute (each removed when the policy
        has no such bound).
        """
        t = int(now)
        names = {
            "#sk": "sk",
            "#ts": "ts",
            "#cr": "created",
            "#lu": "live_until",
            "#da": "dies_at",
            "#g": "gone",
            "#ex": TTL_ATTRIBUTE,
            "#sw": "swept_at",
        }
        values: dict[str, Any] = {":now": N(t)}
        sets = ["#ts = :now", "#cr = if_not_exists(#cr, :now)"]
        removes: list[str] = []
        if exp.idle is not None:
            sets.append("#lu = :lu")
            values[":lu"] = N(t + exp.idle)
        else:
            removes.append("#lu")
        if exp.absolute is not None:
            sets.append("#da = if_not_exists(#cr, :now) + :abs")
            values[":abs"] = N(exp.absolute)
        else:
            removes.append("#da")
        live = (
            "attribute_not_exists(#g) AND (attribute_not_exists(#lu) OR #lu > :now)"
            " AND (attribute_not_exists(#da) OR #da > :now)"
        )
        if exp.ttl:
            sets += ["#ex = :ex", "#sw = if_not_exists(#sw, :now)"]
            values[":ex"] = exp.stamp(now)[TTL_ATTRIBUTE]
            if exp.idle is not None:
                live += " AND #sw > :cutoff"
                values[":cutoff"] = N(t - exp.refresh)
            else:
                live += " AND attribute_exists(#sw)"
        else:
            removes += ["#ex", "#sw"]
            live += " AND attribute_not_exists(#ex)"
        update = "SET " + ", ".join(sets)
        if removes:
            update += " REMOVE " + ", ".join(removes)
        return {
            "Update": {
                "TableName": self.table,
                "Key": {"pk": S(pk), "sk": S(HEAD_SK)},
                "UpdateExpression": update,
                "ConditionExpression": f"attribute_not_exists(#sk) OR ({live})",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def _head_item(self, pk: str, now: float, exp: Expiry) -> dict[str, Any]:
        """The head of a thread first written at ``now`` (what :meth:`_head_action` makes)."""
        t = int(now)
        head = {"pk": S(pk), "sk": S(HEAD_SK), "created": N(t), "ts": N(t)}
        if exp.idle is not None:
            head["live_until"] = N(t + exp.idle)
        if exp.absolute is not None:
            head["dies_at"] = N(t + exp.absolute)
        if exp.ttl:
            head.update(exp.stamp(now))
            head["swept_at"] = N(t)
        return head

    def _get_head(self, pk: str) -> Generator[Any, Any, dict[str, Any] | None]:
        resp = yield from self._call(
            "get_item",
            {
                "TableName": self.table,
                "Key": {"pk": S(pk), "sk": S(HEAD_SK)},
                "ConsistentRead": True,
            },
        )
        return resp.get("Item")  # type: ignore[no-any-return]

    def _on_head_refused(self, pk: str, exp: Expiry) -> Generator[Any, Any, None]:
        """A write found its thread's head refusing it; make the write possible.

        A live thread is due a sweep (or its items' stamps no longer match the
        policy): sweep it. An expired thread is deleted first (a write starts
        it afresh). A thread another process is deleting is waited for, unless
        that process's lease ran out or it is a dead process of this host.
        """
        waited = 0.0
        attempt = 0
        while True:
            head = yield from self._get_head(pk)
            now = self.now()
            if head is None:
                return None
            if head_live(head, now):
                yield from self._sweep(pk, now, exp)
                return None
            holder = _str(head, "gb")
            if holder and (_float(head, "gu") or 0.0) > now:
                dead = yield Blocking(holder_gone, (holder,))
                if not dead:
                    if waited >= PURGE_WAIT_SECONDS:
                        raise StorageUnavailableError(
                            f"thread {split_pk(pk)[1]!r} is being deleted by {holder} (retention "
                            f"expired it) and was still being deleted after {waited:.0f} s; "
                            "retry the write later"
                        )
                    attempt += 1
                    pause = min(1.0, 0.02 * attempt)
                    yield Sleep(pause)
                    waited += pause
                    continue
            me = pruner_identity()
            if (yield from self._mark_gone(pk, me, WRITER_ROLE, now, holder, False)):
                items = yield from self._query_all(pk, None, ("pk", "sk"))
                yield from self._purge_marked(pk, me, items)
                return None
            attempt += 1  # the head changed meanwhile: look again
            if attempt > 1000:
                raise StorageError(f"could not delete expired thread {split_pk(pk)[1]!r}")

    def _mark_gone(
        self,
        pk: str,
        holder: str,
        role: str,
        now: float,
        previous: str | None,
        readable: bool,
        last_write: dict[str, Any] | None = None,
    ) -> Generator[Any, Any, bool]:
        """Mark a thread gone (readers stop seeing it) and hold its deletion for a lease.

        Args:
            pk: The thread's partition key.
            holder: Who deletes it (a :func:`pruner_identity`).
            role: ``"p"`` (the pruner, which may take over another pruner's
                lease since it holds the pruner lock) or ``"w"`` (a writer).
            now: The time; the lease lasts ``LOCK_LEASE_SECONDS`` from it.
            previous: The holder of a lease this call may take over (its lease
                ran out or it is dead), or None.
            readable: Whether readers still see the thread (the pruner decided
                by its policy); then the head must be unchanged since the
                decision (``ts`` equal to ``last_write``, the attribute value
                read, or absent when that is None): no write came in between.
                Otherwise the head must still be expired or marked gone.

        Returns:
            Whether the head now names ``holder``.
        """
        names = {"#sk": "sk", "#g": "gone", "#gb": "gb", "#gr": "gr", "#gu": "gu"}
        values: dict[str, Any] = {
            ":now": N(now),
            ":me": S(holder),
            ":role": S(role),
            ":until": N(now + LOCK_LEASE_SECONDS),
        }
        free = ["attribute_not_exists(#gb)", "#gu <= :now", "#gb = :me"]
        if previous:
            free.append("#gb = :old")
            values[":old"] = S(previous)
        if role == PRUNER_ROLE:
            free.append("#gr = :role")
        condition = f"attribute_exists(#sk) AND ({' OR '.join(free)})"
        names["#ts"] = "ts"
        if readable and last_write is None:
            condition += " AND attribute_not_exists(#g) AND attribute_not_exists(#ts)"
        elif readable:
            values[":ts"] = last_write
            condition += " AND attribute_not_exists(#g) AND #ts = :ts"
        else:
            del names["#ts"]
            names["#lu"] = "live_until"
            names["#da"] = "dies_at"
            condition += " AND (attribute_exists(#g) OR #lu <= :now OR #da <= :now)"
        try:
            yield from self._call(
                "update_item",
                {
                    "TableName": self.table,
                    "Key": {"pk": S(pk), "sk": S(HEAD_SK)},
                    "UpdateExpression": (
                        "SET #g = if_not_exists(#g, :now), #gb = :me, #gr = :role, #gu = :until"
                    ),
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                },
            )
        except ConditionFailedError:
            return False
        return True

    def _purge_marked(
        self, pk: str, holder: str, items: Sequence[dict[str, Any]]
    ) -> Generator[Any, Any, None]:
        """Delete a thread marked gone by ``holder``: its items (pointers first),
        then its head, on condition ``holder`` still holds it."""
        yield from self._delete_keys(pk, [i["sk"]["S"] for i in items if i["sk"]["S"] != HEAD_SK])
        try:
            yield from self._call(
                "delete_item",
                {
                    "TableName": self.table,
                    "Key": {"pk": S(pk), "sk": S(HEAD_SK)},
                    "ConditionExpression": "#gb = :me",
                    "ExpressionAttributeNames": {"#gb": "gb"},
                    "ExpressionAttributeValues": {":me": S(holder)},
                },
            )
        except ConditionFailedError:
            pass  # taken over: the new holder deletes it
        return None

    def _transact_updates(self, updates: Sequence[dict[str, Any]]) -> Generator[Any, Any, None]:
        """Conditional updates of existing items, 100 per TransactWriteItems; an
        update whose item is gone (its condition fails) is dropped and the rest resent."""
        for start in range(0, len(updates), TRANSACTION_ITEMS):
            batch = list(updates[start : start + TRANSACTION_ITEMS])
            while batch:
                try:
                    yield from self._call("transact_write_items", {"TransactItems": batch})
                    break
                except TransactionCanceledError as exc:
                    gone = {i for i, r in enumerate(exc.reasons) if r == "ConditionalCheckFailed"}
                    if not gone:
                        raise
                    batch = [a for i, a in enumerate(batch) if i not in gone]
        return None

    def _sweep(self, pk: str, now: float, exp: Expiry) -> Generator[Any, Any, None]:
        """Make a live thread's items' ``expires_at`` match its policy; drop expired ones.

        Under a policy with TTL every live item's ``expires_at`` is extended to
        what a write now stamps; under one without (``keep_latest``) it is
        removed, so DynamoDB never deletes part of a thread that is trimmed.
        """
        items = yield from self._query_all(pk, None, ("pk", "sk", TTL_ATTRIBUTE))
        stamp = exp.stamp(now).get(TTL_ATTRIBUTE)
        live = [i for i in items if i["sk"]["S"] != HEAD_SK and _is_live(i, now)]
        dead = [i for i in items if i["sk"]["S"] != HEAD_SK and not _is_live(i, now)]
        if stamp is None:
            live = [i for i in live if TTL_ATTRIBUTE in i]
        updates = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": {"pk": i["pk"], "sk": i["sk"]},
                    "UpdateExpression": "SET #ex = :ex" if stamp else "REMOVE #ex",
                    "ConditionExpression": "attribute_exists(#sk)",
                    "ExpressionAttributeNames": {"#ex": TTL_ATTRIBUTE, "#sk": "sk"},
                    **({"ExpressionAttributeValues": {":ex": stamp}} if stamp else {}),
                }
            }
            for i in live
        ]
        yield from self._transact_updates(updates)
        if dead:
            yield from self._batch_write(
                [{"DeleteRequest": {"Key": {"pk": i["pk"], "sk": i["sk"]}}} for i in dead]
            )
        head: dict[str, Any] = {
            "TableName": self.table,
            "Key": {"pk": S(pk), "sk": S(HEAD_SK)},
            "ConditionExpression": "attribute_exists(#sk)",
        }
        if stamp:
            head["UpdateExpression"] = "SET #sw = :now"
            head["ExpressionAttributeNames"] = {"#sw": "swept_at", "#sk": "sk"}
            head["ExpressionAttributeValues"] = {":now": N(int(now))}
        else:
            head["UpdateExpression"] = "REMOVE #sw, #ex"
            head["ExpressionAttributeNames"] = {
                "#sw": "swept_at",
                "#ex": TTL_ATTRIBUTE,
                "#sk": "sk",
            }
        yield from self._call("update_item", head)
        return None

    def _write_groups(
        self,
        pk: str,
        exp: Expiry | None,
        build: Callable[[float], list[list[dict[str, Any]]]],
        droppable: bool,
        what: str,
        whole_limit: bool,
    ) -> Generator[Any, Any, None]:
        """Write groups of actions to one thread: one transaction when they fit.

        A group (an item with its chunks) never spans transactions. When the
        groups exceed one transaction they go in order across several, the
        last group in the last one (for ``put``: the payloads first, the
        checkpoint pointer last, so a reader never sees part of a checkpoint).
        Every limit is checked before the first call.

        Args:
            pk: The thread's partition key.
            exp: What the tenant's retention policy asks of writes (None: none).
            build: Makes the groups for a write at time ``now`` (the same
                groups, in the same order, on every call).
            droppable: Whether a group whose first action's condition fails
                is already stored and may be dropped (insert-only writes).
            what: Names the write in errors.
            whole_limit: Refuse the write if all groups together exceed one
                transaction's bytes (a checkpoint); else only each part must.
        """
        groups = build(self.now())
        head = 0 if exp is None else 1
        sizes = [sum(action_size(a) for a in g) for g in groups]
        room = TRANSACTION_BYTES - 1024
        if whole_limit and sum(sizes) > room:
            refuse_transaction(sum(sizes), sum(len(g) for g in groups), what)
        for group, size in zip(groups, sizes, strict=True):
            if len(group) + head > TRANSACTION_ITEMS or size > room:
                refuse_transaction(size, len(group) + head, what)
        parts: list[list[int]] = [[]]
        count = total = 0
        for gi, (group, size) in enumerate(zip(groups, sizes, strict=True)):
            if parts[-1] and (count + len(group) + head > TRANSACTION_ITEMS or total + size > room):
                parts.append([])
                count = total = 0
            parts[-1].append(gi)
            count += len(group)
            total += size
        for part in parts:

            def build_part(now: float, part: list[int] = part) -> list[list[dict[str, Any]]]:
                made = build(now)
                return [made[gi] for gi in part]

            yield from self._transact_thread(pk, exp, build_part, droppable, what)
        return None

    def _transact_thread(
        self,
        pk: str,
        exp: Expiry | None,
        build: Callable[[float], list[list[dict[str, Any]]]],
        droppable: bool,
        what: str,
    ) -> Generator[Any, Any, None]:
        """Write groups of actions to one thread in one transaction.

        Under a retention policy the thread's head is updated in the same
        transaction; if the head refuses (expired thread, a thread being
        deleted, or a sweep is due) that is handled and the write retried. A
        group whose first action's condition fails is dropped when
        ``droppable`` (an insert-only write that is already stored) and the
        rest retried.
        """
        dropped: set[int] = set()
        for _ in range(5):
            now = self.now()
            groups = build(now)
            actions: list[dict[str, Any]] = []
            owner: list[int] = []  # group index of each action (-1: head)
            if exp is not None:
                actions.append(self._head_action(pk, now, exp))
                owner.append(-1)
            for gi, group in enumerate(groups):
                if gi in dropped:
                    continue
                actions.extend(group)
                owner.extend([gi] * len(group))
            if len(owner) == (0 if exp is None else 1):
                return None
            params = {"TransactItems": actions, "ClientRequestToken": new_token()}
            try:
                yield from self._call("transact_write_items", params)
                return None
            except TransactionCanceledError as exc:
                failed = [
                    owner[i]
                    for i, reason in enumerate(exc.reasons)
                    if reason == "ConditionalCheckFailed" and i < len(owner)
                ]
                other = [r for r in exc.reasons if r not in ("None", "", "ConditionalCheckFailed")]
                if not failed or other or (not droppable and any(g >= 0 for g in failed)):
                    raise TransactionCanceledError(
                        f"DynamoDB cancelled the transaction writing {what} "
                        f"(reasons: {', '.join(exc.reasons)}); nothing of it was written",
                        exc.reasons,
                    ) from exc
                if -1 in failed and exp is not None:
                    yield from self._on_head_refused(pk, exp)
                dropped.update(g for g in failed if g >= 0)
        raise StorageError(f"could not write {what}: the thread kept changing underneath")

    # ---- writes ------------------------------------------------------------------

    @operation
    def put(
        self,
        key: ThreadKey,
        config: dict[str, Any],
        checkpoint: Any,
        metadata: Any,
        new_versions: Any,
    ) -> Generator[Any, Any, Any]:
        """Store a checkpoint with its new blobs: one TransactWriteItems."""
        rec = self.codec.encode_checkpoint(key, config, checkpoint, metadata, new_versions)
        pk = thread_pk(key.tenant, key.thread)
        psk = pointer_sk(key.ns, rec.checkpoint_id)
        blob_sks = [blob_sk(key.ns, b.channel, b.version) for b in rec.blobs]
        metadata_index = json.dumps(rec.metadata_index, separators=(",", ":"))
        what = f"checkpoint {rec.checkpoint_id} of thread {key.thread!r}"
        exp = self._expiry(key.tenant)

        def build(now: float) -> list[list[dict[str, Any]]]:
            stamp = self._stamp(exp, now)
            written: dict[tuple[str, str], int] = {}
            groups: list[list[dict[str, Any]]] = []
            for b, bsk in zip(rec.blobs, blob_sks, strict=True):
                base = {
                    "pk": S(pk),
                    "sk": S(bsk),
                    "t": S(b.sealed.type if b.sealed else "empty"),
                    "ts": N(int(now)),
                }
                payloads = {"d": b.sealed.data} if b.sealed else {}
                item, chunks = with_payloads(base, payloads, stamp)
                written[(b.channel, b.version)] = chunk_count(item, "d")
                groups.append([self._put_action(c) for c in chunks] + [self._put_action(item)])
            refs = [[c, v, written.get((c, v), -1)] for c, v in rec.blob_refs]
            base = {
                "pk": S(pk),
                "sk": S(psk),
                "fv": N(rec.v),
                "bt": S(rec.body.type),
                "mt": S(rec.metadata.type),
                "mi": S(metadata_index),
                "refs": S(json.dumps(refs, separators=(",", ":"))),
                "ts": N(int(now)),
            }
            if rec.parent_checkpoint_id:
                base["p"] = S(str(rec.parent_checkpoint_id))
            if rec.run_id:
                base["r"] = S(rec.run_id)
            item, chunks = with_payloads(base, {"b": rec.body.data, "m": rec.metadata.data}, stamp)
            # the pointer last
            groups.append([self._put_action(c) for c in chunks] + [self._put_action(item)])
            return groups

        yield from self._write_groups(pk, exp, build, False, what, whole_limit=True)
        return self.codec.config(key, rec.checkpoint_id)

    def _put_action(self, item: dict[str, Any], insert_only: bool = False) -> dict[str, Any]:
        put: dict[str, Any] = {"TableName": self.table, "Item": item}
        if insert_only:
            put["ConditionExpression"] = "attribute_not_exists(#sk)"
            put["ExpressionAttributeNames"] = {"#sk": "sk"}
        return {"Put": put}

    @operation
    def put_writes(
        self,
        key: ThreadKey,
        checkpoint_id: str,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Generator[Any, Any, None]:
        """Store a task's pending writes: one TransactWriteItems per 100 items / 4 MB."""
        if not writes:
            return None
        records, replace = self.codec.encode_writes(key, checkpoint_id, writes, task_id, task_path)
        # Special writes share fixed indexes, so one call may hold two writes of one key:
        # like the Postgres saver, an insert keeps the first, a replacement the last.
        position: dict[int, int] = {}
        for pos, r in enumerate(records):
            if replace or r.idx not in position:
                position[r.idx] = pos
        records = [records[pos] for pos in sorted(position.values())]
        pk = thread_pk(key.tenant, key.thread)
        sks = [write_sk(key.ns, checkpoint_id, task_id, r.idx) for r in records]
        what = f"{len(records)} writes of task {task_id!r} on thread {key.thread!r}"
        exp = self._expiry(key.tenant)

        def build(now: float) -> list[list[dict[str, Any]]]:
            stamp = self._stamp(exp, now)
            groups = []
            for r, sk in zip(records, sks, strict=True):
                base = {
                    "pk": S(pk),
                    "sk": S(sk),
                    "ch": S(r.channel),
                    "tp": S(r.task_path),
                    "t": S(r.sealed.type),
                    "ts": N(int(now)),
                }
                item, chunks = with_payloads(base, {"v": r.sealed.data}, stamp)
                # the write first: its condition decides; its chunks ride along
                groups.append(
                    [self._put_action(item, insert_only=not replace)]
                    + [self._put_action(c) for c in chunks]
                )
            return groups

        yield from self._write_groups(pk, exp, build, not replace, what, whole_limit=False)
        return None

    # ---- reads -------------------------------------------------------------------

    @operation
    def get_tuple(self, key: ThreadKey, checkpoint_id: str | None) -> Generator[Any, Any, Any]:
        """The latest (or the given) checkpoint of a thread namespace.

        One Query (ConsistentRead) returns the pointer with its writes and
        chunks; one BatchGetItem fetches the blobs it references (and the
        thread's head when it carries a TTL).
        """
        pk = thread_pk(key.tenant, key.thread)
        now = self.now()
        found: _Group | None = None
        groups: dict[str, _Group] = {}
        if checkpoint_id:
            items = yield from self._query_all(pk, pointer_sk(key.ns, str(checkpoint_id)))
            group = _Group(pk, key.ns, str(checkpoint_id))
            for item in items:
                if _is_live(item, now):
                    group.add(parse_checkpoint_sk(item["sk"]["S"]), item)
            found = group if group.pointer is not None else None
        else:
            params = self._query_params(pk, ns_prefix(key.ns))
            params["ScanIndexForward"] = False
            params["Limit"] = self.get_page_items
            while found is None:
                resp = yield from self._call("query", params)
                for item in resp.get("Items") or []:
                    if not _is_live(item, now):
                        continue
                    ik = parse_checkpoint_sk(item["sk"]["S"])
                    group = groups.setdefault(
                        ik.checkpoint_id, _Group(pk, key.ns, ik.checkpoint_id)
                    )
                    group.add(ik, item)
                    if found is not None and ik.kind == "pointer":
                        break  # the parent's group is complete too
                    if found is None and ik.kind == "pointer":
                        found = group
                last = resp.get("LastEvaluatedKey")
                if found is not None or not last:
                    break
                params = {**params, "ExclusiveStartKey": last, "Limit": 200}
        if found is None:
            return None
        known = {(pk, key.ns, g.checkpoint_id): g for g in groups.values() if g.pointer}
        loaded = yield from self._load([(key.tenant, found)], key.echo_tenant, now, known)
        return loaded[0] if loaded else None

    def _load(
        self,
        entries: Sequence[tuple[str, _Group]],
        echo_tenant: bool,
        now: float,
        known: dict[tuple[str, str, str], _Group] | None = None,
    ) -> Generator[Any, Any, list[Any]]:
        """Decode complete groups: fetch their blobs (and heads) in one BatchGetItem.

        ``known`` holds other groups read alongside, by (pk, ns, checkpoint id):
        where an old-format checkpoint finds its parent's pending sends.
        """
        keys: list[tuple[str, str]] = []
        for _tenant, g in entries:
            assert g.pointer is not None
            if TTL_ATTRIBUTE in g.pointer or HEADED in g.pointer:
                keys.append((g.pk, HEAD_SK))
            for channel, version, n in g.refs():
                bsk = blob_sk(g.ns, channel, version)
                keys.append((g.pk, bsk))
                keys.extend((g.pk, chunk_sk(bsk, "d", i)) for i in range(max(n, 0)))
        got = (yield from self._batch_get(keys)) if keys else {}
        # blobs written before the checkpoint that referenced them: chunks unknown until now
        missing = [
            (pk, chunk_sk(sk, "d", i))
            for (pk, sk), item in list(got.items())
            if sk.startswith("b#")
            for i in range(chunk_count(item, "d"))
            if (pk, chunk_sk(sk, "d", i)) not in got
        ]
        if missing:
            got.update((yield from self._batch_get(missing)))
        out = []
        for tenant, g in entries:
            assert g.pointer is not None
            if TTL_ATTRIBUTE in g.pointer or HEADED in g.pointer:
                head = got.get((g.pk, HEAD_SK))
                if head is None or not head_live(head, now):
                    continue  # the thread expired or is being deleted
            parent_sends: list[tuple[str, str, int, Sealed]] = []
            parent = _str(g.pointer, "p")
            if (_num(g.pointer, "fv", 1) or 1) < 4 and parent:
                parent_sends = yield from self._parent_sends(g, parent, now, known or {})
            stored = self._stored(g, got, now, parent_sends)
            _t, thread = split_pk(g.pk)
            out.append(self.codec.decode(ThreadKey(tenant, thread, g.ns, echo_tenant), stored))
        return out

    def _parent_sends(
        self, g: _Group, parent: str, now: float, known: dict[tuple[str, str, str], _Group]
    ) -> Generator[Any, Any, list[tuple[str, str, int, Sealed]]]:
        """Pending sends of a pre-format-4 checkpoint: the parent's TASKS writes.

        The parent's items sort right after the checkpoint's, so the read that
        found the checkpoint has usually read them too (``known``: groups whose
        pointer was read, hence all their writes); otherwise one more Query.
        """
        pg = known.get((g.pk, g.ns, parent))
        if pg is None or pg.pointer is None:
            items = yield from self._query_all(g.pk, pointer_sk(g.ns, parent) + "w#")
            pg = _Group(g.pk, g.ns, parent)
            for item in items:
                if _is_live(item, now):
                    pg.add(parse_checkpoint_sk(item["sk"]["S"]), item)
        sends = []
        for (task_id, idx), item in pg.writes.items():
            if _str(item, "ch") != TASKS:
                continue
            data = read_payload(item, "v", pg.write_chunks.get((task_id, idx), {}), "write")
            sends.append(
                (
                    task_id,
                    _str(item, "tp", "") or "",
                    idx,
                    Sealed(_str(item, "t") or "", data or b""),
                )
            )
        return sends

    def _stored(
        self,
        g: _Group,
        got: dict[tuple[str, str], dict[str, Any]],
        now: float,
        parent_sends: list[tuple[str, str, int, Sealed]],
    ) -> StoredCheckpoint:
        p = g.pointer
        assert p is not None
        what = f"checkpoint {g.checkpoint_id} of thread {split_pk(g.pk)[1]!r}"
        body = read_payload(p, "b", g.chunks.get("b", {}), what)
        meta = read_payload(p, "m", g.chunks.get("m", {}), what)
        if body is None or meta is None:
            raise CorruptRecordError(f"{what} has no body or metadata")
        blobs: list[tuple[str, str, Sealed | None]] = []
        for channel, version, _n in g.refs():
            bsk = blob_sk(g.ns, channel, version)
            item = got.get((g.pk, bsk))
            if item is None or not _is_live(item, now):
                continue
            count = chunk_count(item, "d")
            chunks = {}
            for i in range(count):
                c = got.get((g.pk, chunk_sk(bsk, "d", i)))
                if c is not None:
                    chunks[i] = c["d"]["B"]
            data = read_payload(item, "d", chunks, f"value of channel {channel!r} in {what}")
            type_ = _str(item, "t") or "empty"
            blobs.append(
                (
                    channel,
                    version,
                    None if data is None and type_ == "empty" else Sealed(type_, data or b""),
                )
            )
        writes = []
        for (task_id, idx), item in g.writes.items():
            data = read_payload(
                item, "v", g.write_chunks.get((task_id, idx), {}), f"write of task {task_id!r}"
            )
            writes.append(
                (
                    task_id,
                    _str(item, "tp", "") or "",
                    idx,
                    _str(item, "ch") or "",
                    Sealed(_str(item, "t") or "", data or b""),
                )
            )
        return StoredCheckpoint(
            thread=split_pk(g.pk)[1],
            ns=g.ns,
            checkpoint_id=g.checkpoint_id,
            parent_checkpoint_id=_str(p, "p"),
            body=Sealed(_str(p, "bt") or "", body),
            metadata=Sealed(_str(p, "mt") or "", meta),
            blobs=blobs,
            writes=writes,
            parent_sends=parent_sends,
            metadata_index=g.metadata_index(),
        )

    def _list_namespace(
        self,
        tenant: str,
        thread: str,
        ns: str,
        checkpoint_id: str | None,
        before_id: str | None,
        limit: int | None,
        echo_tenant: bool,
        keep: Callable[[_Group], bool],
        now: float,
    ) -> Generator[Any, Any, None]:
        pk = thread_pk(tenant, thread)
        if checkpoint_id:
            params = self._query_params(pk, pointer_sk(ns, checkpoint_id))
        elif before_id:
            # everything of this namespace strictly older than before_id:
            # escaped ids sort above '"', so '<prefix><before>"' bounds them
            params = self._query_params(pk, None)
            params["KeyConditionExpression"] += " AND #sk BETWEEN :lo AND :hi"
            params["ExpressionAttributeNames"]["#sk"] = "sk"
            params["ExpressionAttributeValues"][":lo"] = S(ns_prefix(ns))
            params["ExpressionAttributeValues"][":hi"] = S(ns_prefix(ns) + enc(before_id) + '"')
        else:
            params = self._query_params(pk, ns_prefix(ns))
        params["ScanIndexForward"] = False
        remaining = limit
        page = self.list_page_items
        if remaining is not None:
            page = min(page, max(8, remaining * 4))
        params["Limit"] = page
        pending: dict[str, _Group] = {}
        while True:
            resp = yield from self._call("query", params)
            complete: list[tuple[str, _Group]] = []
            read: dict[tuple[str, str, str], _Group] = {}  # every group completed here
            for item in resp.get("Items") or []:
                if not _is_live(item, now):
                    continue
                ik = parse_checkpoint_sk(item["sk"]["S"])
                group = pending.setdefault(ik.checkpoint_id, _Group(pk, ns, ik.checkpoint_id))
                group.add(ik, item)
                if ik.kind == "pointer":
                    pending.clear()  # newer ids without a pointer are orphan writes
                    read[(pk, ns, group.checkpoint_id)] = group
                    if keep(group):
                        complete.append((tenant, group))
            if remaining is not None:
                complete = complete[:remaining]
            if complete:
                for tup in (yield from self._load(complete, echo_tenant, now, read)):
                    yield Emit(tup)
                    if remaining is not None:
                        remaining -= 1
                if remaining is not None and remaining <= 0:
                    return None
            last = resp.get("LastEvaluatedKey")
            if not last:
                return None
            params = {**params, "ExclusiveStartKey": last, "Limit": self.list_page_items}

    def _scan_tenant(
        self, tenant: str, sk_prefix: str, projection: Sequence[str] | None = None
    ) -> Generator[Any, Any, list[dict[str, Any]]]:
        """Every item of a tenant under a sort-key prefix: a consistent, paged Scan."""
        params: dict[str, Any] = {
            "TableName": self.table,
            "ConsistentRead": True,
            "FilterExpression": "begins_with(#pk, :t) AND begins_with(#sk, :s)",
            "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"},
            "ExpressionAttributeValues": {":t": S(tenant_prefix(tenant)), ":s": S(sk_prefix)},
        }
        if projection:
            names = {f"#a{i}": name for i, name in enumerate(projection)}
            params["ProjectionExpression"] = ", ".join(names)
            params["ExpressionAttributeNames"].update(names)
        return (yield from self._scan_pages(params))

    def _scan_pages(self, params: dict[str, Any]) -> Generator[Any, Any, list[dict[str, Any]]]:
        """The items of a Scan (``params`` as for ``scan``), every page."""
        items: list[dict[str, Any]] = []
        while True:
            resp = yield from self._call("scan", params)
            items.extend(resp.get("Items") or [])
            last = resp.get("LastEvaluatedKey")
            if not last:
                return items
            params = {**params, "ExclusiveStartKey": last}

    # ---- deletes, copies, pruning -------------------------------------------------

    @operation
    def delete_thread(self, tenant: str, thread_id: str) -> Generator[Any, Any, None]:
        """Delete every item of one thread (all namespaces)."""
        yield from self._delete_partition(thread_pk(tenant, thread_id))
        return None

    def _delete_partition(self, pk: str) -> Generator[Any, Any, None]:
        items = yield from self._query_all(pk, None, ("pk", "sk"))
        keys = [i["sk"]["S"] for i in items]
        yield from self._delete_keys(pk, keys)
        return None

    def _delete_keys(self, pk: str, sks: Iterable[str]) -> Generator[Any, Any, None]:
        """Delete items: checkpoint pointers first (readers stop seeing them at once),
        then writes, chunks and blobs, the head last."""

        def rank(sk: str) -> int:
            if sk == HEAD_SK:
                return 3
            if is_pointer_sk(sk):
                return 0
            return 2 if sk.startswith("b#") else 1

        ordered = sorted(dict.fromkeys(sks), key=rank)
        yield from self._batch_write(
            [{"DeleteRequest": {"Key": {"pk": S(pk), "sk": S(sk)}}} for sk in ordered]
        )
        return None

    @operation
    def delete_for_runs(self, tenant: str, run_ids: Sequence[str]) -> Generator[Any, Any, int]:
        """Delete the checkpoints (and their writes) made by the given runs.

        A consistent Scan of the tenant's checkpoint items (DynamoDB has no
        index by run without a GSI); returns how many checkpoints went.
        """
        ids = {str(r) for r in run_ids}
        if not ids:
            return 0
        items = yield from self._scan_tenant(tenant, "c#", ("pk", "sk", "r"))
        doomed: set[tuple[str, str]] = set()
        for item in items:
            sk = item["sk"]["S"]
            if _str(item, "r") in ids and parse_checkpoint_sk(sk).kind == "pointer":
                doomed.add((item["pk"]["S"], sk))
        by_pk: dict[str, list[str]] = {}
        for item in items:
            pk, sk = item["pk"]["S"], item["sk"]["S"]
            ik = parse_checkpoint_sk(sk)
            if (pk, pointer_sk(ik.ns, ik.checkpoint_id)) in doomed:
                by_pk.setdefault(pk, []).append(sk)
        for pk, sks in by_pk.items():
            yield from self._delete_keys(pk, sks)
        return len(doomed)

    @operation
    def copy_thread(self, tenant: str, source: str, target: str) -> Generator[Any, Any, None]:
        """Copy every checkpoint, blob, write and effect-journal entry of a thread to
        another thread id (entries the target has already are kept)."""
        if source == target:
            raise InvalidInputError("copy_thread: source and target thread ids are the same")
        src, dst = thread_pk(tenant, source), thread_pk(tenant, target)
        items = yield from self._query_all(src)
        now = self.now()
        head = next((i for i in items if i["sk"]["S"] == HEAD_SK), None)
        if head is not None and not head_live(head, now):
            return None  # the source thread expired or is being deleted
        exp = self._expiry(tenant)
        stamp = self._stamp(exp, now)
        copies = []
        for item in items:
            if item["sk"]["S"] == HEAD_SK or not _is_live(item, now):
                continue
            copy = {k: v for k, v in item.items() if k not in (TTL_ATTRIBUTE, HEADED)}
            copy.update(stamp)
            copy["pk"] = S(dst)
            copies.append(copy)
        if not copies:
            return None
        if exp is not None:
            yield from self._call(
                "put_item", {"TableName": self.table, "Item": self._head_item(dst, now, exp)}
            )
        entries = [c for c in copies if is_effect_sk(c["sk"]["S"])]
        copies = [c for c in copies if not is_effect_sk(c["sk"]["S"])]
        if entries:
            yield from self._copy_effects(dst, exp, entries, target)
        # payloads first, checkpoint pointers last
        copies.sort(key=lambda i: is_pointer_sk(i["sk"]["S"]))
        yield from self._batch_write([{"PutRequest": {"Item": c}} for c in copies])
        return None

    @operation
    def prune(
        self, tenant: str, thread_ids: Sequence[str], strategy: str
    ) -> Generator[Any, Any, None]:
        """Prune threads: ``keep_latest`` per namespace, or ``delete`` everything.

        ``keep_latest`` keeps each namespace's latest checkpoint and what it
        needs (:func:`trim_plan` with ``keep=1``: a DeltaChannel value's
        ancestors included, so the thread still resumes).
        """
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(
                f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'"
            )
        thread_ids = [str(t) for t in thread_ids]
        if strategy == "delete":
            for thread_id in thread_ids:
                yield from self._delete_partition(thread_pk(tenant, thread_id))
            return None
        for thread_id in thread_ids:
            pk = thread_pk(tenant, thread_id)
            items = yield from self._query_all(
                pk, None, ("pk", "sk", "mi", "refs", "fv", "p", "ch")
            )
            yield from self._delete_keys(pk, [i["sk"]["S"] for i in trim_plan(items, 1)])
        return None

    @operation
    def prune_expired(
        self, request: PruneRequest, policy: Callable[[str], Retention | None] | None
    ) -> Generator[Any, Any, None]:
        """The pruner: remove (or trim) the threads retention says have expired.

        Emits a ``PruneProgress`` after each batch of threads and, last, one
        ``PruneReport``. See :class:`~langgraph_durable.dynamodb._prune.Pruner`.

        Args:
            request: The run (policy override, tenant, dry run, clock, budget, batch).
            policy: The policy of a tenant; None decides by each thread's
                stored expiry (its head's ``live_until`` / ``dies_at``).
        """
        from ._prune import Pruner

        yield from Pruner(self, request, policy).run()
        return None

    @operation
    def list(
        self,
        tenant: str,
        thread: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        filter: dict[str, Any] | None,
        before_id: str | None,
        limit: int | None,
        echo_tenant: bool,
    ) -> Generator[Any, Any, None]:
        """Stream matching checkpoints newest first.

        One namespace of one thread streams page by page (a Query per page,
        newest first, and one BatchGetItem per page for the blobs). Without a
        namespace the thread is read whole and sorted; without a thread the
        tenant's checkpoints come from a Scan of the table (an admin
        operation: it reads the whole table).
        """
        if limit == 0:  # the saver base has checked limit and filter
            return None
        wanted = normalize_filter(filter)
        now = self.now()

        def keep(g: _Group) -> bool:
            if checkpoint_id and g.checkpoint_id != checkpoint_id:
                return False
            if before_id and not g.checkpoint_id < before_id:
                return False
            return metadata_matches(g.metadata_index(), wanted)

        if thread is not None and ns is not None:
            yield from self._list_namespace(
                tenant, thread, ns, checkpoint_id, before_id, limit, echo_tenant, keep, now
            )
            return None
        # Across namespaces or threads: gather every complete checkpoint, then sort.
        if thread is not None:
            pk = thread_pk(tenant, thread)
            items = yield from self._query_all(pk, "c#")
        else:
            items = yield from self._scan_tenant(tenant, "c#")
        groups: dict[tuple[str, str, str], _Group] = {}
        for item in items:
            if not _is_live(item, now):
                continue
            ik = parse_checkpoint_sk(item["sk"]["S"])
            pk = item["pk"]["S"]
            group = groups.setdefault(
                (pk, ik.ns, ik.checkpoint_id), _Group(pk, ik.ns, ik.checkpoint_id)
            )
            group.add(ik, item)
        complete = sorted(
            ((tenant, g) for g in groups.values() if g.pointer is not None and keep(g)),
            key=_sort_key_desc,
            reverse=True,
        )
        remaining = limit
        batch = max(1, min(self.list_page_items, 50))
        for start in range(0, len(complete), batch):
            part = complete[start : start + batch]
            if remaining is not None:
                part = part[:remaining]
            for tup in (yield from self._load(part, echo_tenant, now, groups)):
                yield Emit(tup)
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return None
        return None

    # ---- data keys (envelope encryption) ----------------------------------------

    @operation
    def data_keys(self, tenant: str) -> Generator[Any, Any, builtins.list[StoredDataKey]]:
        """Every stored data-key version of a tenant, oldest first, shredded ones included.

        A consistent Query of the tenant's key partition, all pages.
        """
        items = yield from self._query_all(data_keys_pk(tenant))
        return [stored_data_key(item) for item in items]

    @operation
    def add_data_key(self, tenant: str, key: StoredDataKey) -> Generator[Any, Any, bool]:
        """Store a new data-key version: a PutItem on condition it is not stored yet.

        Returns:
            False, writing nothing, when that version is already stored.
        """
        item = {
            "pk": S(data_keys_pk(tenant)),
            "sk": S(data_key_sk(key.version)),
            "key_id": S(key.key_id),
            "created": N(key.created),
        }
        if key.wrapped is not None:
            item["wrapped"] = B(key.wrapped)
        params = {**self._put_action(item, insert_only=True)["Put"]}
        try:
            yield from self._call("put_item", params)
        except ConditionFailedError:
            return False
        return True

    @operation
    def rewrap_data_key(
        self, tenant: str, version: int, old_wrapped: bytes, key_id: str, wrapped: bytes
    ) -> Generator[Any, Any, bool]:
        """Replace one version's wrapped key if it still is ``old_wrapped``.

        Returns:
            Whether it was replaced (False: rewrapped or shredded meanwhile).
        """
        params = self._data_key_update(
            tenant,
            version,
            "SET #w = :w, #k = :k, #t = :now",
            "#w = :old",
            {":w": B(wrapped), ":k": S(key_id), ":old": B(old_wrapped)},
            {"#t": "rotated_at"},
        )
        try:
            yield from self._call("update_item", params)
        except ConditionFailedError:
            return False
        return True

    @operation
    def shred_data_keys(self, tenant: str) -> Generator[Any, Any, int]:
        """Remove the wrapped key of every version of a tenant (kept as tombstones).

        Returns:
            How many versions still had their wrapped key.
        """
        items = yield from self._query_all(data_keys_pk(tenant), None, ("sk", "wrapped"))
        shredded = 0
        for item in items:
            if "wrapped" not in item:
                continue
            params = self._data_key_update(
                tenant,
                int(item["sk"]["S"]),
                "SET #k = :k, #t = :now REMOVE #w",
                "attribute_exists(#w)",
                {":k": S("")},
                {"#t": "shredded_at"},
            )
            try:
                yield from self._call("update_item", params)
            except ConditionFailedError:
                continue  # shredded meanwhile by another call
            shredded += 1
        return shredded

    @operation
    def data_key_tenants(self) -> Generator[Any, Any, builtins.list[str]]:
        """Every tenant with stored data keys (shredded ones included).

        A consistent, paged Scan of the table for the ``<tenant>##keys``
        partitions (an admin operation, for ``rotate_keys()`` without a
        tenant). A registry partition would spare the Scan, but every
        tenant's first data key would then write outside the tenant's
        ``<tenant>#`` key prefix, which ``dynamodb:LeadingKeys`` policies
        confine a tenant's role to, and any role allowed to write it could
        read every tenant's name.
        """
        items = yield from self._scan_pages(
            {
                "TableName": self.table,
                "ConsistentRead": True,
                "FilterExpression": "contains(#pk, :mark)",
                "ProjectionExpression": "#pk",
                "ExpressionAttributeNames": {"#pk": "pk"},
                "ExpressionAttributeValues": {":mark": S(DATA_KEYS_MARK)},
            }
        )
        pks = {item["pk"]["S"] for item in items}
        return sorted(data_keys_tenant(pk) for pk in pks if pk.endswith(DATA_KEYS_MARK))

    def _data_key_update(
        self,
        tenant: str,
        version: int,
        update: str,
        condition: str,
        values: dict[str, Any],
        names: dict[str, str],
    ) -> dict[str, Any]:
        """UpdateItem parameters for one data-key version (``:now``, ``#w``, ``#k`` bound)."""
        return {
            "TableName": self.table,
            "Key": {"pk": S(data_keys_pk(tenant)), "sk": S(data_key_sk(version))},
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#w": "wrapped", "#k": "key_id", **names},
            "ExpressionAttributeValues": {":now": N(self.now()), **values},
        }

    # ---- effect journal ----------------------------------------------------------
    #
    # One item per entry in its thread's partition, sort key ``e#<effect id>``
    # (no Query of checkpoints, blobs or writes reads it: they are under ``c#``
    # and ``b#``). Attributes: ``state`` ("claimed" / "done"), ``token`` and
    # ``attempt`` (N), ``lease_until`` and ``created`` (N, Unix seconds), the
    # sealed request ``req_t`` (S) / ``req`` (B) and, once done, ``outcome``
    # (S), the sealed result ``res_t`` (S) / ``res`` (B) and ``completed`` (N);
    # ``expires_at`` when the saver has a TTL. An entry whose ``expires_at``
    # has passed counts as absent (DynamoDB deletes expired items lazily).
    # Leases compare with the caller's ``now``; TTL stamps and expiry with the
    # saver's clock, as every other item's.

    def _copy_effects(
        self,
        pk: str,
        exp: Expiry | None,
        entries: builtins.list[dict[str, Any]],
        target: str,
    ) -> Generator[Any, Any, None]:
        """Insert copied entries where the target has none (conditional Puts, in
        transactions of up to 100; an entry already there is kept)."""

        def build(now: float) -> builtins.list[builtins.list[dict[str, Any]]]:
            stamp = self._stamp(exp, now)
            return [[self._put_action({**e, **stamp}, insert_only=True)] for e in entries]

        what = f"{len(entries)} effect-journal entries of thread {target!r}"
        yield from self._write_groups(pk, exp, build, True, what, whole_limit=False)
        return None

    @operation
    def effect_claim(
        self,
        tenant: str,
        thread: str,
        effect_id: str,
        request: Sealed,
        lease_until: float,
        now: float,
        takeover: bool,
    ) -> Generator[Any, Any, StoredEffect]:
        """Claim an effect, or return its entry: one UpdateItem.

        The update inserts a fresh entry (token and attempt 1), or, with
        ``takeover``, takes over a claimed entry whose lease ended (token and
        attempt +1, request and creation time kept). When its condition
        fails, DynamoDB returns the stored entry in the same call. Only an
        entry that expired by TTL but is still stored takes a second call: a
        PutItem replacing it with a fresh claim.
        """
        pk, sk = thread_pk(tenant, thread), effect_sk(effect_id)
        key = {"pk": S(pk), "sk": S(sk)}
        clock = self.now()
        _check_effect_size(request, None, effect_id)
        names = {
            "#sk": "sk",
            "#st": "state",
            "#tok": "token",
            "#att": "attempt",
            "#lu": "lease_until",
            "#qt": "req_t",
            "#q": "req",
            "#cr": "created",
        }
        values = {
            ":claimed": S(CLAIMED),
            ":zero": N(0),
            ":one": N(1),
            ":lu": N(lease_until),
            ":qt": S(request.type),
            ":q": B(request.data),
            ":now": N(now),
        }
        update = (
            "SET #st = :claimed, #tok = if_not_exists(#tok, :zero) + :one, "
            "#att = if_not_exists(#att, :zero) + :one, #lu = :lu, "
            "#qt = if_not_exists(#qt, :qt), #q = if_not_exists(#q, :q), "
            "#cr = if_not_exists(#cr, :now)"
        )
        stamp = self._stamp(self._expiry(tenant), clock)
        if stamp:
            update += ", #ex = :ex"
            names["#ex"] = TTL_ATTRIBUTE
            values[":ex"] = stamp[TTL_ATTRIBUTE]
        condition = "attribute_not_exists(#sk)"
        if takeover:
            # an entry expired by TTL is not taken over (token and attempt would
            # continue from it): it is replaced below
            condition += (
                " OR (#st = :claimed AND #lu <= :now"
                " AND (attribute_not_exists(#ex) OR #ex > :clock))"
            )
            names["#ex"] = TTL_ATTRIBUTE
            values[":clock"] = N(clock)
        update_params = {
            "TableName": self.table,
            "Key": key,
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        fresh = {
            **key,
            "state": S(CLAIMED),
            "token": N(1),
            "attempt": N(1),
            "lease_until": N(lease_until),
            "req_t": S(request.type),
            "req": B(request.data),
            "created": N(now),
            **stamp,
        }
        put_params = {
            "TableName": self.table,
            "Item": fresh,
            "ConditionExpression": "attribute_not_exists(#sk) OR #ex <= :clock",
            "ExpressionAttributeNames": {"#sk": "sk", "#ex": TTL_ATTRIBUTE},
            "ExpressionAttributeValues": {":clock": N(clock)},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        replace = False
        for _ in range(5):
            try:
                if replace:
                    yield from self._call("put_item", put_params)
                    return stored_effect(fresh, won=True)
                resp = yield from self._call("update_item", update_params)
                return stored_effect(resp["Attributes"], won=True)
            except ConditionFailedError as exc:
                old = exc.item
            if old is None:  # a server that does not return the stored item
                got = yield from self._call(
                    "get_item", {"TableName": self.table, "Key": key, "ConsistentRead": True}
                )
                old = got.get("Item")
            if old is None:
                replace = False  # deleted meanwhile: claim again
                continue
            if _is_live(old, clock):
                return stored_effect(old, won=False)
            replace = True  # expired by TTL, not deleted yet: replace it
        raise StorageError(
            f"could not claim effect {effect_id!r} of thread {thread!r}: "
            "its entry kept changing underneath"
        )

    @operation
    def effect_complete(
        self,
        tenant: str,
        thread: str,
        effect_id: str,
        token: int,
        outcome: str,
        result: Sealed,
        now: float,
    ) -> Generator[Any, Any, bool]:
        """Record a claimed effect's result under its fencing token: one UpdateItem.

        Returns:
            False, changing nothing, when the entry is gone, done, or holds
            another token.
        """
        clock = self.now()
        _check_effect_size(None, result, effect_id)
        names = {
            "#st": "state",
            "#tok": "token",
            "#oc": "outcome",
            "#rt": "res_t",
            "#r": "res",
            "#ct": "completed",
            "#ex": TTL_ATTRIBUTE,
        }
        values = {
            ":done": S(DONE),
            ":claimed": S(CLAIMED),
            ":tok": N(int(token)),
            ":oc": S(outcome),
            ":rt": S(result.type),
            ":r": B(result.data),
            ":now": N(now),
            ":clock": N(clock),
        }
        update = "SET #st = :done, #oc = :oc, #rt = :rt, #r = :r, #ct = :now"
        stamp = self._stamp(self._expiry(tenant), clock)
        if stamp:
            update += ", #ex = :ex"
            values[":ex"] = stamp[TTL_ATTRIBUTE]
        params = {
            "TableName": self.table,
            "Key": {"pk": S(thread_pk(tenant, thread)), "sk": S(effect_sk(effect_id))},
            "UpdateExpression": update,
            "ConditionExpression": (
                "#st = :claimed AND #tok = :tok AND (attribute_not_exists(#ex) OR #ex > :clock)"
            ),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        try:
            yield from self._call("update_item", params)
        except ConditionFailedError:
            return False
        return True

    @operation
    def effect_delete(
        self, tenant: str, thread: str, effect_id: str, token: int | None
    ) -> Generator[Any, Any, bool]:
        """Delete an entry: one DeleteItem, unconditional for ``token`` None, else
        only while it is claimed under ``token``.

        Returns:
            Whether an entry was deleted.
        """
        params: dict[str, Any] = {
            "TableName": self.table,
            "Key": {"pk": S(thread_pk(tenant, thread)), "sk": S(effect_sk(effect_id))},
            "ReturnValues": "ALL_OLD",
        }
        if token is not None:
            params["ConditionExpression"] = "#st = :claimed AND #tok = :tok"
            params["ExpressionAttributeNames"] = {"#st": "state", "#tok": "token"}
            params["ExpressionAttributeValues"] = {":claimed": S(CLAIMED), ":tok": N(int(token))}
        try:
            resp = yield from self._call("delete_item", params)
        except ConditionFailedError:
            return False
        return bool(resp.get("Attributes"))

    @operation
    def effect_get(
        self, tenant: str, thread: str, effect_id: str
    ) -> Generator[Any, Any, StoredEffect | None]:
        """One live entry, or None: one consistent GetItem."""
        key = {"pk": S(thread_pk(tenant, thread)), "sk": S(effect_sk(effect_id))}
        resp = yield from self._call(
            "get_item", {"TableName": self.table, "Key": key, "ConsistentRead": True}
        )
        item = resp.get("Item")
        if not item or not _is_live(item, self.now()):
            return None
        return stored_effect(item, won=False)

    @operation
    def effect_list(
        self, tenant: str, thread: str
    ) -> Generator[Any, Any, builtins.list[StoredEffect]]:
        """Every live entry of a thread: a consistent Query, all pages.

        The Query's range ``e#`` .. ``h`` holds the entries and the thread's
        head: a thread that expired by TTL lists none.
        """
        params = self._query_params(thread_pk(tenant, thread), None)
        params["KeyConditionExpression"] += " AND #sk BETWEEN :lo AND :hi"
        params["ExpressionAttributeNames"]["#sk"] = "sk"
        params["ExpressionAttributeValues"][":lo"] = S(EFFECT_PREFIX)
        params["ExpressionAttributeValues"][":hi"] = S(HEAD_SK)
        items: builtins.list[dict[str, Any]] = []
        while True:
            resp = yield from self._call("query", params)
            items.extend(resp.get("Items") or [])
            last = resp.get("LastEvaluatedKey")
            if not last:
                break
            params = {**params, "ExclusiveStartKey": last}
        clock = self.now()
        head = next((i for i in items if i["sk"]["S"] == HEAD_SK), None)
        if head is not None and not head_live(head, clock):
            return []  # the thread expired or is being deleted
        return [
            stored_effect(item, won=False)
            for item in items
            if item["sk"]["S"].startswith(EFFECT_PREFIX) and _is_live(item, clock)
        ]

    @operation
    def effect_restore(
        self, tenant: str, thread: str, effect: StoredEffect
    ) -> Generator[Any, Any, None]:
        """Write an entry exactly as given (insert or overwrite): one PutItem."""
        _check_effect_size(effect.request, effect.result, effect.effect_id)
        stamp = self._stamp(self._expiry(tenant), self.now())
        item = effect_item(thread_pk(tenant, thread), effect, stamp)
        yield from self._call("put_item", {"TableName": self.table, "Item": item})
        return None


#: Sort-key prefix of the effect-journal entries of a thread.
EFFECT_PREFIX = "e#"


def effect_sk(effect_id: str) -> str:
    """The sort key of one effect-journal entry."""
    return _check_sk(EFFECT_PREFIX + enc(effect_id))


def is_effect_sk(sk: str) -> bool:
    """Whether a sort key is an effect-journal entry's."""
    return sk.startswith(EFFECT_PREFIX)


def effect_item(pk: str, effect: StoredEffect, stamp: dict[str, Any]) -> dict[str, Any]:
    """The item that stores ``effect`` in the partition ``pk``."""
    item = {
        "pk": S(pk),
        "sk": S(effect_sk(effect.effect_id)),
        "state": S(effect.state),
        "token": N(int(effect.token)),
        "attempt": N(int(effect.attempt)),
        "lease_until": N(effect.lease_until),
        "req_t": S(effect.request.type),
        "req": B(effect.request.data),
        "created": N(effect.created),
        **stamp,
    }
    if effect.outcome is not None:
        item["outcome"] = S(effect.outcome)
    if effect.result is not None:
        item["res_t"] = S(effect.result.type)
        item["res"] = B(effect.result.data)
    return item


def stored_effect(item: dict[str, Any], won: bool) -> StoredEffect:
    """The entry one ``e#`` item holds."""
    sk = item["sk"]["S"]
    if not is_effect_sk(sk) or "req" not in item:
        raise CorruptRecordError(f"item {sk!r} is not an effect-journal entry")
    res = item.get("res")
    return StoredEffect(
        effect_id=dec(sk[len(EFFECT_PREFIX) :]),
        state=_str(item, "state", "") or "",
        token=_num(item, "token", 0) or 0,
        attempt=_num(item, "attempt", 0) or 0,
        lease_until=float(item["lease_until"]["N"]) if "lease_until" in item else 0.0,
        request=Sealed(_str(item, "req_t", "") or "", bytes(item["req"]["B"])),
        outcome=_str(item, "outcome"),
        result=None if res is None else Sealed(_str(item, "res_t", "") or "", bytes(res["B"])),
        won=won,
        created=float(item["created"]["N"]) if "created" in item else 0.0,
    )


def _check_effect_size(request: Sealed | None, result: Sealed | None, effect_id: str) -> None:
    """Refuse an entry whose request and result cannot share one item."""
    size = sum(len(s.data) + len(s.type) for s in (request, result) if s is not None)
    if size > ITEM_BUDGET:
        what = "request" if result is None else "result" if request is None else "entry"
        raise InvalidInputError(
            f"the {what} of effect {effect_id!r} needs {size} bytes, more than one DynamoDB "
            f"item holds ({ITEM_LIMIT}, request and result together): return or pass a "
            "reference to large data (store it elsewhere) instead of the data itself"
        )


def action_size(action: dict[str, Any]) -> int:
    """Size of the item one transaction action writes (keys only for others)."""
    ((kind, body),) = action.items()
    if kind == "Put":
        return item_size(body["Item"])
    return item_size(body.get("Key", {})) + 64


def refuse_transaction(size: int, count: int, what: str) -> None:
    """Refuse, before any write, what one DynamoDB transaction cannot hold.

    Raises:
        InvalidInputError: Naming the size, the item count and the limits.
    """
    raise InvalidInputError(
        f"{what} needs {_mb(size)} in {count} items, but one DynamoDB TransactWriteItems "
        f"holds at most {_mb(TRANSACTION_BYTES)} and {TRANSACTION_ITEMS} items (a checkpoint "
        "or a write is stored by one transaction, so readers never see part of it): keep "
        "large values out of the graph state (store them elsewhere and keep a reference)"
    )


def new_token() -> str:
    """A ClientRequestToken: a transaction retried after a timeout is applied once.

    Not ``uuid.uuid4``: applications (and LangGraph's tests) patch it to hand out
    a fixed sequence of ids, which a saver must not consume.
    """
    return secrets.token_hex(16)
