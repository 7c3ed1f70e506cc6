"""``DynamoDBSaver`` and ``AsyncDynamoDBSaver``.

Both run the same pure operations (``_ops.DynamoDBOps``) through a sync or an
async driver (``_driver``); a saver method only resolves the call's tenant and
thread and hands the operation to its driver.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import sys
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from langgraph.checkpoint.serde.base import SerializerProtocol

from .._core.codec import CheckpointCodec
from .._core.delta import DEFAULT_MAX_CHAIN
from .._core.retention import DELETE, Retention, RetentionPolicy, check_retention
from .._core.sansio import Operation
from .._saver import AsyncSaverMethods, DurableSaverBase, SyncSaverMethods, TenantResolver
from ..errors import ConfigurationError, InvalidInputError
from ..protect.encryption import Encryption
from ..protect.redaction import Redaction
from . import _driver
from ._calls import RetryPolicy
from ._items import validate_table_name
from ._ops import DynamoDBOps

__all__ = ["DynamoDBSaver", "AsyncDynamoDBSaver", "DynamoDBOptions", "parse_conn_string"]


def _positive(name: str, value: Any, kind: Any = int) -> None:
    if isinstance(value, bool) or not isinstance(value, kind) or not float(value) > 0:
        raise ConfigurationError(f"{name} must be a positive number, got {value!r}")


def _caller_level() -> int:
    """The ``stacklevel`` of the first caller outside this package (for warnings)."""
    level, frame = 2, sys._getframe(2)
    while frame.f_back is not None and (
        frame.f_code.co_filename == "<string>"
        or str(frame.f_globals.get("__name__", "")).startswith(
            ("langgraph_durable.", "contextlib", "dataclasses")
        )
    ):
        level, frame = level + 1, frame.f_back
    return level


@dataclass(frozen=True)
class DynamoDBOptions:
    """Validated settings of a DynamoDB saver.

    Attributes:
        table: The table holding every item of every thread.
        region: AWS region of the client the saver creates (None: boto3's default).
        endpoint_url: Endpoint of that client (e.g. a local DynamoDB-compatible
            server); None for AWS.
        retention: How long threads are kept: a
            :class:`~langgraph_durable.Retention`, a callable ``tenant ->
            Retention | None`` (asked on every write), or None to keep every
            thread. Policies that delete need TTL enabled on attribute
            ``expires_at`` (``setup()`` does it when ``create_table`` is true).
        ttl: Deprecated: ``Retention(idle=timedelta(seconds=ttl))``.
        ttl_refresh: Seconds between sweeps that extend the ``expires_at`` of an
            active thread's items (default: half of the idle bound). Shorter
            sweeps more often; longer keeps expired items stored for longer.
        create_table: ``setup()`` creates a missing table (on-demand billing) and
            enables TTL; when false it only checks them.
        default_tenant: Tenant used when a call names none.
        max_attempts: Attempts per call while DynamoDB throttles it.
        retry_base_delay: Seconds of the first backoff (doubled per retry).
        retry_max_delay: Upper bound of one backoff, in seconds.
        max_workers: Threads of the async saver's pool (calls in flight at once).
        connect_timeout: Seconds to connect (client the saver creates).
        read_timeout: Seconds to wait for a response (client the saver creates).
        get_page_items: Items read by the first page of a latest-checkpoint
            lookup: enough for a checkpoint and its writes in one Query.
        list_page_items: Items per page of a history listing.
        delta_chain: A list channel that grows by appending (``messages``) is
            stored as the items added since the previous version, with a full
            copy after at most this many deltas (0-1000; 0 stores every
            version in full). See ``docs/dynamodb.md``.
        s3_bucket: An S3 bucket for checkpoints larger than one DynamoDB
            transaction (4 MB): their largest payloads go there, written before
            the items that reference them. None (default): such a checkpoint
            is refused before anything is written. The bucket must exist.
        s3_prefix: Prefix of every object key the saver writes.
        s3_orphan_grace: Seconds an object must be old before the pruner
            deletes it as an orphan (no item references it: a write that failed
            or crashed between its objects and its transaction).
    """

    table: str
    region: str | None = None
    endpoint_url: str | None = None
    retention: Retention | RetentionPolicy | None = None
    ttl: int | None = None
    ttl_refresh: int | None = None
    create_table: bool = True
    default_tenant: str = "default"
    max_attempts: int = 10
    retry_base_delay: float = 0.05
    retry_max_delay: float = 2.0
    max_workers: int = 8
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    get_page_items: int = 16
    list_page_items: int = 300
    delta_chain: int = DEFAULT_MAX_CHAIN
    s3_bucket: str | None = None
    s3_prefix: str = "langgraph-durable/"
    s3_orphan_grace: float = 3600.0

    def __post_init__(self) -> None:
        validate_table_name(self.table)
        if self.region is not None and (not isinstance(self.region, str) or not self.region):
            raise ConfigurationError(f"region must be a region name or None, got {self.region!r}")
        if self.endpoint_url is not None and (
            not isinstance(self.endpoint_url, str)
            or not self.endpoint_url.startswith(("http://", "https://"))
        ):
            raise ConfigurationError(
                f"endpoint_url must be an http(s) URL or None, got {self.endpoint_url!r}"
            )
        check_retention(self.retention)
        if self.ttl is not None:
            _positive("ttl (seconds)", self.ttl)
            if self.retention is not None:
                raise ConfigurationError(
                    "pass retention= or the deprecated ttl=, not both (ttl=N is "
                    "retention=Retention(idle=timedelta(seconds=N)))"
                )
            warnings.warn(
                "the DynamoDB saver's ttl= is deprecated: use "
                f"retention=Retention(idle=timedelta(seconds={self.ttl}))",
                DeprecationWarning,
                stacklevel=_caller_level(),
            )
        if self.ttl_refresh is not None:
            _positive("ttl_refresh (seconds)", self.ttl_refresh)
            if self.ttl is None and self.retention is None:
                raise ConfigurationError(
                    "ttl_refresh needs ttl or retention: set retention=Retention(idle=...) as well"
                )
        if not isinstance(self.create_table, bool):
            raise ConfigurationError(
                f"create_table must be True or False, got {self.create_table!r}"
            )
        if not isinstance(self.default_tenant, str) or not self.default_tenant:
            raise ConfigurationError(
                f"default_tenant must be a non-empty string, got {self.default_tenant!r}"
            )
        _positive("max_attempts", self.max_attempts)
        _positive("max_workers", self.max_workers)
        for name in ("retry_base_delay", "retry_max_delay", "connect_timeout", "read_timeout"):
            _positive(name, getattr(self, name), (int, float))
        for name in ("get_page_items", "list_page_items"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
                raise ConfigurationError(f"{name} must be an integer from 1 to 1000, got {value!r}")
        if (
            isinstance(self.delta_chain, bool)
            or not isinstance(self.delta_chain, int)
            or not 0 <= self.delta_chain <= 1000
        ):
            raise ConfigurationError(
                "delta_chain must be an integer from 0 to 1000 (0: no deltas), "
                f"got {self.delta_chain!r}"
            )
        if self.s3_bucket is not None and (
            not isinstance(self.s3_bucket, str)
            or not 3 <= len(self.s3_bucket) <= 255
            or not set(self.s3_bucket) <= _BUCKET_CHARS
        ):
            raise ConfigurationError(
                f"s3_bucket must be an S3 bucket name (3-63 of a-z, 0-9, '.', '-') or None, "
                f"got {self.s3_bucket!r}"
            )
        if (
            not isinstance(self.s3_prefix, str)
            or self.s3_prefix.startswith("/")
            or len(self.s3_prefix.encode("utf-8")) > 512
        ):
            raise ConfigurationError(
                "s3_prefix must be a key prefix of at most 512 bytes, not starting with '/' "
                f"(e.g. 'langgraph-durable/'), got {self.s3_prefix!r}"
            )
        _positive("s3_orphan_grace (seconds)", self.s3_orphan_grace, (int, float))

    @property
    def retention_setting(self) -> Retention | RetentionPolicy | None:
        """``retention``, or what the deprecated ``ttl`` stands for."""
        if self.ttl is not None:
            return Retention(idle=datetime.timedelta(seconds=self.ttl))
        return self.retention

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> DynamoDBOptions:
        """Options from keyword settings, naming any unknown one."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ConfigurationError(
                f"unknown DynamoDB saver setting(s) {unknown}: use {sorted(known)}"
            )
        if "table" not in settings:
            raise ConfigurationError("a DynamoDB saver needs table='...' (or options=...)")
        return cls(**settings)


_BUCKET_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")

_URL_KEYS = {
    "region": "region",
    "endpoint": "endpoint_url",
    "endpoint_url": "endpoint_url",
    "ttl": "ttl",
    "ttl_refresh": "ttl_refresh",
    "create_table": "create_table",
    "default_tenant": "default_tenant",
    "retention_idle": "idle",
    "retention_absolute": "absolute",
    "retention_strategy": "strategy",
    "retention_keep": "keep",
    "delta_chain": "delta_chain",
    "s3_bucket": "s3_bucket",
    "s3_prefix": "s3_prefix",
    "s3_orphan_grace": "s3_orphan_grace",
}
_RETENTION_KEYS = ("idle", "absolute", "strategy", "keep")


def _url_duration(value: str) -> Any:
    """A duration from a URL: seconds (``3600``) or text (``30d``)."""
    try:
        return float(value)
    except ValueError:
        return value  # Retention parses "30d" and explains what it refuses


def parse_conn_string(conn_string: str) -> dict[str, Any]:
    """Settings from ``dynamodb://TABLE?region=...&endpoint=...&retention_idle=30d``.

    ``delta_chain`` (a whole number, 0-1000), ``s3_bucket``, ``s3_prefix`` and
    ``s3_orphan_grace`` (seconds) are the settings of those names.

    ``retention_idle``, ``retention_absolute`` (seconds, or text such as
    ``30d``), ``retention_strategy`` (``delete`` or ``keep_latest``) and
    ``retention_keep`` make the ``retention`` setting (a ``Retention``).

    Raises:
        ConfigurationError: Not a ``dynamodb://`` URL, or an unknown parameter.
    """
    if not isinstance(conn_string, str):
        raise ConfigurationError(f"a dynamodb:// URL is required, got {conn_string!r}")
    parts = urlsplit(conn_string)
    if parts.scheme != "dynamodb" or not parts.netloc:
        raise ConfigurationError(
            f"{conn_string!r} is not a DynamoDB URL: use dynamodb://TABLE?region=REGION"
            "[&endpoint=http://HOST:PORT][&retention_idle=30d]"
        )
    settings: dict[str, Any] = {"table": parts.netloc}
    retention: dict[str, Any] = {}
    for name, values in parse_qs(parts.query, keep_blank_values=True).items():
        if name not in _URL_KEYS:
            raise ConfigurationError(
                f"unknown parameter {name!r} in {conn_string!r}: use {sorted(_URL_KEYS)}"
            )
        value: Any = values[-1]
        if name in ("ttl", "ttl_refresh"):
            try:
                value = int(value)
            except ValueError:
                raise ConfigurationError(f"{name} must be whole seconds, got {value!r}") from None
        elif name == "create_table":
            if value.lower() not in ("true", "false", "1", "0"):
                raise ConfigurationError(f"create_table must be true or false, got {value!r}")
            value = value.lower() in ("true", "1")
        elif name in ("retention_idle", "retention_absolute"):
            value = _url_duration(value)
        elif name == "s3_orphan_grace":
            try:
                value = float(value)
            except ValueError:
                raise ConfigurationError(f"{name} must be seconds, got {value!r}") from None
        elif name in ("retention_keep", "delta_chain"):
            try:
                value = int(value)
            except ValueError:
                raise ConfigurationError(f"{name} must be a whole number, got {value!r}") from None
        if _URL_KEYS[name] in _RETENTION_KEYS:
            retention[_URL_KEYS[name]] = value
        else:
            settings[_URL_KEYS[name]] = value
    if retention:
        try:
            settings["retention"] = Retention(**retention)
        except InvalidInputError as exc:
            raise ConfigurationError(f"{exc} (in {conn_string!r})") from exc
    return settings


_SAVER_ARGS = (
    "client",
    "s3_client",
    "serde",
    "tenant",
    "clock",
    "encryption",
    "redaction",
    "integrity",
)


class _DynamoDBSaverBase(DurableSaverBase):
    """What the sync and async DynamoDB savers share: options, operations, client."""

    options: DynamoDBOptions
    _ops: DynamoDBOps

    def __init__(
        self,
        client: Any = None,
        *,
        options: DynamoDBOptions | None = None,
        serde: SerializerProtocol | None = None,
        tenant: str | TenantResolver | None = None,
        clock: Callable[[], float] | None = None,
        encryption: Encryption | None = None,
        redaction: Redaction | None = None,
        retention: Retention | RetentionPolicy | None = None,
        s3_client: Any = None,
        integrity: Any = None,
        **settings: Any,
    ) -> None:
        if options is not None and settings:
            raise ConfigurationError(
                "pass either options=DynamoDBOptions(...) or settings, not both: "
                f"{sorted(settings)}"
            )
        if options is None:
            if retention is not None:
                settings["retention"] = retention
            options = DynamoDBOptions.from_settings(settings)
        elif not isinstance(options, DynamoDBOptions):
            raise ConfigurationError(f"options must be DynamoDBOptions, got {options!r}")
        elif retention is not None:
            options = dataclasses.replace(options, retention=retention)
        self.options = options
        self._clock = clock or time.time
        self._init_base(
            serde,
            tenant,
            self.options.default_tenant,
            encryption,
            redaction,
            retention=self.options.retention_setting,
            integrity=integrity,
        )
        self._owns_client = client is None
        self.client = (
            _driver.make_client(self.options) if client is None else _driver.check_client(client)
        )
        self._owns_s3_client = s3_client is None and self.options.s3_bucket is not None
        self.s3_client = s3_client
        if self._owns_s3_client:
            self.s3_client = _driver.make_s3_client(self.options, self.client)
        self._runner = self._new_driver()

    def _new_driver(self) -> Any:
        raise NotImplementedError

    def _delta_chain(self) -> int:
        return self.options.delta_chain

    def _make_ops(self, codec: CheckpointCodec) -> DynamoDBOps:
        o = self.options
        retention = self.retention
        return DynamoDBOps(
            o.table,
            codec,
            now=self._clock,
            ttl_refresh=o.ttl_refresh,
            retention=None if retention is None else self._retention_for,
            # a fixed keep_latest policy never deletes whole threads: no TTL needed
            ttl_needed=retention is not None
            and not (isinstance(retention, Retention) and retention.strategy != DELETE),
            retry=RetryPolicy(o.max_attempts, o.retry_base_delay, o.retry_max_delay),
            get_page_items=o.get_page_items,
            list_page_items=o.list_page_items,
            bucket=o.s3_bucket,
            object_prefix=o.s3_prefix,
            orphan_grace=float(o.s3_orphan_grace),
        )

    @property
    def table(self) -> str:
        """The table holding this saver's items."""
        return self.options.table

    def _setup_op(self) -> Operation[list[str]]:
        # the deprecated ttl= stores nothing new (its tables stay as they were)
        retention = self.options.retention
        stored = retention.to_json() if isinstance(retention, Retention) else None
        return self._ops.setup(self.options.create_table, stored)

    def _close_client(self) -> None:
        owned = [self.client] if self._owns_client else []
        if self._owns_s3_client:
            owned.append(self.s3_client)
        for client in owned:
            close = getattr(client, "close", None)
            if close is not None:
                close()


class DynamoDBSaver(SyncSaverMethods, _DynamoDBSaverBase):
    """A LangGraph checkpoint saver on one DynamoDB table (sync).

    Args:
        client: A boto3 low-level DynamoDB client, or None to create one from
            the options (region, endpoint_url; botocore retries off, since the
            saver retries throttling itself).
        s3_client: A boto3 S3 client for ``s3_bucket``, or None to create one
            like the DynamoDB client (same region and endpoint options).
        options: A :class:`DynamoDBOptions`; or pass its fields as keyword
            settings instead (``table=...``, ``ttl=...``).
        serde: LangGraph serializer (default: ``AllowlistSerializer`` of
            ``langgraph_durable.protect.allowlist``: LangGraph's format, and reads
            rebuild only allowlisted types; a serializer given here is used as is).
        tenant: None (read ``config["configurable"]["tenant_id"]``), a fixed
            tenant id, or a callable ``(config) -> tenant id``.
        clock: Seconds since the epoch (default ``time.time``); for tests of TTL.
        encryption: Envelope encryption of every stored payload
            (:class:`~langgraph_durable.protect.Encryption`); None stores them
            unencrypted. Tenants' wrapped data keys live in the same table.
        redaction: PII redaction before anything is stored
            (:class:`~langgraph_durable.protect.Redaction`); None stores values
            as they are.
        retention: How long threads are kept (:class:`~langgraph_durable.Retention`,
            or a callable ``tenant -> Retention | None``); see ``prune_expired``
            and docs/dynamodb.md. Replaces the deprecated ``ttl`` setting.
        **settings: :class:`DynamoDBOptions` fields, when ``options`` is None.

    Example:
        >>> with DynamoDBSaver.from_conn_string("dynamodb://checkpoints?region=eu-west-1") as s:
        ...     s.setup()
        ...     graph = builder.compile(checkpointer=s)
    """

    _runner: _driver.SyncDriver

    def _new_driver(self) -> _driver.SyncDriver:
        return _driver.SyncDriver(self.client, self.options.table, self.s3_client)

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Iterator[DynamoDBSaver]:
        """A saver with its own client for ``dynamodb://TABLE?region=...&endpoint=...``.

        Keyword arguments are those of the constructor (settings override the URL's).
        """
        settings = {**parse_conn_string(conn_string), **kwargs}
        saver = cls(**settings)
        try:
            yield saver
        finally:
            saver.close()

    def close(self) -> None:
        """Close the client the saver created (a caller's client stays open)."""
        self._close_client()

    def setup(self) -> list[str]:
        """Create the table and enable TTL when asked; otherwise check them.

        A fixed ``retention`` policy is stored in the table too (the command
        line's ``prune`` reads it).

        Returns:
            What this call changed in the store's schema, as every saver's
            ``setup()`` does (empty when there was nothing to do): here
            ``"created table"`` and ``"enabled TTL"``, in that order.

        Raises:
            SchemaError: The table is missing (and ``create_table`` is false),
                has another key schema, or lacks the TTL the saver needs.
        """
        return self._run(self._setup_op())  # type: ignore[no-any-return]

    def _run(self, op: Operation[Any]) -> Any:
        return self._runner.run(op)

    def _iterate(self, op: Operation[Any]) -> Iterator[Any]:
        return self._runner.iterate(op)


class AsyncDynamoDBSaver(AsyncSaverMethods, _DynamoDBSaverBase):
    """A LangGraph checkpoint saver on one DynamoDB table (asyncio).

    boto3 calls run in a bounded thread pool (``max_workers``), so the event
    loop keeps running while they are in flight. Arguments as
    :class:`DynamoDBSaver`. Its sync methods work from other threads (they
    run on the saver's event loop), not from the loop's own thread.
    """

    _runner: _driver.AsyncDriver

    def _new_driver(self) -> _driver.AsyncDriver:
        return _driver.AsyncDriver(
            self.client, self.options.table, self.options.max_workers, self.s3_client
        )

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, **kwargs: Any
    ) -> AsyncIterator[AsyncDynamoDBSaver]:
        """A saver with its own client for ``dynamodb://TABLE?...``, closed on exit.

        The client is created in a worker thread (boto3 reads files while
        creating one), so the loop is not blocked.
        """
        saver_args = {k: kwargs.pop(k) for k in _SAVER_ARGS if k in kwargs}
        options = DynamoDBOptions.from_settings({**parse_conn_string(conn_string), **kwargs})
        client = saver_args.pop("client", None)
        created = client is None
        if created:
            client = await asyncio.to_thread(_driver.make_client, options)
        s3_created = options.s3_bucket is not None and saver_args.get("s3_client") is None
        if s3_created:
            saver_args["s3_client"] = await asyncio.to_thread(
                _driver.make_s3_client, options, client
            )
        saver = cls(client, options=options, **saver_args)
        saver._owns_client = created
        saver._owns_s3_client = s3_created
        saver._bind_loop()
        try:
            yield saver
        finally:
            await saver.close()

    async def close(self) -> None:
        """Stop the thread pool and close the client the saver created."""
        await asyncio.to_thread(self._runner.close)
        self._close_client()

    async def setup(self) -> list[str]:
        """Create the table and enable TTL when asked; otherwise check them."""
        self._bind_loop()
        return await self._arun(self._setup_op())  # type: ignore[no-any-return]

    async def _arun(self, op: Operation[Any]) -> Any:
        return await self._runner.run(op)

    def _aiterate(self, op: Operation[Any]) -> AsyncIterator[Any]:
        return self._runner.iterate(op)
