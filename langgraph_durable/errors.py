"""The exception tree of langgraph-durable.

Every error a saver raises on purpose is a :class:`DurableError`. Errors that
come from a database driver are translated into one of these types at the
boundary (``raise StorageError(...) from exc``) so callers can handle them
without importing psycopg, redis or botocore.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

__all__ = [
    "DurableError",
    "ConfigurationError",
    "InvalidInputError",
    "InvalidNamespaceError",
    "WrongEventLoopError",
    "StorageError",
    "StorageUnavailableError",
    "SchemaError",
    "MissingPartitionError",
    "CheckpointConflictError",
    "CorruptRecordError",
    "IntegrityError",
    "ChainKeyRequiredError",
    "SettingsMismatchError",
    "UnsupportedOperationError",
    "DecryptionError",
    "KeyringError",
    "EffectError",
    "EffectConflictError",
    "EffectAmbiguousError",
    "EffectBusyError",
    "EffectFailedError",
]


class DurableError(Exception):
    """Base class of every error raised by langgraph-durable."""


class ConfigurationError(DurableError, ValueError):
    """A saver or tool was configured with a value it cannot use.

    The message names the bad value and how to fix it.
    """


class ChainKeyRequiredError(ConfigurationError):
    """A trim would remove checkpoints of a hash-chained history without the chain key.

    ``keep_latest`` leaves a signed tombstone in each survivor whose parent goes, so
    that the thread still verifies; without the key (``integrity=``, or
    ``LGD_INTEGRITY_KEY`` for the command line) it cannot, so nothing is trimmed.
    """


class SettingsMismatchError(ConfigurationError):
    """A record was written with other protection settings than the reader has.

    Raised instead of a tampering error when the record is authentic and only the
    settings differ (for example ``clear_metadata`` or ``searchable_metadata`` of
    ``Encryption``); the message names both settings.
    """


class InvalidInputError(DurableError, ValueError):
    """A call received input it cannot store or look up (e.g. no ``thread_id``)."""


_NAMESPACE_DOC = """A store namespace breaks LangGraph's rules.

    A namespace is a non-empty tuple of non-empty string labels without ``.``
    or NUL, whose first label is not ``langgraph``; a search prefix or a
    listing's match path follows the same label rules and may be empty. Also a
    ``langgraph.store.base.InvalidNamespaceError``, so code written for
    LangGraph's stores catches it.
    """

if TYPE_CHECKING:
    from langgraph.store.base import InvalidNamespaceError as _LangGraphNamespaceError

    class InvalidNamespaceError(InvalidInputError, _LangGraphNamespaceError):
        pass


def __getattr__(name: str) -> Any:
    # Made on first use: LangGraph's store module (its base class) takes seconds to
    # import, and only the stores, which import it anyway, raise this error.
    if name == "InvalidNamespaceError":
        from langgraph.store.base import InvalidNamespaceError as langgraph_error

        error = type(
            "InvalidNamespaceError",
            (InvalidInputError, langgraph_error),
            {"__doc__": _NAMESPACE_DOC, "__module__": __name__},
        )
        globals()[name] = error
        return error
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class WrongEventLoopError(ConfigurationError, asyncio.InvalidStateError):
    """A sync method of an async store called on the store's own event loop (it would
    block the loop it waits for). Also an ``asyncio.InvalidStateError``, as LangGraph's
    async stores raise."""


class StorageError(DurableError):
    """The storage backend refused or failed an operation."""


class StorageUnavailableError(StorageError, ConnectionError):
    """The storage backend could not be reached (connection refused, timed out, closed)."""


class SchemaError(StorageError):
    """The database schema is missing, too old, or newer than this package."""


class MissingPartitionError(SchemaError):
    """A row was written for a time bucket whose partition does not exist yet."""


class CheckpointConflictError(StorageError):
    """A ``put`` named a checkpoint that is stored already with other content.

    Checkpoints are append-only: a checkpoint id, once stored for a (tenant,
    thread, namespace), is never overwritten. Putting it again with the same
    stored bytes (body and metadata) is an idempotent retry and succeeds
    without writing; any difference raises this error and nothing is written.

    Attributes:
        tenant: Tenant id.
        thread_id: Thread id.
        checkpoint_ns: Checkpoint namespace.
        checkpoint_id: The checkpoint id that is stored already.
    """

    def __init__(self, tenant: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> None:
        super().__init__(
            f"checkpoint {checkpoint_id!r} of thread {thread_id!r} (tenant {tenant!r}, "
            f"namespace {checkpoint_ns!r}) is stored already with other content; checkpoints "
            "are append-only: write a new checkpoint id instead of replacing a stored one"
        )
        self.tenant = tenant
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            type(self),
            (self.tenant, self.thread_id, self.checkpoint_ns, self.checkpoint_id),
        )


class CorruptRecordError(StorageError):
    """A stored record could not be decoded or failed verification."""


class IntegrityError(CorruptRecordError):
    """A stored record's integrity tag or chain link does not hold (altered, moved or forged)."""


class UnsupportedOperationError(DurableError, NotImplementedError):
    """The operation is not supported for this data (e.g. pruning a DeltaChannel thread)."""


class DecryptionError(DurableError):
    """A stored record could not be authenticated or decrypted.

    Raised when a ciphertext fails authentication (altered, truncated, or moved
    to another record), when a record lacks the encryption header while
    encryption is on, and when the data key it needs is gone (shredded, or its
    key-encryption key is no longer in the keyring). Nothing is deserialized
    from a record that raised it.
    """


class KeyringError(DurableError):
    """The keyring (local keys or AWS KMS) could not wrap or unwrap a data key."""


class EffectError(DurableError):
    """Base class of the effect journal's errors (``langgraph_durable.effects``)."""


class EffectConflictError(EffectError):
    """One effect key was reached with other arguments than those it was recorded with.

    Only possible with a key the caller supplies (``@idempotent(key=...)``): a
    derived key includes a digest of the arguments.
    """


class EffectAmbiguousError(EffectError):
    """An earlier execution claimed the effect and never recorded a result.

    The process died (or its lease ran out) during the effect, so it may or may
    not have happened. Raised under the policy ``on_ambiguous="fail"``; the
    entry stays as it is until someone decides (see ``docs/effects.md``).
    """


class EffectBusyError(EffectError):
    """Another worker holds the effect's claim and did not finish within the wait."""


class EffectFailedError(EffectError):
    """A recorded terminal error replayed when its exception type cannot be rebuilt.

    Attributes:
        error_type: The original exception's ``module.qualname``.
    """

    def __init__(self, message: str, error_type: str = "") -> None:
        super().__init__(message)
        self.error_type = error_type
