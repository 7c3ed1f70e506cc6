"""SQL literals for the values of the saver's own statements (pure, no psycopg import).

The driver sends a payload write with row-level security's tenant as one
simple-protocol query, ``SELECT set_config(...); EXECUTE name(literal, ...)``
(see ``_driver._Statements``). psycopg's client-side binding builds those
literals through its generic adapters, a few microseconds of Python per value
and per array element: with twenty values a statement it was half the client
CPU that row-level security added per graph step (sync saver). The values of our statements
are few kinds (text, integers, bytes, arrays of them, NULL), rendered here as
untyped literals in PostgreSQL's text input format: the server coerces each to
the prepared statement's parameter type, as it would a bound parameter.

:func:`literal` returns None for a value it does not render (another type, a
string holding NUL): the driver then asks psycopg for that one. The rendering
assumes ``standard_conforming_strings`` is on (backslashes are not escapes in
``'...'``), which the driver checks per connection.
"""

from __future__ import annotations

from typing import Any

__all__ = ["literal", "quote"]

_BYTES = (bytes, bytearray, memoryview)


def quote(text: str) -> str:
    """``text`` as a standard-conforming SQL string literal (no NUL allowed)."""
    return "'" + text.replace("'", "''") + "'"


def literal(value: Any) -> str | None:
    """``value`` as an SQL literal, or None when psycopg must render it."""
    kind = type(value)
    if kind is str:
        return None if "\x00" in value else quote(value)
    if isinstance(value, _BYTES):
        return "'\\x" + bytes(value).hex() + "'"
    if value is None:
        return "NULL"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return f"'{value}'"
    if kind is list or kind is tuple:
        body = _array(value)
        return None if body is None else quote(body)
    return None


def _array(items: Any) -> str | None:
    """The array input form ``{a,b,...}`` of a (possibly nested) list, or None."""
    out = []
    for item in items:
        kind = type(item)
        if kind is str:
            if "\x00" in item:
                return None
            out.append('"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"')
        elif isinstance(item, _BYTES):
            out.append('"\\\\x' + bytes(item).hex() + '"')
        elif item is None:
            out.append("NULL")
        elif kind is int:
            out.append(str(item))
        elif kind is bool:
            out.append("t" if item else "f")
        elif kind is list or kind is tuple:
            inner = _array(item)
            if inner is None:
                return None
            out.append(inner)
        else:
            return None
    return "{" + ",".join(out) + "}"
