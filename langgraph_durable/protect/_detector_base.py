"""The detector framework: spans, the ``Detector`` protocol, regex and callable
detectors, prechecks shared by one scan, and overlap resolution (see ``detectors``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class Span:
    """A finding: ``text[start:end]`` is what detector ``detector`` found.

    Attributes:
        start: Index of the first character in the text.
        end: Index after the last character (exclusive).
        detector: Name of the detector that found it (e.g. ``"email"``); the
            placeholder that replaces the span is derived from it.
    """

    start: int
    end: int
    detector: str


@runtime_checkable
class Detector(Protocol):
    """Anything with a ``name`` and a ``find(text)`` returning spans."""

    name: str

    def find(self, text: str) -> list[Span]:
        """Every finding in ``text`` (in any order; overlaps are allowed)."""
        ...


_MISSING: Any = object()


class _Windows(tuple[tuple[int, int], ...]):
    """Ranges ``(pos, endpos)`` of a text that can hold a number: a precheck's result.

    Detectors of numbers scan these ranges only. A range is a run of digits and
    separators, widened by 2 characters before (a ``+`` or ``(``) and 3 after
    (so a lookahead sees the characters after the run).
    """

    __slots__ = ()


class _Prechecked:
    """Base of the detectors defined here: an optional cheap precheck, then a scan.

    A precheck returns something falsy when the text cannot hold a finding;
    otherwise its result (``True``, or :class:`_Windows` to scan) is passed to
    :meth:`_scan`. :func:`find_spans` evaluates a precheck shared by several
    detectors once per text.
    """

    __slots__ = ("name", "precheck")

    name: str
    precheck: Callable[[str], Any] | None

    def find(self, text: str) -> list[Span]:
        """Every finding in ``text``; nothing when the precheck fails.

        Args:
            text: The string to scan.

        Returns:
            The spans found.
        """
        return self._run(text, {})

    def _run(self, text: str, cache: dict[Any, Any]) -> list[Span]:
        precheck = self.precheck
        context: Any = True
        if precheck is not None:
            context = cache.get(precheck, _MISSING)
            if context is _MISSING:
                context = cache[precheck] = precheck(text)
            if not context:
                return []
        return self._scan(text, context, cache)

    def _scan(self, text: str, context: Any, cache: dict[Any, Any]) -> list[Span]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def _ranges(text: str, context: Any) -> Sequence[tuple[int, int]]:
    return context if isinstance(context, _Windows) else ((0, len(text)),)


def _contains(needle: str) -> Callable[[str], bool]:
    def precheck(text: str) -> bool:
        return needle in text

    return precheck


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a detector needs a non-empty name, got {name!r}")


class RegexDetector(_Prechecked):
    """A detector from a regular expression, with an optional validator of each match.

    Args:
        name: The detector's name (labels its spans, e.g. ``"employee_id"``).
        pattern: The expression, as a string (compiled without flags) or a
            compiled pattern (its flags kept).
        validate: Called with the matched text (of ``group``); the match is
            reported only if it returns true (e.g. a checksum).
        group: The group whose span is reported (``0``: the whole match); a
            match in which the group did not participate, or matched the empty
            string, is skipped.
        hint: A cheap precheck run before the expression: a substring that must
            occur in the text, or a predicate of the text. Without one every
            text is scanned.

    Raises:
        ConfigurationError: The name is empty, the pattern does not compile or
            has no such group, or the hint is neither a string nor callable.
    """

    __slots__ = ("pattern", "validate", "group", "hint")

    def __init__(
        self,
        name: str,
        pattern: str | re.Pattern[str],
        *,
        validate: Callable[[str], bool] | None = None,
        group: int | str = 0,
        hint: str | Callable[[str], bool] | None = None,
    ) -> None:
        _check_name(name)
        if isinstance(pattern, str):
            try:
                pattern = re.compile(pattern)
            except re.error as exc:
                raise ConfigurationError(
                    f"detector {name!r}: invalid regular expression {pattern!r}: {exc}"
                ) from exc
        elif not isinstance(pattern, re.Pattern) or not isinstance(pattern.pattern, str):
            raise ConfigurationError(
                f"detector {name!r}: pattern must be a str or a compiled str pattern, "
                f"got {pattern!r}"
            )
        if isinstance(group, int) and not 0 <= group <= pattern.groups:
            raise ConfigurationError(
                f"detector {name!r}: pattern {pattern.pattern!r} has no group {group}"
            )
        if isinstance(group, str) and group not in pattern.groupindex:
            raise ConfigurationError(
                f"detector {name!r}: pattern {pattern.pattern!r} has no group {group!r}"
            )
        if validate is not None and not callable(validate):
            raise ConfigurationError(f"detector {name!r}: validate must be callable")
        self.name = name
        self.pattern = pattern
        self.validate = validate
        self.group = group
        self.hint = hint
        if hint is None or hint == "":
            self.precheck = None
        elif isinstance(hint, str):
            self.precheck = _contains(hint)
        elif callable(hint):
            self.precheck = hint
        else:
            raise ConfigurationError(
                f"detector {name!r}: hint must be a substring or a predicate, got {hint!r}"
            )

    def _accept(self, match: re.Match[str]) -> bool:
        return self.validate is None or bool(self.validate(match.group(self.group)))

    def _scan(self, text: str, context: Any, cache: dict[Any, Any]) -> list[Span]:
        spans: list[Span] = []
        group, name, finditer = self.group, self.name, self.pattern.finditer
        for pos, endpos in _ranges(text, context):
            for match in finditer(text, pos, endpos):
                start, end = match.span(group)
                if start < end and self._accept(match):
                    spans.append(Span(start, end, name))
        return spans


class CallableDetector(_Prechecked):
    """A detector from a callable returning ``(start, end)`` pairs or :class:`Span` objects.

    Pairs are labelled with this detector's name; spans are kept as returned
    (so one callable, e.g. a named-entity model, may report several kinds).
    Empty spans are dropped.

    Args:
        name: The detector's name.
        fn: Called with the text; returns an iterable of pairs or spans (or
            ``None`` for none).

    Raises:
        ConfigurationError: The name is empty or ``fn`` is not callable; from
            :meth:`find`, ``fn`` returned something that is not a span of the
            text.
    """

    __slots__ = ("fn",)

    def __init__(self, name: str, fn: Callable[[str], Iterable[tuple[int, int] | Span]]) -> None:
        _check_name(name)
        if not callable(fn) or isinstance(fn, type):
            raise ConfigurationError(f"detector {name!r}: {fn!r} is not a function")
        self.name = name
        self.fn = fn
        self.precheck = None

    def _scan(self, text: str, context: Any, cache: dict[Any, Any]) -> list[Span]:
        found = self.fn(text)
        if not found:
            return []
        spans: list[Span] = []
        for item in found:
            if isinstance(item, Span):
                span = item
            else:
                try:
                    start, end = item
                except (TypeError, ValueError):
                    raise ConfigurationError(
                        f"detector {self.name!r} returned {item!r}; "
                        "expected (start, end) pairs or Span objects"
                    ) from None
                span = Span(start, end, self.name)
            _check_span(self.name, span, text)
            if span.start < span.end:
                spans.append(span)
        return spans


def _check_span(name: str, span: Any, text: str) -> None:
    if (
        not isinstance(span, Span)
        or not isinstance(span.start, int)
        or not isinstance(span.end, int)
        or not isinstance(span.detector, str)
        or not 0 <= span.start <= span.end <= len(text)
    ):
        raise ConfigurationError(
            f"detector {name!r} returned {span!r}, not a span of a text of length {len(text)}"
        )


class _AnyOf(_Prechecked):
    """One detector made of several (each with its own precheck), sharing a name."""

    __slots__ = ("parts",)

    def __init__(
        self, name: str, parts: Sequence[_Prechecked], precheck: Callable[[str], Any] | None
    ) -> None:
        self.name = name
        self.parts = tuple(parts)
        self.precheck = precheck

    def _scan(self, text: str, context: Any, cache: dict[Any, Any]) -> list[Span]:
        spans: list[Span] = []
        for part in self.parts:
            spans.extend(part._run(text, cache))
        return _resolve(spans)  # parts may find the same thing (+1 415 555 0132)


def _span_order(span: Span) -> tuple[int, int]:
    return span.start, span.start - span.end


def _resolve(spans: list[Span]) -> list[Span]:
    """``spans`` sorted by start, without the ones overlapping a kept one.

    Of spans starting together the longest is kept; of equal ones the first
    listed (the sort is stable).
    """
    if len(spans) < 2:
        return spans
    spans.sort(key=_span_order)
    kept = [spans[0]]
    for span in spans[1:]:
        if span.start >= kept[-1].end:
            kept.append(span)
    return kept
