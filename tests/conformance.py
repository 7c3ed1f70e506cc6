"""Run ``langgraph-checkpoint-conformance`` and judge its report strictly.

``CapabilityReport.passed_all()`` is true for a saver that implements nothing
(every capability "not detected", zero tests run), so the gate here checks
what was detected, what ran and what failed. Backend neutral.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import Capability
from langgraph.checkpoint.conformance.report import CapabilityReport, ProgressCallbacks

__all__ = ["ALL_CAPABILITIES", "TESTS_PER_CAPABILITY", "ConformanceRun", "run_conformance"]

#: Capability names in the suite's order.
ALL_CAPABILITIES: tuple[str, ...] = tuple(cap.value for cap in Capability)

#: How many tests langgraph-checkpoint-conformance 0.0.2 has per capability (81 in all).
TESTS_PER_CAPABILITY: dict[str, int] = {
    "put": 17,
    "put_writes": 10,
    "get_tuple": 10,
    "list": 16,
    "delete_thread": 5,
    "delete_for_runs": 7,
    "copy_thread": 8,
    "prune": 8,
}

_names = itertools.count()


@dataclass
class ConformanceRun:
    """A finished conformance run: the report plus the traceback of every failure."""

    report: CapabilityReport
    tracebacks: dict[str, str] = field(default_factory=dict)

    def detected(self) -> set[str]:
        """Capabilities the suite found implemented."""
        return {name for name, result in self.report.results.items() if result.detected}

    def passed(self, capabilities: tuple[str, ...] = ALL_CAPABILITIES) -> int:
        """Number of tests passed over ``capabilities``."""
        results = self.report.results
        return sum(results[c].tests_passed for c in capabilities if c in results)

    def failed(self, capabilities: tuple[str, ...] = ALL_CAPABILITIES) -> int:
        """Number of tests failed over ``capabilities``."""
        results = self.report.results
        return sum(results[c].tests_failed for c in capabilities if c in results)

    def summary(self) -> str:
        """A multi-line account: counts per capability, then each failure's traceback tail."""
        lines = [f"conformance of {self.report.checkpointer_name}:"]
        for name in ALL_CAPABILITIES:
            result = self.report.results.get(name)
            if result is None or not result.detected:
                lines.append(f"  {name:16s} NOT DETECTED")
                continue
            lines.append(
                f"  {name:16s} passed {result.tests_passed:2d}/{TESTS_PER_CAPABILITY[name]}"
                f"  failed {result.tests_failed}"
            )
        for key, text in self.tracebacks.items():
            tail = "\n      ".join(text.rstrip().splitlines()[-12:])
            lines.append(f"  FAILED {key}\n      {tail}")
        return "\n".join(lines)

    def assert_full(self, capabilities: tuple[str, ...] = ALL_CAPABILITIES) -> None:
        """Fail unless every capability in ``capabilities`` was detected and all its tests passed.

        Args:
            capabilities: The capabilities the saver must implement.

        Raises:
            AssertionError: With :meth:`summary` as the message.
        """
        expected = sum(TESTS_PER_CAPABILITY[c] for c in capabilities)
        missing = set(capabilities) - self.detected()
        ok = (
            not missing and self.failed(capabilities) == 0 and self.passed(capabilities) == expected
        )
        assert ok, (
            f"expected {expected} passed, 0 failed, capabilities detected: "
            f"{sorted(capabilities)}; got {self.passed(capabilities)} passed, "
            f"{self.failed(capabilities)} failed, missing {sorted(missing)}\n" + self.summary()
        )


async def run_conformance(
    name: str,
    factory: Callable[[], AsyncGenerator[BaseCheckpointSaver, None]],
) -> ConformanceRun:
    """Run the whole suite; ``factory`` is entered once per capability group.

    Args:
        name: Label for the report (made unique, since the suite keeps a global registry).
        factory: Async generator yielding a fresh, ready saver and cleaning up after it.

    Returns:
        The report and failure tracebacks.
    """
    tracebacks: dict[str, str] = {}

    def on_result(capability: str, test: str, passed: bool, error: str | None) -> None:
        if not passed:
            tracebacks[f"{capability}/{test}"] = error or "(no traceback)"

    registered = checkpointer_test(name=f"{name}#{next(_names)}")(factory)
    report = await validate(registered, progress=ProgressCallbacks(on_test_result=on_result))
    return ConformanceRun(report=report, tracebacks=tracebacks)
