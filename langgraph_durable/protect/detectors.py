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

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError
from ._builtin_detectors import (
    _builtins,
    _CardDetector,
    _EmailDetector,
    _IbanDetector,
    _Ipv4Detector,
    _Ipv6Detector,
    _KeyValueDetector,
    _PrivateKeyDetector,
)
from ._detector_base import (
    _MISSING,
    CallableDetector,
    Detector,
    RegexDetector,
    Span,
    _AnyOf,
    _check_name,
    _check_span,
    _Prechecked,
    _resolve,
)

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
