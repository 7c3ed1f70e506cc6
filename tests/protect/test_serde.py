"""EnvelopeSerializer: our envelope encryption for users of upstream savers."""

from __future__ import annotations

import os

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver as UpstreamPostgresSaver
from psycopg.conninfo import make_conninfo

from langgraph_durable.errors import DecryptionError
from langgraph_durable.protect import EnvelopeSerializer, LocalKeyring
from tests.encryption_helpers import Canaries, canary_hits, run_canary_graph, state_has_canaries


def _keyring() -> LocalKeyring:
    return LocalKeyring({"k1": os.urandom(32)}, "k1")


def test_round_trip_damage_and_plaintext() -> None:
    serde = EnvelopeSerializer(_keyring())
    type_, data = serde.dumps_typed({"secret": "value"})
    assert type_ == "lgd-envelope" and b"value" not in data
    assert serde.loads_typed((type_, data)) == {"secret": "value"}
    with pytest.raises(DecryptionError, match="authentication"):
        serde.loads_typed((type_, data[:-1] + bytes((data[-1] ^ 1,))))
    with pytest.raises(DecryptionError):
        serde.loads_typed((type_, data[:20]))
    plain = serde.serde.dumps_typed("old")
    with pytest.raises(DecryptionError, match="not encrypted"):
        serde.loads_typed(plain)
    assert EnvelopeSerializer(_keyring(), allow_plaintext=True).loads_typed(plain) == "old"


def test_another_process_with_the_keyring_reads_and_one_without_does_not() -> None:
    ring = _keyring()
    stored = EnvelopeSerializer(ring).dumps_typed([1, 2, 3])
    assert EnvelopeSerializer(ring).loads_typed(stored) == [1, 2, 3]
    with pytest.raises(DecryptionError, match="not in the keyring"):
        EnvelopeSerializer(LocalKeyring({"k2": os.urandom(32)}, "k2")).loads_typed(stored)


def test_upstream_postgres_saver_encrypts_values_but_not_metadata(
    pg_url: str, pg_schema: str
) -> None:
    """What the serializer covers on langgraph-checkpoint-postgres, and its documented limit."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
    url = make_conninfo(pg_url, options=f"-c search_path={pg_schema}")
    canaries = Canaries()
    with UpstreamPostgresSaver.from_conn_string(url) as saver:
        saver.serde = EnvelopeSerializer(_keyring())
        saver.setup()
        state = run_canary_graph(saver, canaries)
    assert state_has_canaries(state, canaries)
    dump = bytearray()
    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("checkpoint_blobs", "checkpoint_writes"):
            for row in conn.execute(f"SELECT * FROM {table}").fetchall():
                dump += repr(row).encode()
        metadata = repr(conn.execute("SELECT metadata FROM checkpoints").fetchall())
    assert canary_hits(bytes(dump), canaries) == []
    # the limit: upstream keeps metadata (configurable's user_email included) in clear
    assert canaries.email in metadata and canaries.note in metadata
