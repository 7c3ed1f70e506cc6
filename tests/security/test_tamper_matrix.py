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
  raise; an edit that changes nothing is allowed only for a field listed in
  :data:`CLEAR` with the reason it stays clear;
* ``encryption=`` + ``integrity=``: every edit is caught by the read raising or
  by ``verify`` failing, except the fields of :data:`CLEAR` whose edit changes
  nothing a read returns.

One test per backend, flavour and mode; a failure lists every hole at once.
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
from tests.security.tamper_run import arun_matrix, judge, report, run_matrix

TENANT = "default"
BACKENDS = ("postgres", "redis", "redis-cluster", "dynamodb")

#: Fields that stay clear beside the ciphertext, and why (what the backend indexes or
#: needs before it can decrypt). (backend regexp, record kind regexp, field regexp) -> why.
#: An edit of one of these that leaves every read unchanged is allowed.
CLEAR: dict[tuple[str, str, str], str] = {}


def clear_reason(backend: str) -> Callable[[Edit], str | None]:
    def reason(edit: Edit) -> str | None:
        for (b, kind, fld), why in CLEAR.items():
            if (
                re.fullmatch(b, backend)
                and re.fullmatch(kind, edit.kind)
                and re.fullmatch(fld, edit.field)
            ):
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


def _middle(ids: list[str]) -> str:
    ordered = sorted(ids)
    return ordered[len(ordered) // 2]


def _finish(
    backend: str, flavour: str, mode: str, outcomes: Any, seconds: float, layout: Layout
) -> None:
    verdict = judge(outcomes, mode, clear_reason(backend))
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
    assert not verdict.holes, text


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", BACKENDS)
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
            outcomes, seconds = run_matrix(layout, reader, mode, _middle(ids))
    finally:
        layout.close()
    _finish(backend, "sync", mode, outcomes, seconds, layout)


@pytest.mark.parametrize("mode", ["integrity"])
@pytest.mark.parametrize("backend", BACKENDS)
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
            return await arun_matrix(layouts[0], reader, mode, _middle(ids))

    try:
        outcomes, seconds = asyncio.run(main())
    finally:
        for layout in layouts:
            layout.close()
    _finish(backend, "async", mode, outcomes, seconds, layouts[0])
