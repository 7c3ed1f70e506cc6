"""The literals the sync driver renders for ``EXECUTE`` (row-level security's payload writes).

Each value goes through a real server: a statement prepared with typed parameters,
executed with our literals, must return exactly what binding the same values
returns. A value our renderer does not cover falls back to psycopg's literal.
"""

from __future__ import annotations

import psycopg
import pytest

from langgraph_durable.postgres._literals import literal

TEXTS = [
    "",
    "plain",
    "it's",
    "''",
    "back\\slash\\",
    '"double" quotes',
    "100% $1 $$dollar$$ %s %(x)s",
    "new\nline\ttab\r",
    "unicode: é 漢字 🙂",
    "{braces},NULL,null",
    "E'\\x00'",
    ";DROP TABLE x; --",
]
BYTES = [b"", b"\x00", bytes(range(256)), b"'\\\"{}", b"x" * 5000]

CASES: list[tuple[str, object]] = [
    *[("text", t) for t in TEXTS],
    *[("bytea", b) for b in BYTES],
    ("bigint", 0),
    ("bigint", -(2**62)),
    ("bigint", 2**62),
    ("integer", -7),
    ("boolean", True),
    ("boolean", False),
    ("text", None),
    ("bytea", None),
    ("text[]", TEXTS),
    ("text[]", []),
    ("text[]", ["a", None, "NULL", "null"]),
    ("bytea[]", BYTES),
    ("bytea[]", [b"a", None]),
    ("bigint[]", [1, -2, 3, None]),
    ("integer[]", []),
    ("text[]", [["a", "b"], ["c", "d"]]),
    ("boolean[]", [True, False, None]),
]


@pytest.fixture(scope="module")
def conn(pg_url: str):  # type: ignore[no-untyped-def]
    with psycopg.connect(pg_url, autocommit=True) as c:
        assert c.info.parameter_status("standard_conforming_strings") == "on"
        yield c


@pytest.mark.parametrize(
    ("pg_type", "value"), CASES, ids=[f"{t}-{i}" for i, (t, _) in enumerate(CASES)]
)
def test_a_literal_reads_back_as_the_bound_value(
    conn: psycopg.Connection, pg_type: str, value: object
) -> None:
    text = literal(value)
    assert text is not None
    name = "lgd_literal_test"
    conn.execute(f"PREPARE {name}({pg_type}) AS SELECT $1", prepare=False)
    try:
        with psycopg.ClientCursor(conn) as cur:
            cur.execute(f"EXECUTE {name}({text})", prepare=False)
            got = cur.fetchone()[0]  # type: ignore[index]
    finally:
        conn.execute(f"DEALLOCATE {name}", prepare=False)
    bound = conn.execute(f"SELECT %s::{pg_type}", (value,), prepare=False).fetchone()[0]  # type: ignore[index]
    assert got == bound
    assert got == value or (isinstance(value, bytes) and bytes(got) == value)


@pytest.mark.parametrize("value", ["nul\x00inside", ["a", "b\x00"], {"a": 1}, 1.5, object()])
def test_what_it_does_not_render_is_left_to_psycopg(value: object) -> None:
    assert literal(value) is None


@pytest.mark.parametrize("conforming", ["on", "off"])
def test_the_driver_falls_back_to_psycopg_without_standard_conforming_strings(
    pg_url: str, conforming: str
) -> None:
    from langgraph_durable.postgres._driver import _Statements
    from langgraph_durable.postgres._query import Query

    tricky = "back\\slash 'quote' \\' end"
    q = Query(
        "SELECT %s::text, current_setting('langgraph_durable.tenant', true)",
        (tricky,),
        "one",
        True,
        (("langgraph_durable.tenant", "t'1\\"),),
    )
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(f"SET standard_conforming_strings TO {conforming}", prepare=False)
        statements = _Statements()
        name = statements.ready(c, q.sql)
        assert name is not None
        with psycopg.ClientCursor(c) as cur:
            cur.execute(statements.call(cur, q, name), prepare=False)
            while cur.nextset():
                pass
            assert cur.fetchone() == (tricky, "t'1\\")
