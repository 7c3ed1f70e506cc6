"""The saver's DynamoDB operations, one class, and a map of where each part lives.

:class:`DynamoDBOps` is what ``DynamoDBSaver`` and ``AsyncDynamoDBSaver`` use:
each of its operations is a generator that yields :class:`Call` requests (a
low-level boto3 client method and its parameters) or :class:`Sleep` requests
(a backoff pause) and receives their results (see
``langgraph_durable._core.sansio``); the savers run the same generators
through a sync or async driver (``_driver``). It puts together groups of
operations, one module each, all pure (no boto3 import, no I/O, no clock but
the injected ``now``):

- ``_items``: every item and key shape (the table layout is in its
  docstring), attribute values, sizes, chunked payloads, DynamoDB's limits.
- ``_calls``: the requests, the errors the driver raises, the retry policy,
  and :class:`~._calls.OpsBase` (an operation set's state and the calls with
  retries every group shares, DynamoDB's and S3's).
- ``_deltas``: delta blobs of growing lists (their attributes, the chains a
  process remembers).
- ``_objects``: S3 offload of payloads larger than a transaction (object keys,
  the S3 calls, the orphan sweep).
- ``_threads``: a thread's retention on writes (stamps, its head, sweeps,
  purges) and the transactions that write a thread.
- ``_writes`` (put, put_writes), ``_reads`` (get_tuple, list), ``_effects``
  (the effect journal), ``_admin`` (setup, the stored retention policy,
  deletes, copies, pruning, the data keys of envelope encryption).
- ``_prune``: the pruner run (``prune_expired``) and the trim plan of
  ``keep_latest``.
"""

from __future__ import annotations

from .._core.sansio import Sleep
from ._admin import AdminOps
from ._calls import (
    RETRYABLE_CODES,
    Call,
    ConditionFailedError,
    OpsBase,
    RetryableError,
    RetryPolicy,
    TableInUseError,
    TableNotFoundError,
    TransactionCanceledError,
    new_token,
)
from ._effects import EFFECT_PREFIX, EffectOps, effect_item, effect_sk, is_effect_sk, stored_effect
from ._items import (
    CHUNK_BYTES,
    HEAD_SK,
    HEADED,
    ITEM_BUDGET,
    ITEM_LIMIT,
    LOCK_SK,
    META_PK,
    RETENTION_SK,
    TRANSACTION_BYTES,
    TRANSACTION_ITEMS,
    TTL_ATTRIBUTE,
    B,
    N,
    S,
    blob_sk,
    chunk_count,
    chunk_sk,
    dec,
    enc,
    head_live,
    is_pointer_sk,
    item_size,
    parse_checkpoint_sk,
    pointer_sk,
    read_payload,
    refuse_transaction,
    split_pk,
    tenant_prefix,
    thread_pk,
    validate_table_name,
    with_payloads,
    write_sk,
)
from ._prune import data_size, trim_plan
from ._reads import ReadOps
from ._threads import Expiry, ThreadOps
from ._writes import WriteOps

__all__ = [
    "Call",
    "Sleep",
    "RetryPolicy",
    "DynamoDBOps",
    "OpsBase",
    "ThreadOps",
    "RetryableError",
    "TableNotFoundError",
    "TableInUseError",
    "TransactionCanceledError",
    "ConditionFailedError",
    "RETRYABLE_CODES",
    "Expiry",
    "enc",
    "dec",
    "validate_table_name",
    "thread_pk",
    "tenant_prefix",
    "split_pk",
    "pointer_sk",
    "write_sk",
    "blob_sk",
    "chunk_sk",
    "parse_checkpoint_sk",
    "is_pointer_sk",
    "head_live",
    "S",
    "N",
    "B",
    "item_size",
    "with_payloads",
    "chunk_count",
    "read_payload",
    "refuse_transaction",
    "new_token",
    "trim_plan",
    "data_size",
    "EFFECT_PREFIX",
    "effect_sk",
    "is_effect_sk",
    "effect_item",
    "stored_effect",
    "ITEM_LIMIT",
    "ITEM_BUDGET",
    "TRANSACTION_ITEMS",
    "TRANSACTION_BYTES",
    "CHUNK_BYTES",
    "TTL_ATTRIBUTE",
    "HEAD_SK",
    "HEADED",
    "META_PK",
    "RETENTION_SK",
    "LOCK_SK",
]


class DynamoDBOps(WriteOps, ReadOps, EffectOps, AdminOps):
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
        bucket: The S3 bucket of payloads larger than a transaction, or None
            (such a checkpoint is refused).
        object_prefix: Prefix of the saver's object keys.
        orphan_grace: Seconds before an unreferenced object counts as an orphan.
    """
