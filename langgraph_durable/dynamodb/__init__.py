"""DynamoDB savers (extra ``dynamodb``: boto3).

One table holds every thread; all items of a thread share one partition key.
See ``docs/dynamodb.md`` for the table design, IAM policy, TTL and large states.
"""

from ._calls import TransactionCanceledError
from .saver import AsyncDynamoDBSaver, DynamoDBOptions, DynamoDBSaver

__all__ = ["DynamoDBSaver", "AsyncDynamoDBSaver", "DynamoDBOptions", "TransactionCanceledError"]
