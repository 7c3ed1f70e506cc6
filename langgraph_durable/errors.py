"""The exception tree of langgraph-durable.

Every error a saver raises on purpose is a :class:`DurableError`. Errors that
come from a database driver are translated into one of these types at the
boundary (``raise StorageError(...) from exc``) so callers can handle them
without importing psycopg, redis or botocore.
"""

from __future__ import annotations

__all__ = [
    "DurableError",
    "ConfigurationError",
    "InvalidInputError",
    "StorageError",
    "StorageUnavailableError",
    "SchemaError",
    "MissingPartitionError",
    "CorruptRecordError",
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


class InvalidInputError(DurableError, ValueError):
    """A call received input it cannot store or look up (e.g. no ``thread_id``)."""


class StorageError(DurableError):
    """The storage backend refused or failed an operation."""


class StorageUnavailableError(StorageError, ConnectionError):
    """The storage backend could not be reached (connection refused, timed out, closed)."""


class SchemaError(StorageError):
    """The database schema is missing, too old, or newer than this package."""


class MissingPartitionError(SchemaError):
    """A row was written for a time bucket whose partition does not exist yet."""


class CorruptRecordError(StorageError):
    """A stored record could not be decoded or failed verification."""


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
