"""Store namespaces: LangGraph's rules, their text form, prefixes and listings (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from langgraph.store.base import ListNamespacesOp, MatchCondition

from ...errors import InvalidInputError, InvalidNamespaceError

#: The first label no namespace may have (LangGraph keeps it for itself).
RESERVED_ROOT = "langgraph"
#: The separator of a namespace's text form (labels cannot hold it).
SEP = "."


# ---- namespaces --------------------------------------------------------------


def check_labels(namespace: Any, what: str = "namespace") -> tuple[str, ...]:
    """``namespace`` as a tuple whose labels follow LangGraph's rules (may be empty).

    Raises:
        InvalidNamespaceError: a label is not a string, is empty, or holds ``.`` or NUL.
    """
    if isinstance(namespace, list):  # LangGraph's stores take a list of labels too
        namespace = tuple(namespace)
    if not isinstance(namespace, tuple):
        raise InvalidNamespaceError(
            f"a {what} must be a tuple of strings, got {type(namespace).__name__}"
        )
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespaceError(
                f"{what} {namespace!r}: label {label!r} is not a string "
                f"({type(label).__name__}); labels must be strings"
            )
        if not label:
            raise InvalidNamespaceError(f"{what} {namespace!r}: labels cannot be empty strings")
        if SEP in label:
            raise InvalidNamespaceError(
                f"{what} {namespace!r}: label {label!r} contains a period ('.'), "
                "which labels cannot hold"
            )
        if "\x00" in label:
            raise InvalidNamespaceError(
                f"{what} {namespace!r}: label {label!r} contains a NUL byte, "
                "which labels cannot hold"
            )
    return namespace


def check_namespace(namespace: Any) -> tuple[str, ...]:
    """A namespace an item may be stored under (non-empty, not under ``langgraph``)."""
    check_labels(namespace)
    if not namespace:
        raise InvalidNamespaceError("a namespace cannot be empty: give at least one label")
    if namespace[0] == RESERVED_ROOT:
        raise InvalidNamespaceError(
            f"namespace {namespace!r}: the root label {RESERVED_ROOT!r} is reserved by LangGraph"
        )
    return namespace


def ns_text(namespace: tuple[str, ...]) -> str:
    """The text form of a (checked) namespace: its labels joined by ``.``."""
    return SEP.join(namespace)


def ns_from_text(text: str) -> tuple[str, ...]:
    """The namespace of a text form (see :func:`ns_text`)."""
    return tuple(text.split(SEP)) if text else ()


def ns_prefix_bounds(prefix: tuple[str, ...]) -> tuple[str, str] | None:
    """``(low, high)``: the text forms of namespaces under ``prefix`` (the prefix's
    own excluded) are those ``low <= t < high`` in code-point order; None for ().

    A namespace equal to the prefix is matched separately (``t = ns_text(prefix)``).
    """
    if not prefix:
        return None
    base = ns_text(prefix)
    return base + SEP, base + chr(ord(SEP) + 1)


def covering(prefixes: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The fewest prefixes whose namespaces include those of every prefix given."""
    kept: list[tuple[str, ...]] = []
    for p in sorted(prefixes, key=len):
        if not any(p[: len(k)] == k for k in kept):
            kept.append(p)
    return kept


def under(namespace: tuple[str, ...], prefix: Sequence[str]) -> bool:
    """Whether ``namespace`` is ``prefix`` or below it."""
    return tuple(namespace[: len(prefix)]) == tuple(prefix)


# ---- namespace listings ------------------------------------------------------


def namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether a namespace matches a prefix or suffix condition (``*``: any label)."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InvalidInputError(f"unsupported match type {condition.match_type!r}")
    return all(p == "*" or label == p for label, p in pairs)


def list_namespaces(
    op: ListNamespacesOp, namespaces: Iterable[tuple[str, ...]]
) -> list[tuple[str, ...]]:
    """The listing of ``op`` over the namespaces that hold live items."""
    found = {
        ns for ns in namespaces if all(namespace_matches(c, ns) for c in op.match_conditions or ())
    }
    if op.max_depth is not None:
        found = {ns[: op.max_depth] for ns in found}
    return sorted(found)[op.offset : op.offset + op.limit]


def listing_prefix(op: ListNamespacesOp) -> tuple[str, ...]:
    """The literal labels every listed namespace starts with (before any ``*``)."""
    best: tuple[str, ...] = ()
    for c in op.match_conditions or ():
        if c.match_type != "prefix":
            continue
        labels: list[str] = []
        for label in c.path:
            if label == "*":
                break
            labels.append(label)
        if len(labels) > len(best):
            best = tuple(labels)
    return best
