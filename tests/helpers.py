"""Backend-neutral helpers shared by the savers' behaviour tests.

Every saver (PostgreSQL, Redis, DynamoDB) takes the same configs and checkpoints,
so the tests of each build them with these helpers: ``cfg`` for a config,
``make_cp`` / ``versioned_cp`` for a checkpoint, ``put_chain`` for a thread's
history, and a few more for setups that several backends' tests repeat.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any, Protocol

from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable._core.versions import next_version

__all__ = [
    "SupportsAsyncPut",
    "SupportsPut",
    "aput_message_with_write",
    "cfg",
    "checkpoint_ids",
    "config_ids",
    "make_cp",
    "put_chain",
    "put_shared_blob_chain",
    "tenant_from_org",
    "versioned_cp",
    "write_concurrently",
]


class SupportsPut(Protocol):
    """Anything with a saver's sync ``put`` (a saver, or a test's view of one)."""

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any, /) -> Any:
        """Store ``checkpoint`` under ``config``; return the stored checkpoint's config."""
        ...


class SupportsAsyncPut(Protocol):
    """Anything with an async saver's ``aput``, ``aput_writes`` and ``aget_tuple``."""

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any, /) -> Any:
        """Store ``checkpoint`` under ``config``; return the stored checkpoint's config."""
        ...

    async def aput_writes(self, config: Any, writes: Any, task_id: str, /) -> None:
        """Store a task's pending ``writes`` for the checkpoint of ``config``."""
        ...

    async def aget_tuple(self, config: Any, /) -> Any:
        """The checkpoint tuple ``config`` addresses, or None."""
        ...


def cfg(
    thread: str, ns: str = "", checkpoint_id: str | None = None, **extra: Any
) -> dict[str, Any]:
    """A config addressing ``thread`` in namespace ``ns``.

    Args:
        thread: The ``thread_id``.
        ns: The ``checkpoint_ns`` (the root namespace by default).
        checkpoint_id: A checkpoint to address; left out when empty (the latest).
        **extra: More ``configurable`` keys (``tenant_id``, ``run_id``, ...).
    """
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns, **extra}
    if checkpoint_id:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def cli_target(spec: Any) -> list[str]:
    """The command line's flags naming the store of a ``SaverSpec`` (URL, schema or prefix)."""
    args = ["--url", spec.conn]
    if spec.backend == "postgres":
        args += ["--schema", spec.kwargs["schema"]]
    elif spec.backend == "redis":
        args += ["--prefix", spec.kwargs["prefix"]]
    return args


def make_cp(**values: Any) -> dict[str, Any]:
    """A fresh ``empty_checkpoint()`` (new id) whose channel values are ``values``."""
    cp = dict(empty_checkpoint())
    cp["channel_values"] = values
    return cp


def versioned_cp(**values: Any) -> dict[str, Any]:
    """``make_cp(**values)`` with a first version of every channel in ``channel_versions``."""
    cp = make_cp(**values)
    cp["channel_versions"] = {name: next_version(None) for name in values}
    return cp


def put_chain(
    saver: SupportsPut,
    thread: str,
    n: int,
    ns: str = "",
    v: int | None = None,
    **extra: Any,
) -> list[dict[str, Any]]:
    """Put ``n`` checkpoints in a parent chain; each has a primitive and a blob channel.

    Checkpoint ``i`` holds ``step=i`` and ``payload={"i": i}``, with metadata
    ``{"step": i, "source": "loop"}``, and writes both channels' new versions.

    Args:
        saver: Where to put them.
        thread: The ``thread_id``.
        n: How many checkpoints.
        ns: The ``checkpoint_ns``.
        v: The checkpoint format, if not ``empty_checkpoint``'s (LangGraph's graphs
            write 4; the base ``empty_checkpoint`` says 2, whose readers also fetch
            the parent's sends).
        **extra: More ``configurable`` keys of every put (``tenant_id``, ``run_id``, ...).

    Returns:
        The config of each stored checkpoint, oldest first.
    """
    configs, parent = [], None
    for i in range(n):
        cp = make_cp(step=i, payload={"i": i})
        if v is not None:
            cp["v"] = v
        cp["channel_versions"] = {"step": next_version(None), "payload": f"{i + 1:032}.0"}
        parent = saver.put(
            cfg(thread, ns, checkpoint_id=parent, **extra),
            cp,
            {"step": i, "source": "loop"},
            {"step": cp["channel_versions"]["step"], "payload": cp["channel_versions"]["payload"]},
        )["configurable"]["checkpoint_id"]
        configs.append(cfg(thread, ns, checkpoint_id=parent, **extra))
    return configs


def put_shared_blob_chain(saver: SupportsPut, thread: str, n: int = 4) -> str | None:
    """Put ``n`` chained checkpoints that share one blob channel written only once.

    Every checkpoint holds ``big=["kept"] * 10`` at one version (only the first
    put writes it; the later ones reference it) and ``counter=[i]`` at a new
    version each time; the metadata is empty.

    Returns:
        The ``checkpoint_id`` of the last checkpoint (None when ``n`` is 0).
    """
    big_version = next_version(None)
    parent: str | None = None
    for i in range(n):
        cp = make_cp(big=["kept"] * 10, counter=[i])
        cp["channel_versions"] = {"big": big_version, "counter": f"{i + 1:032}.0"}
        new = {"counter": cp["channel_versions"]["counter"]}
        if i == 0:
            new["big"] = big_version  # written once, referenced by every later checkpoint
        parent = saver.put(cfg(thread, checkpoint_id=parent), cp, {}, new)["configurable"][
            "checkpoint_id"
        ]
    return parent


async def aput_message_with_write(
    saver: SupportsAsyncPut, thread: str = "t"
) -> tuple[dict[str, Any], Any]:
    """Put a checkpoint and a pending write into ``thread`` of an async saver; read it back.

    The checkpoint holds ``messages=["hi"]`` (metadata ``{"source": "input"}``); task
    ``"task"`` then writes ``["there"]`` to ``messages``; last, the thread's latest
    checkpoint is read with ``aget_tuple``.

    Returns:
        The checkpoint put, and the tuple read back (None if none was found).
    """
    cp = versioned_cp(messages=["hi"])
    stored = await saver.aput(cfg(thread), cp, {"source": "input"}, cp["channel_versions"])
    await saver.aput_writes(stored, [("messages", ["there"])], "task")
    return cp, await saver.aget_tuple(cfg(thread))


def tenant_from_org(config: dict[str, Any] | None) -> str | None:
    """A tenant resolver: the ``org`` of the config's ``configurable`` (None if unset)."""
    return (config or {}).get("configurable", {}).get("org")


def write_concurrently(
    saver: SupportsPut, thread: str, writers: int, puts: int
) -> list[BaseException]:
    """Put from ``writers`` threads at once, each ``puts`` checkpoints into ``thread``.

    Writer ``n`` puts into namespace ``ns{n}`` checkpoints holding ``x=[n, i]``,
    with empty metadata and no new versions.

    Returns:
        Whatever the writers raised (empty when every put succeeded).
    """
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(puts):
                saver.put(cfg(thread, ns=f"ns{n}"), make_cp(x=[n, i]), {}, {})
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def checkpoint_ids(tuples: Iterable[Any]) -> list[str]:
    """The checkpoint ids of checkpoint tuples, in their order."""
    return [t.checkpoint["id"] for t in tuples]


def config_ids(configs: Iterable[dict[str, Any]]) -> list[str]:
    """The ``checkpoint_id`` of each config, in their order."""
    return [c["configurable"]["checkpoint_id"] for c in configs]
