"""The PII and secret detectors of redaction: built-ins, custom detectors, span resolution.

All values are fake: documentation IP ranges, 555 phone numbers, card numbers
and IBANs whose check digits are computed here, made-up keys and tokens.
"""

from __future__ import annotations

import base64
import gc
import json
import re
import time
from collections.abc import Callable

import pytest

from langgraph_durable.errors import ConfigurationError
from langgraph_durable.protect.detectors import (
    BUILTIN_DETECTORS,
    CallableDetector,
    Detector,
    RegexDetector,
    Span,
    find_spans,
    make_detector,
    placeholder,
    resolve_detectors,
)

# ---- test data helpers --------------------------------------------------------------


def luhn_complete(partial: str) -> str:
    """``partial`` plus the check digit that makes it pass the Luhn check."""
    for check in "0123456789":
        digits = [int(c) for c in partial + check]
        total = sum(digits[-1::-2]) + sum(sum(divmod(2 * d, 10)) for d in digits[-2::-2])
        if total % 10 == 0:
            return partial + check
    raise AssertionError("unreachable")


def luhn_break(number: str) -> str:
    """``number`` with a wrong last digit."""
    return number[:-1] + str((int(number[-1]) + 1) % 10)


def grouped(number: str, sizes: tuple[int, ...], sep: str = " ") -> str:
    parts, i = [], 0
    for size in sizes:
        parts.append(number[i : i + size])
        i += size
    return sep.join(parts)


def iban(country: str, bban: str) -> str:
    """A compact IBAN with ISO 13616 check digits computed for ``bban``."""
    numeric = "".join(str(int(c, 36)) for c in bban + country + "00")
    return f"{country}{98 - int(numeric) % 97:02d}{bban}"


def spaced(value: str) -> str:
    return " ".join(value[i : i + 4] for i in range(0, len(value), 4))


def b64url(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def jwt(payload: dict[str, object], signature: str = "ZmFrZS1zaWduYXR1cmU") -> str:
    return f"{b64url({'alg': 'HS256', 'typ': 'JWT'})}.{b64url(payload)}.{signature}"


def found(name: str, text: str) -> list[str]:
    """The texts the built-in ``name`` finds, in order."""
    spans = sorted(BUILTIN_DETECTORS[name].find(text), key=lambda s: s.start)
    for span in spans:
        assert span.detector == name
    return [text[s.start : s.end] for s in spans]


VISA = "4111 1111 1111 1111"
VISA16 = luhn_complete("411111111111111")  # 4111111111111111
MC = luhn_complete("555555555555444")
AMEX = luhn_complete("37828224631000")
DISCOVER = luhn_complete("601111111111111")
JCB = luhn_complete("353011133330000")
DINERS = luhn_complete("3056930902590")
VISA13 = luhn_complete("422222222222")
MC2 = luhn_complete("222300312200322")
UNIONPAY19 = luhn_complete("621234567890123456")

IBAN_DE = iban("DE", "123456780123456789")
IBAN_GB = iban("GB", "TEST12345612345678")
IBAN_FR = iban("FR", "12345678900000ABC123456")
IBAN_NL = iban("NL", "TEST0123456789")
IBAN_BE = iban("BE", "123456789012")
IBAN_NO = iban("NO", "12345678901")
IBAN_CH = iban("CH", "12345ABCDEF123456")
IBAN_IT = iban("IT", "X0542811101000000123456")
IBAN_MT = iban("MT", "TEST01100000000000012345ABC")
IBAN_ES = iban("ES", "12345678061234567890")

AWS_ID_TAIL = "ZZZZTESTFAKE0001"
AWS_SECRET = "fAkE/SeCrEt+KeY0123456789abcdefghijKLMNO"
JWT = jwt({"sub": "test-user", "iat": 1700000000})


def test_helpers_make_what_they_claim() -> None:
    assert VISA16 == VISA.replace(" ", "") and luhn_break(VISA16) != VISA16
    assert len(AWS_ID_TAIL) == 16 and len(AWS_SECRET) == 40
    for value, length in [(IBAN_DE, 22), (IBAN_GB, 22), (IBAN_FR, 27), (IBAN_NO, 15)]:
        assert len(value) == length
    assert JWT.startswith("eyJ") and JWT.split(".")[1].startswith("eyJ")


# ---- email ----------------------------------------------------------------------------

EMAIL_POSITIVE = [
    ("contact ann.lee@example.com today", "ann.lee@example.com"),
    ("<bob+tag@example.org>", "bob+tag@example.org"),
    ("mailto:first_last@mail.example.co.uk?subject=hi", "first_last@mail.example.co.uk"),
    ("Email: J.Doe-99@sub-domain.example.net.", "J.Doe-99@sub-domain.example.net"),
    ('{"email": "x_y.z%1@example.io"}', "x_y.z%1@example.io"),
    ("user123@example.com, next", "user123@example.com"),
    ("(someone@test.example)", "someone@test.example"),
    ("A@EXAMPLE.COM", "A@EXAMPLE.COM"),
    ("send to ops-team@example.travel now", "ops-team@example.travel"),
    ("line1\nreply-to: no.reply@example.com\n", "no.reply@example.com"),
    ("name@123.example.org", "name@123.example.org"),
]
EMAIL_NEGATIVE = [
    "follow @example on social",
    "icon@2x.png and logo@1.5x.png",
    "root@localhost",
    "npm i pkg@1.2.3",
    "a..b@example.com",
    "ann at example dot com",
    "user@example",
    "@decorator\ndef f(): ...",
    "image@sha256:0123abcd",
    "git clone git@github.com:org/repo.git",
    "https://user@example.com:8443/path",
    "user@example.c",
    "x@-example.com",
    "user@@example.com",
]


@pytest.mark.parametrize(("text", "expected"), EMAIL_POSITIVE)
def test_email_found(text: str, expected: str) -> None:
    assert found("email", text) == [expected]


@pytest.mark.parametrize("text", EMAIL_NEGATIVE)
def test_email_not_found(text: str) -> None:
    assert found("email", text) == []


def test_email_several_and_long_local_part() -> None:
    text = "a@example.com, b@example.org; " + "x" * 70 + "@example.com"
    assert found("email", text) == ["a@example.com", "b@example.org"]


# ---- phone ----------------------------------------------------------------------------

PHONE_POSITIVE = [
    ("call (415) 555-0132 now", "(415) 555-0132"),
    ("415-555-0132", "415-555-0132"),
    ("415 555-0132", "415 555-0132"),
    ("tel 415.555.0132.", "415.555.0132"),
    ("phone=415 555 0132;", "415 555 0132"),
    ("+1 415 555 0132", "+1 415 555 0132"),
    ("+14155550132", "+14155550132"),
    ("+1 (415) 555-0132", "+1 (415) 555-0132"),
    ("+44 20 7946 0958", "+44 20 7946 0958"),
    ("+33 1 23 45 67 89", "+33 1 23 45 67 89"),
    ("+49-30-1234-5678", "+49-30-1234-5678"),
    ("+1 415 555 0132 2 times", "+1 415 555 0132"),
    ("1-800-555-0199", "1-800-555-0199"),
    ("UK: 020 7946 0958", "020 7946 0958"),
    ("FR 01 23 45 67 89", "01 23 45 67 89"),
    ("01.23.45.67.89", "01.23.45.67.89"),
    ("DE 030 12345678", "030 12345678"),
    ("030/12345678", "030/12345678"),
    ("(030) 12345678", "(030) 12345678"),
    ('{"phone": "+1-415-555-0132"}', "+1-415-555-0132"),
]
PHONE_NEGATIVE = [
    "version 1.2.3",
    "1.2.3.4",
    "2024-01-15",
    "2024-01-15T10:30:00+01:00",
    "2024-01-15T10:30:00.123456Z",
    "+2024-01-15",
    "01-15-2024",
    "05/01/2024 08 30",
    "123e4567-e89b-12d3-a456-426614174000",
    "550e8400-e29b-41d4-a716-446655440000",
    "12345678-1234-5678-1234-567812345678",
    "00000000000000000000000000000002.0.2735194",
    "00000000000000000000000000000415.0.5550132",
    "4155550132",
    "order 12345678901234",
    VISA,
    "123-456-7890",
    "555-0132",
    "415-555-0132-99",
    "9415-555-01329",
    "10.415.555.0132",
    "415-555.0132",
    "123-45-6789",
    "+1234",
    "x+14155550132",
]


@pytest.mark.parametrize(("text", "expected"), PHONE_POSITIVE)
def test_phone_found(text: str, expected: str) -> None:
    assert found("phone", text) == [expected]


@pytest.mark.parametrize("text", PHONE_NEGATIVE)
def test_phone_not_found(text: str) -> None:
    assert found("phone", text) == []


# ---- card -----------------------------------------------------------------------------

CARD_POSITIVE = [
    (VISA, VISA),
    (f"card: {VISA}, exp 12/29", VISA),
    (VISA16, VISA16),
    (grouped(VISA16, (4, 4, 4, 4), "-"), grouped(VISA16, (4, 4, 4, 4), "-")),
    (f"pay with {grouped(MC, (4, 4, 4, 4))}.", grouped(MC, (4, 4, 4, 4))),
    (grouped(AMEX, (4, 6, 5)), grouped(AMEX, (4, 6, 5))),
    (f"amex={AMEX};", AMEX),
    (grouped(DISCOVER, (4, 4, 4, 4)), grouped(DISCOVER, (4, 4, 4, 4))),
    (f"jcb {JCB}", JCB),
    (f"diners {DINERS}", DINERS),
    (f"visa13 {VISA13}", VISA13),
    (f"mc2 {MC2}", MC2),
    (f"up {grouped(UNIONPAY19, (4, 4, 4, 4, 3))}", grouped(UNIONPAY19, (4, 4, 4, 4, 3))),
    (f"qty 2 {VISA} 2025", VISA),
    (f'{{"card": "{VISA16}"}}', VISA16),
]
CARD_NEGATIVE = [
    luhn_break(VISA16),  # a 16-digit number failing Luhn
    grouped(luhn_break(VISA16), (4, 4, 4, 4)),
    luhn_break(MC),
    luhn_complete("1" + "23456789012345678"),  # Luhn-valid 19-digit id starting with 1
    luhn_complete("170531220000"),  # Luhn-valid millisecond timestamp
    luhn_complete("41111111111111"),  # Luhn-valid Visa prefix, 15 digits
    "order 4111111111111111111111",  # inside a longer digit run
    "4111.1111.1111.1111",
    "4111 1111-1111 1111",
    "41 11 11 11 11 11 11 11",
    "+4111111111111111",
    "00000000000000000000000000000002.0.2735194",
    "ref-4111111111111111",
    f"x{VISA16}",
]


@pytest.mark.parametrize(("text", "expected"), CARD_POSITIVE)
def test_card_found(text: str, expected: str) -> None:
    assert found("card", text) == [expected]


@pytest.mark.parametrize("text", CARD_NEGATIVE)
def test_card_not_found(text: str) -> None:
    assert found("card", text) == []


def test_two_cards_in_one_run() -> None:
    assert found("card", f"{VISA16} {MC}") == [VISA16, MC]


# ---- iban -----------------------------------------------------------------------------

IBAN_POSITIVE = [
    (IBAN_DE, IBAN_DE),
    (spaced(IBAN_DE), spaced(IBAN_DE)),
    (f"IBAN {spaced(IBAN_GB)} BIC TESTGB2L", spaced(IBAN_GB)),
    (f"iban={IBAN_FR};", IBAN_FR),
    (f"to {spaced(IBAN_NL)}.", spaced(IBAN_NL)),
    (f"({IBAN_BE})", IBAN_BE),
    (spaced(IBAN_NO), spaced(IBAN_NO)),
    (f"CH: {IBAN_CH}", IBAN_CH),
    (f'{{"iban": "{IBAN_IT}"}}', IBAN_IT),
    (spaced(IBAN_MT), spaced(IBAN_MT)),
    (f"{spaced(IBAN_ES)} 2024", spaced(IBAN_ES)),
]


def _bad_check_digits(value: str) -> str:
    check = (int(value[2:4]) + 1) % 100
    return f"{value[:2]}{check:02d}{value[4:]}"


IBAN_NEGATIVE = [
    _bad_check_digits(IBAN_DE),  # bad checksum
    spaced(_bad_check_digits(IBAN_GB)),
    IBAN_DE[:-1] + str((int(IBAN_DE[-1]) + 1) % 10),  # one digit changed
    IBAN_DE[:10] + IBAN_DE[11] + IBAN_DE[10] + IBAN_DE[12:],  # two digits swapped
    iban("XX", "123456780123456789"),  # valid mod-97, unknown country
    iban("DE", "12345678012345678"),  # valid mod-97, wrong length for DE
    IBAN_DE.lower(),
    f"ref{IBAN_DE}",
    f"{IBAN_DE}A",
    "US12 3456 7890 1234 5678",
    "ABCD1234",
    "DE89 in the text",
]


@pytest.mark.parametrize(("text", "expected"), IBAN_POSITIVE)
def test_iban_found(text: str, expected: str) -> None:
    assert found("iban", text) == [expected]


@pytest.mark.parametrize("text", IBAN_NEGATIVE)
def test_iban_not_found(text: str) -> None:
    assert found("iban", text) == []


# ---- ssn ------------------------------------------------------------------------------

SSN_POSITIVE = [
    ("123-45-6789", "123-45-6789"),
    ("123 45 6789", "123 45 6789"),
    ("ssn=234-56-7890;", "234-56-7890"),
    ("(665-12-3456)", "665-12-3456"),
    ("SSN 899-99-9999.", "899-99-9999"),
    ("001-01-0001", "001-01-0001"),
    ('{"ssn": "772-11-2222"}', "772-11-2222"),
    ("667-01-0002 is on file", "667-01-0002"),
    ("id: 555-12-3456", "555-12-3456"),
    ("SSN 321 54 9876, thanks", "321 54 9876"),
]
SSN_NEGATIVE = [
    "000-12-3456",
    "666-12-3456",
    "900-12-3456",
    "999-99-9999",
    "123-00-4567",
    "123-45-0000",
    "123456789",
    "123-45 6789",
    "1123-45-6789",
    "123-45-67890",
    "123-45-6789-1",
    "2024-01-15",
    "12-345-6789",
    "v1.123-45-6789",
]


@pytest.mark.parametrize(("text", "expected"), SSN_POSITIVE)
def test_ssn_found(text: str, expected: str) -> None:
    assert found("ssn", text) == [expected]


@pytest.mark.parametrize("text", SSN_NEGATIVE)
def test_ssn_not_found(text: str) -> None:
    assert found("ssn", text) == []


# ---- ip -------------------------------------------------------------------------------

IP_POSITIVE = [
    ("192.0.2.1", ["192.0.2.1"]),
    ("from 198.51.100.23:8080", ["198.51.100.23"]),
    ("net 203.0.113.0/24", ["203.0.113.0"]),
    ("ip=192.0.2.255,", ["192.0.2.255"]),
    ("host 10.0.0.1.", ["10.0.0.1"]),
    ("range 192.0.2.1-192.0.2.9", ["192.0.2.1", "192.0.2.9"]),
    ("[2001:db8::1]:443", ["2001:db8::1"]),
    ("2001:db8:0:0:0:0:0:1", ["2001:db8:0:0:0:0:0:1"]),
    ("2001:0db8:85a3:0000:0000:8a2e:0370:7334", ["2001:0db8:85a3:0000:0000:8a2e:0370:7334"]),
    ("link fe80::1%eth0", ["fe80::1"]),
    ("mapped ::ffff:192.0.2.128 here", ["::ffff:192.0.2.128"]),
    ("prefix 2001:db8:: routed", ["2001:db8::"]),
    ("peer 2001:db8::42: refused", ["2001:db8::42"]),
]
IP_NEGATIVE = [
    "v1.2.3.4",
    "version 1.2.3.4",
    'version: "10.1.2.3"',
    "Release 4.3.2.1",
    "1.2.3.4.5",
    "10.0.0.1.2",
    "256.1.1.1",
    "192.168.001.001",
    "127.0.0.1",
    "0.0.0.0",
    "::1",
    "x[1::2]",
    "std::vector<int>",
    "10:30:45",
    "00:1a:2b:3c:4d:5e",
    "dead::beef",
    "1.2.3",
    "OID 1.3.6.1.4.1.2021",
    "00000000000000000000000000000002.0.2735194",
]


@pytest.mark.parametrize(("text", "expected"), IP_POSITIVE)
def test_ip_found(text: str, expected: list[str]) -> None:
    assert found("ip", text) == expected


@pytest.mark.parametrize("text", IP_NEGATIVE)
def test_ip_not_found(text: str) -> None:
    assert found("ip", text) == []


# ---- aws_access_key -------------------------------------------------------------------

AWS_ACCESS_POSITIVE = [
    (f"AKIA{AWS_ID_TAIL}", f"AKIA{AWS_ID_TAIL}"),
    (f"aws_access_key_id=ASIA{AWS_ID_TAIL}", f"ASIA{AWS_ID_TAIL}"),
    (f'"AccessKeyId": "AGPA{AWS_ID_TAIL}"', f"AGPA{AWS_ID_TAIL}"),
    (f"user AIDA{AWS_ID_TAIL}.", f"AIDA{AWS_ID_TAIL}"),
    (f"role AROA{AWS_ID_TAIL},", f"AROA{AWS_ID_TAIL}"),
    (f"(ANPA{AWS_ID_TAIL})", f"ANPA{AWS_ID_TAIL}"),
    (f"ANVA{AWS_ID_TAIL}\n", f"ANVA{AWS_ID_TAIL}"),
    (f"key: AIPA{AWS_ID_TAIL}", f"AIPA{AWS_ID_TAIL}"),
    ("AKIA0000000000000000", "AKIA0000000000000000"),
    (f"KEY_AKIA{AWS_ID_TAIL}", f"AKIA{AWS_ID_TAIL}"),
    (f"export AWS_ACCESS_KEY_ID='AKIA{AWS_ID_TAIL}'", f"AKIA{AWS_ID_TAIL}"),
]
AWS_ACCESS_NEGATIVE = [
    f"AKIA{AWS_ID_TAIL[:-1]}",  # 15 after the prefix
    f"AKIA{AWS_ID_TAIL}9",  # 17 after the prefix
    f"akia{AWS_ID_TAIL.lower()}",
    f"XAKIA{AWS_ID_TAIL}",
    f"AKIA{AWS_ID_TAIL}x",
    f"ABCD{AWS_ID_TAIL}",
    "AKIAzzzzTESTFAKE0001",
    "AKIA is a prefix",
    f"AKIB{AWS_ID_TAIL}",
    f"AKIA-{AWS_ID_TAIL}",
    "ASIA and AGPA and AROA in prose",
]


@pytest.mark.parametrize(("text", "expected"), AWS_ACCESS_POSITIVE)
def test_aws_access_key_found(text: str, expected: str) -> None:
    assert found("aws_access_key", text) == [expected]


@pytest.mark.parametrize("text", AWS_ACCESS_NEGATIVE)
def test_aws_access_key_not_found(text: str) -> None:
    assert found("aws_access_key", text) == []


# ---- aws_secret_key -------------------------------------------------------------------

AWS_SECRET_POSITIVE = [
    f"aws_secret_access_key={AWS_SECRET}",
    f"aws_secret_access_key = {AWS_SECRET}\nregion = us-east-1",
    f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
    f'"SecretAccessKey": "{AWS_SECRET}"',
    f"secret_key: {AWS_SECRET}",
    f"secretAccessKey: '{AWS_SECRET}'",
    f"--aws-secret-access-key={AWS_SECRET}",
    f"aws_secret_key={AWS_SECRET}",
    f"SECRET_KEY => '{AWS_SECRET}'",
    f"aws.secret.access.key: {AWS_SECRET}",
    f"{{'aws_secret_access_key': '{AWS_SECRET}', 'x': 1}}",
]
AWS_SECRET_NEGATIVE = [
    AWS_SECRET,
    f"the key is {AWS_SECRET}",
    f"aws_secret_access_key={AWS_SECRET[:-1]}",
    f"aws_secret_access_key={AWS_SECRET}X",
    f"access_key_id={AWS_SECRET}",
    "aws_secret_access_key=<AWS_SECRET_KEY>",
    "secret_key: short",
    f"mysecret_key={AWS_SECRET}",
    f"secret_key {AWS_SECRET}",
    f"secret_key={AWS_SECRET}=",
    f"secret_key=\n{AWS_SECRET}",
]


@pytest.mark.parametrize("text", AWS_SECRET_POSITIVE)
def test_aws_secret_key_found(text: str) -> None:
    assert found("aws_secret_key", text) == [AWS_SECRET]


@pytest.mark.parametrize("text", AWS_SECRET_NEGATIVE)
def test_aws_secret_key_not_found(text: str) -> None:
    assert found("aws_secret_key", text) == []


# ---- bearer_token ---------------------------------------------------------------------

BEARER_POSITIVE = [
    ("Authorization: Bearer abc123DEF456ghi789", "abc123DEF456ghi789"),
    ("authorization: bearer tok_0123456789abcdef", "tok_0123456789abcdef"),
    ("BEARER a1b2c3d4e5f6", "a1b2c3d4e5f6"),
    (f"Authorization: Bearer {JWT}", JWT),
    (JWT, JWT),
    (f"token={JWT}&next=1", JWT),
    (f'{{"jwt":"{JWT}"}}', JWT),
    ("Bearer abc.def-ghi_jkl~mno+pqr/stu==", "abc.def-ghi_jkl~mno+pqr/stu=="),
    ("curl -H 'Authorization: Bearer 0123456789abcdef' https://x", "0123456789abcdef"),
    ("Bearer ABCdefGHIjklMNOpqr", "ABCdefGHIjklMNOpqr"),
    ("use Bearer\tsk_test_12345678.", "sk_test_12345678"),
    (jwt({"sub": "x"}, signature=""), jwt({"sub": "x"}, signature="")),
]
BEARER_NEGATIVE = [
    "the bearer of bad news",
    "Bearer instruments are risky",
    "BEARER FORMALITIES",
    "Bearer Abcdefghijklmnopq",
    "Bearer short1",
    "Bearer token required",
    "Bearer <TOKEN>",
    "xBearer abc123def456",
    b64url({"alg": "none"}),  # one part
    f"{b64url({'alg': 'none'})}.abcdef.ghi",  # the payload is not JSON
    "Bearer\nabc123def456",
]


@pytest.mark.parametrize(("text", "expected"), BEARER_POSITIVE)
def test_bearer_token_found(text: str, expected: str) -> None:
    assert found("bearer_token", text) == [expected]


@pytest.mark.parametrize("text", BEARER_NEGATIVE)
def test_bearer_token_not_found(text: str) -> None:
    assert found("bearer_token", text) == []


# ---- private_key ----------------------------------------------------------------------

BODY = "MIIBfakeFAKEfake0123456789+/abcdEFGH\nZmFrZWtleWJvZHlmb3J0ZXN0cw=="


def pem(kind: str, body: str = BODY, newline: str = "\n") -> str:
    lines = [f"-----BEGIN {kind}-----", *body.split("\n"), f"-----END {kind}-----"]
    return newline.join(lines)


PRIVATE_KEY_POSITIVE = [
    (pem("RSA PRIVATE KEY"), pem("RSA PRIVATE KEY")),
    (pem("EC PRIVATE KEY"), pem("EC PRIVATE KEY")),
    (f"key:\n{pem('PRIVATE KEY')}\nmore text", pem("PRIVATE KEY")),
    (pem("OPENSSH PRIVATE KEY"), pem("OPENSSH PRIVATE KEY")),
    (pem("ENCRYPTED PRIVATE KEY"), pem("ENCRYPTED PRIVATE KEY")),
    (pem("DSA PRIVATE KEY"), pem("DSA PRIVATE KEY")),
    (pem("PGP PRIVATE KEY BLOCK"), pem("PGP PRIVATE KEY BLOCK")),
    (pem("PRIVATE KEY", newline="\r\n"), pem("PRIVATE KEY", newline="\r\n")),
    (  # escaped inside a JSON document stored as text
        '{"k": "' + pem("PRIVATE KEY", newline="\\n") + '\\n"}',
        pem("PRIVATE KEY", newline="\\n"),
    ),
    (  # truncated: no END line
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIBfake0123==\n(cut)",
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIBfake0123==",
    ),
    (
        f"{pem('PRIVATE KEY')}\n-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----",
        pem("PRIVATE KEY"),
    ),
]
PRIVATE_KEY_NEGATIVE = [
    pem("PUBLIC KEY"),
    pem("RSA PUBLIC KEY"),
    pem("CERTIFICATE"),
    pem("PGP PUBLIC KEY BLOCK"),
    pem("SSH2 PUBLIC KEY"),
    "BEGIN PRIVATE KEY ... END PRIVATE KEY",
    "----BEGIN PRIVATE KEY----\nMIIB\n----END PRIVATE KEY----",
    "-----END PRIVATE KEY-----",
    "-----BEGIN private key-----\nMIIB\n-----END private key-----",
    "keep your private key private",
]


@pytest.mark.parametrize(("text", "expected"), PRIVATE_KEY_POSITIVE)
def test_private_key_found(text: str, expected: str) -> None:
    assert found("private_key", text) == [expected]


@pytest.mark.parametrize("text", PRIVATE_KEY_NEGATIVE)
def test_private_key_not_found(text: str) -> None:
    assert found("private_key", text) == []


# ---- api_key --------------------------------------------------------------------------

API_KEY_POSITIVE = [
    ("api_key=sk-test-0123456789", "sk-test-0123456789"),
    ("apikey: abcdEFGH1234", "abcdEFGH1234"),
    ('"api-key": "k3y-VALUE-0001"', "k3y-VALUE-0001"),
    ("x-api-key: 0123456789abcdef", "0123456789abcdef"),
    ("token=tok_live_1234abcd", "tok_live_1234abcd"),
    ("secret=Sup3rS3cretValue", "Sup3rS3cretValue"),
    ("password=hunter2hunter2", "hunter2hunter2"),
    ("PASSWORD: 'correct horse battery staple'", "correct horse battery staple"),
    ("client_secret=abcDEF123456", "abcDEF123456"),
    ('{"access_token": "ya29.a0Afake-token_value"}', "ya29.a0Afake-token_value"),
    ("https://api.example.com/v1?api_key=abc123456789&page=2", "abc123456789"),
    ("openaiApiKey = 'sk-proj-FAKE1234'", "sk-proj-FAKE1234"),
    ("db_password => s3cr3t!pass", "s3cr3t!pass"),
    ("Password: correcthorsebatterystaple", "correcthorsebatterystaple"),
]
API_KEY_NEGATIVE = [
    "password=short",
    "Password: required",
    "api_key=<API_KEY>",
    '"api_key": "<API_KEY>"',
    "password=********",
    "token=$API_TOKEN",
    "api_key=${OPENAI_API_KEY}",
    "api_key=config.openai_key",
    "password = os.environ['DB_PASSWORD']",
    "page_token=CAESBggDEAEYAQ",
    "next_token=abc123def456",
    "max_tokens=4096",
    "api_key=",
    "the password is hunter2hunter2",
    "secret_santa=Alice123Bob",
    "passwordless=enabled123",
]


@pytest.mark.parametrize(("text", "expected"), API_KEY_POSITIVE)
def test_api_key_found(text: str, expected: str) -> None:
    assert found("api_key", text) == [expected]


@pytest.mark.parametrize("text", API_KEY_NEGATIVE)
def test_api_key_not_found(text: str) -> None:
    assert found("api_key", text) == []


# ---- all built-ins together -----------------------------------------------------------

NOTHING_TO_FIND = [
    "The quick brown fox jumps over the lazy dog. Nothing to see: move along.",
    "Step 3 of 5 took 1,234.56 ms (p99 2,000 ms) at 2024-01-15 10:30:00.",
    "00000000000000000000000000000002.0.2735194",
    "1ef4f797-8335-6428-8001-8a1503f9b875",
    "2024-01-15T10:30:00.123456+00:00",
    "v1.2.3.4 and version 10.0.0.1",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "run-3f2a9c1e-5b7d-4e2f-9a8b-1c2d3e4f5a6b call_abc123DEF456",
    "x[1::2] + std::vector<int>{1, 2, 3}",
    '{"step": 12, "parents": {}, "source": "loop", "writes": null}',
    "/home/user/project/src/main.py:120:5",
    "https://example.com/path?page=2&sort=desc#section-3",
    "max_tokens=4096 temperature=0.7 top_p=0.95",
    "1705312200123 1199999999999999999 4155550132",
]


@pytest.mark.parametrize("text", NOTHING_TO_FIND)
def test_builtins_leave_ids_versions_and_prose_alone(text: str) -> None:
    assert find_spans(text, tuple(BUILTIN_DETECTORS.values())) == []


def test_builtins_in_order_and_named() -> None:
    assert list(BUILTIN_DETECTORS) == [
        "email",
        "phone",
        "card",
        "iban",
        "ssn",
        "ip",
        "aws_access_key",
        "aws_secret_key",
        "bearer_token",
        "private_key",
        "api_key",
    ]
    for name, detector in BUILTIN_DETECTORS.items():
        assert detector.name == name and isinstance(detector, Detector)


def test_find_spans_over_a_mixed_text() -> None:
    text = (
        f"Ann (ann.lee@example.com, +1 415 555 0132) paid with {VISA} from {spaced(IBAN_DE)}; "
        f"ssn 123-45-6789, host 192.0.2.10, AKIA{AWS_ID_TAIL}, "
        f"Authorization: Bearer {JWT}\napi_key=sk-test-0123456789"
    )
    spans = find_spans(text, tuple(BUILTIN_DETECTORS.values()))
    assert [(s.detector, text[s.start : s.end]) for s in spans] == [
        ("email", "ann.lee@example.com"),
        ("phone", "+1 415 555 0132"),
        ("card", VISA),
        ("iban", spaced(IBAN_DE)),
        ("ssn", "123-45-6789"),
        ("ip", "192.0.2.10"),
        ("aws_access_key", f"AKIA{AWS_ID_TAIL}"),
        ("bearer_token", JWT),
        ("api_key", "sk-test-0123456789"),
    ]


def test_precheck_results_are_shared_but_not_leaked_across_texts() -> None:
    detectors = tuple(BUILTIN_DETECTORS.values())
    assert find_spans("no digits here", detectors) == []
    assert [s.detector for s in find_spans("call 415-555-0132", detectors)] == ["phone"]
    assert find_spans("", detectors) == []


ALL_POSITIVE_TEXTS = [
    text
    for cases in (
        EMAIL_POSITIVE,
        PHONE_POSITIVE,
        CARD_POSITIVE,
        IBAN_POSITIVE,
        SSN_POSITIVE,
        IP_POSITIVE,
        AWS_ACCESS_POSITIVE,
        BEARER_POSITIVE,
        PRIVATE_KEY_POSITIVE,
        API_KEY_POSITIVE,
    )
    for text, _ in cases
] + AWS_SECRET_POSITIVE


@pytest.mark.parametrize("name", list(BUILTIN_DETECTORS))
def test_find_spans_agrees_with_each_detector_alone(name: str) -> None:
    # find_spans shares prechecks between detectors; the result must not change.
    detector = BUILTIN_DETECTORS[name]
    for text in ALL_POSITIVE_TEXTS + NOTHING_TO_FIND:
        alone = sorted(detector.find(text), key=lambda s: (s.start, -s.end))
        assert find_spans(text, [detector]) == alone, text
        together = find_spans(text, tuple(BUILTIN_DETECTORS.values()))
        for span in together:
            if span.detector == name:
                assert span in alone, text


#: Inputs that make a careless pattern backtrack: (name, input of size k, k).
SLOW_INPUTS: list[tuple[str, Callable[[int], str], int]] = [
    ("ones", lambda k: "1 " * k, 50_000),
    ("dashes", lambda k: "1-" * k, 50_000),
    ("card-groups", lambda k: "4111 " * k, 20_000),
    ("zero-ones", lambda k: "01 " * k, 30_000),
    ("pem-headers", lambda k: "-----BEGIN PRIVATE KEY-----\n" * k, 5_000),
    ("pem-body", lambda k: "-----BEGIN PRIVATE KEY-----" + "A" * k, 100_000),
    ("ats", lambda k: "a@" * k, 50_000),
    ("colons", lambda k: "1::" * k, 30_000),
    ("api-keys", lambda k: "api_key=" * (k // 5) + "x" * k, 50_000),
    ("secret-keys", lambda k: "secret_key" * k, 10_000),
    ("bearers", lambda k: "Bearer " * k, 10_000),
    ("jwt-heads", lambda k: "eyJabcd." * k, 10_000),
    ("parens", lambda k: "(1) " * k, 20_000),
    ("long-local-part", lambda k: "x" * k + "@example.com", 100_000),
]


def _best_seconds(text: str, repeats: int = 5) -> float:
    """CPU seconds of the fastest of ``repeats`` scans of ``text`` by every built-in detector."""
    detectors = tuple(BUILTIN_DETECTORS.values())
    best = float("inf")
    gc.disable()
    try:
        for _ in range(repeats):
            # CPU time of this thread: time spent waiting for a busy machine's cores
            # does not count (wall time made a linear case read 21x under a load of 11)
            start = time.thread_time()
            find_spans(text, detectors)
            best = min(best, time.thread_time() - start)
    finally:
        gc.enable()
    return best


@pytest.mark.parametrize(
    ("make", "size"), [(m, k) for _, m, k in SLOW_INPUTS], ids=[n for n, _, _ in SLOW_INPUTS]
)
def test_no_pathological_slowdown(make: Callable[[int], str], size: int) -> None:
    """Eight times the input takes about eight times as long, not 64 (quadratic).

    A ratio of two runs on the same machine, not a time: a loaded machine slows
    both. The smaller input grows until its scan takes 5 ms, so that the ratio
    is not noise (at 1 ms a scheduler hiccup once made a linear case read 20x);
    the fastest of five runs of each counts.
    """
    small = max(size // 8, 1)
    while _best_seconds(make(small)) < 0.005 and small < size * 64:
        small *= 2
    ratio = _best_seconds(make(8 * small)) / _best_seconds(make(small))
    assert ratio < 20, f"8x the input took {ratio:.1f}x as long (linear: 8, quadratic: 64)"


# ---- find_spans: overlaps -------------------------------------------------------------


def _fixed(name: str, *pairs: tuple[int, int]) -> CallableDetector:
    return CallableDetector(name, lambda text: list(pairs))


def test_find_spans_sorts_and_resolves_overlaps() -> None:
    text = "x" * 40
    spans = find_spans(
        text,
        [
            _fixed("b", (20, 30), (2, 6)),
            _fixed("a", (0, 5), (25, 35)),
            _fixed("c", (0, 8), (30, 32), (35, 38)),
        ],
    )
    # (0, 8) beats (0, 5) (same start, longer); (2, 6) overlaps it; (20, 30) is kept,
    # (25, 35) overlaps it; (30, 32) starts where (20, 30) ends; (35, 38) is free.
    assert spans == [Span(0, 8, "c"), Span(20, 30, "b"), Span(30, 32, "c"), Span(35, 38, "c")]


def test_find_spans_ties_go_to_the_first_detector() -> None:
    text = "abcdef"
    assert find_spans(text, [_fixed("first", (1, 4)), _fixed("second", (1, 4))]) == [
        Span(1, 4, "first")
    ]
    assert find_spans(text, [_fixed("second", (1, 4)), _fixed("first", (1, 4))]) == [
        Span(1, 4, "second")
    ]


def test_find_spans_earliest_start_wins_over_longer_later_span() -> None:
    spans = find_spans("0123456789", [_fixed("short", (2, 5)), _fixed("long", (3, 10))])
    assert spans == [Span(2, 5, "short")]


def test_find_spans_accepts_any_detector_object_and_checks_its_spans() -> None:
    class Upper:
        name = "upper"

        def find(self, text: str) -> list[Span]:
            return [Span(m.start(), m.end(), self.name) for m in re.finditer("[A-Z]+", text)]

    class Broken:
        name = "broken"

        def find(self, text: str) -> list[Span]:
            return [Span(0, len(text) + 1, self.name)]

    assert find_spans("abc DEF ghi", [Upper()]) == [Span(4, 7, "upper")]
    with pytest.raises(ConfigurationError, match="broken"):
        find_spans("abc", [Broken()])


def test_find_spans_calls_an_overridden_find() -> None:
    class OnlyShort(RegexDetector):
        def find(self, text: str) -> list[Span]:
            return [s for s in super().find(text) if s.end - s.start < 4]

    detector = OnlyShort("num", r"\d+")
    assert find_spans("12 12345 7", [detector]) == [Span(0, 2, "num"), Span(9, 10, "num")]


def test_builtin_email_overlapping_a_custom_detector() -> None:
    custom = make_detector("domain", r"example\.com")
    text = "mail ann@example.com"
    spans = find_spans(text, [BUILTIN_DETECTORS["email"], custom])
    assert spans == [Span(5, 20, "email")]


# ---- make_detector --------------------------------------------------------------------


def test_make_detector_from_a_regex_string() -> None:
    detector = make_detector("employee", r"EMP-\d{6}")
    assert isinstance(detector, RegexDetector) and detector.name == "employee"
    text = "EMP-123456 and EMP-654321 but not EMP-12"
    assert [text[s.start : s.end] for s in detector.find(text)] == ["EMP-123456", "EMP-654321"]
    assert {s.detector for s in detector.find(text)} == {"employee"}


def test_make_detector_from_a_compiled_pattern_keeps_its_flags() -> None:
    detector = make_detector("ticket", re.compile(r"tk-\d+", re.IGNORECASE))
    assert detector.find("see TK-42 and tk-7") == [Span(4, 9, "ticket"), Span(14, 18, "ticket")]


def test_make_detector_from_a_callable_returning_pairs() -> None:
    detector = make_detector("ticket", lambda s: [(0, 3)] if s.startswith("TK-") else [])
    assert isinstance(detector, CallableDetector)
    assert detector.find("TK-9") == [Span(0, 3, "ticket")]
    assert detector.find("nothing") == []
    assert find_spans("TK-9", [detector]) == [Span(0, 3, "ticket")]


def test_make_detector_from_a_callable_returning_spans_keeps_their_names() -> None:
    def ner(text: str) -> list[Span]:
        return [Span(0, 3, "person"), Span(4, 9, "city")]

    detector = make_detector("ner", ner)
    assert detector.find("Ann Paris") == [Span(0, 3, "person"), Span(4, 9, "city")]


def test_make_detector_from_a_generator_and_empty_spans() -> None:
    def gen(text: str):  # type: ignore[no-untyped-def]
        yield (0, 0)  # empty: dropped
        yield (1, 2)

    assert make_detector("g", gen).find("abc") == [Span(1, 2, "g")]


def test_make_detector_passes_a_detector_through() -> None:
    detector = RegexDetector("emp", r"EMP-\d+", hint="EMP-")
    assert make_detector("anything", detector) is detector
    assert detector.find("no match") == [] and detector.find("EMP-1") == [Span(0, 5, "emp")]


@pytest.mark.parametrize(
    ("name", "spec"),
    [
        ("", r"\d+"),
        ("x", ""),
        ("x", "("),
        ("x", 42),
        ("x", None),
        ("x", [r"\d+"]),
        ("x", RegexDetector),
        ("x", re.compile(rb"\d+")),
        (None, r"\d+"),
    ],
)
def test_make_detector_rejects_bad_specs(name: object, spec: object) -> None:
    with pytest.raises(ConfigurationError):
        make_detector(name, spec)  # type: ignore[arg-type]


def test_a_callable_returning_garbage_raises_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="bad"):
        make_detector("bad", lambda s: [(0, 99)]).find("abc")
    with pytest.raises(ConfigurationError, match="bad"):
        make_detector("bad", lambda s: [(2, 1)]).find("abc")
    with pytest.raises(ConfigurationError, match="bad"):
        make_detector("bad", lambda s: ["oops"]).find("abc")


def test_regex_detector_options() -> None:
    detector = RegexDetector(
        "order",
        r"order #?(?P<id>\d+)",
        group="id",
        validate=lambda value: int(value) % 2 == 0,
        hint=lambda text: "order" in text,
    )
    assert detector.find("order #12, order 13, order 14") == [
        Span(7, 9, "order"),
        Span(27, 29, "order"),
    ]
    assert RegexDetector("opt", r"a(b)?c", group=1).find("ac abc") == [Span(4, 5, "opt")]
    with pytest.raises(ConfigurationError, match="group"):
        RegexDetector("x", r"a(b)", group=2)
    with pytest.raises(ConfigurationError, match="group"):
        RegexDetector("x", r"a(b)", group="nope")
    with pytest.raises(ConfigurationError, match="hint"):
        RegexDetector("x", r"a", hint=3)  # type: ignore[arg-type]


# ---- resolve_detectors ----------------------------------------------------------------


def test_resolve_detectors_none_is_every_builtin_then_every_custom() -> None:
    resolved = resolve_detectors(None, {"employee": r"EMP-\d{6}"})
    assert [d.name for d in resolved] == [*BUILTIN_DETECTORS, "employee"]
    assert resolve_detectors(None) == tuple(BUILTIN_DETECTORS.values())


def test_resolve_detectors_by_name() -> None:
    resolved = resolve_detectors(
        ["employee", "email", "email"], {"employee": r"EMP-\d{6}", "unused": r"x"}
    )
    assert [d.name for d in resolved] == ["employee", "email"]
    assert resolved[1] is BUILTIN_DETECTORS["email"]
    assert resolve_detectors("email") == (BUILTIN_DETECTORS["email"],)
    assert resolve_detectors([]) == ()


def test_a_custom_detector_replaces_a_builtin_of_its_name() -> None:
    resolved = resolve_detectors(None, {"phone": r"\bTEL:\d+"})
    assert [d.name for d in resolved] == list(BUILTIN_DETECTORS)
    assert resolved[1] is not BUILTIN_DETECTORS["phone"]
    assert resolved[1].find("TEL:123 415-555-0132") == [Span(0, 7, "phone")]


def test_resolve_detectors_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match="'nope'") as info:
        resolve_detectors(["email", "nope"], {"employee": r"EMP"})
    assert "email" in str(info.value) and "employee" in str(info.value)
    with pytest.raises(ConfigurationError):
        resolve_detectors(["email"], {"bad": 42})


# ---- placeholder ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [("email", "<EMAIL>"), ("aws_secret_key", "<AWS_SECRET_KEY>"), ("Employee", "<EMPLOYEE>")],
)
def test_placeholder(name: str, expected: str) -> None:
    assert placeholder(name) == expected


def test_placeholders_are_not_detected_again() -> None:
    detectors = tuple(BUILTIN_DETECTORS.values())
    text = " ".join(f"{name}={placeholder(name)}" for name in BUILTIN_DETECTORS)
    text += ' "api_key": "<API_KEY>", "password": "<API_KEY>"'
    assert find_spans(text, detectors) == []


# ---- compatibility forms: detection on the NFKC form ------------------------------------

BUILTINS = tuple(BUILTIN_DETECTORS.values())


@pytest.mark.parametrize(
    ("text", "expected", "detector"),
    [
        ("mail ann＠example.com now", "ann＠example.com", "email"),  # full-width at sign
        ("ａｎｎ＠ｅｘａｍｐｌｅ．ｃｏｍ", "ａｎｎ＠ｅｘａｍｐｌｅ．ｃｏｍ", "email"),
        (
            "card ４１１１ １１１１ １１１１ １１１１.",
            "４１１１ １１１１ １１１１ １１１１",
            "card",
        ),
        ("tel ＋１ ４１５ ５５５ ０１３２", "＋１ ４１５ ５５５ ０１３２", "phone"),
        ("𝟒𝟏𝟏𝟏 1111 1111 1111", "𝟒𝟏𝟏𝟏 1111 1111 1111", "card"),  # mathematical digits
        ("ip ①⑨②.０.２.１０", "①⑨②.０.２.１０", "ip"),  # circled digits fold to 1, 9, 2
        (
            "key ＡＫＩＡＩＯＳＦＯＤＮＮ７ＥＸＡＭＰＬＥ",
            "ＡＫＩＡＩＯＳＦＯＤＮＮ７ＥＸＡＭＰＬＥ",
            "aws_access_key",
        ),
        ("é then ann.lee@example.com", "ann.lee@example.com", "email"),  # combining mark before
    ],
)
def test_compatibility_forms_are_found_on_the_nfkc_form(
    text: str, expected: str, detector: str
) -> None:
    (span,) = find_spans(text, BUILTINS)
    assert (text[span.start : span.end], span.detector) == (expected, detector)


def test_a_character_folding_into_several_is_masked_whole() -> None:
    # the ligature "ﬁ" folds to "fi": the span maps back to whole original characters
    text = "mail ﬁnn@example.com or ＳＳＮ １２３-４５-６７８９"
    assert [(s.detector, text[s.start : s.end]) for s in find_spans(text, BUILTINS)] == [
        ("email", "ﬁnn@example.com"),
        ("ssn", "１２３-４５-６７８９"),
    ]
    # "⒈" folds to "1.", so this reads "1.23-45-6789": not an SSN, as in ASCII
    assert find_spans("SSN ⒈23-45-6789", BUILTINS) == []


def test_text_whose_nfkc_form_cannot_be_mapped_back_is_masked_whole() -> None:
    # Hangul jamo compose across characters: the finding masks the whole text
    text = "\u1100\u1161 ann＠example.com"
    assert find_spans(text, BUILTINS) == [Span(0, len(text), "email")]
    assert find_spans("\u1100\u1161 nothing here", BUILTINS) == []


def test_ascii_and_normalized_text_take_the_fast_path() -> None:
    assert find_spans("plain ann.lee@example.com", BUILTINS)[0].start == 6
    assert find_spans("Grüße an ann.lee@example.com", BUILTINS)[0].start == 9
