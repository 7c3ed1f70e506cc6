"""Every DynamoDB item and key shape of the saver: sort keys, attributes, sizes.

Pure (no boto3 import, no I/O). The operations that read and write these
items are in the other modules of the package (see ``_ops``).

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
  shared by every checkpoint of the namespace that references the version; a
  delta of a growing list has ``bv``, ``bn`` and ``bc`` too (see ``_deltas``);
* ``e#<effect id>`` one effect-journal entry (see ``_effects``): the claim's
  state, fencing token, attempt and lease, the sealed request and, once done,
  the outcome and the sealed result;
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

A payload too large for its item moves to chunk items (``<name>_n``,
``<name>_len``, ``<name>_h`` on the item: :func:`with_payloads`); with a bucket, a
payload too large for a transaction moves to S3 (``<name>_s3``, ``<name>_len``,
``<name>_h``: see ``_objects``).

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

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any

from .._core.records import StoredDataKey
from ..errors import ConfigurationError, CorruptRecordError, InvalidInputError

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
    """Parse a ``c#`` sort key (see the module docstring).

    Raises:
        CorruptRecordError: ``sk`` is not a key the saver writes (cut short, a
            blank or non-numeric index, a malformed escape).
    """
    try:
        return _parse_checkpoint_sk(sk)
    except (ValueError, IndexError) as exc:
        raise CorruptRecordError(
            f"unexpected sort key {sk!r} in the checkpoint range: {exc}"
        ) from exc


def _parse_checkpoint_sk(sk: str) -> CheckpointItemKey:
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
    if value is None:
        return default
    try:
        return int(float(value["N"]))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise CorruptRecordError(
            f"item {_where(item)}: attribute {name!r} is not a number ({exc!r})"
        ) from exc


def _str(item: dict[str, Any], name: str, default: str | None = None) -> str | None:
    value = item.get(name)
    if value is None:
        return default
    try:
        return str(value["S"])
    except (KeyError, TypeError) as exc:
        raise CorruptRecordError(
            f"item {_where(item)}: attribute {name!r} is not a string ({exc!r})"
        ) from exc


def _bin(item: dict[str, Any], name: str, what: str) -> bytes:
    """Binary attribute ``name`` of ``item``, which must be there.

    Raises:
        CorruptRecordError: It is missing or not binary.
    """
    try:
        return bytes(item[name]["B"])
    except (KeyError, TypeError) as exc:
        raise CorruptRecordError(f"{what} (item {_where(item)}): no binary {name!r}") from exc


def _where(item: dict[str, Any]) -> str:
    """An item's sort key, for an error message."""
    sk = item.get("sk")
    return repr(sk.get("S")) if isinstance(sk, dict) else "?"


def stored_data_key(item: dict[str, Any]) -> StoredDataKey:
    """The data-key version one ``<tenant>##keys`` item holds (``wrapped`` None if shredded)."""
    wrapped = item.get("wrapped")
    created = item.get("created")
    try:
        return StoredDataKey(
            version=int(item["sk"]["S"]),
            key_id=_str(item, "key_id", "") or "",
            wrapped=None if wrapped is None else bytes(wrapped["B"]),
            created=0.0 if created is None else float(created["N"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptRecordError(
            f"stored data-key item {_where(item)} cannot be read: {exc!r}"
        ) from exc


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
    item: dict[str, Any],
    name: str,
    chunks: dict[int, bytes],
    what: str,
    objects: dict[str, bytes] | None = None,
) -> bytes | None:
    """Payload ``name`` of ``item``: inline, reassembled from ``chunks``, or the S3
    object ``objects`` holds for it (``<name>_s3``), checked.

    Returns None when the item has no such payload.

    Raises:
        CorruptRecordError: A chunk or the object is missing, or the length or
            hash differ.
    """
    inline = item.get(name)
    if inline is not None:
        return _bin(item, name, what)
    stored = _str(item, f"{name}_s3")
    if stored is not None:
        data = (objects or {}).get(stored)
        if data is None:
            raise CorruptRecordError(f"{what}: its S3 object {stored!r} is missing")
    else:
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


def payload_matches(item: dict[str, Any], name: str, data: bytes) -> bool:
    """Whether payload ``name`` of a stored item holds exactly ``data``.

    Inline payloads are compared byte for byte; a payload in chunks or in S3
    by the length and SHA-256 its item records (:func:`with_payloads`), so no
    chunk or object is read. A payload the item lacks matches nothing.
    """
    inline = item.get(name)
    if inline is not None:
        return _bin(item, name, "a stored payload") == data
    length, digest = _num(item, f"{name}_len"), _str(item, f"{name}_h")
    if length is None or digest is None:
        return False
    return length == len(data) and digest == hashlib.sha256(data).hexdigest()


def same_checkpoint(
    item: dict[str, Any], body_type: str, body: bytes, metadata_type: str, metadata: bytes
) -> bool:
    """Whether a stored checkpoint (pointer) item holds this body and metadata.

    Checkpoints are append-only: a put of a stored checkpoint id succeeds
    without writing only when this holds (an idempotent retry).
    """
    return (
        _str(item, "bt") == body_type
        and _str(item, "mt") == metadata_type
        and payload_matches(item, "b", body)
        and payload_matches(item, "m", metadata)
    )


# ---- liveness ---------------------------------------------------------------------


def _is_live(item: dict[str, Any], now: float) -> bool:
    expires = _float(item, TTL_ATTRIBUTE)
    return expires is None or expires > now


def _float(item: dict[str, Any] | None, name: str) -> float | None:
    value = None if item is None else item.get(name)
    if value is None:
        return None
    try:
        return float(value["N"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptRecordError(
            f"item {_where(item or {})}: attribute {name!r} is not a number ({exc!r})"
        ) from exc


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


# ---- transactions -------------------------------------------------------------------


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
        "or a write is stored by one transaction, so readers never see part of it): give "
        "the saver an S3 bucket (s3_bucket=...), where a checkpoint's large payloads go, or "
        "keep large values out of the graph state (store them elsewhere and keep a reference)"
    )
