"""The requests the operations yield, the errors they see, and the calls with retries.

Pure (no boto3 import, no I/O, no clock but the injected ``now``): every
saver operation is a generator that yields :class:`Call` requests (a
low-level boto3 client method and its parameters) or :class:`Sleep` requests
(a backoff pause) and receives their results (see
``langgraph_durable._core.sansio``). :class:`OpsBase` holds an operation set's
state and the calls every group of operations shares; every retry decision
(throttling, unprocessed batch items, transaction conflicts) is made here, once.
"""

from __future__ import annotations

import datetime
import random
import secrets
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .._core.codec import CheckpointCodec
from .._core.retention import Retention
from .._core.sansio import Sleep
from ..errors import SchemaError, StorageError, StorageUnavailableError
from ._deltas import ChainMemory
from ._items import (
    BATCH_GET_KEYS,
    BATCH_WRITE_ITEMS,
    HEAD_SK,
    TRANSACTION_ITEMS,
    S,
    is_pointer_sk,
    tenant_prefix,
    validate_table_name,
)

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
        "SlowDown",  # S3
    }
)
#: Cancellation reasons of a transaction that a retry may clear.
RETRYABLE_REASONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)


# ---- requests and errors ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    """One API call for the driver: ``client.<operation>(**params)``.

    Attributes:
        operation: The boto3 low-level client method, e.g. ``"transact_write_items"``.
        params: Its keyword arguments.
        service: Whose client makes it: ``"dynamodb"``, or ``"s3"`` (the bucket
            of offloaded payloads; the driver hands back ``get_object``'s body
            as bytes).
    """

    operation: str
    params: dict[str, Any]
    service: str = "dynamodb"


class RetryableError(StorageUnavailableError):
    """DynamoDB throttled a call or failed it transiently; a retry may succeed.

    Attributes:
        code: The DynamoDB error code.
    """

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class ConnectionLostError(StorageUnavailableError):
    """The connection to DynamoDB (or S3) failed: the call may or may not have been
    applied. Only a call that may be applied twice is sent again (see ``_call``)."""


#: Calls that may be sent again after a lost connection: reads, and whole-item batch
#: writes (applied twice, they leave what applied once leaves). A transaction is sent
#: again only with its ``ClientRequestToken`` (DynamoDB applies a token once, and
#: answers its repetition as the first call).
_RESENDABLE = frozenset(
    {"get_item", "batch_get_item", "query", "scan", "batch_write_item", "get_object"}
)


def resendable(operation: str, params: dict[str, Any]) -> bool:
    """Whether a call whose connection was lost may be sent again as it was."""
    return operation in _RESENDABLE or (
        operation == "transact_write_items" and "ClientRequestToken" in params
    )


class ObjectMissingError(StorageError):
    """An S3 object the saver asked for does not exist (``NoSuchKey``)."""


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


class BaseMissingError(StorageError):
    """A delta's base blob is not stored (any more): the transaction wrote nothing.

    Raised by a write whose ``ConditionCheck`` on the base failed (the thread
    was deleted or pruned meanwhile by another process); ``put`` then writes
    the checkpoint again with full copies.
    """


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


def new_token() -> str:
    """A ClientRequestToken: a transaction retried after a timeout is applied once.

    Not ``uuid.uuid4``: applications (and LangGraph's tests) patch it to hand out
    a fixed sequence of ids, which a saver must not consume.
    """
    return secrets.token_hex(16)


# ---- the state and the calls every group of operations shares -------------------------


class OpsBase:
    """The state of an operation set and its calls (see ``_ops.DynamoDBOps`` for the arguments)."""

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
        bucket: str | None = None,
        object_prefix: str = "",
        orphan_grace: float = 3600.0,
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
        self.chains = ChainMemory()
        self.bucket = bucket
        self.object_prefix = object_prefix
        self.orphan_grace = orphan_grace

    def _forget_thread(self, tenant: str, thread: str) -> None:
        """Forget what this process knows of a thread's blobs (deleted, pruned, a failed write)."""
        self.codec.forget_thread(tenant, thread)
        self.chains.forget_thread(tenant, thread)

    # ---- calls with retries ------------------------------------------------------

    def _call(
        self, operation: str, params: dict[str, Any], service: str = "dynamodb"
    ) -> Generator[Any, Any, Any]:
        """One API call, retried with backoff while DynamoDB (or S3) throttles it."""
        attempt = 1
        while True:
            try:
                return (yield Call(operation, params, service))
            except ConnectionLostError:
                if attempt >= self.retry.max_attempts or not resendable(operation, params):
                    raise
                yield Sleep(self.retry.delay(attempt))
                attempt += 1
                continue
            except (RetryableError, TransactionCanceledError) as exc:
                if isinstance(exc, TransactionCanceledError) and "ClientRequestToken" in params:
                    # a cancelled transaction is retried as a new request
                    params = {**params, "ClientRequestToken": new_token()}
                if isinstance(exc, TransactionCanceledError) and not exc.retryable:
                    raise
                if attempt >= self.retry.max_attempts:
                    code = getattr(exc, "code", None) or ",".join(getattr(exc, "reasons", ()) or ())
                    if service == "s3":
                        where, fix = f"S3 refused {operation} on bucket {self.bucket!r}", ""
                    else:
                        where = f"DynamoDB refused {operation} on table {self.table!r}"
                        fix = "raise the table's capacity or "
                    raise StorageUnavailableError(
                        f"{where} {attempt} times ({code}): {fix}raise the saver's max_attempts"
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
        self, keys: Iterable[tuple[str, str]], projection: Sequence[str] | None = None
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
            if projection:
                names = {f"#a{i}": name for i, name in enumerate(("pk", "sk", *projection))}
                request[self.table]["ProjectionExpression"] = ", ".join(names)
                request[self.table]["ExpressionAttributeNames"] = names
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

    def _put_action(self, item: dict[str, Any], insert_only: bool = False) -> dict[str, Any]:
        put: dict[str, Any] = {"TableName": self.table, "Item": item}
        if insert_only:
            put["ConditionExpression"] = "attribute_not_exists(#sk)"
            put["ExpressionAttributeNames"] = {"#sk": "sk"}
        return {"Put": put}
