"""PII and secret detectors: find the spans of a string that redaction rewrites.

Every string stored in a checkpoint is scanned by the detectors of its
redaction rule, on every write, so the detectors are tuned to be cheap on text
that holds nothing: each built-in has a *precheck* (a character or substring
that must occur, such as ``@`` for e-mail or ``-----BEGIN`` for PEM keys) and
:func:`find_spans` runs a precheck shared by several detectors once per string.

Detection in free text is probabilistic. The built-ins are deliberately
conservative: a false positive rewrites an id, a version or a timestamp an
agent still needs, so when a shape is ambiguous it is *not* reported. They do
not replace a review of what a graph stores.

Built-in detectors (:data:`BUILTIN_DETECTORS`, in this order):

``email``
    ``local@domain.tld`` with an alphabetic top-level domain. Not caught:
    quoted or non-ASCII local parts, internationalized domains, hosts without a
    dot (``root@localhost``), obfuscated forms (``ann at example dot com``).
    Retina file names such as ``icon@2x.png`` and ``user@host:path`` (scp,
    URL userinfo) are not reported.
``phone``
    International numbers with a leading ``+`` (8-15 digits; spaces, dots,
    dashes and parentheses between groups), North American numbers with
    separators (``(415) 555-0132``, ``415-555-0132``, ``415.555.0132``,
    ``415 555-0132``, ``1-800-555-0199``; area and exchange codes must start
    with 2-9, so ``123-456-7890`` and ``555-123-4567`` are not reported), and
    national numbers with a trunk ``0`` written in separated groups (UK
    ``020 7946 0958``, FR ``01 23 45 67 89`` / ``01.23.45.67.89``, DE
    ``030 12345678`` / ``030/12345678``; 9-12 digits, one kind of separator).
    Not caught, on purpose: bare digit runs without ``+`` (``4155550132``),
    7-digit local numbers (``555-0132``), ``00``-prefixed international
    numbers (``0044 20 ...``) and national forms of other shapes. Never
    reported: numbers inside longer digit runs or dotted/dashed sequences
    (versions, dates, ISO timestamps, UUIDs, LangGraph channel versions such
    as ``00000000000000000000000000000002.0.2735194``). A leading-zero number
    written in groups (``0123 4567 890``) looks like a national phone number
    and is reported; a short number right after an international number
    (``+1 415 555 0132 22``) may be included in its span.
``card``
    Payment card numbers: 13-19 digits, bare or in groups of 3-6 separated by
    one kind of separator (space or dash), passing the Luhn check *and* starting
    with a known network prefix of a matching length (Visa, Mastercard, Amex,
    Discover, Diners, JCB, UnionPay, Maestro, Mir). The prefix table keeps
    Luhn-valid ids (snowflakes, millisecond timestamps, which start with 1) out;
    cards of other networks are not caught.
``iban``
    Uppercase IBANs, compact (``DE89370400440532013000``) or in groups of four
    (``DE89 3704 0044 0532 0130 00``), whose country is in the length table
    (the SEPA countries and other common ones) and whose ISO 13616 mod-97
    check passes. Lowercase IBANs and countries outside the table are not
    caught.
``ssn``
    US Social Security numbers ``AAA-GG-SSSS`` or ``AAA GG SSSS`` (the two
    separators alike); never-issued values (area 000, 666 or 900-999, group
    00, serial 0000) and bare 9-digit runs are not reported.
``ip``
    IPv4 addresses in dotted-quad form (octets 0-255 without leading zeros)
    that are not part of a longer dotted sequence (``1.2.3.4.5``) and are not
    version numbers: ``v1.2.3.4`` and a dotted quad right after the word
    ``v``, ``ver``, ``version``, ``release`` or ``build`` (``version 1.2.3.4``,
    ``"version": "1.2.3.4"``) are excluded. A bare ``1.2.3.4`` is reported.
    IPv6 addresses (full, compressed and IPv4-mapped) are validated with
    :mod:`ipaddress`; to keep C++/Rust paths and Python slices out, an IPv6
    candidate needs a decimal digit and a group of at least three hex digits
    (``fe80::1`` yes, ``x[1::2]`` and ``dead::beef`` no). Unspecified and
    loopback addresses (``0.0.0.0``, ``127.0.0.0/8``, ``::``, ``::1``) identify
    no one and are not reported. Zone ids (``%eth0``) are not part of the span.
``aws_access_key``
    AWS access key ids: ``AKIA``/``ASIA``/``AGPA``/``AIDA``/``AROA``/``ANPA``/
    ``ANVA``/``AIPA`` + 16 uppercase letters or digits, not adjacent to other
    letters or digits.
``aws_secret_key``
    40-character AWS secret access keys, only right after a key naming them
    (``aws_secret_access_key=``, ``"SecretAccessKey": "``, ``secret_key:``);
    the span is the secret. A secret without such a key is not caught.
``bearer_token``
    The token after ``Bearer`` (case-insensitive, on the same line; at least
    8 characters that do not read as a word: a digit or symbol, 24+ letters,
    or 16+ letters with inner capitals, so ``Bearer instruments`` is prose)
    and JSON Web Tokens anywhere (``eyJ...``.``eyJ...``.``signature``).
``private_key``
    PEM private-key blocks, whole: ``-----BEGIN [RSA |EC |OPENSSH |ENCRYPTED
    ]PRIVATE KEY-----`` (also PGP private key blocks) through the next
    ``-----END ... PRIVATE KEY-----`` line before another BEGIN line, with
    real or escaped (``\\n``) line breaks. A block without its END line
    (truncated) is reported through its last base64 or header line. Public
    keys and certificates are not reported.
``api_key``
    The value of a credential-like key: ``api_key``/``apikey``/``api-key``/
    ``x-api-key`` (any identifier ending in ``api key``), ``secret``,
    ``password``/``passwd``/``passphrase`` (with any prefix: ``client_secret``,
    ``db_password``), ``secret_key``/``private_key``, and ``token`` alone or
    as ``access_token``, ``auth_token``, ``refresh_token``, ``id_token``,
    ``session_token`` and similar (not ``page_token``, ``next_token``, ...:
    pagination cursors are ids), followed by ``=``, ``:`` or ``=>`` (the key
    case-insensitive, optionally quoted). The span is the value, quoted or
    bare, at least 8 characters. Not reported: placeholders (``<API_KEY>``,
    ``********``), variable references (``$TOKEN``, ``${TOKEN}``,
    ``config.api_key``, ``os.environ[...]``), and a bare value that reads as a
    word (letters only, under 24 of them, and not mixed-case if 16 or more:
    ``Password: required``). A quoted value ends at the first quote (either
    kind) or line break. Not caught: a secret in prose without a separator
    (``the password is hunter2``).

Custom detectors are registered by name (:func:`make_detector`,
:func:`resolve_detectors`): a regex, a callable returning spans, or any object
with a ``name`` and a ``find(text)`` method (:class:`Detector`).
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigurationError

__all__ = [
    "Span",
    "Detector",
    "RegexDetector",
    "CallableDetector",
    "BUILTIN_DETECTORS",
    "make_detector",
    "resolve_detectors",
    "find_spans",
    "placeholder",
]


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


# --------------------------------------------------------------------------- prechecks


def _has_digit(text: str) -> bool:
    # Ten substring searches are ~5x faster than a regex scan for [0-9].
    return (
        "0" in text
        or "1" in text
        or "2" in text
        or "3" in text
        or "4" in text
        or "5" in text
        or "6" in text
        or "7" in text
        or "8" in text
        or "9" in text
    )


# A digit, 5+ digits or separators, a digit: every phone number, card, SSN and
# IPv4 address lies in one such run (IBANs contain one).
_NUMBER_RUN = re.compile(r"[0-9][0-9 ().\-/]{5,}[0-9]")
_NO_WINDOWS = _Windows()


def _number_windows(text: str) -> _Windows:
    """The ranges of ``text`` that can hold a number (none without a digit)."""
    if not _has_digit(text):
        return _NO_WINDOWS
    size = len(text)
    return _Windows(
        (max(0, m.start() - 2), min(size, m.end() + 3)) for m in _NUMBER_RUN.finditer(text)
    )


# Guards around numbers: not inside a word, a longer digit run, or a dotted,
# dashed or slashed sequence (versions, dates, ids).
_NUM_BEFORE = r"(?<![\w+.\-/])"
_NUM_AFTER = r"(?![\w+]|[.\-/][0-9])"


def _digit_count(value: str) -> int:
    return sum(c.isdigit() for c in value)


# --------------------------------------------------------------------------- email

_EMAIL = re.compile(
    r"(?<![\w.%+\-])"
    r"[A-Za-z0-9_](?:[A-Za-z0-9_.%+\-]{0,62}[A-Za-z0-9_%+\-])?"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}"
    r"(?![\w\-]|\.[A-Za-z0-9]|:\S)"  # not git@host:org/repo or user@host:port
)
_EMAIL_LOCAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.%+-")
_RETINA = re.compile(r"[0-9]+(?:\.[0-9]+)?x\.")


class _EmailDetector(_Prechecked):
    """E-mail addresses, found from each ``@`` (the local part is walked back to)."""

    __slots__ = ()

    def __init__(self) -> None:
        self.name = "email"
        self.precheck = _contains("@")

    def _scan(self, text: str, context: Any, cache: dict[Any, Any]) -> list[Span]:
        spans: list[Span] = []
        at = text.find("@")
        while at != -1:
            start = at
            floor = max(0, at - 65)
            while start > floor and text[start - 1] in _EMAIL_LOCAL:
                start -= 1
            match = _EMAIL.match(text, start) if start < at else None
            if match is not None and self._valid(match.group()):
                spans.append(Span(match.start(), match.end(), "email"))
                at = text.find("@", match.end())
            else:
                at = text.find("@", at + 1)
        return spans

    @staticmethod
    def _valid(address: str) -> bool:
        local, _, domain = address.partition("@")
        return ".." not in local and _RETINA.match(domain) is None


# --------------------------------------------------------------------------- phone

_PHONE_SEP = r"(?:[ .\-]\(?|\(|\)[ .\-]?)"
# + country code and groups; the last group has 2+ digits (so a short number
# after the phone number is not swallowed).
_PHONE_INTL = re.compile(
    r"(?<![\w+])\+\(?[1-9][0-9]*"
    rf"(?:(?:{_PHONE_SEP}[0-9]+)*{_PHONE_SEP}[0-9]{{2,}})?{_NUM_AFTER}"
)
_PHONE_NANP = re.compile(
    rf"{_NUM_BEFORE}(?:1[ .\-]?)?"
    r"(?:\([2-9][0-9]{2}\) ?[2-9][0-9]{2}[ .\-][0-9]{4}"
    r"|[2-9][0-9]{2}(?P<s>[ .\-])[2-9][0-9]{2}(?:(?P=s)|-)[0-9]{4})"
    rf"{_NUM_AFTER}"
)
_PHONE_TRUNK = re.compile(
    rf"{_NUM_BEFORE}(?:0[1-9][0-9]{{0,3}}|\(0[1-9][0-9]{{0,3}}\))"
    rf"(?P<t>[ \-/])[0-9]{{2,8}}(?:(?P=t)[0-9]{{2,8}}){{0,4}}{_NUM_AFTER}"
)
_PHONE_FR_DOTS = re.compile(rf"{_NUM_BEFORE}0[1-9](?:\.[0-9]{{2}}){{4}}{_NUM_AFTER}")
_DATE_LIKE = re.compile(r"\+?[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _valid_intl_phone(value: str) -> bool:
    if not 8 <= _digit_count(value) <= 15 or _DATE_LIKE.fullmatch(value):
        return False
    depth = 0
    for c in value:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        if not 0 <= depth <= 1:
            return False
    return depth == 0


def _valid_trunk_phone(value: str) -> bool:
    return 9 <= _digit_count(value) <= 12


# --------------------------------------------------------------------------- card

_CARD_CANDIDATE = re.compile(rf"{_NUM_BEFORE}[0-9]+(?:[ \-][0-9]+)*{_NUM_AFTER}")
_DIGITS = re.compile(r"[0-9]+")


def _luhn(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = ord(c) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _card_network_ok(digits: str) -> bool:
    """Whether ``digits`` starts with a known network prefix and has its length."""
    n = len(digits)
    d2, d3, d4 = int(digits[:2]), int(digits[:3]), int(digits[:4])
    if digits[0] == "4":  # Visa
        return n in (13, 16, 19)
    if 51 <= d2 <= 55 or 2221 <= d4 <= 2720:  # Mastercard
        return n == 16
    if d2 in (34, 37):  # American Express
        return n == 15
    if 2200 <= d4 <= 2204:  # Mir
        return 16 <= n <= 19
    if d4 == 6011 or 644 <= d3 <= 649 or d2 in (62, 65):  # Discover, UnionPay
        return 16 <= n <= 19
    if 3528 <= d4 <= 3589:  # JCB
        return 16 <= n <= 19
    if 300 <= d3 <= 305 or d2 in (36, 38, 39) or d4 == 3095:  # Diners Club
        return 14 <= n <= 19
    if d2 in (50, 56, 57, 58, 63, 67):  # Maestro
        return 13 <= n <= 19
    return False


def _valid_card(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and _card_network_ok(digits) and _luhn(digits)


class _CardDetector(_Prechecked):
    """Cards in a run of digit groups: the longest valid run of whole groups wins."""

    __slots__ = ()

    def __init__(self) -> None:
        self.name = "card"
        self.precheck = _number_windows

    def _scan(self, text: str, context: Any, cache: dict[Any, Any]) -> list[Span]:
        spans: list[Span] = []
        for pos, endpos in _ranges(text, context):
            for match in _CARD_CANDIDATE.finditer(text, pos, endpos):
                if match.end() - match.start() >= 13:
                    spans.extend(self._in_run(match.group(), match.start()))
        return spans

    @staticmethod
    def _in_run(run: str, offset: int) -> list[Span]:
        groups = [m.span() for m in _DIGITS.finditer(run)]
        count = len(groups)
        spans: list[Span] = []
        i = 0
        while i < count:
            start, end = groups[i]
            found = -1
            if 13 <= end - start <= 19:  # a bare number
                if _valid_card(run[start:end]):
                    found = i
            elif 3 <= end - start <= 6:  # groups of 3-6 digits, one kind of separator
                sep = run[end] if i + 1 < count else ""
                digits, j, ends = end - start, i, []
                while j + 1 < count and run[groups[j][1]] == sep:
                    size = groups[j + 1][1] - groups[j + 1][0]
                    if not 3 <= size <= 6 or digits + size > 19:
                        break
                    digits += size
                    j += 1
                    if digits >= 13:
                        ends.append(j)
                for j in reversed(ends):  # the longest first
                    if _valid_card("".join(run[a:b] for a, b in groups[i : j + 1])):
                        found = j
                        break
            if found < 0:
                i += 1
            else:
                spans.append(Span(offset + start, offset + groups[found][1], "card"))
                i = found + 1
        return spans


# --------------------------------------------------------------------------- iban

# ISO 13616 registry: country code -> IBAN length.
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22,
    "BH": 22, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24,
    "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SC": 31,
    "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip
# Starts with a letter (a fast scan) and looks back for a word start.
_IBAN_CANDIDATE = re.compile(
    r"[A-Z](?<![A-Za-z0-9][A-Z])[A-Z][0-9]{2}"
    r"(?:[A-Z0-9]{11,30}|(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,4})?)"
    r"(?![A-Za-z0-9])"
)
_IBAN_REACH = 44
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def _iban_checksum_ok(iban: str) -> bool:
    number = "".join(str(int(c, 36)) for c in iban[4:] + iban[:4])
    return int(number) % 97 == 1


class _IbanDetector(_Prechecked):
    """IBANs; a grouped candidate is cut to its country's length at a group end."""

    __slots__ = ()

    def __init__(self) -> None:
        self.name = "iban"
        self.precheck = _number_windows

    def _scan(self, text: str, context: Any, cache: dict[Any, Any]) -> list[Span]:
        spans: list[Span] = []
        for match in self._candidates(text, context):
            candidate = match.group()
            length = _IBAN_LENGTHS.get(candidate[:2])
            if length is None:
                continue
            seen = cut = 0
            for cut, c in enumerate(candidate, 1):  # noqa: B007 (cut is used below)
                if c != " ":
                    seen += 1
                    if seen == length:
                        break
            end = match.start() + cut
            if seen != length or (end < len(text) and text[end] in _ALNUM):
                continue
            if _iban_checksum_ok(candidate[:cut].replace(" ", "")):
                spans.append(Span(match.start(), end, "iban"))
        return spans

    @staticmethod
    def _candidates(text: str, context: Any) -> Iterator[re.Match[str]]:
        # An IBAN (at most 42 characters with its spaces) holds a number run: scan
        # around the runs only. A candidate cut short by ``endpos`` is rejected by
        # the caller's look at the character after it.
        size = len(text)
        pos = endpos = -1
        for start, end in _ranges(text, context):
            start, end = max(0, start - _IBAN_REACH), min(size, end + _IBAN_REACH)
            if start > endpos:
                if endpos > pos:
                    yield from _IBAN_CANDIDATE.finditer(text, pos, endpos)
                pos = start
            endpos = end
        if endpos > pos:
            yield from _IBAN_CANDIDATE.finditer(text, pos, endpos)


# --------------------------------------------------------------------------- ssn

_SSN = re.compile(rf"{_NUM_BEFORE}[0-9]{{3}}(?P<s>[ \-])[0-9]{{2}}(?P=s)[0-9]{{4}}{_NUM_AFTER}")


def _valid_ssn(value: str) -> bool:
    area, group, serial = value[:3], value[4:6], value[7:]
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


# --------------------------------------------------------------------------- ip

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"(?<![\w.]){_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}(?![\w]|\.[0-9])")
_VERSION_BEFORE = re.compile(
    r"(?<![A-Za-z0-9])(?:v|ver|version|release|build)[\"']?[ \t]*[:=]?[ \t]*[\"']?$",
    re.IGNORECASE,
)
_IPV6_CANDIDATE = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f.]*")
# Literal ':' first (a fast scan): a full address has ':h:h:' somewhere.
_HEX_COLONS = re.compile(r":[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}:")
_HEX3 = re.compile(r"(?:^|:)[0-9A-Fa-f]{3}")


def _ipv6_hint(text: str) -> bool:
    return ":" in text and ("::" in text or _HEX_COLONS.search(text) is not None)


class _Ipv4Detector(_Prechecked):
    __slots__ = ()

    def __init__(self) -> None:
        self.name = "ip"
        self.precheck = _number_windows

    def _scan(self, text: str, context: Any, cache: dict[Any, Any]) -> list[Span]:
        spans: list[Span] = []
        for pos, endpos in _ranges(text, context):
            for match in _IPV4.finditer(text, pos, endpos):
                start = match.start()
                if _VERSION_BEFORE.search(text, max(0, start - 24), start):
                    continue
                address = ipaddress.IPv4Address(match.group())
                if not (address.is_loopback or address.is_unspecified):
                    spans.append(Span(start, match.end(), "ip"))
        return spans


class _Ipv6Detector(_Prechecked):
    __slots__ = ()

    def __init__(self) -> None:
        self.name = "ip"
        self.precheck = _ipv6_hint

    def _scan(self, text: str, context: Any, cache: dict[Any, Any]) -> list[Span]:
        spans: list[Span] = []
        size = len(text)
        for match in _IPV6_CANDIDATE.finditer(text):
            start, end = match.span()
            if end < size and (text[end].isalnum() or text[end] in "_:"):
                continue
            candidate = match.group()
            while candidate.endswith("."):
                candidate = candidate[:-1]
                end -= 1
            if candidate.endswith(":") and not candidate.endswith("::"):
                candidate = candidate[:-1]
                end -= 1
            if not _has_digit(candidate) or _HEX3.search(candidate) is None:
                continue
            try:
                address = ipaddress.IPv6Address(candidate)
            except ValueError:
                continue
            if not (address.is_loopback or address.is_unspecified):
                spans.append(Span(start, end, "ip"))
        return spans


# --------------------------------------------------------------------------- secrets

# Literal 'A' first (a fast scan), then a look back for a word start.
_AWS_ACCESS_KEY = re.compile(
    r"A(?<![A-Za-z0-9]A)(?:KIA|SIA|GPA|IDA|ROA|NPA|NVA|IPA)[A-Z0-9]{16}(?![A-Za-z0-9])"
)
_AWS_ACCESS_PREFIX = re.compile(r"A(?:KIA|SIA|GPA|IDA|ROA|NPA|NVA|IPA)")


def _aws_access_hint(text: str) -> bool:
    return "A" in text and _AWS_ACCESS_PREFIX.search(text) is not None


_KEY_VALUE_SEP = r"[\"']?[ \t]*(?:=>|[:=])[ \t]*"
_AWS_SECRET_KEY = re.compile(
    r"(?<![A-Za-z0-9])(?i:(?:aws[_.\-]?)?secret[_.\-]?(?:access[_.\-]?)?key)"
    rf"{_KEY_VALUE_SEP}[\"']?(?P<secret>[A-Za-z0-9/+]{{40}})(?![A-Za-z0-9/+=])"
)


def _aws_secret_hint(text: str) -> bool:
    return "ecret" in text or "ECRET" in text


_BEARER = re.compile(
    r"(?<![\w\-])(?i:bearer)[ \t]+(?P<token>[A-Za-z0-9\-._~+/]*[A-Za-z0-9\-_~+/]=*)"
)
_JWT = re.compile(r"eyJ(?<![\w\-]eyJ)[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*")


def _looks_random(value: str) -> bool:
    """A secret-looking value: a digit or symbol, 16+ letters with inner capitals, or 24+ letters.

    A single lowercase, UPPERCASE or Capitalized word (``required``,
    ``Instruments``) is prose, not a secret.
    """
    if not value.isalpha():
        return True
    if len(value) >= 24:
        return True
    return len(value) >= 16 and not value[1:].islower() and not value.isupper()


def _valid_bearer(token: str) -> bool:
    return len(token) >= 8 and _looks_random(token)


def _bearer_hint(text: str) -> bool:
    return "earer" in text or "EARER" in text or "eyJ" in text


_PEM_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
# After a BEGIN line without an END line (truncated): base64 and header lines.
_PEM_BODY = re.compile(
    r"(?:(?:\r?\n|\\r?\\n)(?:[A-Za-z0-9+/=]+|[A-Za-z\-]+: [^\r\n\\]*)(?=[\r\n\\]|$))*"
)


class _PrivateKeyDetector(_Prechecked):
    """PEM private-key blocks: each BEGIN line through the next END line before another BEGIN."""

    __slots__ = ()

    def __init__(self) -> None:
        self.name = "private_key"
        self.precheck = _contains("-----BEGIN ")

    def _scan(self, text: str, context: Any, cache: dict[Any, Any]) -> list[Span]:
        spans: list[Span] = []
        begin = text.find("-----BEGIN ")
        while begin != -1:
            header = _PEM_BEGIN.match(text, begin)
            following = text.find("-----BEGIN ", begin + 1)
            if header is not None:
                limit = len(text) if following == -1 else following
                footer = _PEM_END.search(text, header.end(), limit)
                if footer is not None:
                    end = footer.end()
                else:
                    body = _PEM_BODY.match(text, header.end(), limit)
                    end = header.end() if body is None else body.end()
                spans.append(Span(begin, end, "private_key"))
            begin = following
        return spans


_API_KEY = re.compile(
    r"(?<![\w\-])(?P<key>(?i:"
    r"[\w\-]*?api[_\-]?key"
    r"|[\w\-]*?(?:secret|password|passwd|passphrase)"
    r"|[\w\-]*?(?:secret|private)[_\-]?(?:access[_\-]?)?key"
    r"|(?:(?:access|auth|refresh|id|session|api|bearer|csrf|xsrf|oauth|app|bot|client"
    r"|personal[_\-]?access|security)[_\-]?)?token"
    rf")){_KEY_VALUE_SEP}"
    r"(?:(?P<q>[\"'])(?P<quoted>[^\"'\r\n]{8,})(?P=q)"
    # a bare value is a whole run, not followed by a call or subscript: os.environ[...]
    r"|(?P<bare>[^\s\"'`,;&<>(){}\[\]]{8,})(?=[\s\"'`,;&<>{})\]]|$))"
)
# Placeholders, masks and template references are not secrets.
_NOT_A_SECRET = re.compile(
    r"<[A-Za-z0-9_:\-]+>|\[[A-Za-z0-9_:\-]+\]|(.)\1*|\$\{?\w+\}?|\{\{.*\}\}|%\(\w+\)s"
    r"|undefined|none|null",
    re.IGNORECASE,
)
# A bare dotted name is a reference in code (``config.api_key``), not a value.
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


class _KeyValueDetector(RegexDetector):
    """``api_key``: the value of a credential-like key, quoted or bare."""

    __slots__ = ()

    def _scan(self, text: str, context: Any, cache: dict[Any, Any]) -> list[Span]:
        spans: list[Span] = []
        for match in self.pattern.finditer(text):
            group = "quoted" if match.group("quoted") is not None else "bare"
            value = match.group(group)
            if group == "bare" and (not _looks_random(value) or _DOTTED_NAME.fullmatch(value)):
                continue
            if _NOT_A_SECRET.fullmatch(value) is None:
                spans.append(Span(match.start(group), match.end(group), self.name))
        return spans


def _api_key_hint(text: str) -> bool:
    if "=" not in text and ":" not in text:
        return False
    low = text.lower()
    return "key" in low or "token" in low or "secret" in low or "pass" in low


# --------------------------------------------------------------------------- registry


def _in_numbers(detector: RegexDetector) -> RegexDetector:
    """``detector`` scanning only the ranges of a text that can hold a number."""
    detector.precheck = _number_windows
    return detector


def _builtins() -> dict[str, Detector]:
    phone = _AnyOf(
        "phone",
        [
            _in_numbers(RegexDetector("phone", _PHONE_INTL, validate=_valid_intl_phone)),
            _in_numbers(RegexDetector("phone", _PHONE_NANP)),
            _in_numbers(RegexDetector("phone", _PHONE_TRUNK, validate=_valid_trunk_phone)),
            _in_numbers(RegexDetector("phone", _PHONE_FR_DOTS)),
        ],
        _number_windows,
    )
    return {
        "email": _EmailDetector(),
        "phone": phone,
        "card": _CardDetector(),
        "iban": _IbanDetector(),
        "ssn": _in_numbers(RegexDetector("ssn", _SSN, validate=_valid_ssn)),
        "ip": _AnyOf("ip", [_Ipv4Detector(), _Ipv6Detector()], _has_digit),
        "aws_access_key": RegexDetector("aws_access_key", _AWS_ACCESS_KEY, hint=_aws_access_hint),
        "aws_secret_key": RegexDetector(
            "aws_secret_key", _AWS_SECRET_KEY, group="secret", hint=_aws_secret_hint
        ),
        "bearer_token": _AnyOf(
            "bearer_token",
            [
                RegexDetector("bearer_token", _BEARER, validate=_valid_bearer, group="token"),
                RegexDetector("bearer_token", _JWT),
            ],
            _bearer_hint,
        ),
        "private_key": _PrivateKeyDetector(),
        "api_key": _KeyValueDetector("api_key", _API_KEY, hint=_api_key_hint),
    }


#: The built-in detectors by name, in the order :func:`resolve_detectors` uses.
BUILTIN_DETECTORS: dict[str, Detector] = _builtins()


def make_detector(
    name: str, spec: str | re.Pattern[str] | Callable[..., Any] | Detector
) -> Detector:
    """A detector registered under ``name`` from a regex, a callable or a detector.

    Args:
        name: The name (labels the spans of a regex or of a callable returning
            pairs; the placeholder is ``<NAME>``).
        spec: A regular expression (string or compiled; every non-empty match
            is a finding), a callable ``fn(text)`` returning ``(start, end)``
            pairs or :class:`Span` objects, or a :class:`Detector` (used as it
            is: its own name labels its spans).

    Returns:
        The detector.

    Raises:
        ConfigurationError: The name is empty, the regex is empty or does not
            compile, or ``spec`` is none of the above.
    """
    _check_name(name)
    if isinstance(spec, (str, re.Pattern)):
        if not (spec if isinstance(spec, str) else spec.pattern):
            raise ConfigurationError(f"detector {name!r}: the regular expression is empty")
        return RegexDetector(name, spec)
    if isinstance(spec, type):
        raise ConfigurationError(
            f"detector {name!r}: expected a regex, a callable or a detector instance, "
            f"got the class {spec.__name__}"
        )
    if isinstance(spec, Detector) and isinstance(spec.name, str) and callable(spec.find):
        return spec
    if callable(spec):
        return CallableDetector(name, spec)
    raise ConfigurationError(
        f"detector {name!r}: expected a regex (str or compiled), a callable returning "
        f"(start, end) pairs or Spans, or a Detector; got {spec!r}"
    )


def resolve_detectors(
    names: Iterable[str] | None, custom: Mapping[str, Any] | None = None
) -> tuple[Detector, ...]:
    """The detectors to run, from names of built-in and custom detectors.

    A custom detector named like a built-in replaces it (in the built-in's
    place).

    Args:
        names: Detector names, in order (repeats are dropped; a single string
            is one name); ``None`` for every built-in and then every custom
            detector.
        custom: Custom detectors by name; each value is given to
            :func:`make_detector`.

    Returns:
        The detectors.

    Raises:
        ConfigurationError: A name is unknown (the message lists the known
            ones) or a custom detector is invalid.
    """
    customs = {key: make_detector(key, spec) for key, spec in (custom or {}).items()}
    known: dict[str, Detector] = {**BUILTIN_DETECTORS, **customs}
    if names is None:
        return tuple(known.values())
    if isinstance(names, str):
        names = (names,)
    chosen: dict[str, Detector] = {}
    for name in names:
        detector = known.get(name) if isinstance(name, str) else None
        if detector is None:
            raise ConfigurationError(
                f"unknown detector {name!r}; known detectors: {', '.join(known)}"
            )
        chosen.setdefault(name, detector)
    return tuple(chosen.values())


# The detector classes defined here (exactly: a subclass may override find).
_OWN_TYPES = frozenset(
    {
        RegexDetector,
        CallableDetector,
        _AnyOf,
        _EmailDetector,
        _CardDetector,
        _IbanDetector,
        _Ipv4Detector,
        _Ipv6Detector,
        _PrivateKeyDetector,
        _KeyValueDetector,
    }
)


def find_spans(text: str, detectors: Sequence[Detector]) -> list[Span]:
    """Every finding of ``detectors`` in ``text``, sorted, without overlaps.

    Detection runs on the text's NFKC form, so full-width and other compatibility
    forms (``ann＠example.com``, ``４１１１ １１１１ ...``) are found like their ASCII
    twins; the spans returned are of ``text`` itself (see :func:`_find_folded`).
    Overlaps are resolved left to right: the earliest-starting span is kept
    (of those starting together, the longest; of equal ones, the one of the
    detector listed first) and every span overlapping a kept one is dropped.
    Prechecks shared by several built-in detectors run once.

    Args:
        text: The string to scan.
        detectors: The detectors to run.

    Returns:
        The kept spans, sorted by start.

    Raises:
        ConfigurationError: A detector returned something that is not a span
            of the text.
    """
    if not text:
        return []
    if not text.isascii() and not unicodedata.is_normalized("NFKC", text):
        return _find_folded(text, detectors)
    return _find(text, detectors)


class _OneForOne(dict[int, int | str]):
    """A ``str.translate`` table: each character to its NFKC form when that is one
    character (``＠`` to ``@``, ``４`` to ``4``), else to itself; filled as characters
    are met (at most ``_FOLD_CACHE`` of them are kept)."""

    def __missing__(self, code: int) -> int | str:
        char = chr(code)
        folded = unicodedata.normalize("NFKC", char)
        value: int | str = folded if len(folded) == 1 and folded != char else code
        if len(self) < _FOLD_CACHE:
            self[code] = value
        return value


_FOLD_CACHE = 65536
_ONE_FOR_ONE = _OneForOne()


def _fold(text: str) -> tuple[str, list[int], list[int]] | None:
    """``text`` in NFKC form, with each of its characters' span in ``text``.

    Each cluster (a character and the combining marks after it) is normalized
    on its own, so every character of the result comes from one cluster;
    None when that differs from normalizing the whole text (a rare
    composition across clusters, such as Hangul jamo).
    """
    parts: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    normalize = unicodedata.normalize
    combining = unicodedata.combining
    begin = 0
    size = len(text)
    while begin < size:
        end = begin + 1
        while end < size and combining(text[end]):
            end += 1
        piece = normalize("NFKC", text[begin:end])
        parts.append(piece)
        starts.extend([begin] * len(piece))
        ends.extend([end] * len(piece))
        begin = end
    folded = "".join(parts)
    return (folded, starts, ends) if folded == normalize("NFKC", text) else None


def _find_folded(text: str, detectors: Sequence[Detector]) -> list[Span]:
    """Spans of ``text`` found on its NFKC form.

    Most such texts fold one character for one (full-width forms, mathematical
    digits): found with :meth:`str.translate` and scanned with the same indices.
    Otherwise a finding covers every original character any of its characters came from
    (a character that folds into several, such as ``㎖``, is masked whole if
    part of it is in a finding), and findings that then overlap are merged.
    When the NFKC form cannot be mapped back (:func:`_fold` gives None), a
    finding masks the whole text.
    """
    quick = text.translate(_ONE_FOR_ONE)
    if quick == unicodedata.normalize("NFKC", text):
        return _find(quick, detectors)  # one character for one: the same indices
    folded = _fold(text)
    if folded is None:
        found = _find(unicodedata.normalize("NFKC", text), detectors)
        return [Span(0, len(text), found[0].detector)] if found else []
    form, starts, ends = folded
    merged: list[Span] = []
    for span in _find(form, detectors):
        start, end = starts[span.start], ends[span.end - 1]
        if merged and start < merged[-1].end:
            last = merged[-1]
            merged[-1] = Span(last.start, max(last.end, end), last.detector)
        else:
            merged.append(Span(start, end, span.detector))
    return merged


def _find(text: str, detectors: Sequence[Detector]) -> list[Span]:
    found: list[Span] = []
    cache: dict[Any, Any] = {}
    for detector in detectors:
        if type(detector) in _OWN_TYPES:
            # _run inlined (most texts stop at a precheck), its cache shared
            own: _Prechecked = detector  # type: ignore[assignment]
            precheck = own.precheck
            context: Any = True
            if precheck is not None:
                context = cache.get(precheck, _MISSING)
                if context is _MISSING:
                    context = cache[precheck] = precheck(text)
                if not context:
                    continue
            spans = own._scan(text, context, cache)
        else:
            spans = detector.find(text)
            for span in spans:
                _check_span(detector.name, span, text)
            spans = [span for span in spans if span.start < span.end]
        if spans:
            found.extend(spans)
    return _resolve(found)


def placeholder(detector: str) -> str:
    """The text that replaces a finding of ``detector`` (``"email"`` -> ``"<EMAIL>"``).

    Args:
        detector: A detector name.

    Returns:
        ``"<" + detector.upper() + ">"``.
    """
    return f"<{detector.upper()}>"
