"""Retention and the pruner on PostgreSQL: expiry, partition drops, keep_latest, locks."""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from langgraph_durable import Retention
from langgraph_durable.errors import ConfigurationError, InvalidInputError
from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver
from tests.helpers import cfg, put_chain
from tests.postgres.aging import DAY, age_thread, partitions, rows_naming, table_counts
from tests.retention_helpers import (
    EXPECTED_APPROVAL_LOG,
    apause,
    aresume,
    arun_turns,
    delta_graph,
    interrupt_graph,
    pause,
    resume,
    run_turns,
)

IDLE_30D = Retention(idle=datetime.timedelta(days=30))


@pytest.fixture
def conn(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_url, autocommit=True) as c:
        yield c


@pytest.fixture
def saver(pg_url: str, pg_schema: str) -> Iterator[PostgresSaver]:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, retention=IDLE_30D) as s:
        s.setup()
        yield s


def test_stored_expiry_deletes_expired_threads_whole_and_keeps_live_ones(
    saver: PostgresSaver, conn: psycopg.Connection[Any], pg_schema: str
) -> None:
    put_chain(saver, "old", 3)
    put_chain(saver, "new", 3)
    saver.put_writes(saver.get_tuple(cfg("old")).config, [("a", 1)], "task")  # type: ignore[union-attr]
    age_thread(conn, pg_schema, "old", days=31)
    before_new = rows_naming(conn, pg_schema, "new")
    report = saver.prune_expired()
    assert (report.threads, report.checkpoints, report.locked) == (1, 3, False)
    assert report.bytes > 0 and not report.budget_exhausted
    assert rows_naming(conn, pg_schema, "old") == dict.fromkeys(
        rows_naming(conn, pg_schema, "x"), 0
    )
    assert rows_naming(conn, pg_schema, "new") == before_new
    assert saver.get_tuple(cfg("old")) is None
    assert len(list(saver.list(cfg("new")))) == 3
    # a second run finds nothing
    assert saver.prune_expired().threads == 0


def test_expiry_is_stored_only_for_delete_policies(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    policies = {
        "a": Retention(idle=datetime.timedelta(days=30)),
        "b": Retention(idle=datetime.timedelta(days=30), strategy="keep_latest"),
    }
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, retention=lambda t: policies.get(t)
    ) as s:
        s.setup()
        for tenant in ("a", "b", "c"):
            s.put(cfg("t", tenant_id=tenant), _cp(), {}, {})
        rows = dict(
            conn.execute(
                f'SELECT tenant_id, expires_at IS NOT NULL FROM "{pg_schema}".threads'
            ).fetchall()
        )
        assert rows == {"a": True, "b": False, "c": False}


def test_injected_clock_idle_and_absolute(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as s:
        s.setup()
        put_chain(s, "busy", 2)
        put_chain(s, "quiet", 2)
        # "busy" is old but written today; "quiet" was last written 10 days ago
        age_thread(conn, pg_schema, "busy", days=0, created_days=100)
        age_thread(conn, pg_schema, "quiet", days=10)
        now = time.time()
        idle = Retention(idle=datetime.timedelta(days=30))
        assert s.prune_expired(idle, now=now, dry_run=True).threads == 0
        assert s.prune_expired(idle, now=now + 21 * DAY, dry_run=True).threads == 1
        absolute = Retention(absolute=datetime.timedelta(days=90))
        report = s.prune_expired(absolute, now=now)
        assert report.threads == 1
        assert s.get_tuple(cfg("busy")) is None and s.get_tuple(cfg("quiet")) is not None
        assert rows_naming(conn, pg_schema, "busy")["checkpoints"] == 0


def test_old_partitions_are_dropped_whole_and_live_threads_move_forward(
    saver: PostgresSaver, conn: psycopg.Connection[Any], pg_schema: str
) -> None:
    for t in ("e1", "e2"):
        put_chain(saver, t, 2)
        age_thread(conn, pg_schema, t, days=40, move_epoch=True)
    # an older epoch where one thread is still live (written 1 day ago)
    for t in ("m-old", "m-live"):
        put_chain(saver, t, 2)
    age_thread(conn, pg_schema, "m-old", days=60, move_epoch=True)
    age_thread(conn, pg_schema, "m-live", days=1, created_days=60, move_epoch=True)
    before = [c.checkpoint["id"] for c in saver.list(cfg("m-live"))]
    leaves = partitions(conn, pg_schema)
    assert len(leaves) == 3 * 4  # current, next, two old epochs
    dry = saver.prune_expired(dry_run=True)
    assert table_counts(conn, pg_schema)["threads"] == 4
    assert partitions(conn, pg_schema) == leaves
    assert _epoch_of(conn, pg_schema, "m-live") < _epoch_now(conn, pg_schema) - 1
    report = saver.prune_expired()
    # the live thread moved to the current epoch, so its old epoch dropped whole too
    assert (report.threads, report.partitions, report.checkpoints, report.moved) == (3, 6, 6, 1)
    assert (dry.threads, dry.partitions, dry.checkpoints, dry.moved) == (3, 6, 6, 1)
    assert dry.bytes == report.bytes
    assert sorted(t for _tenant, t in dry.thread_ids) == ["e1", "e2", "m-old"]
    assert set(partitions(conn, pg_schema)) == _current(saver, conn, pg_schema)
    for t in ("e1", "e2", "m-old"):
        assert sum(rows_naming(conn, pg_schema, t).values()) == 0
    assert _epoch_of(conn, pg_schema, "m-live") == _epoch_now(conn, pg_schema)
    assert rows_naming(conn, pg_schema, "m-live")["checkpoints"] == 2  # no copy left behind
    assert [c.checkpoint["id"] for c in saver.list(cfg("m-live"))] == before
    got = saver.get_tuple(cfg("m-live"))
    assert got is not None and got.checkpoint["channel_values"]["payload"] == {"i": 1}
    put_chain(saver, "m-live", 1)
    assert len(list(saver.list(cfg("m-live")))) == 3


def test_an_epoch_whose_live_thread_holds_most_rows_keeps_its_partitions(
    saver: PostgresSaver, conn: psycopg.Connection[Any], pg_schema: str
) -> None:
    # one live thread against two expired ones, but it holds more checkpoints than both
    put_chain(saver, "big", 5)
    for t in ("old-1", "old-2"):
        put_chain(saver, t, 2)
        age_thread(conn, pg_schema, t, days=60, move_epoch=True)
    age_thread(conn, pg_schema, "big", days=1, created_days=60, move_epoch=True)
    leaves = partitions(conn, pg_schema)
    dry = saver.prune_expired(dry_run=True)
    report = saver.prune_expired()
    assert (report.threads, report.partitions, report.checkpoints, report.moved) == (2, 0, 4, 0)
    assert (dry.threads, dry.partitions, dry.checkpoints, dry.moved) == (2, 0, 4, 0)
    assert partitions(conn, pg_schema) == leaves
    assert len(list(saver.list(cfg("big")))) == 5


def test_an_epoch_mostly_live_keeps_its_partitions(
    saver: PostgresSaver, conn: psycopg.Connection[Any], pg_schema: str
) -> None:
    # moving two live threads costs more than deleting one expired thread's rows
    for t in ("old", "live-1", "live-2"):
        put_chain(saver, t, 2)
    age_thread(conn, pg_schema, "old", days=60, move_epoch=True)
    for t in ("live-1", "live-2"):
        age_thread(conn, pg_schema, t, days=1, created_days=60, move_epoch=True)
    leaves = partitions(conn, pg_schema)
    report = saver.prune_expired()
    assert (report.threads, report.partitions, report.checkpoints, report.moved) == (1, 0, 2, 0)
    assert partitions(conn, pg_schema) == leaves
    assert sum(rows_naming(conn, pg_schema, "old").values()) == 0
    for t in ("live-1", "live-2"):
        assert len(list(saver.list(cfg(t)))) == 2


def test_a_killed_partition_drop_is_finished_by_the_next_run(
    saver: PostgresSaver, conn: psycopg.Connection[Any], pg_schema: str
) -> None:
    put_chain(saver, "gone", 2)
    age_thread(conn, pg_schema, "gone", days=40, move_epoch=True)
    old = [n for n in partitions(conn, pg_schema) if n not in _current(saver, conn, pg_schema)]
    # as if a pruner died after its commit and one detach, before the drops
    conn.execute(f'DELETE FROM "{pg_schema}".threads WHERE thread_id = %s', ("gone",))
    leaf = next(n for n in old if n.startswith("writes_"))
    conn.execute(f'ALTER TABLE "{pg_schema}".writes DETACH PARTITION "{pg_schema}"."{leaf}"')
    saver.prune_expired()
    assert not set(old) & set(partitions(conn, pg_schema))


def test_budget_stops_between_batches_and_a_rerun_finishes(
    saver: PostgresSaver, conn: psycopg.Connection[Any], pg_schema: str
) -> None:
    for i in range(6):
        put_chain(saver, f"t{i}", 1)
        age_thread(conn, pg_schema, f"t{i}", days=31)
    ticks = iter(range(100))
    from langgraph_durable._core import retention as core

    real = core.PruneRequest.out_of_time
    try:
        # out of time after the second batch
        core.PruneRequest.out_of_time = lambda self: next(ticks) >= 2  # type: ignore[method-assign]
        first = saver.prune_expired(batch=2)
    finally:
        core.PruneRequest.out_of_time = real  # type: ignore[method-assign]
    assert first.budget_exhausted and first.threads == 4
    second = saver.prune_expired(batch=2)
    assert not second.budget_exhausted and second.threads == 2
    assert table_counts(conn, pg_schema)["threads"] == 0


def test_keep_latest_trims_and_threads_resume(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    policy = Retention(idle=datetime.timedelta(days=30), strategy="keep_latest", keep=1)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, retention=policy) as s:
        s.setup()
        paused = interrupt_graph(s)
        pause(paused, "paused")
        deltas = delta_graph(s)
        before = run_turns(deltas, "delta", 7)
        put_chain(s, "live", 3)
        for t in ("paused", "delta"):
            age_thread(conn, pg_schema, t, days=31)
        live_rows = rows_naming(conn, pg_schema, "live")
        delta_before = rows_naming(conn, pg_schema, "delta")["checkpoints"]
        dry = s.prune_expired(dry_run=True)
        report = s.prune_expired()
        assert (report.trimmed, report.threads) == (2, 0)
        assert (dry.trimmed, dry.checkpoints, dry.bytes) == (
            report.trimmed,
            report.checkpoints,
            report.bytes,
        )
        # the DeltaChannel thread kept ancestors back to a snapshot, not its whole history
        kept = rows_naming(conn, pg_schema, "delta")["checkpoints"]
        assert 1 < kept < delta_before
        assert rows_naming(conn, pg_schema, "live") == live_rows
        assert dict(deltas.get_state(cfg("delta")).values) == before
        after = run_turns(deltas, "delta", 1)
        assert after["items"][: len(before["items"])] == before["items"]
        assert len(after["items"]) == len(before["items"]) + 2
        assert resume(paused, "paused") == EXPECTED_APPROVAL_LOG


def test_upstream_prune_keep_latest_keeps_delta_ancestors(saver: PostgresSaver) -> None:
    graph = delta_graph(saver)
    before = run_turns(graph, "d", 6)
    saver.prune(["d"])
    assert dict(graph.get_state(cfg("d")).values) == before
    assert len(list(saver.list(cfg("d")))) < 6 * 3


def test_second_pruner_reports_the_lock(
    saver: PostgresSaver, conn: psycopg.Connection[Any], pg_schema: str
) -> None:
    put_chain(saver, "old", 1)
    age_thread(conn, pg_schema, "old", days=31)
    with psycopg.connect(conn.info.dsn, autocommit=True) as holder:
        holder.execute(
            "SELECT pg_advisory_lock(hashtext(%s))", (f"langgraph_durable:{pg_schema}:prune",)
        )
        report = saver.prune_expired()
        assert report.locked and report.threads == 0
    assert saver.get_tuple(cfg("old")) is None or saver.prune_expired().threads == 1
    assert saver.get_tuple(cfg("old")) is None


def test_tenant_filter_and_effect_rows(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, retention=IDLE_30D) as s:
        s.setup()
        for tenant in ("a", "b"):
            s.put(cfg("t", tenant_id=tenant), _cp(), {}, {})
            conn.execute(
                f'INSERT INTO "{pg_schema}".effects (tenant_id, thread_id, effect_id, state, '
                "token, attempt, lease_until, request_type, request, created) "
                "VALUES (%s, 't', 'e1', 'done', 1, 1, 0, 'x', '\\x00', 0)",
                (tenant,),
            )
            age_thread(conn, pg_schema, "t", tenant=tenant, days=31)
        report = s.prune_expired(tenant_id="a")
        assert report.threads == 1
        left = conn.execute(f'SELECT tenant_id FROM "{pg_schema}".effects').fetchall()
        assert left == [("b",)]
        assert s.get_tuple(cfg("t", tenant_id="b")) is not None


def test_setup_stores_the_policy_and_bad_arguments_are_refused(
    saver: PostgresSaver,
) -> None:
    assert Retention.from_json(saver._run(saver._ops.retention_get())) == IDLE_30D
    with pytest.raises(InvalidInputError):
        saver.prune_expired(max_seconds=0)
    with pytest.raises(ConfigurationError):
        saver.prune_expired("30d")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        Retention()
    with pytest.raises(ConfigurationError):
        PostgresSaver("postgresql://x", retention="30d")  # type: ignore[arg-type]


async def test_async_saver_prunes_and_trims(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    policy = Retention(idle=datetime.timedelta(days=30), strategy="keep_latest")
    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema, retention=policy) as s:
        await s.setup()
        paused = interrupt_graph(s)
        await apause(paused, "paused")
        deltas = delta_graph(s)
        before = await arun_turns(deltas, "delta", 5)
        for t in ("paused", "delta"):
            age_thread(conn, pg_schema, t, days=31)
        seen: list[Any] = []
        report = await s.aprune_expired(progress=seen.append)
        assert report.trimmed == 2 and seen and seen[-1].done == 2
        assert dict((await deltas.aget_state(cfg("delta"))).values) == before
        assert await aresume(paused, "paused") == EXPECTED_APPROVAL_LOG
        await arun_turns(deltas, "delta", 1)
        gone = await s.aprune_expired(Retention(idle=datetime.timedelta(days=1)))
        assert gone.threads == 0  # both were written again just now
        gone = await s.aprune_expired(
            Retention(idle=datetime.timedelta(days=1)), now=time.time() + 2 * DAY
        )
        assert gone.threads == 2
        assert table_counts(conn, pg_schema)["checkpoints"] == 0


def _cp() -> dict[str, Any]:
    from tests.helpers import make_cp

    return make_cp()


def _epoch_now(conn: psycopg.Connection[Any], schema: str) -> int:
    return int(conn.execute(f'SELECT "{schema}".current_epoch()').fetchone()[0])  # type: ignore[index]


def _epoch_of(conn: psycopg.Connection[Any], schema: str, thread: str) -> int:
    row = conn.execute(f'SELECT epoch FROM "{schema}".threads WHERE thread_id = %s', (thread,))
    return int(row.fetchone()[0])  # type: ignore[index]


def _current(saver: PostgresSaver, conn: psycopg.Connection[Any], schema: str) -> set[str]:
    epoch = conn.execute(f'SELECT "{schema}".current_epoch()').fetchone()[0]  # type: ignore[index]
    return {f"{t}_e{e}" for t in ("checkpoints", "blobs", "writes") for e in (epoch, epoch + 1)}


# ---- moving live threads forward: composition and races ----------------------------


def _old_epoch_pair(saver: Any, conn: psycopg.Connection[Any], schema: str, live: str) -> None:
    """``live`` (created 60 days ago, written yesterday) and an expired thread, both of two
    checkpoints, in the epoch of 60 days ago."""
    put_chain(saver, live, 2)
    put_chain(saver, "gone", 2)
    age_thread(conn, schema, "gone", days=60, move_epoch=True)
    age_thread(conn, schema, live, days=1, created_days=60, move_epoch=True)


def test_moved_threads_resume_and_keep_their_deltas_chain_and_encryption(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    from tests.encryption_helpers import local_encryption

    with PostgresSaver.from_conn_string(
        pg_url,
        schema=pg_schema,
        retention=IDLE_30D,
        integrity=b"k" * 32,
        encryption=local_encryption(),
    ) as s:
        s.setup()
        paused = interrupt_graph(s)
        pause(paused, "paused")
        deltas = delta_graph(s)
        before = run_turns(deltas, "delta", 6)
        for t in ("paused", "delta"):
            age_thread(conn, pg_schema, t, days=1, created_days=60, move_epoch=True)
        for i in range(3):  # more checkpoints than the live threads: moving is cheaper
            put_chain(s, f"gone-{i}", 20)
            age_thread(conn, pg_schema, f"gone-{i}", days=60, move_epoch=True)
        rows = {t: rows_naming(conn, pg_schema, t) for t in ("paused", "delta")}
        report = s.prune_expired()
        assert (report.threads, report.moved, report.partitions) == (3, 2, 3)
        for t in ("paused", "delta"):
            assert _epoch_of(conn, pg_schema, t) == _epoch_now(conn, pg_schema)
            assert rows_naming(conn, pg_schema, t) == rows[t]
        assert s.verify().ok
        assert dict(deltas.get_state(cfg("delta")).values) == before
        after = run_turns(deltas, "delta", 1)
        assert after["items"][: len(before["items"])] == before["items"]
        assert resume(paused, "paused") == EXPECTED_APPROVAL_LOG
        assert s.verify().ok


def test_a_move_killed_before_the_drop_is_finished_by_the_next_run(
    saver: PostgresSaver, conn: psycopg.Connection[Any], pg_schema: str, pg_url: str
) -> None:
    from langgraph_durable.postgres import _partitions

    _old_epoch_pair(saver, conn, pg_schema, "live")
    # a saver that remembers the thread's old epoch (it read it there)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as stale:
        assert stale.get_tuple(cfg("live")) is not None
        assert stale._ops.epochs.get("default", "live") == _epoch_of(conn, pg_schema, "live")
        real = _partitions._forget_epoch

        def killed(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError("killed")
            yield  # a generator, as the real one

        _partitions._forget_epoch = killed  # type: ignore[assignment]
        try:
            with pytest.raises(RuntimeError, match="killed"):
                saver.prune_expired()
        finally:
            _partitions._forget_epoch = real  # type: ignore[assignment]
        # moved, not dropped: the old rows are still there, and no read finds them
        assert _epoch_of(conn, pg_schema, "live") == _epoch_now(conn, pg_schema)
        assert rows_naming(conn, pg_schema, "live")["checkpoints"] == 4
        put_chain(saver, "live", 1)
        assert len(list(stale.list(cfg("live")))) == 3
        assert len(list(stale.list(cfg("live"), limit=5))) == 3
        assert stale.get_tuple(cfg("live")) == saver.get_tuple(cfg("live"))
        report = saver.prune_expired()
        assert (report.threads, report.moved, report.partitions) == (1, 0, 3)
        assert rows_naming(conn, pg_schema, "live")["checkpoints"] == 3
        assert len(list(stale.list(cfg("live")))) == 3


def _drive_move(saver: PostgresSaver, conn: psycopg.Connection[Any]) -> Any:
    """The pruner's move of the old epoch's live threads, run one statement at a time
    on ``conn``: yields before each COMMIT (the batch is copied, not committed)."""
    from langgraph_durable._core.retention import PruneReport, PruneRequest
    from langgraph_durable.postgres import _partitions, _prune_plan

    request = PruneRequest(retention=IDLE_30D)
    plan = _prune_plan._Plan(request, lambda _t: IDLE_30D, ["default"])
    current = int(conn.execute(f"SELECT {saver._ops._s}.current_epoch()").fetchone()[0])  # type: ignore[index]
    epoch = int(
        conn.execute(f"SELECT min(epoch) FROM {saver._ops._s}.threads").fetchone()[0]  # type: ignore[index]
    )
    progress = _prune_plan._Progress(PruneReport(), 0)
    steps = _partitions._move_live(saver._ops, request, plan, epoch, current, progress)
    sent: Any = None
    try:
        while True:
            q = steps.send(sent)
            if not hasattr(q, "sql"):  # a progress event or a rest
                sent = None
                continue
            if q.sql == "COMMIT":
                yield
            with conn.cursor() as cur:
                cur.execute(q.sql, q.params or None)
                sent = (
                    cur.fetchall()
                    if q.fetch == "all"
                    else cur.fetchone()
                    if q.fetch == "one"
                    else cur.rowcount
                )
    except StopIteration as done:
        return done.value


def _blocked_then_done(call: Any, move: Any) -> Any:
    """Run ``call`` in a thread; it must still wait after 0.5 s; then the move (a
    ``_drive_move``) commits and the call must end."""
    import threading

    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - reported below
            out["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(0.5)
    waited = worker.is_alive()
    for _ in move:  # the rest of the move: its commit, and the next batches
        pass
    worker.join(10)
    assert not worker.is_alive()
    if "error" in out:
        raise out["error"]
    assert waited, "the call did not wait for the move to commit"
    return out.get("value")


@contextlib.contextmanager
def _mid_move(
    saver: PostgresSaver, conn: psycopg.Connection[Any], schema: str, url: str
) -> Iterator[tuple[PostgresSaver, Any]]:
    """Thread "mv" live in an old epoch, its move copied but not committed; yields another
    saver on the schema and the rest of the move (see ``_blocked_then_done``)."""
    _old_epoch_pair(saver, conn, schema, "mv")
    with (
        psycopg.connect(url, autocommit=True) as mover,
        PostgresSaver.from_conn_string(url, schema=schema) as other,
    ):
        move = _drive_move(saver, mover)
        next(move)  # the batch is copied, its transaction still open
        yield other, move


def test_a_write_during_a_move_waits_and_lands_in_the_new_epoch(
    saver: PostgresSaver, conn: psycopg.Connection[Any], pg_schema: str, pg_url: str
) -> None:
    with _mid_move(saver, conn, pg_schema, pg_url) as (writer, move):
        latest = writer.get_tuple(cfg("mv"))
        assert latest is not None
        cp = {**latest.checkpoint, "id": "1fffffff-0000-6000-8000-000000000000"}

        def put() -> Any:
            return writer.put(latest.config, cp, {"step": 9}, {})

        _blocked_then_done(put, move)
        writer.put_writes(cfg("mv", checkpoint_id=cp["id"]), [("payload", 1)], "task-1")
    assert _epoch_of(conn, pg_schema, "mv") == _epoch_now(conn, pg_schema)
    epochs = conn.execute(
        f'SELECT DISTINCT epoch FROM "{pg_schema}".checkpoints WHERE checkpoint_id = %s',
        (cp["id"],),
    ).fetchall()
    assert epochs == [(_epoch_now(conn, pg_schema),)]
    assert [c.checkpoint["id"] for c in saver.list(cfg("mv"))][0] == cp["id"]
    got = saver.get_tuple(cfg("mv"))
    assert got is not None and got.pending_writes == [("task-1", "payload", 1)]


def test_a_delete_during_a_move_waits_and_removes_the_moved_rows(
    saver: PostgresSaver, conn: psycopg.Connection[Any], pg_schema: str, pg_url: str
) -> None:
    with _mid_move(saver, conn, pg_schema, pg_url) as (other, move):
        _blocked_then_done(lambda: other.delete_thread("mv"), move)
    assert saver.get_tuple(cfg("mv")) is None
    now = _epoch_now(conn, pg_schema)
    left = conn.execute(
        f'SELECT count(*) FROM "{pg_schema}".checkpoints WHERE thread_id = %s AND epoch = %s',
        ("mv", now),
    ).fetchone()
    assert left == (0,)
    saver.prune_expired()  # the old epoch (its copy and the expired thread) drops
    assert sum(rows_naming(conn, pg_schema, "mv").values()) == 0


async def test_async_saver_moves_live_threads_forward(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    async with AsyncPostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, retention=IDLE_30D
    ) as s:
        await s.setup()
        deltas = delta_graph(s)
        before = await arun_turns(deltas, "delta", 4)
        with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as writer:
            for i in range(2):  # more checkpoints than the live thread: moving is cheaper
                put_chain(writer, f"gone-{i}", 30)
                age_thread(conn, pg_schema, f"gone-{i}", days=60, move_epoch=True)
        age_thread(conn, pg_schema, "delta", days=1, created_days=60, move_epoch=True)
        dry = await s.aprune_expired(dry_run=True)
        report = await s.aprune_expired()
        assert (report.threads, report.moved, report.partitions) == (2, 1, 3)
        assert (dry.threads, dry.moved, dry.checkpoints) == (2, 1, report.checkpoints)
        assert dict((await deltas.aget_state(cfg("delta"))).values) == before
        await arun_turns(deltas, "delta", 1)


def test_moves_go_a_batch_at_a_time_over_pages(
    saver: PostgresSaver, conn: psycopg.Connection[Any], pg_schema: str, monkeypatch: Any
) -> None:
    from langgraph_durable.postgres import _partitions

    monkeypatch.setattr(_partitions, "_MOVE_PAGE", 2)
    monkeypatch.setattr(_partitions, "MOVE_BATCH", 1)
    for t in ("gone-1", "gone-2"):
        put_chain(saver, t, 5)
        age_thread(conn, pg_schema, t, days=60, move_epoch=True)
    for t in ("live-1", "live-2", "live-3"):
        put_chain(saver, t, 2)
        age_thread(conn, pg_schema, t, days=1, created_days=60, move_epoch=True)
    report = saver.prune_expired()
    assert (report.threads, report.moved, report.partitions, report.checkpoints) == (2, 3, 3, 10)
    for t in ("live-1", "live-2", "live-3"):
        assert _epoch_of(conn, pg_schema, t) == _epoch_now(conn, pg_schema)
        assert len(list(saver.list(cfg(t)))) == 2


def test_an_expired_thread_written_before_its_epoch_drops_keeps_the_epoch(
    saver: PostgresSaver, conn: psycopg.Connection[Any], pg_schema: str, monkeypatch: Any
) -> None:
    from langgraph_durable.postgres import _partitions

    for t in ("old-1", "old-2"):
        put_chain(saver, t, 2)
        age_thread(conn, pg_schema, t, days=60, move_epoch=True)
    leaves = partitions(conn, pg_schema)
    real = _partitions._forget_epoch

    def written_first(*args: Any) -> Any:
        put_chain(saver, "old-2", 1)  # written again: live, in its old epoch
        return (yield from real(*args))

    monkeypatch.setattr(_partitions, "_forget_epoch", written_first)
    report = saver.prune_expired()
    # the epoch was kept (nothing of it forgotten), its one expired thread deleted by rows
    assert (report.threads, report.partitions, report.moved) == (1, 0, 0)
    assert partitions(conn, pg_schema) == leaves
    assert sum(rows_naming(conn, pg_schema, "old-1").values()) == 0
    assert len(list(saver.list(cfg("old-2")))) == 3


def test_a_pruner_killed_while_moving_and_rerun_ends_like_an_uninterrupted_run(
    pg_url: str, pg_schema: str, conn: psycopg.Connection[Any]
) -> None:
    import json
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from tests.retention.worker import POLICIES

    threads = [f"t{i}" for i in range(8)]
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as s:
        s.setup()
        for tenant in ("old", "young"):
            for t in threads:
                put_chain(s, t, 2, tenant_id=tenant)
                # both tenants' threads started 60 days ago; "young"'s were written yesterday
                days = 60.0 if tenant == "old" else 1.0
                age_thread(
                    conn, pg_schema, t, tenant=tenant, days=days, created_days=60, move_epoch=True
                )
    spec = {"backend": "postgres", "conn": pg_url, "kwargs": {"schema": pg_schema}}
    root = Path(__file__).resolve().parents[2]

    def worker(pause: float) -> subprocess.Popen[str]:
        args = [json.dumps(spec), repr(time.time()), "2", str(pause)]
        return subprocess.Popen(
            [sys.executable, "-m", "tests.retention.worker", *args],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def state() -> dict[tuple[str, str], int]:
        with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, retention=POLICIES.get) as s:
            return {
                (tenant, t): len(list(s.list(cfg(t, tenant_id=tenant))))
                for tenant in ("old", "young")
                for t in threads
            }

    for _ in range(2):
        proc = worker(0.2)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # a move batch (or an epoch) is done
        assert line.startswith("progress"), (line, proc.stderr.read() if proc.stderr else "")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        assert all(n in (0, 2) for n in state().values())
    proc = worker(0.0)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert not report["budget_exhausted"]
    assert state() == {
        (tenant, t): (2 if tenant == "young" else 0) for tenant in ("old", "young") for t in threads
    }
    now = _epoch_now(conn, pg_schema)
    epochs = conn.execute(f'SELECT DISTINCT epoch FROM "{pg_schema}".threads').fetchall()
    assert epochs == [(now,)]
    assert set(partitions(conn, pg_schema)) == {
        f"{t}_e{e}" for t in ("checkpoints", "blobs", "writes") for e in (now, now + 1)
    }
    assert conn.execute(
        f'SELECT count(*) FROM "{pg_schema}".checkpoints WHERE tenant_id = %s', ("old",)
    ).fetchone() == (0,)
