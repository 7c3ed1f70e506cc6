"""Shared pieces of the Agent Server checkpointer factories (``<backend>.server``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from .errors import ConfigurationError

__all__ = ["env_flag", "env_required", "set_up_saver"]

_OFF = {"0", "off", "false", "no"}
_ON = {"1", "on", "true", "yes"}


def env_flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    """An on/off setting (``on``/``off``, ``true``/``false``, ``1``/``0``, ``yes``/``no``)."""
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ConfigurationError(f"{name} must be on or off, got {value!r}")


def env_required(env: Mapping[str, str], name: str, what: str) -> str:
    """A setting that must be present; ``what`` says what to put there."""
    value = env.get(name, "").strip()
    if not value:
        raise ConfigurationError(f"{name} is not set: give {what}")
    return value


@asynccontextmanager
async def set_up_saver(opened: Any, run_setup: bool) -> AsyncIterator[Any]:
    """Enter a saver's async context manager, run ``setup()`` if asked, yield the saver."""
    async with opened as saver:
        if run_setup:
            await saver.setup()
        yield saver
