"""S3 offload of checkpoints larger than a transaction: object keys and S3 calls.

With a bucket (``s3_bucket=``), a checkpoint whose items would pass what one
``TransactWriteItems`` holds (4 MB) keeps its largest payloads in S3 objects,
largest first until the rest fits: the objects are written first (one
``PutObject`` each), then the transaction whose items reference them, its
pointer last, so a reader never finds an item whose object is not written yet.
An offloaded payload's item holds, instead of the payload (or its chunks):

* ``<name>_s3`` (S): the object key;
* ``<name>_len`` (N) and ``<name>_h`` (S, SHA-256), checked when it is read.

The same goes for a pending write larger than a transaction (``put_writes``): its
value goes to S3 first, then the transaction of its item.

Object keys, every part percent-encoded (``quote(part, safe="")``)::

    <prefix>tenant=<t>/thread=<th>/ns=<ns>/checkpoint=<id>/<b|m>/<sha256>
    <prefix>tenant=<t>/thread=<th>/ns=<ns>/checkpoint=<id>/channel=<c>/version=<v>/d/<sha256>
    <prefix>tenant=<t>/thread=<th>/ns=<ns>/checkpoint=<id>/task=<task>/idx=<i>/v/<sha256>

the first for the checkpoint's body (``b``) or metadata (``m``), the second for a
channel value that checkpoint wrote, the third for a pending write of one of its
tasks. A key names the one item that may
reference it (the pointer, or the blob of that channel and version) and its
content (same bytes, same key: a retried write rewrites the same object), so
an object is an *orphan* when that item does not reference it: its write
failed or crashed after the ``PutObject``, or its item was deleted by
DynamoDB's TTL or by a process that crashed before deleting the object. The
pruner deletes orphans older than a grace period (``s3_orphan_grace``).

Pure (no boto3 import, no I/O): S3 calls are :class:`~._calls.Call` requests
with ``service="s3"``.
"""

from __future__ import annotations

import datetime
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from ..errors import InvalidInputError, StorageError
from ._calls import ObjectMissingError, OpsBase
from ._items import blob_sk, pointer_sk, thread_pk, write_sk

__all__ = [
    "OBJECT_ATTRIBUTES",
    "S3_SUFFIX",
    "ObjectRef",
    "ObjectOps",
    "object_key",
    "object_keys_of",
    "parse_object_key",
    "retarget",
    "tenant_object_prefix",
    "thread_object_prefix",
]

#: Suffix of the attribute naming an offloaded payload's object (``b_s3``, ...).
S3_SUFFIX = "_s3"
#: Every attribute that may name an object: body, metadata, channel value, write.
OBJECT_ATTRIBUTES = ("b" + S3_SUFFIX, "m" + S3_SUFFIX, "d" + S3_SUFFIX, "v" + S3_SUFFIX)
#: S3's limit on a key's length (UTF-8 bytes).
KEY_LIMIT = 1024
#: Keys per DeleteObjects call (S3's limit).
DELETE_KEYS = 1000


def _q(part: str) -> str:
    return quote(part, safe="")


def thread_object_prefix(prefix: str, tenant: str, thread: str) -> str:
    """The key prefix of every object of one thread."""
    return f"{tenant_object_prefix(prefix, tenant)}thread={_q(thread)}/"


def tenant_object_prefix(prefix: str, tenant: str) -> str:
    """The key prefix of every object of one tenant."""
    return f"{prefix}tenant={_q(tenant)}/"


def object_key(
    prefix: str,
    tenant: str,
    thread: str,
    ns: str,
    checkpoint_id: str,
    name: str,
    digest: str,
    channel: str | None = None,
    version: str | None = None,
    task_id: str | None = None,
    idx: int | None = None,
) -> str:
    """The key of one offloaded payload (see the module docstring).

    Raises:
        InvalidInputError: The key would pass S3's 1,024 bytes.
    """
    key = thread_object_prefix(prefix, tenant, thread)
    key += f"ns={_q(ns)}/checkpoint={_q(checkpoint_id)}/"
    if channel is not None and version is not None:
        key += f"channel={_q(channel)}/version={_q(version)}/"
    elif task_id is not None and idx is not None:
        key += f"task={_q(task_id)}/idx={int(idx)}/"
    key += f"{name}/{digest}"
    if len(key.encode("utf-8")) > KEY_LIMIT:
        raise InvalidInputError(
            f"an S3 key for checkpoint {checkpoint_id!r} of thread {thread!r} would take "
            f"{len(key.encode())} bytes, more than S3 allows ({KEY_LIMIT}): use shorter ids "
            "or a shorter s3_prefix"
        )
    return key


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """What an object key says: whose payload it holds."""

    tenant: str
    thread: str
    ns: str
    checkpoint_id: str
    name: str
    channel: str | None = None
    version: str | None = None
    task_id: str | None = None
    idx: int | None = None

    def item_key(self) -> tuple[str, str]:
        """(pk, sk) of the one item that may reference the object."""
        pk = thread_pk(self.tenant, self.thread)
        if self.channel is not None and self.version is not None:
            return pk, blob_sk(self.ns, self.channel, self.version)
        if self.task_id is not None and self.idx is not None:
            return pk, write_sk(self.ns, self.checkpoint_id, self.task_id, self.idx)
        return pk, pointer_sk(self.ns, self.checkpoint_id)

    @property
    def attribute(self) -> str:
        """The attribute of that item that names the object."""
        return self.name + S3_SUFFIX


def parse_object_key(prefix: str, key: str) -> ObjectRef | None:
    """What an object key under ``prefix`` says, or None for a key the saver never makes."""
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix) :].split("/")
    fields = ("tenant", "thread", "ns", "checkpoint")
    if len(parts) not in (6, 8) or not all(
        p.startswith(f + "=") for p, f in zip(parts, fields, strict=False)
    ):
        return None
    tenant, thread, ns, cid = (unquote(p.split("=", 1)[1]) for p in parts[:4])
    if len(parts) == 6 and parts[4] in ("b", "m"):
        return ObjectRef(tenant, thread, ns, cid, parts[4])
    if len(parts) != 8:
        return None
    first, second = (unquote(p.split("=", 1)[-1]) for p in parts[4:6])
    if parts[4].startswith("channel=") and parts[5].startswith("version=") and parts[6] == "d":
        return ObjectRef(tenant, thread, ns, cid, "d", channel=first, version=second)
    if (
        parts[4].startswith("task=")
        and parts[5].startswith("idx=")
        and parts[6] == "v"
        and second.lstrip("-").isdigit()
    ):
        return ObjectRef(tenant, thread, ns, cid, "v", task_id=first, idx=int(second))
    return None


def retarget(prefix: str, key: str, thread: str) -> str:
    """The key ``key`` would have in another thread of the same tenant (``copy_thread``)."""
    ref = parse_object_key(prefix, key)
    if ref is None:
        raise StorageError(f"S3 key {key!r} is not one this saver made")
    digest = key.rsplit("/", 1)[1]
    return object_key(
        prefix,
        ref.tenant,
        thread,
        ref.ns,
        ref.checkpoint_id,
        ref.name,
        digest,
        ref.channel,
        ref.version,
        ref.task_id,
        ref.idx,
    )


def object_keys_of(item: dict[str, Any]) -> list[str]:
    """The object keys an item references."""
    return [str(item[name]["S"]) for name in OBJECT_ATTRIBUTES if name in item]


class ObjectOps(OpsBase):
    """S3 calls on the saver's bucket (``self.bucket``, keys under ``self.object_prefix``)."""

    def _s3(self, operation: str, params: dict[str, Any]) -> Generator[Any, Any, Any]:
        if self.bucket is None:
            raise StorageError(
                "this checkpoint's payloads are in S3, but the saver has no s3_bucket: "
                "give it the bucket they were written to"
            )
        return (yield from self._call(operation, {"Bucket": self.bucket, **params}, "s3"))

    def _put_object(self, key: str, data: bytes) -> Generator[Any, Any, None]:
        """Write one object (one PutObject)."""
        yield from self._s3("put_object", {"Key": key, "Body": data})
        return None

    def _get_objects(
        self, keys: Iterable[str], cache: dict[str, bytes] | None = None
    ) -> Generator[Any, Any, dict[str, bytes]]:
        """The bytes of objects (one GetObject each); a missing one is left out."""
        out: dict[str, bytes] = {}
        for key in dict.fromkeys(keys):
            if cache is not None and key in cache:
                out[key] = cache[key]
                continue
            try:
                resp = yield from self._s3("get_object", {"Key": key})
            except ObjectMissingError:
                continue
            out[key] = bytes(resp["Body"])
        return out

    def _delete_objects(self, keys: Sequence[str]) -> Generator[Any, Any, None]:
        """Delete objects, 1,000 per DeleteObjects (a missing one is no error)."""
        if not keys or self.bucket is None:
            return None
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), DELETE_KEYS):
            part = unique[start : start + DELETE_KEYS]
            resp = yield from self._s3(
                "delete_objects",
                {"Delete": {"Objects": [{"Key": k} for k in part], "Quiet": True}},
            )
            errors = [e for e in resp.get("Errors") or [] if e.get("Code") != "NoSuchKey"]
            if errors:
                first = errors[0]
                raise StorageError(
                    f"S3 did not delete {len(errors)} objects of bucket {self.bucket!r} "
                    f"({first.get('Code')}: {first.get('Message')}, e.g. {first.get('Key')!r})"
                )
        return None

    def _list_objects(
        self, prefix: str, token: str | None = None
    ) -> Generator[Any, Any, tuple[list[tuple[str, float, int]], str | None]]:
        """One page of the objects under ``prefix``: (key, last modified, size), next token."""
        params: dict[str, Any] = {"Prefix": prefix, "MaxKeys": 1000}
        if token:
            params["ContinuationToken"] = token
        resp = yield from self._s3("list_objects_v2", params)
        out = []
        for obj in resp.get("Contents") or []:
            modified = obj.get("LastModified")
            if isinstance(modified, datetime.datetime):
                when = modified.timestamp()
            else:
                when = float(modified or 0.0)
            out.append((str(obj["Key"]), when, int(obj.get("Size") or 0)))
        more = resp.get("NextContinuationToken") if resp.get("IsTruncated") else None
        return out, more

    def _copy_object(self, source: str, target: str) -> Generator[Any, Any, None]:
        """Copy one object within the bucket (one CopyObject)."""
        yield from self._s3(
            "copy_object", {"Key": target, "CopySource": {"Bucket": self.bucket, "Key": source}}
        )
        return None

    def _orphans(
        self, prefix: str, now: float, dry_run: bool
    ) -> Generator[Any, Any, tuple[int, int]]:
        """Delete the objects under ``prefix`` older than the grace period that no item
        references; (objects, bytes) deleted (or, in a dry run, that would be).

        A ListObjectsV2 per 1,000 objects, a projected BatchGetItem per 100 old
        ones (the items their keys name), a DeleteObjects per page of orphans.
        Keys the saver never makes are left alone.
        """
        if self.bucket is None:
            return 0, 0
        count = size = 0
        token: str | None = None
        while True:
            objects, token = yield from self._list_objects(prefix, token)
            old: dict[str, tuple[ObjectRef, int]] = {}
            for key, when, nbytes in objects:
                ref = parse_object_key(self.object_prefix, key)
                if ref is not None and when < now - self.orphan_grace:
                    old[key] = (ref, nbytes)
            items = yield from self._batch_get(
                (ref.item_key() for ref, _n in old.values()), OBJECT_ATTRIBUTES
            )
            doomed = []
            for key, (ref, nbytes) in old.items():
                item = items.get(ref.item_key())
                if item is None or (item.get(ref.attribute) or {}).get("S") != key:
                    doomed.append(key)
                    size += nbytes
            count += len(doomed)
            if not dry_run:
                yield from self._delete_objects(doomed)
            if not token:
                return count, size
