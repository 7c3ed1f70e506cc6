"""PostgresSaver under concurrency: no saver-wide lock, and setup() safe from many processes."""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import time
import traceback
import uuid
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointMetadata, empty_checkpoint

THREADS = 8
PAYLOAD_BYTES = 512 * 1024
MIN_ROUNDS = 6  # per thread, whatever the sampler sees
DEADLINE_S = 90.0
MIN_OVERLAP = 4  # statements of the saver seen active at the same moment
SETUP_PROCESSES = 4

ACTIVE_SQL = """
SELECT count(*) FROM pg_stat_activity
WHERE state = 'active'
  AND datname = current_database()
  AND application_name = %s
  AND pid <> pg_backend_pid()
"""


def test_threads_sharing_one_saver_overlap_on_the_database(pg_url: str, pg_schema: str) -> None:
    from psycopg_pool import ConnectionPool

    from langgraph_durable.postgres import PostgresSaver

    # Only this test's pool connections carry this name, so other tests running at the
    # same time (pytest-xdist) cannot inflate the count.
    app_name = f"lgd-overlap-{uuid.uuid4().hex[:8]}"
    pool = ConnectionPool(
        pg_url,
        min_size=THREADS,
        max_size=THREADS,
        kwargs={"application_name": app_name},
        open=True,
    )
    try:
        pool.wait(timeout=30)
        saver = PostgresSaver(pool, schema=pg_schema)
        saver.setup()

        start = threading.Barrier(THREADS + 1)
        stop = threading.Event()
        rounds = [0] * THREADS
        errors: list[str] = []

        def work(index: int) -> None:
            try:
                config: RunnableConfig = {
                    "configurable": {"thread_id": f"overlap-{index}", "checkpoint_ns": ""}
                }
                version = None
                start.wait(timeout=60)
                while not stop.is_set():
                    payload = os.urandom(PAYLOAD_BYTES)  # incompressible: real I/O each time
                    version = saver.get_next_version(version, None)
                    checkpoint = empty_checkpoint()
                    checkpoint["channel_values"] = {"blob": payload}
                    checkpoint["channel_versions"] = {"blob": version}
                    metadata: CheckpointMetadata = {"source": "loop", "step": rounds[index]}
                    config = saver.put(config, checkpoint, metadata, {"blob": version})
                    got = saver.get_tuple(config)
                    assert got is not None, "a checkpoint just written was not found"
                    assert got.checkpoint["id"] == checkpoint["id"]
                    assert got.checkpoint["channel_values"]["blob"] == payload
                    rounds[index] += 1
            except BaseException:
                errors.append(traceback.format_exc())
                stop.set()

        workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(THREADS)]
        for worker in workers:
            worker.start()

        samples: list[int] = []
        with psycopg.connect(pg_url, autocommit=True) as sampler:
            start.wait(timeout=60)
            deadline = time.monotonic() + DEADLINE_S
            while not stop.is_set() and time.monotonic() < deadline:
                row = sampler.execute(ACTIVE_SQL, (app_name,)).fetchone()
                samples.append(int(row[0]) if row else 0)
                if max(samples) >= MIN_OVERLAP and min(rounds) >= MIN_ROUNDS:
                    break
            stop.set()
        for worker in workers:
            worker.join(timeout=60)

        assert not errors, "worker failed:\n" + "\n".join(errors)
        assert not any(worker.is_alive() for worker in workers), "a worker did not finish"
        assert min(rounds) >= MIN_ROUNDS, f"rounds per thread: {rounds}"
        assert max(samples) >= MIN_OVERLAP, (
            f"never saw {MIN_OVERLAP} of the saver's statements active at once in {len(samples)} "
            f"samples (max {max(samples)}); rounds per thread: {rounds}"
        )
    finally:
        pool.close()


def _setup_in_child(
    url: str,
    schema: str,
    start: Any,
    results: multiprocessing.Queue,  # type: ignore[type-arg]
) -> None:
    """Child process: connect, wait for the others, then call setup() once."""
    try:
        from langgraph_durable.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(url, schema=schema, pool_size=1) as saver:
            start.wait(timeout=120)
            applied = saver.setup()
        results.put((os.getpid(), "ok", list(applied)))
    except BaseException:
        results.put((os.getpid(), "error", traceback.format_exc()))


def test_setup_from_many_processes_applies_each_migration_once(pg_url: str, pg_schema: str) -> None:
    from langgraph_durable.postgres import PostgresSaver, _schema

    expected = list(range(1, len(_schema.MIGRATIONS) + 1))
    assert expected, "no migrations defined"

    context = multiprocessing.get_context("spawn")
    start = context.Barrier(SETUP_PROCESSES)
    results = context.Queue()
    processes = [
        context.Process(target=_setup_in_child, args=(pg_url, pg_schema, start, results))
        for _ in range(SETUP_PROCESSES)
    ]
    for process in processes:
        process.start()

    outcomes: list[tuple[int, str, Any]] = []
    try:
        for _ in processes:
            outcomes.append(results.get(timeout=180))
    except queue.Empty:
        pass
    finally:
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
                process.join(10)

    assert len(outcomes) == SETUP_PROCESSES, f"only {len(outcomes)} processes reported: {outcomes}"
    failures = [detail for _, status, detail in outcomes if status != "ok"]
    assert not failures, "setup() failed in a process:\n" + "\n".join(failures)
    assert all(process.exitcode == 0 for process in processes), [p.exitcode for p in processes]

    applied = [version for _, _, versions in outcomes for version in versions]
    assert sorted(applied) == expected, (
        f"versions applied across processes: {[(pid, v) for pid, _, v in outcomes]}; "
        f"expected each of {expected} exactly once"
    )
    for _, _, versions in outcomes:
        assert versions == sorted(versions), f"a process applied versions out of order: {versions}"

    # The schema is now current: another setup() applies nothing.
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, pool_size=1) as saver:
        assert saver.setup() == []
