"""Known answers for the chain's stored bytes: tags, digests and chain blocks.

Stores written by an earlier release must keep verifying, so the bytes a tag or a
digest is computed over, and the chain block's layout, may not drift when the
code that computes them changes (these values were computed by the first
release of the chain's format, ``lgd-tag/2`` and ``lgd-chain/2``).
"""

from __future__ import annotations

import pytest

from langgraph_durable._core.chain import ChainBlock, ChainKey, split_block
from langgraph_durable._core.records import RecordIdentity, RecordKind, Sealed

KEY = ChainKey(b"k" * 32)
DATA = bytes(range(256)) * 20

IDENTITIES = {
    "checkpoint": RecordIdentity("tenant", "t", "", RecordKind.CHECKPOINT, "c1"),
    "delta": RecordIdentity(
        "tëñ",
        "th|1",
        "ns:a|b",
        RecordKind.BLOB,
        "",
        "messages",
        "00000012.0.5",
        "messages",
        "delta:1:2",
    ),
    "write": RecordIdentity("t", "th", "", RecordKind.WRITE, "c9", "task-1", "3", "chan", ""),
}

TAGS = [
    ("checkpoint", "json", b"", "b5858ba0badd55dc7f2759d61859d6384711f9d0c85dee8d7e3a1879b42da1ea"),
    (
        "checkpoint",
        "msgpack",
        DATA,
        "5c45c8cbe533e55d26d9f310d081fc2d8d89587563168b9fd4f317c645662e52",
    ),
    ("delta", "json", b"", "04720953e1f49caba8ef1e9b06834a8a231f533bd2fd992b95678965694dd5a6"),
    ("delta", "msgpack", DATA, "aec3ab5a35dbbb1b636b1930dc8442b77b7e54d98a3827778f7e3b1032d1b2b5"),
    ("write", "json", b"", "2293619ec20d8b35d0d7bdddd54e151bd6ac7ec25851c59761d5044fc57d1956"),
    ("write", "msgpack", DATA, "d095a2bcc14e8545efb507c070cd4eda55e6546537562f48b93de2bc71a3fd4d"),
]


@pytest.mark.parametrize(("who", "type_", "data", "want"), TAGS)
def test_a_tag_is_what_the_format_says(who: str, type_: str, data: bytes, want: str) -> None:
    identity = IDENTITIES[who]
    assert KEY.tag(identity, type_, data).hex() == want
    sealed = KEY.seal(identity, Sealed(type_, data))
    assert sealed.data == data + bytes.fromhex(want)
    assert KEY.check(identity, sealed) == Sealed(type_, data)


def test_a_digest_is_what_the_format_says() -> None:
    child = KEY.link(
        "tenant",
        "thread",
        "",
        "c2",
        "c1",
        b"p" * 32,
        b"b" * 32,
        b"m" * 32,
        [("messages", "2"), ("a", "1")],
        [("task", 0), ("task", -3)],
    )
    assert child.hex() == "478753b9ebfe5f27791e8f9b9ee65e97f272d7382d8a496d5aa57374f88013a4"
    root = KEY.link("tenant", "thread", "ns", "c1", None, None, b"b" * 32, b"m" * 32, [], [])
    assert root.hex() == "10b78c3a2d02ed6ccfdff9ece321261340cf7755fd0292932567a00a05d91d53"
    wide = KEY.link(
        "tëñ",
        "th|1",
        "ns:ü",
        "c2",
        "c1",
        b"p" * 32,
        b"b" * 32,
        b"m" * 32,
        [("mëssages", "2"), ("a", "1")],
        [("tâsk", 0)],
    )
    assert wide.hex() == "cb90e623d716d5f90a895cfef9420cd0bc9ed9a0e284c2d26b611fab70ee21de"


@pytest.mark.parametrize(
    ("covers", "want"),
    [
        (
            (("task-1", 0), ('we"ird\\', -1)),
            "7b2263223a5b5b227461736b2d31222c305d2c5b2277655c226972645c5c222c2d315d5d7d"
            "000000454c474331",
        ),
        ((), "7b2263223a5b5d7d000000284c474331"),
    ],
)
def test_a_chain_block_is_what_the_format_says(
    covers: tuple[tuple[str, int], ...], want: str
) -> None:
    block = ChainBlock(b"d" * 32, covers)
    assert block.encode() == b"d" * 32 + bytes.fromhex(want)
    _inner, back = split_block(Sealed("json", b"body" + block.encode()))
    assert back == block
