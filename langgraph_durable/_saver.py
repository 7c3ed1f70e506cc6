"""What every backend's savers share: call resolution and the public methods.

A backend provides an *ops* object whose methods build sans-IO operations
(``langgraph_durable._core.sansio.Operation``) and a way to run them: a sync
saver defines ``_run(op)`` and ``_iterate(op)``, an async saver ``_arun(op)``
and ``_aiterate(op)``. The public ``BaseCheckpointSaver`` methods below are
then written once for every backend, in a sync and an async flavour that only
differ in how they hand the operation to the driver.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Collection, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ._core.codec import (
    CheckpointCodec,
    ThreadKey,
    json_safe_metadata,
    tenant_from_config,
    thread_key,
)
from ._core.effects import StoredEffect, request_identity, result_identity
from ._core.filters import metadata_matches, normalize_filter
from ._core.retention import (
    DEFAULT_THROTTLE,
    PruneProgress,
    PruneReport,
    PruneRequest,
    Retention,
    RetentionPolicy,
    check_retention,
    resolve_retention,
)
from ._core.sansio import Emit, Operation, Sleep, collect_emits, select_emits
from ._core.versions import next_version
from .errors import (
    CheckpointConflictError,
    ConfigurationError,
    DecryptionError,
    InvalidInputError,
)
from .protect.keys import KeyManager, KeyMissing
from .protect.pipeline import IdentityPipeline

if TYPE_CHECKING:
    from .protect.encryption import Encryption
    from .protect.redaction import Redaction

__all__ = [
    "DurableSaverBase",
    "SyncSaverMethods",
    "AsyncSaverMethods",
    "TenantResolver",
    "OpenedEffect",
]

TenantResolver = Callable[[RunnableConfig | None], "str | None"]

# Attempts at a call that keeps finding data-key versions it has not unwrapped.
_KEY_ATTEMPTS = 8
# Seconds between looks while another call loads the same tenant's keys.
_LOAD_WAIT = 0.002


@dataclass(frozen=True, slots=True)
class _Call:
    """One saver call: its tenant, how to build its operation, what keys it needs.

    ``make`` is called after the tenant's data keys are ready (and again if a
    record needed a key version that was not), so it builds a fresh operation.
    """

    tenant: str
    make: Callable[[], Operation[Any]]
    write: bool = False
    keyed: bool = True
    opens: bool = True
    """Whether the operation opens stored records (which may need other key versions)."""


@dataclass(frozen=True, slots=True)
class OpenedEffect:
    """A journal entry with its request and result opened by the record pipeline."""

    entry: StoredEffect
    request: Any
    result: Any = None


def _setting(value: Any, kind: type, name: str) -> Any:
    """``value`` if it is None or a ``kind``; a clear error otherwise."""
    if value is not None and not isinstance(value, kind):
        raise ConfigurationError(
            f"{name} must be None or a langgraph_durable.protect.{kind.__name__}, got {value!r}"
        )
    return value


def _next_need(missing: KeyMissing, need: frozenset[int], attempt: int) -> frozenset[int]:
    if attempt >= _KEY_ATTEMPTS or (missing.version is not None and missing.version in need):
        raise DecryptionError(
            f"data-key version {missing.version} of tenant {missing.tenant!r} is still "
            "missing after loading the tenant's keys"
        )
    return need if missing.version is None else need | {missing.version}


class DurableSaverBase(BaseCheckpointSaver[str]):
    """Tenant and thread resolution, the record pipeline, and backend operations.

    Subclasses implement :meth:`_make_ops` (the backend's operations object).
    """

    default_tenant: str
    _ops: Any

    _keys: KeyManager | None = None
    encryption: Encryption | None = None
    redaction: Redaction | None = None
    retention: Retention | RetentionPolicy | None = None

    def _init_base(
        self,
        serde: SerializerProtocol | None,
        tenant: str | TenantResolver | None,
        default_tenant: str,
        encryption: Encryption | None = None,
        redaction: Redaction | None = None,
        retention: Retention | RetentionPolicy | None = None,
        integrity: Any = None,
    ) -> None:
        BaseCheckpointSaver.__init__(self, serde=serde)
        self.retention = check_retention(retention)
        from .protect.integrity import resolve_integrity

        self.integrity = resolve_integrity(integrity)
        from .protect.encryption import Encryption
        from .protect.redaction import Redaction

        self.redaction = _setting(redaction, Redaction, "redaction")
        self.encryption = _setting(encryption, Encryption, "encryption")
        if self.encryption is not None:
            self._keys = self.encryption.key_manager()
        if not isinstance(default_tenant, str) or not default_tenant:
            raise ConfigurationError(
                f"default_tenant must be a non-empty string, got {default_tenant!r}"
            )
        self.default_tenant = default_tenant
        if tenant is None:
            self._tenant: TenantResolver = tenant_from_config
        elif isinstance(tenant, str):
            fixed = tenant
            self._tenant = lambda _config: fixed
        elif callable(tenant):
            self._tenant = tenant
        else:
            raise ConfigurationError(
                f"tenant must be None, a string or a callable(config) -> str, got {tenant!r}"
            )
        self._build_ops()

    def _make_ops(self, codec: CheckpointCodec) -> Any:
        raise NotImplementedError

    def _delta_chain(self) -> int:
        """Most deltas between full copies of a list channel; 0: no delta encoding."""
        return 0

    def _build_ops(self) -> None:
        if self.encryption is not None and self._keys is not None:
            from .protect.encryption import EncryptionPipeline

            self.pipeline: IdentityPipeline = EncryptionPipeline(
                self.serde, self.encryption, self._keys.cache
            )
        else:
            self.pipeline = IdentityPipeline(self.serde)
        if self.redaction is not None:
            from .protect.redaction import RedactionPipeline

            # redact -> serialize -> encrypt: redaction wraps the rest of the pipeline
            self.pipeline = RedactionPipeline(self.pipeline, self.redaction)  # type: ignore[assignment]
        if self.integrity is not None:
            from .protect.integrity import IntegrityPipeline

            # ... -> encrypt -> tag: the tag covers the bytes as stored
            self.pipeline = IntegrityPipeline(self.pipeline, self.integrity)  # type: ignore[assignment]
        self._ops = self._make_ops(CheckpointCodec(self.pipeline, self._delta_chain()))

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> Any:
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self:
            cast(DurableSaverBase, clone)._build_ops()
        return clone

    def _admin_keys(self) -> KeyManager:
        if self._keys is None:
            raise ConfigurationError(
                "this saver has no encryption: pass encryption=Encryption(keyring) to manage keys"
            )
        return self._keys

    def _keyed(self, call: _Call) -> Operation[Any]:
        """The call's operation, preceded by loading its tenant's keys when it needs them."""
        keys = self._keys
        if keys is None or not call.keyed:
            return call.make()
        if call.write and not call.opens and keys.fresh(call.tenant, True):
            return call.make()  # sealing needs only the active key, which is loaded
        return Operation(self._keyed_steps(keys, call))

    def _keyed_steps(self, keys: KeyManager, call: _Call) -> Generator[Any, Any, Any]:
        """Make the tenant's keys ready, run the call; on a key version not loaded, again.

        A streaming call that is run again skips the items it already emitted.
        """
        need: frozenset[int] = frozenset()
        attempt = emitted = 0
        while True:
            yield from self._ready_keys(keys, call, need, attempt)
            skip = emitted

            def keep(_item: Any) -> bool:
                nonlocal skip, emitted
                if skip:
                    skip -= 1
                    return False
                emitted += 1
                return True

            try:
                return (yield from select_emits(call.make().steps, keep, None))
            except KeyMissing as missing:
                attempt += 1
                need = _next_need(missing, need, attempt)

    def _ready_keys(
        self, keys: KeyManager, call: _Call, need: frozenset[int], attempt: int
    ) -> Generator[Any, Any, None]:
        while attempt or not keys.fresh(call.tenant, call.write):
            if keys.begin_load(call.tenant):
                try:
                    yield from keys.ensure(self._ops, call.tenant, need, call.write)
                finally:
                    keys.end_load(call.tenant)
                return None
            yield Sleep(_LOAD_WAIT)  # another call is loading this tenant's keys
        return None

    def _rotate_steps(self, tenant_id: str | None) -> Generator[Any, Any, dict[str, int]]:
        keys = self._admin_keys()
        if tenant_id is not None:
            tenants = [str(tenant_id)]
        else:
            tenants = yield from self._ops.data_key_tenants().steps
        summary = {"tenants": 0, "rewrapped": 0, "current": 0}
        for tenant in tenants:
            done, current = yield from keys.rotate(self._ops, tenant)
            summary["tenants"] += 1
            summary["rewrapped"] += done
            summary["current"] += current
        return summary

    # ---- effect journal (langgraph_durable.effects) ----------------------------

    def _effect_claim_op(
        self,
        tenant: str,
        thread: str,
        material: bytes,
        request: Any,
        lease_until: float,
        now: float,
        takeover: bool,
    ) -> Operation[OpenedEffect]:
        """Claim the effect derived from ``material`` (or find its entry), opened."""

        def claim() -> Generator[Any, Any, OpenedEffect]:
            pipeline = self.pipeline
            effect_id = pipeline.effect_id(tenant, material)
            sealed = pipeline.seal(request_identity(tenant, thread, effect_id), request)
            entry = yield from self._ops.effect_claim(
                tenant, thread, effect_id, sealed, lease_until, now, takeover
            ).steps
            return self._open_effect(tenant, thread, entry, request if entry.won else None)

        return self._keyed(_Call(tenant, lambda: Operation(claim()), write=True))

    def _effect_lookup_op(
        self, tenant: str, thread: str, material: bytes
    ) -> Operation[OpenedEffect | None]:
        """The entry derived from ``material``, opened, or None (nothing is claimed)."""

        def lookup() -> Generator[Any, Any, OpenedEffect | None]:
            effect_id = self.pipeline.effect_id(tenant, material)
            entry = yield from self._ops.effect_get(tenant, thread, effect_id).steps
            return None if entry is None else self._open_effect(tenant, thread, entry)

        return self._keyed(_Call(tenant, lambda: Operation(lookup())))

    def _open_effect(
        self, tenant: str, thread: str, entry: StoredEffect, request: Any = None
    ) -> OpenedEffect:
        pipeline = self.pipeline
        effect_id = entry.effect_id
        if request is None:
            request = pipeline.open(request_identity(tenant, thread, effect_id), entry.request)
        result = None
        if entry.result is not None:
            result = pipeline.open(result_identity(tenant, thread, effect_id), entry.result)
        return OpenedEffect(entry, request, result)

    def _effect_complete_op(
        self,
        tenant: str,
        thread: str,
        effect_id: str,
        token: int,
        outcome: str,
        result: Any,
        now: float,
    ) -> Operation[bool]:
        """Record an effect's result (or terminal error) under the claim ``token``."""

        def make() -> Operation[bool]:
            sealed = self.pipeline.seal(result_identity(tenant, thread, effect_id), result)
            return self._ops.effect_complete(  # type: ignore[no-any-return]
                tenant, thread, effect_id, token, outcome, sealed, now
            )

        return self._keyed(_Call(tenant, make, write=True, opens=False))

    def _effect_delete_op(
        self, tenant: str, thread: str, effect_id: str, token: int | None
    ) -> Operation[bool]:
        """Drop an entry (only the claim ``token`` holds, or any with None)."""
        return self._keyed(
            _Call(
                tenant,
                lambda: self._ops.effect_delete(tenant, thread, effect_id, token),
                keyed=False,
            )
        )

    def _effect_list_op(self, tenant: str, thread: str) -> Operation[list[OpenedEffect]]:
        """Every entry of a thread, opened."""

        def entries() -> Generator[Any, Any, list[OpenedEffect]]:
            stored = yield from self._ops.effect_list(tenant, thread).steps
            return [self._open_effect(tenant, thread, entry) for entry in stored]

        return self._keyed(_Call(tenant, lambda: Operation(entries())))

    def _effect_transaction(self) -> Any:
        """A transaction whose connection the effect may write through (Postgres only)."""
        raise ConfigurationError(
            f"transactional effects need a PostgreSQL saver; {type(self).__name__} has no "
            "transactions an effect can join"
        )

    def _aeffect_transaction(self) -> Any:
        """Async :meth:`_effect_transaction`."""
        return self._effect_transaction()

    def get_next_version(self, current: str | None, channel: None = None) -> str:  # type: ignore[override]
        return next_version(current)

    # ---- call resolution -------------------------------------------------------

    def _tenant_of(self, config: RunnableConfig | None, tenant_id: str | None = None) -> str:
        if tenant_id is not None:
            return str(tenant_id)
        resolved = self._tenant(config)
        return str(resolved) if resolved is not None else self.default_tenant

    def _key(self, config: RunnableConfig) -> ThreadKey:
        if not isinstance(config, dict):
            raise InvalidInputError(f"config must be a RunnableConfig dict, got {config!r}")
        key = thread_key(config, self._tenant_of(config), self.default_tenant)
        echo = "tenant_id" in (config.get("configurable") or {})
        return ThreadKey(key.tenant, key.thread, key.ns, echo)

    def _put_op(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Operation[Any]:
        key = self._key(config)
        parent = config["configurable"].get("checkpoint_id")
        if not self._ops.codec.chain_needs_parent(key, parent):
            return self._keyed(
                _Call(
                    key.tenant,
                    lambda: self._ops.put(key, config, checkpoint, metadata, new_versions),
                    write=True,
                    opens=False,
                )
            )

        # The hash chain needs the parent's digest and this process has not seen
        # the parent: read it first (the read fills the codec's chain cache). The
        # chain covers the parent's pending writes stored by then (LangGraph writes
        # a step's writes next to the next checkpoint; waiting for them cost 10-20%
        # of graph steps/s, so a write stored later is covered by its own tag only).
        def make() -> Operation[Any]:
            def steps() -> Generator[Any, Any, Any]:
                yield from self._ops.get_tuple(key, parent).steps
                put = self._ops.put(key, config, checkpoint, metadata, new_versions)
                return (yield from put.steps)

            return Operation(steps())

        return self._keyed(_Call(key.tenant, make, write=True))

    def _put_writes_op(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Operation[Any]:
        key = self._key(config)
        checkpoint_id = config["configurable"].get("checkpoint_id")
        if not checkpoint_id:
            raise InvalidInputError(
                "put_writes needs config['configurable']['checkpoint_id'] (the checkpoint "
                "the writes belong to)"
            )
        codec: CheckpointCodec = self._ops.codec
        cid = str(checkpoint_id)

        def make() -> Operation[Any]:
            op = self._ops.put_writes(key, cid, writes, str(task_id), task_path or "")
            if codec.chain_cache is None:
                return op  # type: ignore[no-any-return]

            def steps() -> Generator[Any, Any, Any]:
                result = yield from op.steps
                codec.wrote(key, cid, writes, str(task_id))  # the child's put covers them
                return result

            return Operation(steps())

        return self._keyed(_Call(key.tenant, make, write=True, opens=False))

    def _get_op(self, config: RunnableConfig) -> Operation[Any]:
        key = self._key(config)
        checkpoint_id = config["configurable"].get("checkpoint_id")
        return self._keyed(_Call(key.tenant, lambda: self._ops.get_tuple(key, checkpoint_id)))

    def _list_op(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Operation[Any]:
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise InvalidInputError(f"limit must be a non-negative integer, got {limit!r}")
        if filter is not None and not isinstance(filter, dict):
            raise InvalidInputError(
                f"filter must be a dict of metadata keys to values, got {filter!r}"
            )
        configurable = (config or {}).get("configurable") or {}
        thread = configurable.get("thread_id")
        ns = configurable.get("checkpoint_ns")
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        tenant = self._tenant_of(config)

        def make() -> Operation[Any]:
            # Keys the backend cannot match (encrypted metadata) are matched here,
            # on the opened metadata, and the limit is applied after them.
            server, client = self.pipeline.split_filter(tenant, filter)
            op = self._ops.list(
                tenant,
                None if thread is None else str(thread),
                None if ns is None else str(ns),
                configurable.get("checkpoint_id"),
                server,
                before_id,
                limit if client is None else None,
                "tenant_id" in configurable,
            )
            if client is None:
                return op  # type: ignore[no-any-return]
            wanted = normalize_filter(client)
            return Operation(
                select_emits(op.steps, lambda t: metadata_matches(_safe(t.metadata), wanted), limit)
            )

        return self._keyed(_Call(tenant, make))

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

    def _retention_for(self, tenant: str) -> Retention | None:
        """The retention policy of ``tenant`` under this saver's ``retention=``."""
        return resolve_retention(self.retention, tenant)

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
        """Copy a thread's effect-journal entries, sealed again for the target thread."""
        pipeline = self.pipeline
        stored = yield from self._ops.effect_list(tenant, source).steps
        for entry in stored:
            opened = self._open_effect(tenant, source, entry)
            effect_id = entry.effect_id
            request = pipeline.seal(request_identity(tenant, target, effect_id), opened.request)
            result = None
            if entry.result is not None:
                result = pipeline.seal(result_identity(tenant, target, effect_id), opened.result)
            copy = StoredEffect(
                effect_id,
                entry.state,
                entry.token,
                entry.attempt,
                entry.lease_until,
                request,
                entry.outcome,
                result,
                False,
                entry.created,
            )
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
    saver: DurableSaverBase, tenant_id: str | None, thread_id: str | None, page: int
) -> Generator[Any, Any, VerifyReport]:
    """Check every chain (or one tenant's, or one thread's); emit Broken and progress."""
    from ._core.audit import AuditCodec, check_thread

    chain = saver.integrity
    if chain is None:
        raise ConfigurationError(
            "verify needs the chain key: pass integrity= to the saver (or set LGD_INTEGRITY_KEY)"
        )
    ops = saver._make_ops(AuditCodec(chain))
    report = VerifyReport()
    started = time.monotonic()

    def one(tenant: str, thread: str) -> Generator[Any, Any, None]:
        listing = ops.list(tenant, thread, None, None, None, None, None, False)
        entries = yield from collect_emits(listing.steps)
        report.threads += 1
        report.checkpoints += len(entries)
        for broken in check_thread(chain, entries):
            report.broken += 1
            yield Emit(broken)
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
    report.seconds = time.monotonic() - started
    return report


def _verify_item(
    item: Any,
    on_broken: Callable[[Any], None] | None,
    progress: Callable[[VerifyReport], None] | None,
) -> None:
    if isinstance(item, VerifyReport):
        if progress is not None:
            progress(item)
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


def _safe(metadata: Any) -> dict[str, Any]:
    return json_safe_metadata(dict(metadata or {}))


class SyncSaverMethods(DurableSaverBase):
    """The public sync methods, for a saver that defines ``_run`` and ``_iterate``."""

    def _run(self, op: Operation[Any]) -> Any:
        raise NotImplementedError

    def _iterate(self, op: Operation[Any]) -> Iterator[Any]:
        raise NotImplementedError

    def rotate_keys(self, tenant_id: str | None = None) -> dict[str, int]:
        """Rewrap stored data keys under the keyring's active key (no payload is rewritten).

        Args:
            tenant_id: Only this tenant (default: every tenant with data keys).

        Returns:
            ``{"tenants": n, "rewrapped": n, "current": n}``.
        """
        return self._run(Operation(self._rotate_steps(tenant_id)))  # type: ignore[no-any-return]

    def shred_tenant(self, tenant_id: str) -> int:
        """Crypto-shred a tenant: delete its wrapped data keys; the number of versions."""
        return self._run(Operation(self._admin_keys().shred(self._ops, str(tenant_id))))  # type: ignore[no-any-return]

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._get_op(config))  # type: ignore[no-any-return]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self._iterate(self._list_op(config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._run(self._put_op(config, checkpoint, metadata, new_versions))  # type: ignore[no-any-return]

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._run(self._put_writes_op(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str, *, tenant_id: str | None = None) -> None:
        self._run(self._delete_thread_op(thread_id, tenant_id))

    def delete_for_runs(self, run_ids: Sequence[str], *, tenant_id: str | None = None) -> None:
        self._run(self._delete_for_runs_op(run_ids, tenant_id))

    def copy_thread(
        self, source_thread_id: str, target_thread_id: str, *, tenant_id: str | None = None
    ) -> None:
        self._run(self._copy_thread_op(source_thread_id, target_thread_id, tenant_id))

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        tenant_id: str | None = None,
    ) -> None:
        self._run(self._prune_op(thread_ids, strategy, tenant_id))

    def prune_expired(
        self,
        retention: Retention | None = None,
        *,
        tenant_id: str | None = None,
        dry_run: bool = False,
        max_seconds: float | None = None,
        now: float | None = None,
        batch: int = 500,
        throttle: float = DEFAULT_THROTTLE,
        progress: Callable[[PruneProgress], None] | None = None,
    ) -> PruneReport:
        """Remove (or trim) the threads that retention says have expired.

        Args:
            retention: The policy to apply; default: the saver's ``retention=``,
                else each thread's stored expiry (written under that setting).
            tenant_id: Only this tenant (default: every tenant).
            dry_run: Count what a run would remove; change nothing.
            max_seconds: Stop between batches after this long (the report
                says ``budget_exhausted``; a later run resumes).
            now: The time (Unix seconds) that decides expiry (default: now).
            batch: Threads per batch (one short transaction each where the
                backend has them).
            throttle: After each batch, rest this many times as long as the
                batch took, so writers keep the database's attention
                (0: flat out; 1: busy half the time).
            progress: Called after each batch.

        Returns:
            What was removed; ``locked`` when another pruner was running.
        """
        op = self._prune_expired_op(
            retention, tenant_id, dry_run, max_seconds, now, batch, throttle
        )
        return _collect_report(self._iterate(op), progress)

    def verify(
        self,
        *,
        tenant_id: str | None = None,
        thread_id: str | None = None,
        on_broken: Callable[[Any], None] | None = None,
        progress: Callable[[VerifyReport], None] | None = None,
        page: int = 200,
    ) -> VerifyReport:
        """Check the hash chain of stored threads (needs ``integrity=``).

        Every record's tag and every checkpoint's link to its parent (or to
        the tombstone a trim left) is checked, thread by thread, so memory
        stays bounded by the largest thread. No payload is decrypted.

        Args:
            tenant_id: Only this tenant (default: every tenant).
            thread_id: Only this thread (of ``tenant_id``, or the default tenant).
            on_broken: Called with each broken link
                (``langgraph_durable._core.audit.Broken``: tenant, thread, ns,
                checkpoint_id, reason).
            progress: Called with the running report after each thread.
            page: Threads read per page while walking the store.

        Returns:
            The counts; ``report.ok`` is False when a link is broken.
        """
        op = Operation(_verify_steps(self, tenant_id, thread_id, page))
        report = VerifyReport()
        for item in self._iterate(op):
            _verify_item(item, on_broken, progress)
            if isinstance(item, VerifyReport):
                report = item
        return report


class AsyncSaverMethods(DurableSaverBase):
    """The public async methods, for a saver that defines ``_arun`` and ``_aiterate``.

    The sync methods work from other threads (they run on the saver's event
    loop), not from the loop's own thread, where they would block forever.
    """

    loop: asyncio.AbstractEventLoop | None = None

    async def _arun(self, op: Operation[Any]) -> Any:
        raise NotImplementedError

    def _aiterate(self, op: Operation[Any]) -> AsyncIterator[Any]:
        raise NotImplementedError

    def _bind_loop(self) -> None:
        if self.loop is None:
            self.loop = asyncio.get_running_loop()

    async def arotate_keys(self, tenant_id: str | None = None) -> dict[str, int]:
        """Async :meth:`SyncSaverMethods.rotate_keys`."""
        self._bind_loop()
        return await self._arun(Operation(self._rotate_steps(tenant_id)))  # type: ignore[no-any-return]

    async def ashred_tenant(self, tenant_id: str) -> int:
        """Async :meth:`SyncSaverMethods.shred_tenant`."""
        self._bind_loop()
        return await self._arun(Operation(self._admin_keys().shred(self._ops, str(tenant_id))))  # type: ignore[no-any-return]

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self._bind_loop()
        return await self._arun(self._get_op(config))  # type: ignore[no-any-return]

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        self._bind_loop()
        async for item in self._aiterate(self._list_op(config, filter, before, limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._bind_loop()
        return await self._arun(self._put_op(config, checkpoint, metadata, new_versions))  # type: ignore[no-any-return]

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._bind_loop()
        await self._arun(self._put_writes_op(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str, *, tenant_id: str | None = None) -> None:
        await self._arun(self._delete_thread_op(thread_id, tenant_id))

    async def adelete_for_runs(
        self, run_ids: Sequence[str], *, tenant_id: str | None = None
    ) -> None:
        await self._arun(self._delete_for_runs_op(run_ids, tenant_id))

    async def acopy_thread(
        self, source_thread_id: str, target_thread_id: str, *, tenant_id: str | None = None
    ) -> None:
        await self._arun(self._copy_thread_op(source_thread_id, target_thread_id, tenant_id))

    async def aprune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        tenant_id: str | None = None,
    ) -> None:
        await self._arun(self._prune_op(thread_ids, strategy, tenant_id))

    async def aprune_expired(
        self,
        retention: Retention | None = None,
        *,
        tenant_id: str | None = None,
        dry_run: bool = False,
        max_seconds: float | None = None,
        now: float | None = None,
        batch: int = 500,
        throttle: float = DEFAULT_THROTTLE,
        progress: Callable[[PruneProgress], None] | None = None,
    ) -> PruneReport:
        """Async :meth:`SyncSaverMethods.prune_expired` (same arguments and result)."""
        op = self._prune_expired_op(
            retention, tenant_id, dry_run, max_seconds, now, batch, throttle
        )
        report: PruneReport | None = None
        async for item in self._aiterate(op):
            if isinstance(item, PruneReport):
                report = item
            elif progress is not None:
                progress(item)
        return _final(report)

    async def averify(
        self,
        *,
        tenant_id: str | None = None,
        thread_id: str | None = None,
        on_broken: Callable[[Any], None] | None = None,
        progress: Callable[[VerifyReport], None] | None = None,
        page: int = 200,
    ) -> VerifyReport:
        """Async :meth:`SyncSaverMethods.verify` (same arguments and result)."""
        op = Operation(_verify_steps(self, tenant_id, thread_id, page))
        report = VerifyReport()
        async for item in self._aiterate(op):
            _verify_item(item, on_broken, progress)
            if isinstance(item, VerifyReport):
                report = item
        return report

    # ---- sync access from other threads --------------------------------------

    def _call_on_loop(self, coro: Any) -> Any:
        loop = self.loop
        if loop is None or loop.is_closed():
            coro.close()
            raise InvalidInputError(
                f"{type(self).__name__}'s sync methods need the saver's event loop running in "
                "another thread; use the async methods (aget_tuple, alist, ...) instead"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise InvalidInputError(
                f"a sync method of {type(self).__name__} was called from its own event loop, "
                "which would block forever; await the async method instead"
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._call_on_loop(self.aget_tuple(config))  # type: ignore[no-any-return]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        yield from self._call_on_loop(collect())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._call_on_loop(self.aput(config, checkpoint, metadata, new_versions))  # type: ignore[no-any-return]

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._call_on_loop(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str, *, tenant_id: str | None = None) -> None:
        self._call_on_loop(self.adelete_thread(thread_id, tenant_id=tenant_id))

    def delete_for_runs(self, run_ids: Sequence[str], *, tenant_id: str | None = None) -> None:
        self._call_on_loop(self.adelete_for_runs(run_ids, tenant_id=tenant_id))

    def copy_thread(
        self, source_thread_id: str, target_thread_id: str, *, tenant_id: str | None = None
    ) -> None:
        self._call_on_loop(
            self.acopy_thread(source_thread_id, target_thread_id, tenant_id=tenant_id)
        )

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        tenant_id: str | None = None,
    ) -> None:
        self._call_on_loop(self.aprune(thread_ids, strategy=strategy, tenant_id=tenant_id))

    def prune_expired(
        self,
        retention: Retention | None = None,
        *,
        tenant_id: str | None = None,
        dry_run: bool = False,
        max_seconds: float | None = None,
        now: float | None = None,
        batch: int = 500,
        throttle: float = DEFAULT_THROTTLE,
        progress: Callable[[PruneProgress], None] | None = None,
    ) -> PruneReport:
        return self._call_on_loop(  # type: ignore[no-any-return]
            self.aprune_expired(
                retention,
                tenant_id=tenant_id,
                dry_run=dry_run,
                max_seconds=max_seconds,
                now=now,
                batch=batch,
                throttle=throttle,
                progress=progress,
            )
        )
