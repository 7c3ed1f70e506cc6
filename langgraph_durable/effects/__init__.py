"""Idempotent effects: a journal so replays never repeat a side effect.

``@idempotent`` claims each call in the thread's effect journal (kept by the
graph's langgraph-durable checkpointer) before it runs and records its result
right after, so a resume after an interrupt or a crash, a replay from an older
checkpoint, or a second worker on the same thread returns the recorded result
instead of running the effect again. See ``docs/effects.md`` for the exact
guarantees.

Public names:
    idempotent, current_effect, Effect, IdempotentToolNode, EffectJournal,
    EffectEntry, RETRY, default_transient.
"""

from __future__ import annotations

from ._decorator import idempotent
from ._flow import RETRY, Effect
from ._tools import IdempotentToolNode
from ._wrap import current_effect, default_transient
from .journal import EffectEntry, EffectJournal

__all__ = [
    "idempotent",
    "current_effect",
    "Effect",
    "IdempotentToolNode",
    "EffectJournal",
    "EffectEntry",
    "RETRY",
    "default_transient",
]
