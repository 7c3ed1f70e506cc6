"""The tamper matrix: edits generated from what a backend stored, read back in three modes.

A thread is written once per backend and mode through a real LangGraph graph
(:func:`write_thread`: a list channel stored as deltas, interrupts and resumes,
a fork, a node that raises). A backend's :class:`Layout`
(``tests/security/tamper_layouts.py``) then lists every stored record of the
thread's tenant as it is stored (every column of every table, every field of every
Redis key, every attribute of every DynamoDB item), decoded into a tree of
leaves (array elements, JSON keys, msgpack elements, write frames). The edits
are generated from that tree (:func:`field_edits`, :func:`record_edits`):

* every leaf gets a different valid-looking value: another value of the same
  field from a record that agrees on the categorical fields (another version of
  the same channel, another checkpoint id, another task), or "" / ``"empty"``
  for a short categorical text (a type marker), a flipped byte (first, middle,
  last) for bytes, +1 for a number, the other boolean;
* every leaf inside a container is dropped, every field removed;
* every record is deleted, copied under another key, and "blanked" (payloads
  removed, type markers set to ``"empty"``, a DynamoDB item cut to its keys).

Each edit is applied, the thread is read back (:func:`read_all`: ``get_tuple``
of the latest and of a middle checkpoint, the full ``list``, two filtered
listings), the result is compared with the untouched read, and the edit is
undone. :func:`judge` says whether the outcome is allowed in the mode.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_durable.protect import Encryption, LocalKeyring

__all__ = [
    "MODES",
    "INTEGRITY_KEY",
    "Edit",
    "Enc",
    "Layout",
    "Record",
    "StorageRefused",
    "leaves",
    "set_at",
    "drop_at",
    "write_thread",
    "awrite_thread",
    "saver_kwargs",
]

MODES = ("plain", "encryption", "integrity")
INTEGRITY_KEY = hashlib.sha256(b"lgd tamper matrix: the chain key").digest()
THREAD = "tamper"


# ---- savers -----------------------------------------------------------------------------


def saver_kwargs(mode: str, key: bytes) -> dict[str, Any]:
    """The saver options of ``mode`` (``key``: the local keyring's one key)."""
    kw: dict[str, Any] = {"delta_chain": 2}
    if mode in ("encryption", "integrity"):
        kw["encryption"] = Encryption(LocalKeyring({"k1": key}, "k1"))
    if mode == "integrity":
        kw["integrity"] = INTEGRITY_KEY
    return kw


def new_key() -> bytes:
    return os.urandom(32)


# ---- the thread ---------------------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    steps: int
    note: str


def tamper_graph(checkpointer: Any) -> Any:
    """speak (appends a reply; raises on "boom") -> ask (pauses on ``interrupt()``)."""

    def speak(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        if "boom" in str(state["messages"][-1].content):
            raise ValueError("boom requested")
        return {
            "messages": [AIMessage(content=f"reply {n} " + "x" * 40, id=f"m{n}")],
            "steps": state.get("steps", 0) + 1,
        }

    def ask(state: State) -> dict[str, Any]:
        answer = interrupt(f"approve {len(state['messages'])}?")
        return {"note": f"approved {answer}"}

    g = StateGraph(State)
    g.add_node("speak", speak)
    g.add_node("ask", ask)
    g.add_edge(START, "speak")
    g.add_edge("speak", "ask")
    return g.compile(checkpointer=checkpointer)


def _cfg(thread: str = THREAD) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def write_thread(saver: Any, thread: str = THREAD) -> None:
    """Three turns (each interrupted, then resumed), a fork from step 2, a failing node."""
    g = tamper_graph(saver)
    for i in range(3):
        g.invoke({"messages": [HumanMessage(f"q{i}", id=f"h{i}")]}, _cfg(thread), durability="sync")
        g.invoke(Command(resume=f"ok{i}"), _cfg(thread), durability="sync")
    older = next(s for s in g.get_state_history(_cfg(thread)) if s.metadata.get("step") == 2)
    g.invoke({"messages": [HumanMessage("fork", id="hf")]}, older.config, durability="sync")
    g.invoke(Command(resume="fork ok"), _cfg(thread), durability="sync")
    try:
        g.invoke({"messages": [HumanMessage("boom", id="hb")]}, _cfg(thread), durability="sync")
    except ValueError:
        pass
    else:  # pragma: no cover - the graph always raises here
        raise AssertionError("the failing node did not fail")


async def awrite_thread(saver: Any, thread: str = THREAD) -> None:
    """:func:`write_thread` through an async saver."""
    g = tamper_graph(saver)
    for i in range(3):
        await g.ainvoke(
            {"messages": [HumanMessage(f"q{i}", id=f"h{i}")]}, _cfg(thread), durability="sync"
        )
        await g.ainvoke(Command(resume=f"ok{i}"), _cfg(thread), durability="sync")
    history = [s async for s in g.aget_state_history(_cfg(thread))]
    older = next(s for s in history if s.metadata.get("step") == 2)
    await g.ainvoke({"messages": [HumanMessage("fork", id="hf")]}, older.config, durability="sync")
    await g.ainvoke(Command(resume="fork ok"), _cfg(thread), durability="sync")
    try:
        await g.ainvoke({"messages": [HumanMessage("boom", id="hb")]}, _cfg(thread))
    except ValueError:
        pass
    else:  # pragma: no cover
        raise AssertionError("the failing node did not fail")


# ---- value trees ------------------------------------------------------------------------


@dataclass
class Enc:
    """A value stored encoded inside another (msgpack, JSON, write frames, a delta)."""

    fmt: str
    value: Any


class StorageRefused(Exception):
    """The storage itself refused the edit (e.g. NOT NULL): not an attack that can happen."""


def leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(path, leaf) of every leaf of a value tree (lists, dicts and :class:`Enc`)."""
    if isinstance(value, Enc):
        yield from leaves(value.value, (*path, Enc))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from leaves(v, (*path, i))
    elif isinstance(value, dict) and value:
        for k, v in value.items():
            yield from leaves(v, (*path, k))
    else:
        yield path, value


def set_at(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """A copy of ``value`` with the leaf at ``path`` replaced."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if head is Enc:
        return Enc(value.fmt, set_at(value.value, rest, new))
    copy = list(value) if isinstance(value, list) else dict(value)
    copy[head] = set_at(value[head], rest, new)
    return copy


def drop_at(value: Any, path: tuple[Any, ...]) -> Any:
    """A copy of ``value`` without the element at ``path`` (its last step)."""
    head, rest = path[0], path[1:]
    if head is Enc:
        return Enc(value.fmt, drop_at(value.value, rest))
    if not rest:
        copy = list(value) if isinstance(value, list) else dict(value)
        del copy[head]
        return copy
    copy = list(value) if isinstance(value, list) else dict(value)
    copy[head] = drop_at(value[head], rest)
    return copy


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def path_label(name: str, path: tuple[Any, ...]) -> str:
    out = name
    for p in path:
        out += "" if p is Enc else f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def tweak(text: str) -> str:
    """A new valid-looking text: the last alphanumeric character changed."""
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch.isdigit():
            return text[:i] + str((int(ch) + 1) % 10) + text[i + 1 :]
        if ch.isalpha():
            return text[:i] + ("b" if ch != "b" else "c") + text[i + 1 :]
    return text + "x"


def _nearest(candidates: Sequence[Any], value: Any) -> Any:
    """The largest candidate below ``value`` (a rollback), else the smallest above."""
    ordered = sorted(candidates)
    below = [c for c in ordered if c < value]
    return below[-1] if below else ordered[0]


def changes(leaf: Any, others: Sequence[Any], type_marker: bool) -> list[tuple[str, Any]]:
    """The (action, new value) edits of one leaf; ``others``: that field's other values."""
    out: list[tuple[str, Any]] = []
    if isinstance(leaf, bool):
        out.append(("toggle", not leaf))
    elif isinstance(leaf, (int, float, Decimal)):
        out.append(("+1", leaf + 1))
    elif isinstance(leaf, (bytes, bytearray)):
        data = bytes(leaf)
        if not data:
            out.append(("fill", b"\x00"))
        for name, at in (("flip first byte", 0), ("flip middle byte", len(data) // 2)):
            if data and (name == "flip first byte" or at != 0):
                out.append((name, _flip(data, at)))
        if len(data) > 2:
            out.append(("flip last byte", _flip(data, len(data) - 1)))
    elif isinstance(leaf, str):
        alt = [o for o in others if isinstance(o, str) and o != leaf]
        if alt:
            out.append(("other value", _nearest(alt, leaf)))
        else:
            out.append(("tweak", tweak(leaf)))
        if leaf:
            out.append(("blank", ""))
        if type_marker and leaf not in ("", "empty"):
            out.append(("set 'empty'", "empty"))
    elif leaf is None:
        alt = [o for o in others if o is not None]
        if alt:
            out.append(("fill", alt[0]))
    elif isinstance(leaf, dt.datetime):
        out.append(("+1s", leaf + dt.timedelta(seconds=1)))
    elif isinstance(leaf, (set, frozenset)) and len(leaf) > 1:
        out.append(("drop member", type(leaf)(sorted(leaf)[1:])))
    return out


# ---- records, layouts, edits ------------------------------------------------------------


@dataclass
class Record:
    """One stored record: its kind (table, key type, item kind), a label, its fields.

    ``fields`` maps a field name to its decoded tree; ``keys`` names the fields
    that locate the record (primary-key columns, hash-field name parts, sort-key
    parts): editing one moves the record.
    """

    kind: str
    label: str
    fields: dict[str, Any]
    keys: tuple[str, ...] = ()
    handle: Any = None


@dataclass
class Edit:
    """One edit of the matrix.

    ``removal``: the edit takes a record out of what a read sees (deletes it, or
    changes a field that locates it: a key column, a key's name, a sort-key part)
    rather than changing what it holds. Encryption alone does not detect removal.
    """

    kind: str
    record: str
    field: str
    action: str
    apply: Callable[[], Callable[[], None]]
    removal: bool = False
    rec: Record | None = None

    @property
    def name(self) -> str:
        return f"{self.kind} {self.record} {self.field}: {self.action}"


class Layout:
    """A backend's raw view of one tenant's thread (see ``tamper_layouts``)."""

    #: Fields never edited: the tenant and thread that scope the snapshot.
    SCOPE: tuple[str, ...] = ()

    def records(self) -> list[Record]:
        raise NotImplementedError

    def write(self, rec: Record, fields: dict[str, Any]) -> Callable[[], None]:
        """Store ``rec`` with ``fields`` in place of its own (a key change moves it);
        return the undo."""
        raise NotImplementedError

    def insert(self, rec: Record, fields: dict[str, Any]) -> Callable[[], None]:
        """Store a new record of ``rec``'s kind with ``fields``; return the undo."""
        raise NotImplementedError

    def delete(self, rec: Record) -> Callable[[], None]:
        raise NotImplementedError

    def without(self, rec: Record, name: str) -> dict[str, Any] | None:
        """``rec``'s fields without field ``name`` (None: the field cannot be removed)."""
        if name in rec.keys:
            return None
        return {k: v for k, v in rec.fields.items() if k != name}

    def blanked(self, rec: Record) -> dict[str, Any] | None:
        """``rec`` with its payloads removed and its type markers set to "empty"."""
        fields = dict(rec.fields)
        changed = False
        for name, tree in rec.fields.items():
            if name in rec.keys:
                continue
            new = tree
            for path, leaf in leaves(tree):
                if isinstance(leaf, (bytes, bytearray)) and len(leaf) > 16:
                    new, changed = set_at(new, path, None), True
                elif isinstance(leaf, str) and _is_type_marker(name, path, leaf):
                    new, changed = set_at(new, path, "empty"), True
            fields[name] = new
        return fields if changed else None

    def extra_edits(self, records: list[Record]) -> Iterator[Edit]:
        """Backend-specific edits (e.g. a checkpoint spread over several keys)."""
        return iter(())

    def close(self) -> None:
        pass


TYPE_MARKERS = {"msgpack", "json", "bytes", "bytearray", "pickle", "null", "empty"}


def _is_type_marker(name: str, path: tuple[Any, ...], leaf: str) -> bool:
    label = path_label(name, path).lower()
    return leaf in TYPE_MARKERS or leaf.startswith("enc") or "type" in label


def _features(rec: Record, categorical: set[Any]) -> set[tuple[Any, ...]]:
    """What a record shows of its kind: each leaf path with its type, or its value when
    the field is categorical (a channel name, a type marker, a source)."""
    out = set()
    for name, tree in rec.fields.items():
        for path, leaf in leaves(tree):
            generic = _generic(tree, path)
            if (name, path) in categorical:
                out.add((name, generic, leaf))
            out.add((name, generic, type(leaf).__name__))
    return out


def _generic(tree: Any, path: tuple[Any, ...]) -> tuple[Any, ...]:
    """``path`` with positions in lists of containers erased (every write frame's
    channel is one field; a positional record's elements stay apart)."""
    out, node = [], tree
    for p in path:
        if p is Enc:
            node = node.value
        elif isinstance(p, int):
            if all(isinstance(x, (list, dict, Enc)) for x in node):
                out.append(-1)
                node = node[p]
                continue
            node = node[p]
        else:
            node = node[p]
        out.append(p)
    return tuple(out)


def representatives(recs: list[Record], categorical: set[Any]) -> list[Record]:
    """A few records of one kind that together show every path, type and categorical
    value the kind has (greedy cover, ties broken towards the middle of the thread),
    and the first by key (checkpoint ids sort in time order: the thread's first
    checkpoint, which has no parent, is a case of its own)."""
    by_label = sorted(recs, key=lambda r: r.label)
    mid = len(by_label) // 2
    ordered = [r for _i, r in sorted(enumerate(by_label), key=lambda p: abs(p[0] - mid))]
    feats = {id(r): _features(r, categorical) for r in ordered}
    todo = set().union(*feats.values()) if feats else set()
    out: list[Record] = []
    if recs:
        out.append(min(recs, key=lambda r: repr([r.fields.get(k) for k in r.keys])))
        todo -= feats[id(out[0])]
    while todo:
        best = max(ordered, key=lambda r: len(feats[id(r)] & todo))
        out.append(best)
        todo -= feats[id(best)]
    return out


def _pools(recs: list[Record]) -> tuple[dict[Any, list[tuple[Record, Any]]], set[Any]]:
    pools: dict[Any, list[tuple[Record, Any]]] = defaultdict(list)
    generic: dict[Any, list[Any]] = defaultdict(list)
    generic_of: dict[Any, Any] = {}
    for rec in recs:
        for name, tree in rec.fields.items():
            for path, leaf in leaves(tree):
                pools[(name, path)].append((rec, leaf))
                g = generic_of[(name, path)] = (name, _generic(tree, path))
                generic[g].append(leaf)
    kinds = set()
    for where, values in generic.items():
        distinct = {v for v in values if isinstance(v, str)}
        if (
            distinct
            and len(distinct) <= 8
            and len(values) > len(distinct)
            and all(len(v) <= 40 for v in distinct)
            and all(isinstance(v, str) for v in values)
        ):
            kinds.add(where)
    categorical = {where for where in pools if generic_of[where] in kinds}
    return pools, categorical


def _agrees(a: Record, b: Record, categorical: set[Any], skip: Any) -> bool:
    for name, path in categorical:
        if (name, path) == skip:
            continue
        va, vb = _leaf(a, name, path), _leaf(b, name, path)
        if va is not _MISSING and vb is not _MISSING and va != vb:
            return False
    return True


_MISSING = object()


def _leaf(rec: Record, name: str, path: tuple[Any, ...]) -> Any:
    if name not in rec.fields:
        return _MISSING
    value = rec.fields[name]
    for p in path:
        try:
            value = value.value if p is Enc else value[p]
        except (KeyError, IndexError, TypeError, AttributeError):
            return _MISSING
    return value


def generate(layout: Layout, records: list[Record]) -> list[Edit]:
    """Every edit of the matrix, from the records' stored layout."""
    by_kind: dict[str, list[Record]] = defaultdict(list)
    for rec in records:
        by_kind[rec.kind].append(rec)
    edits: list[Edit] = []
    for _kind, recs in sorted(by_kind.items()):
        pools, categorical = _pools(recs)
        for i, rec in enumerate(representatives(recs, categorical)):
            edits.extend(_record_edits(layout, rec, recs, pools, categorical, i == 0))
    edits.extend(layout.extra_edits(records))
    return edits


def _record_edits(
    layout: Layout,
    rec: Record,
    recs: list[Record],
    pools: dict[Any, list[tuple[Record, Any]]],
    categorical: set[Any],
    first: bool,
) -> Iterator[Edit]:
    def edit(
        field_: str, action: str, fn: Callable[[], Callable[[], None]], removal: bool = False
    ) -> Edit:
        return Edit(rec.kind, rec.label, field_, action, fn, removal, rec)

    for name, tree in rec.fields.items():
        moves = name in rec.keys or name in layout.SCOPE  # editing it moves the record
        if name in layout.SCOPE:
            if first and isinstance(tree, str):  # the record moved to another tenant/thread
                moved = {**rec.fields, name: tweak(tree)}
                yield edit(name, f"tweak -> {tweak(tree)!r}", _bind(layout.write, rec, moved), True)
            continue
        for path, leaf in leaves(tree):
            if _inner(tree, path):
                continue
            where = (name, path)
            same = [
                v
                for r, v in pools[where]
                if r is not rec and _agrees(r, rec, categorical, where) and v != leaf
            ]
            if not same:
                same = [v for r, v in pools[where] if r is not rec and v != leaf]
            marker = isinstance(leaf, str) and _is_type_marker(name, path, leaf)
            for action, new in changes(leaf, same, marker):
                if repr(new) == repr(leaf):
                    continue
                fields = {**rec.fields, name: set_at(tree, path, new)}
                label = f"{action} -> {_short(new)}" if not isinstance(new, bytes) else action
                yield edit(path_label(name, path), label, _bind(layout.write, rec, fields), moves)
                if name in rec.keys and action in ("other value", "tweak"):
                    yield edit(
                        path_label(name, path),
                        f"copy record with {action} -> {_short(new)}",
                        _bind(layout.insert, rec, fields),
                    )
            if _droppable(tree, path):
                dropped = {**rec.fields, name: drop_at(tree, path)}
                yield edit(
                    path_label(name, path),
                    "drop element",
                    _bind(layout.write, rec, dropped),
                    moves,
                )
        for path in dict.fromkeys(_container_drops(tree)):
            dropped = {**rec.fields, name: drop_at(tree, path)}
            yield edit(
                path_label(name, path),
                "drop element",
                _bind(layout.write, rec, dropped),
                moves or _is_frame(tree, path),
            )
        rest = layout.without(rec, name) if tree is not None else None
        if rest is not None:
            yield edit(name, "remove field", _bind(layout.write, rec, rest))
    blank = layout.blanked(rec)
    if blank is not None:
        yield edit("*", "blank (payloads removed, type 'empty')", _bind(layout.write, rec, blank))
    yield edit("*", "delete record", lambda: layout.delete(rec), True)


def _is_frame(tree: Any, path: tuple[Any, ...]) -> bool:
    """Whether ``path`` is a whole record inside a value of several (a write frame):
    dropping it removes that record."""
    if len(path) < 2 or path[-2] is not Enc:
        return False
    node = tree
    for p in path[:-2]:
        node = node.value if p is Enc else node[p]
    return isinstance(node, Enc) and node.fmt == "frames"


def _inner(tree: Any, path: tuple[Any, ...]) -> bool:
    """Whether ``path`` goes through a middle element of a list of 3+ containers of one
    shape (write frames, blob references): the first and last stand for the rest; the
    middle one is still dropped whole (see the caller)."""
    node = tree
    for p in path:
        if p is Enc:
            node = node.value
            continue
        if (
            isinstance(node, list)
            and len(node) >= 3
            and all(isinstance(x, (list, dict, Enc)) for x in node)
            and 0 < p < len(node) - 1
        ):
            return True
        node = node[p]
    return False


def _droppable(tree: Any, path: tuple[Any, ...]) -> bool:
    """A dict key, or the last element of a list (a positional record cut short)."""
    if not path or path[-1] is Enc:
        return False
    parent: Any = tree
    for p in path[:-1]:
        parent = parent.value if p is Enc else parent[p]
    return isinstance(parent, dict) or path[-1] == len(parent) - 1


def _container_drops(tree: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths of the first, middle and last element of each list of containers."""
    if isinstance(tree, Enc):
        yield from _container_drops(tree.value, (*path, Enc))
    elif isinstance(tree, list):
        containers = tree and all(isinstance(x, (list, dict, Enc)) for x in tree)
        for i, x in enumerate(tree):
            if containers and i in (0, len(tree) // 2, len(tree) - 1):
                yield (*path, i)
            if not _inner(tree, (i,)):
                yield from _container_drops(x, (*path, i))
    elif isinstance(tree, dict):
        for k, x in tree.items():
            yield from _container_drops(x, (*path, k))


def _bind(fn: Callable[..., Any], *args: Any) -> Callable[[], Callable[[], None]]:
    return lambda: fn(*args)
