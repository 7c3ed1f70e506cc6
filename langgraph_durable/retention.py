"""Retention policies and what the pruner reports (see ``docs/operations.md``).

``Retention`` is also importable as ``langgraph_durable.Retention``.
"""

from __future__ import annotations

from ._core.retention import (
    DEFAULT_THROTTLE,
    PruneProgress,
    PruneReport,
    Retention,
    RetentionPolicy,
    format_duration,
    parse_duration,
)

__all__ = [
    "Retention",
    "RetentionPolicy",
    "PruneReport",
    "PruneProgress",
    "parse_duration",
    "format_duration",
    "DEFAULT_THROTTLE",
]
