"""The optional C module computes the same record tags as the Python code.

``langgraph_durable._core._tagfast`` is built by ``hatch_build.py`` when the machine has a
C compiler and OpenSSL's headers; these tests need it and are skipped (visibly) without.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langgraph_durable._core import chain
from langgraph_durable._core.chain import ChainKey
from langgraph_durable._core.records import RecordIdentity, RecordKind, Sealed

pytestmark = pytest.mark.skipif(
    chain._tagfast is None, reason="the optional C module _tagfast is not built here"
)

KEYS = [b"k" * 32, bytes(range(16)), os.urandom(64), os.urandom(65), os.urandom(200)]


def _pure(key: bytes) -> ChainKey:
    ck = ChainKey(key)
    ck._fast = None  # the Python path only
    return ck


def _identity(fields: list[str]) -> RecordIdentity:
    tenant, thread, ns, checkpoint_id, key, version, channel, extra = fields
    return RecordIdentity(
        tenant, thread, ns, RecordKind.BLOB, checkpoint_id, key, version, channel, extra
    )


texts = st.lists(
    st.sampled_from(["a", "|", ":", "é", "€", "\U0001f600", "\x00", "x" * 300]), max_size=6
).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    key=st.sampled_from(KEYS),
    fields=st.lists(texts, min_size=8, max_size=8),
    type_=st.sampled_from(["msgpack", "json", "bytes", "empty", "tÿpe"]),
    size=st.sampled_from([0, 1, 31, 2000, 2047, 2048, 2049, 5000, 70_000]),
)
def test_native_tags_are_the_python_tags(
    key: bytes, fields: list[str], type_: str, size: int
) -> None:
    fast, slow = ChainKey(key), _pure(key)
    assert fast._fast is not None
    identity = _identity(fields)
    data = os.urandom(size)
    want = slow.tag(identity, type_, data)
    assert fast.tag(identity, type_, data) == want
    sealed = fast.seal(identity, Sealed(type_, data))
    assert sealed == Sealed(type_, data + want) == slow.seal(identity, Sealed(type_, data))
    assert fast.check(identity, sealed) == Sealed(type_, data) == slow.check(identity, sealed)


def test_a_field_the_module_cannot_encode_falls_back_to_python() -> None:
    fast, slow = ChainKey(b"k" * 32), _pure(b"k" * 32)
    identity = RecordIdentity("t\udc80", "thread", "", RecordKind.WRITE, "c1", "task", "0")
    keys = fast._fast
    assert keys is not None
    assert chain._tagfast.tag(keys, chain._identity_fields(identity), "json", b"x") is None
    assert fast.tag(identity, "json", b"x") == slow.tag(identity, "json", b"x")
    assert fast.seal(identity, Sealed("json", b"x")) == slow.seal(identity, Sealed("json", b"x"))


def test_the_module_refuses_bad_arguments() -> None:
    tf = chain._tagfast
    with pytest.raises(ValueError):
        tf.keys(b"short")
    keys = tf.keys(bytes(64))
    with pytest.raises(TypeError):
        tf.tag(b"not keys", ("a",), "json", b"")
    with pytest.raises(TypeError):
        tf.tag(keys, ["a"], "json", b"")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tf.tag(keys, ("a", 1), "json", b"")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tf.seal(keys, ("a",), "json")  # type: ignore[call-arg]


def test_lgd_pure_python_turns_the_module_off() -> None:
    code = "from langgraph_durable._core import chain; print(chain._tagfast is None)"
    env = {**os.environ, "LGD_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr
