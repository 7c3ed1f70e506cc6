"""The chain primitives: record tags, chain blocks, tombstones and the link check."""

from __future__ import annotations

import hmac
import os

import pytest

from langgraph_durable._core.audit import Audited, check_thread
from langgraph_durable._core.chain import (
    ChainBlock,
    ChainCache,
    ChainKey,
    _lp,
    _lps,
    _Mac,
    chain_key,
    join_block,
    split_block,
    tombstone_bodies,
)
from langgraph_durable._core.records import RecordIdentity, RecordKind, Sealed
from langgraph_durable.errors import ConfigurationError, IntegrityError

KEY = ChainKey(b"k" * 32)


def _ident(cid: str = "c1", thread: str = "t") -> RecordIdentity:
    return RecordIdentity("tenant", thread, "", RecordKind.CHECKPOINT, cid)


def test_a_tag_holds_only_for_its_bytes_type_identity_and_key() -> None:
    sealed = KEY.seal(_ident(), Sealed("json", b"payload"))
    assert KEY.check(_ident(), sealed) == Sealed("json", b"payload")
    flipped = bytearray(sealed.data)
    flipped[2] ^= 1
    for bad_identity, bad in [
        (_ident(), Sealed("json", bytes(flipped))),
        (_ident(), Sealed("msgpack", sealed.data)),
        (_ident("c2"), sealed),
        (_ident(thread="other"), sealed),
        (_ident(), Sealed("json", b"short")),
    ]:
        with pytest.raises(IntegrityError):
            KEY.check(bad_identity, bad)
    with pytest.raises(IntegrityError):
        ChainKey(b"x" * 32).check(_ident(), sealed)


def test_delta_extra_is_bound() -> None:
    base = RecordIdentity("t", "th", "", RecordKind.BLOB, "", "messages", "3", "messages")
    moved = base._replace(extra="delta:1:2")
    sealed = KEY.seal(base, Sealed("json", b"x"))
    with pytest.raises(IntegrityError):
        KEY.check(moved, sealed)


def test_chain_keys_are_checked() -> None:
    assert chain_key("00" * 32) == bytes(32)
    for bad in ["zz", b"short", 42]:
        with pytest.raises(ConfigurationError):
            chain_key(bad)


def test_block_round_trip_and_replacement() -> None:
    body = Sealed("json", b"inner-and-tag")
    block = ChainBlock(b"d" * 32, (("task", 0), ("task", -1)))
    joined = join_block(body, block)
    inner, parsed = split_block(joined)
    assert inner == body and parsed == block
    tomb = KEY.tombstone("tenant", "t", "", "c5", "c4", b"p" * 32, 3, "c2", "c4")
    again = join_block(joined, ChainBlock(block.digest, block.covers, tomb))
    inner, parsed = split_block(again)
    assert inner == body and parsed is not None and parsed.tombstone == tomb
    assert split_block(body) == (body, None)
    with pytest.raises(IntegrityError):
        split_block(Sealed("json", b"\x00\x00\x10\x00LGC1"))


def _entry(cid: str, parent: str | None, parent_digest: bytes | None, **kw: object) -> Audited:
    covers = kw.pop("covers", ())
    digest = KEY.link(
        "tenant",
        "t",
        "",
        cid,
        parent,
        parent_digest,
        b"b" * 32,
        b"m" * 32,
        [],
        covers,  # type: ignore[arg-type]
    )
    return Audited(
        "tenant", "t", "", cid, parent, ChainBlock(digest, tuple(covers)),  # type: ignore[arg-type]
        b"b" * 32, b"m" * 32, [], set(kw.pop("writes", set())),  # type: ignore[arg-type]
    )  # fmt: skip


def _line(n: int) -> list[Audited]:
    out: list[Audited] = []
    parent: Audited | None = None
    for i in range(n):
        cid = f"c{i}"
        e = _entry(
            cid,
            parent.checkpoint_id if parent else None,
            parent.block.digest if parent and parent.block else None,
        )
        out.append(e)
        parent = e
    return out


def test_check_thread_finds_what_is_missing_or_relinked() -> None:
    entries = _line(5)
    assert check_thread(KEY, entries) == []
    # one removed from the middle: its child is named
    broken = check_thread(KEY, [e for e in entries if e.checkpoint_id != "c2"])
    assert [(b.checkpoint_id, "c2" in b.reason) for b in broken] == [("c3", True)]
    # a child re-linked to another parent
    entries[3].parent_id = "c1"
    assert [b.checkpoint_id for b in check_thread(KEY, entries)] == ["c3"]


def test_covered_writes_must_stay() -> None:
    parent = _entry("c0", None, None, writes={("task", 0)})
    assert parent.block is not None
    child = _entry("c1", "c0", parent.block.digest, covers=(("task", 0),))
    assert check_thread(KEY, [parent, child]) == []
    parent.write_keys.clear()
    assert [b.checkpoint_id for b in check_thread(KEY, [parent, child])] == ["c1"]


def test_a_trim_tombstone_keeps_the_survivor_verifying() -> None:
    entries = _line(4)
    bodies = {
        e.checkpoint_id: join_block(Sealed("json", b"x" * 40), e.block)  # type: ignore[arg-type]
        for e in entries
    }
    survivors = {"c3": ("c2", bodies["c3"])}
    removed = {"c0": None, "c1": None, "c2": bodies["c2"]}
    new = tombstone_bodies(KEY, "tenant", "t", "", survivors, removed)
    _inner, block = split_block(new["c3"])
    assert block is not None and block.tombstone is not None
    assert block.tombstone.parent == "c2" and block.tombstone.count == 3
    survivor = entries[3]
    survivor.block = block
    assert check_thread(KEY, [survivor]) == []
    # a tombstone signed with another key, or for another survivor, does not hold
    digest = block.tombstone.digest
    forged = ChainKey(b"z" * 32).tombstone("tenant", "t", "", "c3", "c2", digest, 3, "c0", "c2")
    survivor.block = ChainBlock(block.digest, block.covers, forged)
    assert [b.checkpoint_id for b in check_thread(KEY, [survivor])] == ["c3"]


def test_cache_is_bounded_and_forgets_threads() -> None:
    cache = ChainCache(size=3)
    for i in range(5):
        cache.put(("tn", "t", ""), f"c{i}", bytes([i]) * 32)
    assert cache.get(("tn", "t", ""), "c0") is None
    cache.add_writes(("tn", "t", ""), "c4", [("task", 1), ("task", 0)])
    assert cache.get(("tn", "t", ""), "c4") == (bytes([4]) * 32, (("task", 0), ("task", 1)))
    cache.forget("tn", "t")
    assert cache.get(("tn", "t", ""), "c4") is None


@pytest.mark.parametrize("key_size", [16, 32, 64, 65, 200])
@pytest.mark.parametrize(
    "sizes", [(0, 0), (10, 2037), (2047, 1), (0, 2048), (5000, 1), (100_000, 4095)]
)
def test_mac_is_hmac_sha256(key_size: int, sizes: tuple[int, int]) -> None:
    """The GIL-holding MAC is RFC 2104 HMAC-SHA256 of its two parts' concatenation."""
    key = os.urandom(key_size)
    head, data = (os.urandom(n) for n in sizes)
    assert _Mac(key).digest2(head, data) == hmac.digest(key, head + data, "sha256")


@pytest.mark.parametrize(
    "values",
    [
        (),
        ("",),
        ("a", "", "bc"),
        ("x" * 255, "y" * 256, "z" * 1023),  # lengths whose bytes are not ASCII
        ("x" * 1024, "short"),  # past the table of lengths
        ("t\u00ebn\u00e4nt", "thread"),  # not ASCII: UTF-8 bytes, byte lengths
        ("\U0001f600", "\x7f\x80"),
    ],
)
def test_length_prefixed_strings_in_one_pass_are_the_same_bytes(values: tuple[str, ...]) -> None:
    assert _lps(*values) == b"".join(_lp(v) for v in values)
