"""Tamper evidence: record tags, the checkpoint hash chain and trim tombstones.

Pure: no I/O. Three layers, all keyed by one secret chain key (HMAC-SHA256):

* **Record tags.** Every payload the record pipeline seals (checkpoint body,
  metadata, channel blob or delta, pending write, journal entry) ends with a
  32-byte tag over its record identity, its type and its stored bytes. A byte
  changed, or a record moved to another identity, fails the tag.
* **The chain.** Each checkpoint's *digest* is an HMAC over its identity, its
  parent's id and digest, the tags of its body and metadata, the blob versions
  it references and the keys of its parent's pending writes known when it was
  written (``covers``), and of its grandparent's (``grand``: LangGraph stores a
  step's writes after the checkpoint that follows it, so a checkpoint's writes are
  usually known only when its grandchild is written). It is stored with the body,
  after the body's tag, in a
  *chain block* that needs no other key to read. Forks chain to their parent,
  so a thread's history verifies as a DAG.
* **Tombstones.** Trimming history (``keep_latest``) removes parents that
  surviving checkpoints link to; the pruner adds to each such survivor's chain
  block a tombstone signed with the chain key: the removed parent's id and
  digest, and how many checkpoints were removed (with the first and last id).
  The survivor's digest is unchanged, so it and its descendants still verify.

Layout of a checkpoint body's stored bytes when the chain is on::

    inner bytes | tag (32) | digest (32) | JSON {"c": covers, "g": grand, "t": tombstone}
                | u32 len | b"LGC1"

where ``len`` counts the digest and the JSON.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ChainKeyRequiredError, ConfigurationError, IntegrityError
from .hashing import GIL_HELD, feed
from .records import RecordIdentity, Sealed

__all__ = [
    "TAG_SIZE",
    "IntegrityError",
    "ChainBlock",
    "Tombstone",
    "ChainKey",
    "ChainCache",
    "chain_key",
    "split_block",
    "join_block",
    "has_block",
    "refuse_unkeyed_trim",
    "tombstone_bodies",
]

TAG_SIZE = 32
_MAGIC = b"LGC1"
_ZERO = bytes(TAG_SIZE)


def _lp(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")
    return len(raw).to_bytes(4, "big") + raw


#: u32 big-endian lengths below 1,024 as 4-character latin-1 strings (see ``_lps``).
_LEN4 = [n.to_bytes(4, "big").decode("latin-1") for n in range(1024)]


def _lps(*values: str) -> bytes:
    """``b"".join(map(_lp, values))``, in one pass for short ASCII strings.

    An ASCII string's UTF-8 bytes are its latin-1 bytes, and so are a length's
    four bytes written as four latin-1 characters: the whole encodes at once.
    """
    if "".join(values).isascii():
        try:
            return "".join([_LEN4[len(v)] + v for v in values]).encode("latin-1")
        except IndexError:  # a string of 1,024 characters or more
            pass
    return b"".join(map(_lp, values))


def chain_key(value: Any) -> bytes:
    """The chain key from ``integrity=``: bytes (16 or more), or a hex string."""
    if isinstance(value, str):
        try:
            value = bytes.fromhex(value.strip())
        except ValueError as exc:
            raise ConfigurationError("integrity key: a hex string or bytes expected") from exc
    if isinstance(value, bytearray | memoryview):
        value = bytes(value)
    if not isinstance(value, bytes):
        raise ConfigurationError(
            f"integrity= takes the chain key as bytes or hex, got {type(value).__name__}"
        )
    if len(value) < 16:
        raise ConfigurationError("integrity key: at least 16 bytes (32 recommended)")
    return value


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What a trim removed before a surviving checkpoint (see the module doc)."""

    parent: str
    digest: bytes
    count: int
    first: str
    last: str
    mac: bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "p": self.parent,
            "d": self.digest.hex(),
            "n": self.count,
            "f": self.first,
            "l": self.last,
            "m": self.mac.hex(),
        }

    @classmethod
    def from_json(cls, raw: Any) -> Tombstone:
        try:
            return cls(
                str(raw["p"]),
                bytes.fromhex(raw["d"]),
                int(raw["n"]),
                str(raw["f"]),
                str(raw["l"]),
                bytes.fromhex(raw["m"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"a chain tombstone is malformed: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ChainBlock:
    """The chain fields stored after a checkpoint body's tag."""

    digest: bytes
    covers: tuple[tuple[str, int], ...] = ()
    tombstone: Tombstone | None = None
    grand: tuple[tuple[str, int], ...] = ()

    def encode(self) -> bytes:
        return encode_block(self.digest, self.covers, self.tombstone, self.grand)


def encode_block(
    digest: bytes,
    covers: tuple[tuple[str, int], ...],
    tombstone: Tombstone | None = None,
    grand: tuple[tuple[str, int], ...] = (),
) -> bytes:
    """``ChainBlock(digest, covers, tombstone, grand).encode()`` (without making the block)."""
    if (
        tombstone is None
        and not grand
        and (
            not covers
            or (
                all([type(t) is str and type(i) is int for t, i in covers])
                and _PLAIN("".join([t for t, _i in covers])) is not None
            )
        )
    ):
        # what json.dumps writes for these (plain task ids), without its machinery
        text = '{"c":[' + ",".join([f'["{t}",{i}]' for t, i in covers]) + "]}"
    else:
        doc: dict[str, Any] = {"c": [list(c) for c in covers]}
        if grand:
            doc["g"] = [list(c) for c in grand]
        if tombstone is not None:
            doc["t"] = tombstone.to_json()
        text = json.dumps(doc, separators=(",", ":"))
    payload = digest + text.encode()
    return payload + len(payload).to_bytes(4, "big") + _MAGIC


#: A string json.dumps writes as itself between quotes.
_PLAIN = re.compile(r"[A-Za-z0-9_.:~+-]*").fullmatch


def split_block(sealed: Sealed) -> tuple[Sealed, ChainBlock | None]:
    """(the body as the pipeline sealed it, its chain block or None when it has none)."""
    data = sealed.data
    if len(data) < 8 or data[-4:] != _MAGIC:
        return sealed, None
    size = int.from_bytes(data[-8:-4], "big")
    start = len(data) - 8 - size
    if size < TAG_SIZE or start < 0:
        raise IntegrityError("a checkpoint's chain block is truncated")
    payload = data[start:-8]
    try:
        doc = json.loads(payload[TAG_SIZE:])
        covers = tuple((str(t), int(i)) for t, i in doc.get("c", ()))
        grand = tuple((str(t), int(i)) for t, i in doc.get("g", ()))
        tomb = doc.get("t")
    except (ValueError, TypeError, AttributeError) as exc:
        raise IntegrityError(f"a checkpoint's chain block is malformed: {exc}") from exc
    block = ChainBlock(
        payload[:TAG_SIZE], covers, None if tomb is None else Tombstone.from_json(tomb), grand
    )
    return Sealed(sealed.type, data[:start]), block


def has_block(sealed: Sealed) -> bool:
    """Whether a stored checkpoint body ends with a chain block (written with ``integrity=``)."""
    data = sealed.data
    if len(data) < 8 or data[-4:] != _MAGIC:
        return False
    size = int.from_bytes(data[-8:-4], "big")
    return TAG_SIZE <= size <= len(data) - 8


def refuse_unkeyed_trim(tenant: str, thread: str, bodies: Iterable[Sealed | None]) -> None:
    """Raise ChainKeyRequiredError when a trim without the chain key meets a chained body.

    A pruner without ``integrity=`` reads the bodies of the checkpoints that would
    lose their parent (the survivors a keyed trim gives a tombstone): trimming a
    chained history without tombstones would make ``verify`` report every such
    survivor, and the removed parents' digests could never be recovered.
    """
    if any(body is not None and has_block(body) for body in bodies):
        raise ChainKeyRequiredError(
            f"thread {thread!r} of tenant {tenant!r} has a hash chain (written with "
            "integrity=): keep_latest cannot trim it without the chain key, which signs the "
            "tombstones that keep the trimmed history verifiable; give the pruner the key "
            "(integrity= on the saver, LGD_INTEGRITY_KEY for the command line). Nothing of "
            "this thread was removed"
        )


def join_block(sealed: Sealed, block: ChainBlock) -> Sealed:
    """The body with ``block`` appended (any block it had is replaced)."""
    inner, _old = split_block(sealed)
    return Sealed(inner.type, inner.data + block.encode())


_BLOCK = 64  # SHA-256's block size


class _Mac:
    """HMAC-SHA256 (RFC 2104) under one key, the padded key's states computed once.

    Not ``hmac.digest``: that lets go of the GIL on every call (see ``hashing``).
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > _BLOCK:
            key = hashlib.sha256(key).digest()
        key = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))

    def digest2(self, head: bytes, data: bytes) -> bytes:
        """The MAC of ``head + data`` (one update when both fit under ``GIL_HELD``)."""
        inner = self._inner.copy()
        if len(head) + len(data) <= GIL_HELD:
            inner.update(head + data)
        else:
            feed(inner, head)
            feed(inner, data)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


class ChainKey:
    """The keyed functions of the chain (tags, digests, tombstones)."""

    def __init__(self, key: bytes) -> None:
        self._key = chain_key(key)
        self._mac = _Mac(self._key)

    # ---- record tags -------------------------------------------------------------

    def tag(self, identity: RecordIdentity, type_: str, data: bytes) -> bytes:
        """HMAC over the identity's encoding, the type and the bytes."""
        return self._mac.digest2(_tag_head(identity, type_), data)

    def seal(self, identity: RecordIdentity, sealed: Sealed) -> Sealed:
        """``sealed`` with its tag appended."""
        type_, data = sealed.type, sealed.data
        return Sealed(type_, data + self._mac.digest2(_tag_head(identity, type_), data))

    def check(self, identity: RecordIdentity, sealed: Sealed) -> Sealed:
        """The stored bytes without their tag; IntegrityError if the tag does not hold."""
        data = sealed.data
        if len(data) < TAG_SIZE:
            raise IntegrityError(_what(identity, "has no integrity tag"))
        inner, tag = data[:-TAG_SIZE], data[-TAG_SIZE:]
        if not hmac.compare_digest(tag, self.tag(identity, sealed.type, inner)):
            raise IntegrityError(
                _what(
                    identity,
                    "fails its integrity tag (altered, moved or forged; or written before "
                    "integrity= was turned on, which such records cannot be told apart from: "
                    "see docs/integrity.md, Limits)",
                )
            )
        return Sealed(sealed.type, inner)

    # ---- the chain ---------------------------------------------------------------

    def link(
        self,
        tenant: str,
        thread: str,
        ns: str,
        checkpoint_id: str,
        parent_id: str | None,
        parent_digest: bytes | None,
        body_tag: bytes,
        metadata_tag: bytes,
        refs: Iterable[tuple[str, str]],
        covers: Iterable[tuple[str, int]],
        grand: Iterable[tuple[str, int]] = (),
    ) -> bytes:
        """The digest of one checkpoint (see the module doc)."""
        ref_pairs = sorted([(str(a), str(b)) for a, b in refs])
        cover_pairs = sorted([(str(t), str(int(i))) for t, i in covers])
        grand_pairs = sorted([(str(t), str(int(i))) for t, i in grand])
        tail = b""
        if grand_pairs:  # absent from digests made before grandparents were covered
            tail = (
                b"g"
                + len(grand_pairs).to_bytes(4, "big")
                + _lps(*[v for pair in grand_pairs for v in pair])
            )
        return self._mac.digest2(
            b"lgd-chain/2"
            + _lps(tenant, thread, ns, checkpoint_id, parent_id or "")
            + (parent_digest if parent_digest is not None else _ZERO)
            + body_tag
            + metadata_tag
            + len(ref_pairs).to_bytes(4, "big"),
            _lps(*[v for pair in ref_pairs for v in pair])
            + len(cover_pairs).to_bytes(4, "big")
            + _lps(*[v for pair in cover_pairs for v in pair])
            + tail,
        )

    def tombstone(
        self,
        tenant: str,
        thread: str,
        ns: str,
        survivor: str,
        parent: str,
        digest: bytes,
        count: int,
        first: str,
        last: str,
    ) -> Tombstone:
        """A signed tombstone for ``survivor``, whose parent ``parent`` was trimmed."""
        return Tombstone(
            parent,
            digest,
            count,
            first,
            last,
            self._tomb_mac(tenant, thread, ns, survivor, parent, digest, count, first, last),
        )

    def tombstone_holds(
        self, tenant: str, thread: str, ns: str, survivor: str, tomb: Tombstone
    ) -> bool:
        want = self._tomb_mac(
            tenant,
            thread,
            ns,
            survivor,
            tomb.parent,
            tomb.digest,
            tomb.count,
            tomb.first,
            tomb.last,
        )
        return hmac.compare_digest(want, tomb.mac)

    def _tomb_mac(
        self,
        tenant: str,
        thread: str,
        ns: str,
        survivor: str,
        parent: str,
        digest: bytes,
        count: int,
        first: str,
        last: str,
    ) -> bytes:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        mac.update(b"lgd-tomb/1")
        for part in (tenant, thread, ns, survivor, parent, str(count), first, last):
            mac.update(_lp(part))
        mac.update(digest)
        return mac.digest()


#: RecordIdentity's fields in declaration order (tenant, thread, ns, kind, checkpoint_id,
#: key, version, channel, extra): what a tag binds.
_IDENTITY_FIELDS = RecordIdentity._fields
#: The lengths of the identity's fields and the type, as u32 big-endian.
_HEAD_LENGTHS = struct.Struct(f">{len(_IDENTITY_FIELDS) + 1}I")


def _tag_head(identity: RecordIdentity, type_: str) -> bytes:
    """What a tag binds besides the bytes: every identity field and the type, unambiguously
    (their lengths, then their UTF-8 bytes)."""
    fields = (*identity, type_)  # a named tuple: its fields in order
    joined = "".join(fields)
    if joined.isascii():  # one byte per character: the lengths are the strings'
        return b"lgd-tag/2" + _HEAD_LENGTHS.pack(*map(len, fields)) + joined.encode("ascii")
    parts = [v.encode("utf-8", "surrogatepass") for v in fields]
    return b"".join((b"lgd-tag/2", _HEAD_LENGTHS.pack(*map(len, parts)), *parts))


def _what(identity: RecordIdentity, problem: str) -> str:
    where = identity.checkpoint_id or identity.version or "-"
    return (
        f"{identity.kind} record of tenant {identity.tenant!r}, thread {identity.thread!r}, "
        f"namespace {identity.ns!r} ({where}, key {identity.key or '-'}) {problem}"
    )


class _Known:
    __slots__ = ("digest", "writes", "parent")

    def __init__(self, digest: bytes | None) -> None:
        self.digest = digest  # None: writes seen before the checkpoint's own put ended
        self.writes: set[tuple[str, int]] = set()
        self.parent: str | None = None


class ChainCache:
    """Digests and pending-write keys of recently written or read checkpoints.

    ``put`` needs its parent's digest and the keys of the parent's writes;
    LangGraph reads a thread's latest checkpoint before it runs on it and then
    writes each checkpoint after its parent, so these are nearly always here.
    On a miss the saver reads the parent first (one extra round trip).
    Bounded (least recently used first out); thread-safe.
    """

    def __init__(self, size: int = 20_000) -> None:
        self._size = size
        self._items: OrderedDict[tuple[str, str, str, str], _Known] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self, scope: tuple[str, str, str], checkpoint_id: str
    ) -> tuple[bytes, tuple[tuple[str, int], ...]] | None:
        with self._lock:
            known = self._items.get((*scope, checkpoint_id))
            if known is None or known.digest is None:
                return None
            self._items.move_to_end((*scope, checkpoint_id))
            return known.digest, tuple(sorted(known.writes))

    def grand_writes(
        self, scope: tuple[str, str, str], parent_id: str
    ) -> tuple[tuple[str, int], ...]:
        """The write keys known of the parent's parent (empty when either is unknown)."""
        with self._lock:
            parent = self._items.get((*scope, parent_id))
            if parent is None or not parent.parent:
                return ()
            grand = self._items.get((*scope, parent.parent))
            return () if grand is None else tuple(sorted(grand.writes))

    def has(self, scope: tuple[str, str, str], checkpoint_id: str) -> bool:
        """Whether :meth:`get` would find the checkpoint's digest (no reordering)."""
        known = self._items.get((*scope, checkpoint_id))  # one dict read: atomic
        return known is not None and known.digest is not None

    def put(
        self,
        scope: tuple[str, str, str],
        checkpoint_id: str,
        digest: bytes,
        writes: Iterable[tuple[str, int]] = (),
        parent: str | None = None,
    ) -> None:
        with self._lock:
            k = (*scope, checkpoint_id)
            known = self._items.get(k)
            if known is None or (known.digest is not None and known.digest != digest):
                known = _Known(digest)
                self._items[k] = known
            known.digest = digest
            known.writes.update(writes)
            if parent:
                known.parent = parent
            self._items.move_to_end(k)
            self._trim()

    def _trim(self) -> None:
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def add_writes(
        self, scope: tuple[str, str, str], checkpoint_id: str, writes: Iterable[tuple[str, int]]
    ) -> None:
        with self._lock:
            k = (*scope, checkpoint_id)
            known = self._items.get(k)
            if known is None:  # the checkpoint's own put may not have ended yet
                known = self._items[k] = _Known(None)
                self._trim()
            known.writes.update(writes)

    def forget(self, tenant: str, thread: str) -> None:
        with self._lock:
            for k in [k for k in self._items if k[0] == tenant and k[1] == thread]:
                del self._items[k]


def tombstone_bodies(
    chain: ChainKey,
    tenant: str,
    thread: str,
    ns: str,
    survivors: dict[str, tuple[str | None, Sealed]],
    removed: dict[str, Sealed | None],
) -> dict[str, Sealed]:
    """The new bodies of surviving checkpoints whose parent a trim removes.

    Args:
        chain: The chain key (the saver's ``codec.chain``).
        tenant, thread, ns: Where the trim happens (one namespace).
        survivors: checkpoint id -> (parent id, stored body) of the checkpoints
            that stay. Only those whose parent is in ``removed`` need be given.
        removed: checkpoint id -> stored body (None if not read) of every
            checkpoint of the namespace the trim removes.

    Returns:
        checkpoint id -> the body to store instead (the same payload and tag,
        its chain block now carrying a signed tombstone). A survivor whose
        body or removed parent has no chain block (written without
        ``integrity=``) is left as it is. Write these before deleting the
        removed checkpoints: a tombstone next to a parent still present is
        harmless, a missing parent without one reads as tampering.
    """
    if not removed:
        return {}
    ids = sorted(removed)
    out: dict[str, Sealed] = {}
    for survivor, (parent, body) in survivors.items():
        if not parent or parent not in removed:
            continue
        parent_body = removed[parent]
        if parent_body is None:
            continue
        _inner, parent_block = split_block(parent_body)
        _inner, block = split_block(body)
        if parent_block is None or block is None:
            continue
        tomb = chain.tombstone(
            tenant, thread, ns, survivor, parent, parent_block.digest, len(ids), ids[0], ids[-1]
        )
        out[survivor] = join_block(body, ChainBlock(block.digest, block.covers, tomb, block.grand))
    return out
