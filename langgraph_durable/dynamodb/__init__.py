"""DynamoDB savers and stores (extra ``dynamodb``: boto3).

One table holds every thread; all items of a thread share one partition key.
The stores keep their items in the same table, in partitions of their own.
See ``docs/dynamodb.md`` for the table design, IAM policy, TTL and large states.
"""

from typing import Any

from ._calls import TransactionCanceledError
from .saver import AsyncDynamoDBSaver, DynamoDBOptions, DynamoDBSaver

__all__ = [
    "DynamoDBSaver",
    "AsyncDynamoDBSaver",
    "DynamoDBOptions",
    "TransactionCanceledError",
    "DynamoDBStore",
    "AsyncDynamoDBStore",
]

#: Names imported on first use (the store module loads LangGraph's store interface).
_LAZY = {"DynamoDBStore": ".store", "AsyncDynamoDBStore": ".store"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)
