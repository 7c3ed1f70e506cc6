"""Run the pure operations (``_ops.DynamoDBOps``) on a boto3 DynamoDB client (sync and async).

The only module of the DynamoDB backend that talks to DynamoDB (and to S3,
where offloaded payloads live). It owns the clients (given, or made from the
options), the thread pool of the async driver, and the translation of botocore
errors into ours. Retries are not
here: the operations decide them (``_calls.OpsBase._call``).
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .. import _drive
from .._core.sansio import Operation
from ..errors import ConfigurationError, DurableError, StorageError
from ._calls import (
    RETRYABLE_CODES,
    Call,
    ConditionFailedError,
    ConnectionLostError,
    ObjectMissingError,
    RetryableError,
    TableInUseError,
    TableNotFoundError,
    TransactionCanceledError,
)

R = TypeVar("R")

_UNAVAILABLE = (
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ConnectionClosedError",
    "ConnectionError",
    "ProxyConnectionError",
)
_CREDENTIALS = ("NoCredentialsError", "PartialCredentialsError", "NoRegionError")
_ACCESS = ("AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException")


def translate(exc: BaseException, table: str = "") -> DurableError:
    """Our error for a botocore error (or anything else a client call raised)."""
    if isinstance(exc, DurableError):
        return exc
    name = type(exc).__name__
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        code = str(response["Error"].get("Code", ""))
        message = str(response["Error"].get("Message", "")).strip()
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0
        if code in RETRYABLE_CODES:
            return RetryableError(f"DynamoDB throttled the call ({code}): {message}", code)
        if isinstance(status, int) and status >= 500:
            return RetryableError(
                f"DynamoDB failed the call (HTTP {status}): {message[:200]}", f"HTTP {status}"
            )
        if code == "TransactionCanceledException":
            reasons = [
                str(r.get("Code", "None")) for r in response.get("CancellationReasons") or []
            ]
            return TransactionCanceledError(
                f"DynamoDB cancelled the transaction (reasons: {', '.join(reasons) or '?'})",
                reasons,
            )
        if code == "ConditionalCheckFailedException":
            return ConditionFailedError(
                f"DynamoDB refused a conditional write: {message}", response.get("Item")
            )
        if code == "ResourceNotFoundException":
            return TableNotFoundError(
                f"DynamoDB table {table!r} does not exist ({message}): call setup() once "
                "before use (it creates the table), or check the table name and region"
            )
        if code == "ResourceInUseException":
            return TableInUseError(f"DynamoDB table {table!r} is busy: {message}")
        if code in ("NoSuchKey", "404"):
            return ObjectMissingError(f"S3 has no such object: {message}")
        if code == "NoSuchBucket":
            return ConfigurationError(
                f"the S3 bucket of the saver (s3_bucket) does not exist ({message}): create it "
                "(the saver does not), or check its name and region"
            )
        if code in ("AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId"):
            return StorageError(
                f"S3 refused the credentials or permissions ({code}: {message}): see the IAM "
                "policy in docs/dynamodb.md (s3:PutObject, GetObject, DeleteObject, ListBucket)"
            )
        if code in _ACCESS:
            return StorageError(
                f"DynamoDB refused the credentials or permissions ({code}: {message}): see "
                "the IAM policy in docs/dynamodb.md"
            )
        return StorageError(f"DynamoDB error {code}: {message}")
    if name in _UNAVAILABLE:
        return ConnectionLostError(f"DynamoDB is unreachable: {exc}")
    if name in _CREDENTIALS:
        return ConfigurationError(
            f"boto3 cannot sign DynamoDB requests ({exc}): configure AWS credentials and a "
            "region (environment, profile, or the saver's region option)"
        )
    return StorageError(f"unexpected error talking to DynamoDB: {exc!r}")


def make_client(options: Any) -> Any:
    """A boto3 DynamoDB client for ``options`` (botocore's own retries off: ours decide).

    Raises:
        ConfigurationError: boto3 is missing or the region cannot be resolved.
    """
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "the DynamoDB saver needs boto3: pip install 'langgraph-durable[dynamodb]'"
        ) from exc
    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"},
        max_pool_connections=max(10, options.max_workers),
        connect_timeout=options.connect_timeout,
        read_timeout=options.read_timeout,
    )
    try:
        client = boto3.session.Session().client(
            "dynamodb",
            region_name=options.region,
            endpoint_url=options.endpoint_url,
            config=config,
        )
    except Exception as exc:
        raise translate(exc, options.table) from exc
    client.meta.events.register("before-call.dynamodb", _invocation_id)
    return client


def make_s3_client(options: Any, dynamodb_client: Any = None) -> Any:
    """A boto3 S3 client for the saver's bucket, made like its DynamoDB client.

    Region, endpoint and timeouts come from ``options``; without an endpoint
    there, a DynamoDB client given to the saver that talks to a local server
    (not ``amazonaws.com``) lends its endpoint and region: one local server
    (moto, LocalStack) serves both.

    Raises:
        ConfigurationError: boto3 is missing or the region cannot be resolved.
    """
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "the DynamoDB saver needs boto3: pip install 'langgraph-durable[dynamodb]'"
        ) from exc
    endpoint, region = options.endpoint_url, options.region
    meta = getattr(dynamodb_client, "meta", None)
    if meta is not None:
        lent = str(getattr(meta, "endpoint_url", "") or "")
        if endpoint is None and lent and "amazonaws.com" not in lent:
            endpoint = lent
        region = region or getattr(meta, "region_name", None)
    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"},
        max_pool_connections=max(10, options.max_workers),
        connect_timeout=options.connect_timeout,
        read_timeout=options.read_timeout,
        s3={"addressing_style": "path"} if endpoint else None,
    )
    try:
        client = boto3.session.Session().client(
            "s3", region_name=region, endpoint_url=endpoint, config=config
        )
    except Exception as exc:
        raise translate(exc, options.table) from exc
    client.meta.events.register("before-call.s3", _invocation_id)
    return client


def _invocation_id(context: dict[str, Any], **_: Any) -> None:
    """Give each request its invocation id, which botocore draws from ``uuid.uuid4``.

    Applications (and LangGraph's tests) patch ``uuid.uuid4`` to hand out a fixed
    sequence of ids; a checkpoint saver must not consume it.
    """
    retries = context.setdefault("retries", {})
    retries.setdefault("invocation-id", str(uuid.UUID(bytes=secrets.token_bytes(16), version=4)))


def check_client(client: Any) -> Any:
    """Refuse anything that is not a low-level DynamoDB client."""
    if not callable(getattr(client, "transact_write_items", None)) or not callable(
        getattr(client, "batch_get_item", None)
    ):
        raise ConfigurationError(
            "the DynamoDB saver needs a boto3 low-level client (boto3.client('dynamodb')), "
            f"got {type(client).__name__}"
        )
    return client


def _call(step: Any) -> Call:
    if not isinstance(step, Call):
        raise TypeError(f"operation yielded {step!r}, expected a Call, Sleep or Emit")
    return step


def _perform(client: Any, s3_client: Any, call: Call) -> Any:
    """Make one call on the client of its service (a GetObject's body read whole)."""
    if call.service == "s3":
        if s3_client is None:
            raise ConfigurationError(
                "this operation needs S3 (offloaded payloads), but the saver has no S3 "
                "client: set s3_bucket (the saver then makes one) or pass s3_client="
            )
        resp = getattr(s3_client, call.operation)(**call.params)
        if call.operation == "get_object":
            body = resp["Body"]
            try:
                return {**resp, "Body": body.read()}
            finally:
                body.close()
        return resp
    return getattr(client, call.operation)(**call.params)


class SyncDriver:
    """Runs operations with blocking client calls.

    Args:
        client: A boto3 DynamoDB client.
        table: The table name (for error messages).
        s3_client: A boto3 S3 client (for offloaded payloads), or None.
    """

    def __init__(self, client: Any, table: str, s3_client: Any = None) -> None:
        self.client = client
        self.table = table
        self.s3_client = s3_client

    def run(self, op: Operation[R]) -> R:
        """Run an operation to its result (it must not emit items)."""
        return _drive.run(op, self._execute, self._translate)

    def iterate(self, op: Operation[Any]) -> Iterator[Any]:
        """Run an operation, yielding the items it emits."""
        return _drive.iterate(op, self._execute, self._translate)

    def _execute(self, step: Any) -> Any:
        return _perform(self.client, self.s3_client, _call(step))

    def _translate(self, exc: BaseException) -> BaseException:
        return _translated(exc, self.table)


class AsyncDriver:
    """Runs operations on the event loop; client calls go to a bounded thread pool.

    boto3 is blocking, so each call runs in one of ``max_workers`` threads
    while the loop keeps serving other tasks; backoff pauses are
    ``asyncio.sleep``.

    Args:
        client: A boto3 DynamoDB client (thread safe).
        table: The table name (for error messages).
        max_workers: Size of the pool (calls in flight at once).
        s3_client: A boto3 S3 client (for offloaded payloads), or None.
    """

    def __init__(self, client: Any, table: str, max_workers: int, s3_client: Any = None) -> None:
        self.client = client
        self.table = table
        self.s3_client = s3_client
        self.executor = ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="langgraph-durable-dynamodb"
        )

    async def run(self, op: Operation[R]) -> R:
        """Run an operation to its result (it must not emit items)."""
        return await _drive.arun(op, self._execute, self._translate)

    def iterate(self, op: Operation[Any]) -> AsyncIterator[Any]:
        """Run an operation, yielding the items it emits."""
        return _drive.aiterate(op, self._execute, self._translate)

    async def call_in_pool(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a blocking function in the driver's pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    async def _execute(self, step: Any) -> Any:
        return await self.call_in_pool(_perform, self.client, self.s3_client, _call(step))

    def _translate(self, exc: BaseException) -> BaseException:
        return _translated(exc, self.table)

    def close(self) -> None:
        """Stop the pool (calls in flight finish first)."""
        self.executor.shutdown(wait=True)


def _translated(exc: BaseException, table: str) -> DurableError:
    error = translate(exc, table)
    if error is not exc:
        error.__cause__ = exc
    return error
