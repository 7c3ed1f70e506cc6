"""The saver's admin calls as operations: deletes, copies, pruning, verify.

:class:`SaverAdmin` adds to :class:`DurableSaverBase` the operations of
``delete_thread``, ``delete_for_runs``, ``copy_thread`` (opened and sealed
again when payloads are bound to their thread), ``prune`` and
``prune_expired``; ``verify`` walks the stored chains (``_verify_steps``).
``_saver`` hands them to the driver.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ._core.codec import ThreadKey
from ._core.retention import (
    DEFAULT_THROTTLE,
    PruneProgress,
    PruneReport,
    PruneRequest,
    Retention,
    RetentionPolicy,
)
from ._core.sansio import Emit, Operation, collect_emits
from ._saver_base import DurableSaverBase, _Call
from .errors import CheckpointConflictError, ConfigurationError, InvalidInputError

__all__ = ["SaverAdmin", "VerifyReport"]


class SaverAdmin(DurableSaverBase):
    """The operations of the admin calls (see the module docstring)."""

    def _delete_thread_op(self, thread_id: str, tenant_id: str | None) -> Operation[Any]:
        tenant = self._tenant_of(None, tenant_id)
        return self._keyed(
            _Call(tenant, lambda: self._ops.delete_thread(tenant, str(thread_id)), keyed=False)
        )

    def _delete_for_runs_op(self, run_ids: Sequence[str], tenant_id: str | None) -> Operation[Any]:
        tenant = self._tenant_of(None, tenant_id)
        return self._keyed(
            _Call(tenant, lambda: self._ops.delete_for_runs(tenant, run_ids), keyed=False)
        )

    def _copy_thread_op(self, source: str, target: str, tenant_id: str | None) -> Operation[Any]:
        tenant = self._tenant_of(None, tenant_id)
        if self.pipeline.binds_identity:
            return self._keyed(
                _Call(
                    tenant,
                    lambda: Operation(self._reseal_copy(tenant, str(source), str(target))),
                    write=True,
                )
            )
        return self._keyed(
            _Call(
                tenant,
                lambda: self._ops.copy_thread(tenant, str(source), str(target)),
                keyed=False,
            )
        )

    def _prune_op(
        self, thread_ids: Sequence[str], strategy: str, tenant_id: str | None
    ) -> Operation[Any]:
        tenant = self._tenant_of(None, tenant_id)
        return self._keyed(
            _Call(tenant, lambda: self._ops.prune(tenant, thread_ids, strategy), keyed=False)
        )

    def _prune_expired_op(
        self,
        retention: Retention | None,
        tenant_id: str | None,
        dry_run: bool,
        max_seconds: float | None,
        now: float | None,
        batch: int,
        throttle: float = DEFAULT_THROTTLE,
    ) -> Operation[Any]:
        """The pruner's operation; it emits ``PruneProgress`` items, then one ``PruneReport``."""
        if retention is not None and not isinstance(retention, Retention):
            raise ConfigurationError(
                f"retention must be None or a langgraph_durable.Retention, got {retention!r}"
            )
        if max_seconds is not None and (
            isinstance(max_seconds, bool)
            or not isinstance(max_seconds, (int, float))
            or max_seconds <= 0
        ):
            raise InvalidInputError(
                f"max_seconds must be None or a positive number, got {max_seconds!r}"
            )
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10_000:
            raise InvalidInputError(f"batch must be an integer from 1 to 10000, got {batch!r}")
        if (
            isinstance(throttle, bool)
            or not isinstance(throttle, (int, float))
            or not 0 <= throttle <= 100
        ):
            raise InvalidInputError(f"throttle must be a number from 0 to 100, got {throttle!r}")
        request = PruneRequest(
            retention=retention,
            tenant=None if tenant_id is None else str(tenant_id),
            dry_run=bool(dry_run),
            now=time.time() if now is None else float(now),
            deadline=None if max_seconds is None else time.monotonic() + float(max_seconds),
            batch=batch,
            throttle=float(throttle),
        )
        policy: RetentionPolicy | None
        if retention is not None:
            policy = lambda _tenant: retention  # noqa: E731
        elif self.retention is not None:
            policy = self._retention_for
        else:
            policy = None
        return self._ops.prune_expired(request, policy)  # type: ignore[no-any-return]

    def _reseal_copy(self, tenant: str, source: str, target: str) -> Generator[Any, Any, None]:
        """copy_thread when payloads are bound to their thread (encryption).

        A stored ciphertext only opens under its own record identity, so the
        rows cannot be copied as they are: every checkpoint and write of the
        source is opened and stored again for the target, oldest first.
        """
        if source == target:
            raise InvalidInputError("copy_thread: source and target thread ids are the same")
        listing = self._ops.list(tenant, source, None, None, None, None, None, False)
        tuples = yield from collect_emits(listing.steps)
        for tup in reversed(tuples):
            conf = tup.config["configurable"]
            ns = conf.get("checkpoint_ns", "")
            key = ThreadKey(tenant, target, ns, False)
            parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
            put_config: dict[str, Any] = {
                "configurable": {"thread_id": target, "checkpoint_ns": ns}
            }
            if parent:
                put_config["configurable"]["checkpoint_id"] = parent
            checkpoint = tup.checkpoint
            versions = dict(checkpoint.get("channel_versions") or {})
            try:
                yield from self._ops.put(key, put_config, checkpoint, tup.metadata, versions).steps
            except CheckpointConflictError:
                # stored already (an earlier copy; sealed with another nonce):
                # the target keeps its checkpoint, as the plain copy does
                pass
            groups: dict[tuple[str, str, bool], list[tuple[int, str, Any]]] = {}
            for write in tup.pending_writes or ():
                task_id, channel, value = write
                idx = getattr(write, "idx", 0)
                path = getattr(write, "task_path", "")
                groups.setdefault((task_id, path, idx < 0), []).append((idx, channel, value))
            for (task_id, path, _special), items in groups.items():
                items.sort(key=lambda item: item[0])
                batch = [(channel, value) for _idx, channel, value in items]
                yield from self._ops.put_writes(
                    key, conf["checkpoint_id"], batch, task_id, path
                ).steps
                self._ops.codec.wrote(key, conf["checkpoint_id"], batch, task_id)
        yield from self._reseal_effects(tenant, source, target)
        return None

    def _reseal_effects(self, tenant: str, source: str, target: str) -> Generator[Any, Any, None]:
        """Copy a thread's effect-journal entries, checked and sealed again for the target."""
        stored = yield from self._ops.effect_list(tenant, source).steps
        for entry in stored:
            copy = self._reseal_effect(tenant, source, target, entry)
            yield from self._ops.effect_restore(tenant, target, copy).steps
        return None


@dataclass
class VerifyReport:
    """What ``verify`` checked and what it found.

    Attributes:
        threads: Threads checked.
        checkpoints: Checkpoints checked.
        broken: Broken links found (each also reported to ``on_broken``).
        seconds: How long it took.
    """

    threads: int = 0
    checkpoints: int = 0
    broken: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.broken == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "threads": self.threads,
            "checkpoints": self.checkpoints,
            "broken": self.broken,
            "seconds": round(self.seconds, 3),
        }


def _verify_steps(
    saver: DurableSaverBase,
    tenant_id: str | None,
    thread_id: str | None,
    page: int,
    heads: Iterable[Any] | None = None,
    want_heads: bool = False,
) -> Generator[Any, Any, VerifyReport]:
    """Check every chain (or one tenant's, or one thread's) and the effect-journal
    entries of each thread checked; emit Broken and progress.

    ``heads`` (``_core.audit.Head``): anchored heads each thread in scope must
    still hold (a thread they name that is not found is reported too);
    ``want_heads``: emit each thread's heads after checking it.
    """
    from ._core.audit import AuditCodec, Broken, Head, check_heads, check_thread, thread_heads
    from ._core.effects import audit_entry

    chain = saver.integrity
    if chain is None:
        raise ConfigurationError(
            "verify needs the chain key: pass integrity= to the saver (or set LGD_INTEGRITY_KEY)"
        )
    ops = saver._make_ops(AuditCodec(chain))
    report = VerifyReport()
    started = time.monotonic()
    anchored: dict[tuple[str, str], list[Head]] = {}
    scope_tenant = tenant_id or (saver.default_tenant if thread_id is not None else None)
    for given in heads or ():
        if isinstance(given, Head):
            head = given
        elif isinstance(given, dict):  # the JSON form (Head.to_json, --print-heads --json)
            head = Head.from_json(given)
        else:
            raise InvalidInputError(
                f"heads= takes the heads verify exports (Head, or its to_json() dict), got "
                f"{given!r}"[:300]
            )
        if (scope_tenant is None or head.tenant == scope_tenant) and (
            thread_id is None or head.thread == thread_id
        ):
            anchored.setdefault((head.tenant, head.thread), []).append(head)

    def one(tenant: str, thread: str) -> Generator[Any, Any, None]:
        listing = ops.list(tenant, thread, None, None, None, None, None, False)
        entries = yield from collect_emits(listing.steps)
        report.threads += 1
        report.checkpoints += len(entries)
        found = check_thread(chain, entries)
        found += check_heads(chain, entries, anchored.pop((tenant, thread), ()))
        # a backend's indexes that decide which checkpoint reads as the latest (Redis)
        index_problems = getattr(saver._ops, "index_problems", None)
        if index_problems is not None:
            for problem in (yield from index_problems(tenant, thread).steps):
                found.append(Broken(tenant, thread, "", "index", problem))
        # the thread's effect-journal entries: shape, and the tags of request and state
        journal = yield from saver._ops.effect_list(tenant, thread).steps
        for entry in journal:
            problem = audit_entry(chain, tenant, thread, entry)
            if problem is not None:
                found.append(Broken(tenant, thread, "", f"effect:{entry.effect_id}", problem))
        for broken in found:
            report.broken += 1
            yield Emit(broken)
        if want_heads:
            for head in thread_heads(entries):
                yield Emit(head)
        report.seconds = time.monotonic() - started
        yield Emit(report)

    if thread_id is not None:
        yield from one(tenant_id or saver.default_tenant, thread_id)
    else:
        cursor: Any = None
        while True:
            threads, cursor = yield from saver._ops.thread_page(tenant_id, cursor, page).steps
            for tenant, thread in threads:
                yield from one(tenant, thread)
            if cursor is None:
                break
    for (tenant, thread), missing in sorted(anchored.items()):  # threads not found at all
        for broken in check_heads(chain, (), missing):
            report.broken += 1
            yield Emit(Broken(tenant, thread, broken.ns, broken.checkpoint_id, broken.reason))
    report.seconds = time.monotonic() - started
    return report


def _verify_item(
    item: Any,
    on_broken: Callable[[Any], None] | None,
    progress: Callable[[VerifyReport], None] | None,
    on_head: Callable[[Any], None] | None = None,
) -> None:
    from ._core.audit import Head

    if isinstance(item, VerifyReport):
        if progress is not None:
            progress(item)
    elif isinstance(item, Head):
        if on_head is not None:
            on_head(item)
    elif on_broken is not None:
        on_broken(item)


def _collect_report(
    items: Iterator[Any], progress: Callable[[PruneProgress], None] | None
) -> PruneReport:
    report: PruneReport | None = None
    for item in items:
        if isinstance(item, PruneReport):
            report = item
        elif progress is not None:
            progress(item)
    return _final(report)


def _final(report: PruneReport | None) -> PruneReport:
    if report is None:  # an operation that ends without its report is a bug of ours
        raise RuntimeError("the pruner ended without a report")
    return report
