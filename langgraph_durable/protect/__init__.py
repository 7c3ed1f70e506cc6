"""The record pipeline: redaction, serialization and encryption of stored payloads.

Every payload-bearing field a backend stores passes through a
:class:`~langgraph_durable.protect.pipeline.RecordPipeline` on the way in and
out. Today the package ships the identity pipeline (serialize only);
redaction and envelope encryption plug in here without changing any
backend's storage shape.
"""

from .pipeline import IdentityPipeline

__all__ = ["IdentityPipeline"]
