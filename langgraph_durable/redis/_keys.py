"""Every Redis key of the saver, the shapes of their fields, and URL helpers.

Pure: no redis import, no I/O.

Key layout (``P`` is the saver's prefix, ``T`` the thread's hash tag
``{tenant:thread}`` with both parts percent-encoded, so distinct pairs never
share a tag and every key of a thread lives in one cluster slot)::

    P:{T}:h   hash   "<ns>\\0<id>" -> record header (msgpack: v, parent, run_id,
                     blob refs, DeltaChannel flag); field "\\0" marks a thread
                     registered in its tenant's index; fields "\\0\\0created" and
                     "\\0\\0touched" hold the server times (ms) of its first and
                     last write (the pruner's clock)
    P:{T}:c   hash   "<ns>\\0<id>" -> record payload (msgpack: metadata index
                     JSON, body type, body, metadata type, metadata)
    P:{T}:b   hash   "<ns>\\0<channel>\\0<version>" -> blob (msgpack: type, bytes),
                     or a delta of a list value: "D", >I meta length, meta
                     (msgpack: the version it extends, that version's item
                     count), then the added items (msgpack: type, bytes)
    P:{T}:w   hash   "<ns>\\0<id>" -> task ids that wrote (msgpack list);
                     "<ns>\\0<id>\\0<task>" -> that task's writes (frames)
    P:{T}:i   zset   "<ns>\\0<id>", score 0: by namespace, then id
    P:{T}:n   zset   "<id>\\0<ns>", score 0: by id across namespaces
    P:{T}:e   set    effect ids of the thread's effect journal
    P:{T}:e:<effect id>  hash  one journal entry: state, token, attempt,
                     lease_until, request_type, request, outcome, result_type,
                     result, created, completed (times as Python float reprs),
                     and call (the id of the last call that changed it)
    P:threads:{tenant}   zset   thread id -> server time (ms) it was registered
    P:keys:{tenant}      hash   data-key version -> msgpack [key id, wrapped key
                                or nil once shredded, created (Unix seconds)]
    P:key-tenants        set    tenants that have data keys (envelope encryption)
    P:retention          string the saver's retention policy (JSON), set by setup()
    P:prune-lock         string the running pruner (host:pid:random), with a lease

The data-key hashes and their set never expire and are not touched by
``delete_thread`` or ``prune``: a tenant's keys outlive its threads.

Six keys per thread whatever its size, plus the effect journal's set and
one hash per entry; an expiry covers them all (seven commands plus one per
journal entry), so every key of a thread always has the same expiry.
Identifiers may not contain NUL, which separates the parts of a field; checkpoint
ids sort in time order, so the lexicographic ranges of the two sorted sets give
the latest checkpoint of a namespace and newest-first listings.

The record and frame formats are in ``_records``; the Lua scripts read the same
shapes (``lua/lib/thread.lua``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import ConfigurationError, InvalidInputError

__all__ = ["KeyLayout", "validate_prefix", "split_cluster_url"]

SEP = "\x00"
#: Field of the header hash that says the thread is in its tenant's index.
MARK = "\x00"
#: Fields of the header hash with the server times (ms) of a thread's first and
#: last write (two NULs: never a checkpoint's "<ns>\0<id>").
CREATED_FIELD = "\x00\x00created"
TOUCHED_FIELD = "\x00\x00touched"

#: The fields of an effect-journal entry's hash, in the order the scripts return them.
EFFECT_FIELDS = (
    "state",
    "token",
    "attempt",
    "lease_until",
    "request_type",
    "request",
    "outcome",
    "result_type",
    "result",
    "created",
    "completed",
)


def validate_prefix(prefix: str) -> str:
    """Check that ``prefix`` can start the saver's key names and return it."""
    if not isinstance(prefix, str) or not prefix:
        raise ConfigurationError(f"prefix must be a non-empty string, got {prefix!r}")
    bad = [c for c in "{}\x00" if c in prefix]
    if bad or len(prefix) > 128:
        raise ConfigurationError(
            f"prefix {prefix!r} is not allowed: use up to 128 characters without "
            "'{', '}' or NUL (a brace would change the keys' cluster hash slot), e.g. 'lgd'"
        )
    return prefix


def _tag_part(value: str) -> str:
    """Percent-encode the characters that delimit a hash tag or its parts."""
    return value.replace("%", "%25").replace(":", "%3A").replace("{", "%7B").replace("}", "%7D")


_GLOB = re.compile(r"([*?\[\]\\])")
_TAG_CODES = re.compile(r"%(25|3A|7B|7D)")
_TAG_CHARS = {"25": "%", "3A": ":", "7B": "{", "7D": "}"}


def _untag(value: str) -> str:
    """What ``_tag_part`` encoded."""
    return _TAG_CODES.sub(lambda m: _TAG_CHARS[m.group(1)], value)


def _glob_escape(value: str) -> str:
    """``value`` matched literally in a SCAN MATCH pattern."""
    return _GLOB.sub(r"\\\1", value)


def _ident(value: Any, what: str) -> str:
    """``value`` as a string fit for a key or field part (no NUL, valid UTF-8)."""
    text = value if isinstance(value, str) else str(value)
    if SEP in text:
        raise InvalidInputError(f"{what} must not contain NUL characters, got {text!r}")
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{what} is not valid Unicode text: {text!r}") from exc
    return text


def _effect_id(effect_id: Any) -> str:
    text = _ident(effect_id, "effect id")
    if not text:
        raise InvalidInputError("effect id must not be empty")
    return text


def _is_meta(f: bytes) -> bool:
    """Whether a header-hash field is not a checkpoint (the mark, the thread's times)."""
    return f == MARK.encode() or f[:2] == b"\x00\x00"


class KeyLayout:
    """The key names of one saver prefix (see the module docstring).

    Args:
        prefix: The key prefix (validated).
    """

    SUFFIXES = ("h", "c", "b", "w", "i", "n")

    def __init__(self, prefix: str) -> None:
        self.prefix = validate_prefix(prefix)

    def tag(self, tenant: str, thread: str) -> str:
        """The hash tag shared by every key of one thread (with braces)."""
        return "{" + _tag_part(tenant) + ":" + _tag_part(thread) + "}"

    def thread(self, tenant: str, thread: str) -> tuple[str, ...]:
        """The six keys of a thread, in the order the scripts expect."""
        base = self._base(tenant, thread)
        return tuple(base + s for s in self.SUFFIXES)

    def _base(self, tenant: str, thread: str) -> str:
        return f"{self.prefix}:{self.tag(tenant, thread)}:"

    def checkpoint_index_pattern(self, tenant: str | None = None) -> str:
        """A SCAN pattern matching the ``i`` key of every thread (of one tenant).

        A thread has that key exactly while it has a checkpoint.
        """
        inner = "*" if tenant is None else _glob_escape(_tag_part(tenant)) + ":*"
        return _glob_escape(self.prefix) + ":{" + inner + "}:" + self.SUFFIXES[4]

    def thread_of(self, key: Any) -> tuple[str, str] | None:
        """(tenant, thread) of a thread's ``i`` key name; None for any other key."""
        try:
            text = key.decode() if isinstance(key, (bytes, bytearray)) else str(key)
        except UnicodeDecodeError:
            return None
        head, tail = self.prefix + ":{", "}:" + self.SUFFIXES[4]
        if not text.startswith(head) or not text.endswith(tail):
            return None
        body = text[len(head) : -len(tail)]
        tenant, sep, thread = body.partition(":")
        if not sep or any(c in body for c in "{}") or ":" in thread:
            return None
        return _untag(tenant), _untag(thread)

    def effects(self, tenant: str, thread: str) -> str:
        """The set of a thread's effect ids (the scripts derive it from the ``h`` key)."""
        return self._base(tenant, thread) + "e"

    def effect(self, tenant: str, thread: str, effect_id: str) -> str:
        """The hash of one effect-journal entry of a thread (in the thread's slot)."""
        return self._base(tenant, thread) + "e:" + effect_id

    def tenant_index(self, tenant: str) -> str:
        """The sorted set of a tenant's thread ids (its own slot)."""
        return f"{self.prefix}:threads:{{{_tag_part(tenant)}}}"

    def data_keys(self, tenant: str) -> str:
        """The hash of a tenant's data-key versions (one slot, never expires)."""
        return f"{self.prefix}:keys:{{{_tag_part(tenant)}}}"

    def key_tenants(self) -> str:
        """The set of tenants that have data keys."""
        return f"{self.prefix}:key-tenants"

    def retention(self) -> str:
        """The string holding the saver's retention policy (JSON; ``setup()`` writes it)."""
        return f"{self.prefix}:retention"

    def prune_lock(self) -> str:
        """The string naming the running pruner (with a lease)."""
        return f"{self.prefix}:prune-lock"


def split_cluster_url(url: str) -> tuple[str, bool]:
    """A redis-py URL and whether it names a cluster.

    ``redis+cluster://``, ``rediss+cluster://`` and a ``cluster=true`` query
    parameter name a cluster; the returned URL has plain ``redis://`` /
    ``rediss://`` and no ``cluster`` parameter.

    Raises:
        ConfigurationError: Not a Redis URL.
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError(f"a Redis URL is required, got {url!r}")
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    cluster = False
    if scheme.endswith("+cluster"):
        scheme, cluster = scheme[: -len("+cluster")], True
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigurationError(
            f"unsupported Redis URL scheme {parts.scheme!r} in {url!r}: use redis://, "
            "rediss://, unix://, or redis+cluster:// / rediss+cluster:// for a cluster"
        )
    query = []
    named = False
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name.lower() == "cluster":
            named = True
            if value.lower() in ("1", "true", "yes", "on"):
                cluster = True
            elif value.lower() not in ("0", "false", "no", "off", ""):
                raise ConfigurationError(f"cluster={value!r} in {url!r}: use true or false")
            continue
        query.append((name, value))
    if cluster and scheme == "unix":
        raise ConfigurationError(f"a cluster cannot be reached over a unix socket: {url!r}")
    if scheme == parts.scheme.lower() and not named:
        return url.strip(), cluster  # as given: nothing to take out
    rebuilt = urlunsplit((scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))
    return rebuilt, cluster
