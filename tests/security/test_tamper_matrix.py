"""The tamper matrix: every stored field of every record, edited, read back, in three modes.

For each backend (PostgreSQL, Redis, Redis Cluster, DynamoDB), sync and async,
and each mode, a thread is written through a real graph (``tamper.write_thread``),
its records are read from the storage itself (``tamper_layouts``: every column,
hash field, sorted-set member and item attribute, so a field added later is
covered without a change here), and every generated edit is applied, read back
through a fresh-cache reader, compared with the untouched read, and undone.

What each mode must show (``tamper.judge``):

* plain (no protection): nothing is promised, but a read never fails with a
  builtin exception (only our ``DurableError`` types);
* ``encryption=``: an edit that changes what a read returns makes the read
  raise, unless the read only shows less (removal: a record deleted, moved out
  of the thread by a key edit, or unindexed; encryption alone does not detect
  deletion); an edit that changes nothing is allowed only for a field listed in
  :data:`CLEAR` with the reason it stays clear (or a copy no read reaches);
* ``encryption=`` + ``integrity=``: every edit, removal included, is caught by
  the read raising or by ``verify`` failing, except the fields of :data:`CLEAR`
  whose edit changes nothing a read returns.

In every mode the documented limits (:data:`LIMITS`, :data:`TAIL`,
:data:`TRUNCATION`, and filter-only changes: a clear metadata index edit that
only changes which checkpoints a filtered listing selects) are allowed and
listed with their reason in the report. Each read starts without the reader's
caches (chain digests, unwrapped data keys), as a new process would.

One test per backend, flavour and mode; a failure lists every hole at once.
Set ``LGD_TAMPER_REPORT=path`` for a JSON line per run (every edit and its
outcome), ``LGD_TAMPER_ONLY=regexp`` to run only the edits whose name matches.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.redaction_helpers import _classes
from tests.security.tamper import (
    MODES,
    THREAD,
    Edit,
    Layout,
    awrite_thread,
    new_key,
    saver_kwargs,
    write_thread,
)
from tests.security.tamper_layouts import DynamoLayout, PostgresLayout, RedisLayout
from tests.security.tamper_run import Outcome, arun_matrix, judge, report, run_matrix

TENANT = "default"
BACKENDS = ("postgres", "redis", "redis-cluster", "dynamodb")
#: ``LGD_TAMPER_FULL=1`` (``make soak``): every backend in every mode, sync and async,
#: every edit. Otherwise (``make test``, about 40 s): PostgreSQL and Redis in every
#: mode, the cluster and DynamoDB with integrity only, async on PostgreSQL and Redis,
#: DynamoDB (moto is slow) on a sample of each record kind's edits.
FULL = os.environ.get("LGD_TAMPER_FULL") == "1"
SYNC_RUNS = [
    (b, m)
    for b in BACKENDS
    for m in MODES
    if FULL or b in ("postgres", "redis") or m == "integrity"
]
ASYNC_BACKENDS = BACKENDS if FULL else ("postgres", "redis")
#: Most edits per run on DynamoDB outside the full matrix (each record kind keeps its share).
DYNAMO_SAMPLE = None if FULL else 60

#: Fields that stay clear beside the ciphertext, and why (what the backend indexes or
#: needs before it can decrypt). (backend regexp, record kind regexp, field regexp) -> why.
#: An edit of one of these that leaves every read unchanged is allowed (one that changes
#: a read is judged like any other).
CLEAR: dict[tuple[str, str, str], str] = {
    ("postgres", ".*", "created_at|updated_at"): "timestamp: retention only",
    ("postgres", "checkpoints", "v"): "format version: the body's own v is authoritative",
    ("postgres", "blobs", "base_count"): "a delta's item count: ignored on a full row",
    ("postgres|dynamodb", "data_keys|data key", "created"): (
        "data-key creation time: rotation age only"
    ),
    ("redis.*", r":\{T\}:h hash \\0\\0(created|touched)", ".*"): (
        "the thread's created/touched times: retention only"
    ),
    ("redis.*", r":\{T\}:h hash \\0", ".*"): (
        "the mark that the thread is in its tenant's thread index: cross-thread listing "
        "and retention; a thread's own reads do not use it"
    ),
    ("redis.*", r":\{T\}:h hash", r"value\[0\]"): ("header v: the body's own v is authoritative"),
    ("redis.*", r":\{T\}:h hash", r"value\[2\]"): "header run_id: the delete_for_runs index",
    ("redis.*", r":\{T\}:h hash", r"value\[4\]"): (
        "header delta flag: a pruning hint (whether the metadata counts deltas)"
    ),
    ("redis.*", r":threads:\{T\} zset", ".*"): (
        "the tenant's thread index (score: last write): cross-thread listing and retention "
        "order; a thread's own reads do not use it"
    ),
    ("redis.*", r":key-tenants set", ".*"): (
        "the set of tenants with data keys: rotation and shredding walk it, reads do not"
    ),
    ("redis.*", r":keys:\{T\} hash", r"value\[2\]"): "data-key creation time: rotation age only",
    ("dynamodb", ".*", "ts"): "write time: retention only",
    ("dynamodb", "checkpoint", "fv"): (
        "format version: picks the read path for old formats; the body's own v is authoritative"
    ),
    ("dynamodb", "checkpoint", r"refs\[\d+\]\[(2|3)\].*"): (
        "read hints in a reference (chunk count, delta chain): which items to fetch at "
        "once; the blob item's own chunk count and chain are authoritative"
    ),
    ("dynamodb", "blob", r"bc.*"): (
        "a delta's chunk-count hints for its chain: which items to fetch at once; each "
        "base item's own count is authoritative"
    ),
    ("dynamodb", "write", "tp"): "a write's task path: missing reads as empty",
}

#: Documented limits: (backend, kind, field, removal only) -> why. An uncaught edit that
#: matches one is listed with its reason instead of failing the test.
LIMITS: dict[tuple[str, str, str, bool], str] = {
    ("postgres", "threads", ".*", False): (
        "the threads registry row: without it the thread reads as empty (whole-thread "
        "removal), caught only by an anchored head (verify --heads)"
    ),
    ("redis.*", r":\{T\}:[in] zset", "score", False): (
        "index order: the i/n sorted-set scores decide which checkpoint reads as latest; "
        "encryption alone does not bind them (with integrity=, verify finds a score "
        "other than 0)"
    ),
}
#: Why the removal of a pending write no chain covers yet is allowed.
TAIL = (
    "tail: a pending write no chain block covers (a checkpoint's chain covers the writes "
    "of its parent and grandparent stored when its put began: the newest two "
    "checkpoints' writes, and writes LangGraph stored after the grandchild's put)"
)
#: Records whose removal an anchored head does not catch (verify --heads finds the head
#: through the other index): the truncation limit does not cover them.
NOT_ANCHORED = re.compile(r".*:\{T\}:i zset")
#: Why the removal of a thread's newest checkpoint is allowed.
TRUNCATION = (
    "truncation: the newest checkpoint of a branch removed, caught only by an anchored "
    "head (verify --heads)"
)


def _matches(backend: str, edit: Edit, b: str, kind: str, fld: str) -> bool:
    """``kind`` matches the record kind, or the kind and the record's label."""
    return bool(
        re.fullmatch(b, backend)
        and (re.fullmatch(kind, edit.kind) or re.fullmatch(kind, f"{edit.kind} {edit.record}"))
        and re.fullmatch(fld, edit.field)
    )


def clear_reason(backend: str) -> Callable[[Edit], str | None]:
    def reason(edit: Edit) -> str | None:
        for (b, kind, fld), why in CLEAR.items():
            if _matches(backend, edit, b, kind, fld):
                return why
        return None

    return reason


def limit_reason(backend: str) -> Callable[[Outcome], str | None]:
    """The documented limit an uncaught outcome falls under (None: a hole)."""

    def reason(o: Outcome) -> str | None:
        if o.tail:
            return TAIL
        if o.truncates and not NOT_ANCHORED.fullmatch(o.edit.kind):
            return TRUNCATION
        for (b, kind, fld, removal), why in LIMITS.items():
            if _matches(backend, o.edit, b, kind, fld) and (o.edit.removal or not removal):
                return why
        return None

    return reason


def _spec(request: pytest.FixtureRequest, backend: str) -> tuple[str, str, dict[str, Any]]:
    """(class backend, connection string, saver kwargs) on the test's own namespace."""
    if backend == "postgres":
        schema = request.getfixturevalue("pg_schema")
        return "postgres", request.getfixturevalue("pg_url"), {"schema": schema}
    if backend == "redis":
        prefix = request.getfixturevalue("redis_prefix")
        return "redis", request.getfixturevalue("redis_url"), {"prefix": prefix}
    if backend == "redis-cluster":
        prefix = request.getfixturevalue("redis_prefix")
        return "redis", request.getfixturevalue("redis_cluster_conn_string"), {"prefix": prefix}
    endpoint = request.getfixturevalue("dynamodb_endpoint")
    table = request.getfixturevalue("dynamodb_table")
    return "dynamodb", f"dynamodb://{table}?region=us-east-1&endpoint={endpoint}", {}


def _layout(backend: str, conn: str, kwargs: dict[str, Any]) -> Layout:
    if backend == "postgres":
        return PostgresLayout(conn, kwargs["schema"], TENANT, THREAD)
    if backend.startswith("redis"):
        return RedisLayout(conn, kwargs["prefix"])
    return DynamoLayout(conn, TENANT, THREAD)


def _cap(backend: str) -> int | None:
    return DYNAMO_SAMPLE if backend == "dynamodb" else None


def _middle(ids: list[str]) -> str:
    ordered = sorted(ids)
    return ordered[len(ordered) // 2]


def _finish(
    backend: str, flavour: str, mode: str, outcomes: Any, seconds: float, layout: Layout
) -> None:
    verdict = judge(outcomes, mode, clear_reason(backend), limit_reason(backend))
    title = f"{backend} {flavour} {mode}"
    text = report(title, outcomes, seconds, verdict)
    out = os.environ.get("LGD_TAMPER_REPORT")
    if out:  # a JSON line per run, for reading the whole matrix at once
        with open(out, "a") as fh:
            fh.write(
                json.dumps(
                    {
                        "run": title,
                        "edits": len(outcomes),
                        "seconds": round(seconds, 2),
                        "counts": verdict.counts,
                        "holes": verdict.holes,
                        "unchanged": verdict.unchanged,
                        "filters": verdict.filters,
                        "limits": verdict.limits,
                        "skipped": getattr(layout, "skipped", []),
                        "all": [
                            f"{o.edit.name} => {o.result} {o.detail} verify={o.verify_broken}"
                            for o in outcomes
                        ],
                    }
                )
                + "\n"
            )
    assert len(outcomes) > 50, text  # the layout was read: the matrix is not empty
    assert any(o.result == "raised" for o in outcomes) or mode == "plain", text
    assert not verdict.holes, text


@pytest.mark.parametrize(("backend", "mode"), SYNC_RUNS)
def test_tamper_matrix(request: pytest.FixtureRequest, backend: str, mode: str) -> None:
    kind, conn, kwargs = _spec(request, backend)
    cls = _classes(kind)[0]
    options = saver_kwargs(mode, new_key())
    with cls.from_conn_string(conn, **kwargs, **options) as writer:
        writer.setup()
        write_thread(writer)
    layout = _layout(backend, conn, kwargs)
    try:
        with cls.from_conn_string(conn, **kwargs, **options) as reader:
            ids = [
                t.config["configurable"]["checkpoint_id"]
                for t in reader.list({"configurable": {"thread_id": THREAD}})
            ]
            outcomes, seconds = run_matrix(layout, reader, mode, _middle(ids), cap=_cap(backend))
    finally:
        layout.close()
    _finish(backend, "sync", mode, outcomes, seconds, layout)


@pytest.mark.parametrize("mode", ["integrity"])
@pytest.mark.parametrize("backend", ASYNC_BACKENDS)
def test_tamper_matrix_async(request: pytest.FixtureRequest, backend: str, mode: str) -> None:
    kind, conn, kwargs = _spec(request, backend)
    cls = _classes(kind)[1]
    options = saver_kwargs(mode, new_key())
    layouts: list[Layout] = []

    async def main() -> Any:
        async with cls.from_conn_string(conn, **kwargs, **options) as writer:
            await writer.setup()
            await awrite_thread(writer)
        layouts.append(_layout(backend, conn, kwargs))  # after setup: the schema exists
        async with cls.from_conn_string(conn, **kwargs, **options) as reader:
            cfg = {"configurable": {"thread_id": THREAD}}
            ids = [t.config["configurable"]["checkpoint_id"] async for t in reader.alist(cfg)]
            return await arun_matrix(layouts[0], reader, mode, _middle(ids), cap=_cap(backend))

    try:
        outcomes, seconds = asyncio.run(main())
    finally:
        for layout in layouts:
            layout.close()
    _finish(backend, "async", mode, outcomes, seconds, layouts[0])
