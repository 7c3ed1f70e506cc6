"""The effect tests' zygote (tests/effects/zygote.py) with the soak's worker
(:func:`tests.soak.harness.run`) in place of theirs, imported before any fork."""

from __future__ import annotations

from tests.effects import zygote
from tests.soak import harness

zygote.worker = harness  # type: ignore[assignment]  # _child calls worker.run(job)

if __name__ == "__main__":
    zygote.main()
