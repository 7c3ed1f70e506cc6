"""langgraph-durable: checkpoint savers that make LangGraph agents survive production.

Public names are imported lazily, so ``import langgraph_durable`` imports no
database driver. Use the backend subpackages directly, e.g.
``from langgraph_durable.postgres import PostgresSaver``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0.dev0"

_LAZY = {
    "PostgresSaver": "langgraph_durable.postgres",
    "AsyncPostgresSaver": "langgraph_durable.postgres",
    "RedisSaver": "langgraph_durable.redis",
    "AsyncRedisSaver": "langgraph_durable.redis",
    "DynamoDBSaver": "langgraph_durable.dynamodb",
    "AsyncDynamoDBSaver": "langgraph_durable.dynamodb",
    "DurableError": "langgraph_durable.errors",
    "idempotent": "langgraph_durable.effects",
    "current_effect": "langgraph_durable.effects",
    "IdempotentToolNode": "langgraph_durable.effects",
    "Retention": "langgraph_durable.retention",
    "PruneReport": "langgraph_durable.retention",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'langgraph_durable' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
