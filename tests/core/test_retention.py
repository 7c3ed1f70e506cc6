"""The pure retention core: policies, durations, expiry, what keep_latest keeps, locks."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys

import pytest

from langgraph_durable import Retention
from langgraph_durable._core.retention import (
    CheckpointNode,
    PruneReport,
    PruneRequest,
    delta_pending,
    format_duration,
    holder_gone,
    keep_set,
    parse_duration,
    pruner_identity,
    resolve_retention,
    thread_expired,
    thread_expires_at,
)
from langgraph_durable.errors import ConfigurationError, InvalidInputError

DAY = 86400.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("12h", 43200),
        ("30d", 30 * DAY),
        ("2w", 14 * DAY),
        ("1.5h", 5400),
    ],
)
def test_durations_parse_and_format_back(text: str, seconds: float) -> None:
    delta = parse_duration(text)
    assert delta.total_seconds() == seconds
    assert parse_duration(format_duration(delta) or "") == delta


@pytest.mark.parametrize("text", ["", "30", "30x", "d", "-1d", "0s", "1 day", None])
def test_bad_durations_are_refused_with_the_accepted_forms(text: object) -> None:
    with pytest.raises(InvalidInputError, match="duration"):
        parse_duration(text)  # type: ignore[arg-type]


def test_retention_normalises_and_validates() -> None:
    r = Retention(idle="30d", absolute=90 * DAY, strategy="keep-latest", keep=3)
    assert r.idle == datetime.timedelta(days=30)
    assert r.absolute == datetime.timedelta(days=90)
    assert r.strategy == "keep_latest" and r.keep == 3
    assert Retention.from_json(r.to_json()) == r
    assert r.describe() == "keep latest 3 when 30d idle or 90d old"
    assert Retention(strategy="keep_latest").describe() == "keep latest 1 when always"
    for bad in (
        {},  # delete without a bound would delete everything
        {"idle": "30d", "strategy": "purge"},
        {"idle": "30d", "keep": 0},
        {"idle": "30d", "keep": True},
        {"idle": -5},
        {"idle": [1]},
    ):
        with pytest.raises((ConfigurationError, InvalidInputError)):
            Retention(**bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="stored retention"):
        Retention.from_json("not json")


def test_expiry_is_the_earlier_of_idle_and_absolute() -> None:
    r = Retention(idle=10, absolute=100)
    assert thread_expires_at(r, created=0, updated=50) == 60
    assert thread_expires_at(r, created=0, updated=95) == 100
    assert thread_expires_at(Retention(absolute=100), created=None, updated=7) == 107
    assert thread_expires_at(None, 0, 0) is None
    assert thread_expired(r, 0, 50, now=60) and not thread_expired(r, 0, 50, now=59.9)
    assert thread_expired(Retention(strategy="keep_latest"), 0, 0, now=0)


def test_per_tenant_policies_resolve_and_a_wrong_return_is_refused() -> None:
    plans = {"free": Retention(idle=60)}
    assert resolve_retention(plans.get, "free") == plans["free"]
    assert resolve_retention(plans.get, "pro") is None
    assert resolve_retention(None, "x") is None
    with pytest.raises(ConfigurationError, match="tenant 'x'"):
        resolve_retention(lambda t: "30d", "x")


def _chain(ns: str, n: int, delta_from: int | None = None, v: int = 4) -> list[CheckpointNode]:
    """n checkpoints c00..; those from ``delta_from`` on need their ancestors."""
    nodes = []
    for i in range(n):
        delta = delta_from is not None and i >= delta_from
        parent = f"c{i - 1:02d}" if i else None
        nodes.append(CheckpointNode(ns, f"c{i:02d}", parent, v, delta, False))
    return nodes


def test_keep_set_keeps_the_latest_per_namespace() -> None:
    nodes = _chain("", 5) + _chain("sub", 3)
    assert keep_set(nodes, 1) == {("", "c04"), ("sub", "c02")}
    assert keep_set(nodes, 2) == {("", "c04"), ("", "c03"), ("sub", "c02"), ("sub", "c01")}
    assert keep_set(nodes, 10) == {(n.ns, n.checkpoint_id) for n in nodes}


def test_keep_set_follows_delta_ancestors_back_to_a_snapshot() -> None:
    # c00..c02 plain, c03..c06 rebuilt from ancestors: keep c06 back to c02 (the snapshot)
    kept = keep_set(_chain("", 7, delta_from=3), 1)
    assert kept == {("", f"c{i:02d}") for i in range(2, 7)}


def test_keep_set_keeps_the_parent_holding_old_format_sends() -> None:
    nodes = _chain("", 3, v=3)
    with_sends = [*nodes[:2], CheckpointNode("", "c02", "c01", 3, False, True)]
    assert keep_set(with_sends, 1) == {("", "c02"), ("", "c01")}
    assert keep_set(nodes, 1) == {("", "c02")}


def test_keep_set_on_forks_keeps_the_latest_branch_tips() -> None:
    nodes = [
        CheckpointNode("", "a", None),
        CheckpointNode("", "b", "a"),
        CheckpointNode("", "c", "a", delta=True),  # a fork of a, needing a
    ]
    assert keep_set(nodes, 1) == {("", "c"), ("", "a")}


def test_delta_pending_reads_the_metadata_langgraph_writes() -> None:
    assert delta_pending({"counters_since_delta_snapshot": {"m": [1, 1]}})
    assert not delta_pending({"counters_since_delta_snapshot": {}})
    assert not delta_pending({"step": 3})
    assert not delta_pending(None)


def test_report_records_threads_only_in_dry_runs() -> None:
    real, dry = PruneReport(), PruneReport(dry_run=True)
    real.record("t", "a")
    dry.record("t", "a")
    assert real.thread_ids == [] and dry.thread_ids == [("t", "a")]
    assert set(dry.as_dict()) >= {"threads", "checkpoints", "bytes", "partitions", "seconds"}


def test_lock_holders_of_dead_processes_here_are_recognised() -> None:
    me = pruner_identity()
    assert not holder_gone(me)
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    host = me.split(":")[0]
    assert holder_gone(f"{host}:{child.stdout.strip()}:abcd")
    assert not holder_gone(f"another-host-{os.getpid()}:1:abcd")
    assert not holder_gone("garbage")


def test_rest_after_is_the_throttle_times_the_batch_time_within_bounds() -> None:
    clock = [100.0]

    def request(**kw: object) -> PruneRequest:
        return PruneRequest(monotonic=lambda: clock[0], **kw)  # type: ignore[arg-type]

    clock[0] = 100.5  # the batch started at 100.0 and took 0.5 s
    assert request(throttle=0.0).rest_after(100.0) == 0.0
    assert request(throttle=1.0).rest_after(100.0) == pytest.approx(0.5)
    assert request(throttle=3.0).rest_after(100.0) == pytest.approx(1.5)
    assert request(throttle=1.0, dry_run=True).rest_after(100.0) == 0.0
    # capped, and never past the time budget
    assert request(throttle=100.0).rest_after(100.0) == pytest.approx(10.0)
    assert request(throttle=3.0, deadline=101.0).rest_after(100.0) == pytest.approx(0.5)
    assert request(throttle=3.0, deadline=100.2).rest_after(100.0) == 0.0
