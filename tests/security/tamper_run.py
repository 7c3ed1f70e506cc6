"""Running the tamper matrix: read back, compare, classify, judge (see ``tamper``)."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_durable.errors import DurableError
from tests.security.tamper import (
    THREAD,
    Edit,
    Layout,
    Record,
    StorageRefused,
    _cfg,
    _short,
    generate,
    leaves,
)

__all__ = [
    "Outcome",
    "Verdict",
    "read_all",
    "aread_all",
    "run_matrix",
    "arun_matrix",
    "judge",
    "report",
]


# ---- reading and comparing ------------------------------------------------------------------


def _norm(value: Any) -> Any:
    """``value`` with exceptions made comparable (ValueError("x") != ValueError("x"))."""
    if isinstance(value, BaseException):
        return ("exception", type(value).__name__, _norm(list(value.args)))
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    return value


def _tuple(t: Any) -> Any:
    if t is None:
        return None
    return {
        "config": _norm(t.config),
        "checkpoint": _norm(t.checkpoint),
        "metadata": _norm(t.metadata),
        "parent_config": _norm(t.parent_config),
        "pending_writes": _norm(t.pending_writes),
    }


def _clear_caches(saver: Any, thread: str) -> None:
    """Forget what the reader learnt of the thread (chain digests) and its tenant's
    unwrapped data keys, as a new process would: an edit of a data-key record is read."""
    codec = saver._ops.codec
    if codec.chain_cache is not None:
        codec.chain_cache.forget(saver.default_tenant, thread)
    keys = getattr(saver, "_keys", None)
    if keys is not None:
        keys.cache.drop()


def selected(edits: list[Edit], cap: int | None = None) -> list[Edit]:
    """The edits whose name matches ``LGD_TAMPER_ONLY`` (a regexp; unset: all), at most
    about ``cap`` of them: every n-th edit of each record kind, so each kind keeps
    its share (a sample for a slow backend; the full matrix runs in ``make soak``)."""
    only = os.environ.get("LGD_TAMPER_ONLY")
    if only:
        edits = [e for e in edits if re.search(only, e.name)]
    if cap is None or len(edits) <= cap:
        return edits
    step = -(-len(edits) // cap)
    seen: dict[str, int] = {}
    out = []
    for e in edits:
        n = seen[e.kind] = seen.get(e.kind, -1) + 1
        if n % step == 0:
            out.append(e)
    return out


def read_all(
    saver: Any, thread: str, middle: str | None, baseline: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Everything the matrix compares: latest, a middle checkpoint, the listings.

    With ``baseline``, stops at the first part that differs from it (the outcome is
    known: the rest would only cost time)."""
    _clear_caches(saver, thread)
    cfg = _cfg(thread)
    out: dict[str, Any] = {}
    mid = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": middle}}
    ns_cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("list", lambda: [_tuple(t) for t in saver.list(cfg)]),
        ("latest", lambda: _tuple(saver.get_tuple(cfg))),
        ("middle", lambda: _tuple(saver.get_tuple(mid))),
        ("list:ns", lambda: [_id(t) for t in saver.list(ns_cfg)]),
        ("filter:source=loop", lambda: [_id(t) for t in saver.list(cfg, filter=LOOP)]),
    ]
    for name, step in steps:
        out[name] = step()
        if baseline is not None and first_difference(baseline[name], out[name]) is not None:
            break
    return out


async def aread_all(
    saver: Any, thread: str, middle: str | None, baseline: dict[str, Any] | None = None
) -> dict[str, Any]:
    """:func:`read_all` through an async saver."""
    _clear_caches(saver, thread)
    cfg = _cfg(thread)
    out: dict[str, Any] = {}
    mid = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": middle}}

    async def listing(**kw: Any) -> list[Any]:
        return [t async for t in saver.alist(cfg, **kw)]

    for name in ("list", "latest", "middle", "list:ns", "filter:source=loop"):
        if name == "list:ns":
            ns_cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            out[name] = [_id(t) async for t in saver.alist(ns_cfg)]
        elif name == "latest":
            out[name] = _tuple(await saver.aget_tuple(cfg))
        elif name == "middle":
            out[name] = _tuple(await saver.aget_tuple(mid))
        elif name == "list":
            out[name] = [_tuple(t) for t in await listing()]
        else:
            out[name] = [_id(t) for t in await listing(filter=LOOP)]
        if baseline is not None and first_difference(baseline[name], out[name]) is not None:
            break
    return out


LOOP = {"source": "loop"}


def _id(t: Any) -> str:
    return str(t.config["configurable"]["checkpoint_id"])


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where ``a`` and ``b`` first differ (a readable path), None if equal."""
    if a == b:
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}.{k} ({'added' if k not in a else 'missing'})"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return path or "."
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length {len(a)} -> {len(b)})"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return path
    return f"{path} ({_short(a)} -> {_short(b)})"


def _filters_only(diff_keys: Sequence[str]) -> bool:
    return bool(diff_keys) and all(k.startswith("filter:") for k in diff_keys)


# ---- running -----------------------------------------------------------------------------


@dataclass
class Outcome:
    edit: Edit
    result: str  # "raised", "builtin", "changed", "filters", "same", "refused"
    detail: str = ""
    verify_broken: bool | None = None
    #: The edit removes a pending write of a checkpoint no chain covers yet (see
    #: :func:`uncovered`).
    tail: bool = False
    #: The edit removes a record of a branch's newest checkpoint (see :func:`newest`).
    truncates: bool = False


#: Record kinds that hold pending writes (PostgreSQL, Redis, DynamoDB).
WRITE_KINDS = re.compile(r"writes|.*:w hash|write( chunk)?")


def uncovered(listing: list[Any]) -> set[str]:
    """Checkpoint ids whose pending writes no chain covers yet: those without a
    grandchild (a checkpoint's chain covers its grandparent's writes, which
    LangGraph stores after the child's put)."""
    parent: dict[str, str | None] = {}
    for t in listing:
        p = t["parent_config"]
        parent[t["config"]["configurable"]["checkpoint_id"]] = (
            p["configurable"]["checkpoint_id"] if p else None
        )
    covered = {parent.get(p) for p in parent.values() if p is not None}
    return {c for c in parent if c not in covered}


def _uncovered_op(saver: Any, thread: str) -> Any:
    """An operation returning the checkpoint ids with a pending write that no chain
    block covers, read from the stored chain blocks (the audit listing of ``verify``):
    the writes of the newest two checkpoints, and writes LangGraph stored after the
    put of the grandchild began (its background writes race the next puts)."""
    from langgraph_durable._core.audit import AuditCodec
    from langgraph_durable._core.sansio import Operation, collect_emits

    ops = saver._make_ops(AuditCodec(saver.integrity))
    listing = ops.list(saver.default_tenant, thread, None, None, None, None, None, False)

    def steps() -> Any:
        entries = yield from collect_emits(listing.steps)
        by_id = {(e.ns, e.checkpoint_id): e for e in entries}
        covered: set[tuple[str, str, tuple[str, int]]] = set()
        for e in entries:
            if e.block is None or not e.parent_id:
                continue
            covered |= {(e.ns, e.parent_id, k) for k in e.block.covers}
            parent = by_id.get((e.ns, e.parent_id))
            if parent is not None and parent.parent_id:
                covered |= {(e.ns, parent.parent_id, k) for k in e.block.grand}
        return {
            e.checkpoint_id
            for e in entries
            if any((e.ns, e.checkpoint_id, k) not in covered for k in e.write_keys)
        }

    return Operation(steps())


def newest(listing: list[Any]) -> set[str]:
    """Checkpoint ids no other checkpoint names as its parent (each branch's newest)."""
    ids = {t["config"]["configurable"]["checkpoint_id"] for t in listing}
    parents = {
        t["parent_config"]["configurable"]["checkpoint_id"] for t in listing if t["parent_config"]
    }
    return ids - parents


def _removes(edit: Edit, ids: set[str], writes: bool, removal: bool) -> bool:
    """Whether ``edit`` (a ``removal``: it deletes, moves or unindexes) takes away a
    record of one of checkpoints ``ids``: a pending write (``writes``) or a record of
    the checkpoint itself."""
    rec = edit.rec
    if not removal or rec is None or bool(WRITE_KINDS.fullmatch(rec.kind)) != writes:
        return False
    texts = [
        leaf
        for name in rec.keys
        for _path, leaf in leaves(rec.fields.get(name))
        if isinstance(leaf, str)
    ]
    return any(i in t for t in texts for i in ids)


def _classify(edit: Edit, baseline: Any, got: Any, exc: BaseException | None) -> Outcome:
    if isinstance(exc, StorageRefused):
        return Outcome(edit, "refused", str(exc))
    if isinstance(exc, DurableError):
        return Outcome(edit, "raised", f"{type(exc).__name__}: {str(exc)[:120]}")
    if exc is not None:
        return Outcome(edit, "builtin", f"{type(exc).__name__}: {str(exc)[:160]}")
    diffs = [k for k in got if first_difference(baseline[k], got[k]) is not None]
    if not diffs:
        return Outcome(edit, "same")
    where = first_difference(baseline[diffs[0]], got[diffs[0]], diffs[0])
    return Outcome(edit, "filters" if _filters_only(diffs) else "changed", str(where))


def run_matrix(
    layout: Layout,
    saver: Any,
    mode: str,
    middle: str | None,
    thread: str = THREAD,
    cap: int | None = None,
) -> tuple[list[Outcome], float]:
    """Apply every edit in turn, read, undo; the outcomes and the seconds it took."""
    started = time.monotonic()
    baseline = read_all(saver, thread, middle)
    tail, heads = uncovered(baseline["list"]), newest(baseline["list"])
    if saver.integrity is not None:
        tail = saver._run(_uncovered_op(saver, thread))
    records = layout.records()
    outcomes = []
    for edit in selected(generate(layout, records), cap):
        try:
            undo = edit.apply()
        except StorageRefused as exc:
            outcomes.append(_classify(edit, baseline, None, exc))
            continue
        try:
            try:
                got, exc = read_all(saver, thread, middle, baseline), None
            except Exception as e:  # noqa: BLE001 - what the read raised is the outcome
                got, exc = None, e
            out = _classify(edit, baseline, got, exc)
            if mode == "integrity" and out.result != "raised":
                try:
                    out.verify_broken = not saver.verify(thread_id=thread).ok
                except DurableError:
                    out.verify_broken = True
                except Exception as e:  # noqa: BLE001 - a builtin from verify is a hole
                    out = Outcome(edit, "builtin", f"verify: {type(e).__name__}: {e}"[:200])
            gone = edit.removal or (out.result == "changed" and _shrank(out.detail))
            out.tail = _removes(edit, tail, True, gone)
            out.truncates = _removes(edit, heads, False, gone)
            outcomes.append(out)
        finally:
            undo()
    after = read_all(saver, thread, middle)
    assert first_difference(baseline, after) is None, "the matrix did not restore the thread"
    assert records_equal(records, layout.records()), "the matrix did not restore the records"
    return outcomes, time.monotonic() - started


async def arun_matrix(
    layout: Layout,
    saver: Any,
    mode: str,
    middle: str | None,
    thread: str = THREAD,
    cap: int | None = None,
) -> tuple[list[Outcome], float]:
    """:func:`run_matrix` through an async saver (the raw edits stay synchronous)."""
    started = time.monotonic()
    baseline = await aread_all(saver, thread, middle)
    tail, heads = uncovered(baseline["list"]), newest(baseline["list"])
    if saver.integrity is not None:
        tail = await saver._arun(_uncovered_op(saver, thread))
    records = layout.records()
    outcomes = []
    for edit in selected(generate(layout, records), cap):
        try:
            undo = edit.apply()
        except StorageRefused as exc:
            outcomes.append(_classify(edit, baseline, None, exc))
            continue
        try:
            try:
                got, exc = await aread_all(saver, thread, middle, baseline), None
            except Exception as e:  # noqa: BLE001
                got, exc = None, e
            out = _classify(edit, baseline, got, exc)
            if mode == "integrity" and out.result != "raised":
                try:
                    out.verify_broken = not (await saver.averify(thread_id=thread)).ok
                except DurableError:
                    out.verify_broken = True
                except Exception as e:  # noqa: BLE001
                    out = Outcome(edit, "builtin", f"verify: {type(e).__name__}: {e}"[:200])
            gone = edit.removal or (out.result == "changed" and _shrank(out.detail))
            out.tail = _removes(edit, tail, True, gone)
            out.truncates = _removes(edit, heads, False, gone)
            outcomes.append(out)
        finally:
            undo()
        await asyncio.sleep(0)
    after = await aread_all(saver, thread, middle)
    assert first_difference(baseline, after) is None, "the matrix did not restore the thread"
    assert records_equal(records, layout.records()), "the matrix did not restore the records"
    return outcomes, time.monotonic() - started


def records_equal(a: list[Record], b: list[Record]) -> bool:
    def view(recs: list[Record]) -> list[Any]:
        return sorted((r.kind, r.label, repr(r.fields)) for r in recs)

    return view(a) == view(b)


# ---- judging -------------------------------------------------------------------------------


@dataclass
class Verdict:
    holes: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    filters: list[str] = field(default_factory=list)
    #: Outcomes allowed by a documented limit (removal under encryption alone,
    #: the limits of ``limit``), each with its reason.
    limits: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


#: Why an edit that only changes which checkpoints a metadata filter selects is allowed.
FILTER_ONLY = (
    "filter-only: the clear metadata index decides which checkpoints a filtered listing "
    "returns; every checkpoint read is checked against its sealed metadata"
)
#: Why removal may go unseen with encryption alone.
REMOVAL = "removal: encryption alone does not detect a deleted record (integrity= does)"
#: Why a copy that no read returns is allowed.
UNREACHABLE = "an unreachable copy: no checkpoint references it, no read returns it"


def _shrank(detail: str) -> bool:
    """Whether a read difference is only something missing (a list shorter, a part gone)."""
    m = re.search(r"\(length (\d+) -> (\d+)\)", detail)
    if m:
        return int(m.group(2)) < int(m.group(1))
    return "(missing)" in detail or detail.endswith("-> None)")


def judge(
    outcomes: list[Outcome],
    mode: str,
    clear: Callable[[Edit], str | None],
    limit: Callable[[Outcome], str | None] = lambda _o: None,
) -> Verdict:
    """Sort outcomes into holes (not allowed in ``mode``), unchanged reads, documented limits.

    ``clear(edit)`` gives the documented reason a field may stay clear (None: none);
    ``limit(outcome)`` the documented limit an uncaught outcome falls under (None: none).
    """
    v = Verdict()
    for o in outcomes:
        key = o.result + (
            "" if o.verify_broken is None else f"/verify {'broken' if o.verify_broken else 'ok'}"
        )
        v.counts[key] = v.counts.get(key, 0) + 1
        line = f"{o.edit.name} => {o.result}" + (f" ({o.detail})" if o.detail else "")
        if o.verify_broken is not None:
            line += f"; verify {'fails' if o.verify_broken else 'passes'}"
        caught = mode == "integrity" and bool(o.verify_broken)
        if o.result == "builtin":
            v.holes.append(line)
        elif mode == "plain" or o.result in ("raised", "refused") or caught:
            continue
        elif o.result == "same":
            why = clear(o.edit)
            if why is None and o.edit.action.startswith("copy"):
                why = UNREACHABLE
            if why is None and o.edit.removal and mode == "encryption":
                why = REMOVAL
            if why is None:
                v.holes.append(line + " [unchanged read, field not listed as clear]")
            else:
                v.unchanged.append(f"{line} [{why}]")
        elif o.result == "filters":
            v.filters.append(line)
            v.limits.append(f"{line} [{FILTER_ONLY}]")
        elif o.result == "changed":
            why = limit(o)
            if why is None and mode == "encryption" and _shrank(o.detail):
                why = REMOVAL  # the read shows less (a record deleted, moved or unindexed)
            if why is None:
                v.holes.append(line)
            else:
                v.limits.append(f"{line} [{why}]")
    return v


def report(title: str, outcomes: list[Outcome], seconds: float, v: Verdict) -> str:
    lines = [f"{title}: {len(outcomes)} edits in {seconds:.1f}s; {v.counts}"]
    if v.holes:
        lines.append(f"{len(v.holes)} holes:")
        lines.extend("  " + h for h in v.holes)
    if v.limits:
        lines.append(f"{len(v.limits)} documented limits:")
        lines.extend("  " + h for h in v.limits)
    return "\n".join(lines)
