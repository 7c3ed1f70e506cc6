"""Channel version ids."""

from __future__ import annotations

import random


def next_version(current: str | int | float | None) -> str:
    """Return the channel version after ``current``.

    Versions are strings that sort lexicographically in the order they were
    made: a zero-padded counter, then a random fraction so that two forks of
    one thread never produce the same version for different values.

    Args:
        current: The channel's current version, or None for a new channel.

    Returns:
        The next version string.
    """
    if current is None:
        counter = 0
    elif isinstance(current, (int, float)):
        counter = int(current)
    else:
        counter = int(str(current).split(".", 1)[0])
    return f"{counter + 1:032}.{random.random():016}"
