"""The built-in PII and secret detectors (what each finds: ``detectors``' module doc)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from typing import Any

from ._detector_base import (
    Detector,
    RegexDetector,
    Span,
    _AnyOf,
    _contains,
    _Prechecked,
    _ranges,
    _Windows,
)

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
