"""The saver base: settings, the record pipeline, data keys, and call resolution.

:class:`DurableSaverBase` turns a saver call (``put``, ``get_tuple``, ``list``,
the effect journal's calls, ...) into the backend's sans-IO operation: it
resolves the tenant and thread, checks the arguments, builds the operation with
the backend's ops object (``_make_ops``), and puts the loading of the tenant's
data keys in front of it when the call needs them. ``_saver_admin`` adds the
admin calls; ``_saver`` the public sync and async methods that hand each
operation to the driver.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ._core.codec import (
    CheckpointCodec,
    ThreadKey,
    json_safe_metadata,
    tenant_from_config,
    thread_key,
)
from ._core.effects import (
    CLAIMED,
    DONE,
    StoredEffect,
    claim_problem,
    decide,
    done_entry,
    fresh_claim,
    request_identity,
    state_identity,
    taken_over,
)
from ._core.filters import metadata_matches, normalize_filter
from ._core.records import Sealed
from ._core.retention import (
    Retention,
    RetentionPolicy,
    check_retention,
    resolve_retention,
)
from ._core.sansio import Operation, Sleep, select_emits
from ._core.versions import next_version
from .errors import (
    ConfigurationError,
    CorruptRecordError,
    DecryptionError,
    IntegrityError,
    InvalidInputError,
    StorageError,
)
from .protect.allowlist import AllowlistSerializer, collect_schema_allowlists
from .protect.keys import KeyManager, KeyMissing
from .protect.pipeline import IdentityPipeline

if TYPE_CHECKING:
    from .protect.encryption import Encryption
    from .protect.redaction import Redaction

__all__ = ["DurableSaverBase", "TenantResolver", "OpenedEffect"]

TenantResolver = Callable[[RunnableConfig | None], "str | None"]

# Attempts at a call that keeps finding data-key versions it has not unwrapped.
_KEY_ATTEMPTS = 8
# Seconds between looks while another call loads the same tenant's keys.
_LOAD_WAIT = 0.002
# Clones kept per saver by with_allowlist (one per distinct graph schema set).
_CLONES = 64

# Compiled graphs hand their schema classes to the saver's with_allowlist (the
# default serializer rebuilds only allowlisted types): see protect/allowlist.py.
collect_schema_allowlists()
# Attempts at taking an expired effect claim over while others change the entry.
_TAKEOVER_ATTEMPTS = 5


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


_NO_REQUEST = Sealed("", b"")


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
        # Reads rebuild only allowlisted types unless a serializer is given (used as given).
        BaseCheckpointSaver.__init__(
            self, serde=serde if serde is not None else AllowlistSerializer()
        )
        self._clones: dict[frozenset[Any], Any] = {}
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

    def _build_ops(self, like: CheckpointCodec | None = None) -> None:
        """Build the record pipeline and the backend's operations from the settings.

        Args:
            like: The codec of the saver this one is a ``with_allowlist`` clone of:
                the clone shares what the process learned of the store (delta
                chains, the hash chain's parents) with it.
        """
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
        codec = CheckpointCodec(self.pipeline, self._delta_chain())
        if like is not None:
            codec.deltas = like.deltas
            codec.chain_cache = like.chain_cache
        self._ops = self._make_ops(codec)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> Any:
        """A clone whose serializer also rebuilds ``extra_allowlist`` (a graph's schema classes).

        ``StateGraph.compile`` calls it. The clone shares the connection, the data
        keys and the process's knowledge of the store with this saver; clones are
        kept per allowlist, so running a graph again makes none. A serializer that
        is not LangGraph's (given as ``serde=``) is used as given: the saver itself
        is returned.
        """
        if not isinstance(self.serde, JsonPlusSerializer):
            return self
        wanted = frozenset(e if isinstance(e, type) else tuple(e) for e in extra_allowlist)
        clone = self._clones.get(wanted)
        if clone is not None:
            return clone
        clone = super().with_allowlist(wanted)
        if clone is not self:
            derived = cast(DurableSaverBase, clone)
            derived._clones = {}
            derived._build_ops(self._ops.codec)
        if len(self._clones) >= _CLONES:
            self._clones.pop(next(iter(self._clones)))
        self._clones[wanted] = clone
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
        """Claim the effect derived from ``material`` (or find its entry), opened.

        A first claim is one round trip and writes the claim's sealed state
        record. An entry found stored is opened and checked first (its state
        record binds its clear fields, see ``state_identity``); with
        ``takeover``, an expired claim is then taken over by a second round
        trip, conditioned on the token just read, that seals the new claim.
        """

        def claim() -> Generator[Any, Any, OpenedEffect]:
            pipeline = self.pipeline
            effect_id = pipeline.effect_id(tenant, material)
            sealed = pipeline.seal(request_identity(tenant, thread, effect_id), request)
            fresh = fresh_claim(effect_id, sealed, lease_until, now)
            state = pipeline.seal(state_identity(tenant, thread, fresh), None)
            for _ in range(_TAKEOVER_ATTEMPTS):
                entry = yield from self._ops.effect_claim(
                    tenant, thread, effect_id, sealed, lease_until, now, False, state
                ).steps
                if entry.won:
                    return OpenedEffect(entry, request)
                opened = self._open_effect(tenant, thread, entry)
                if decide(entry, now, takeover).action != "takeover":
                    return opened
                claim = taken_over(entry, lease_until)
                sealed_claim = pipeline.seal(state_identity(tenant, thread, claim), None)
                won = yield from self._ops.effect_takeover(
                    tenant, thread, effect_id, entry.token, sealed_claim, lease_until, now
                ).steps
                if won is not None:
                    return OpenedEffect(won, opened.request)
            raise StorageError(
                f"effect {effect_id!r} of thread {thread!r} could not be taken over in "
                f"{_TAKEOVER_ATTEMPTS} attempts (its entry keeps changing)"
            )

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

    def _journal_altered(self, thread: str, effect_id: str, problem: str) -> Exception:
        """The error for a journal entry whose shape shows it was altered (the mode's)."""
        message = f"effect-journal entry {effect_id!r} of thread {thread!r} was altered: {problem}"
        if self.integrity is not None:
            return IntegrityError(message)
        if self.encryption is not None:
            return DecryptionError(message)
        return CorruptRecordError(message)

    def _open_effect(
        self, tenant: str, thread: str, entry: StoredEffect, request: Any = None
    ) -> OpenedEffect:
        """Check an entry's shape, open its request and its state record (which only
        opens while the entry's clear fields are as written), and its result if done."""
        pipeline = self.pipeline
        effect_id = entry.effect_id
        problem = claim_problem(entry)
        if problem is not None:
            raise self._journal_altered(thread, effect_id, problem)
        assert entry.result is not None
        if request is None:
            request = pipeline.open(request_identity(tenant, thread, effect_id), entry.request)
        value = pipeline.open(state_identity(tenant, thread, entry), entry.result)
        if entry.state == CLAIMED and value is not None:
            raise self._journal_altered(thread, effect_id, "a claim carries a result")
        return OpenedEffect(entry, request, value)

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
        """Record an effect's result (or terminal error) under the claim ``token``: the
        record replaces the claim's, sealed under the outcome and the token."""

        def make() -> Operation[bool]:
            claim = StoredEffect(effect_id, CLAIMED, token, token, 0.0, _NO_REQUEST)
            done = done_entry(claim, token, outcome)
            sealed = self.pipeline.seal(state_identity(tenant, thread, done), result)
            return self._ops.effect_complete(  # type: ignore[no-any-return]
                tenant, thread, effect_id, token, outcome, sealed, now
            )

        return self._keyed(_Call(tenant, make, write=True, opens=False))

    def _reseal_effect(
        self, tenant: str, source: str, target: str, entry: StoredEffect
    ) -> StoredEffect:
        """``entry`` of thread ``source`` opened, checked and sealed again for ``target``."""
        opened = self._open_effect(tenant, source, entry)
        effect_id = entry.effect_id
        pipeline = self.pipeline
        request = pipeline.seal(request_identity(tenant, target, effect_id), opened.request)
        copy = StoredEffect(
            effect_id,
            entry.state,
            entry.token,
            entry.attempt,
            entry.lease_until,
            request,
            entry.outcome,
            None,
            False,
            entry.created,
        )
        value = opened.result if entry.state == DONE else None
        state = pipeline.seal(state_identity(tenant, target, copy), value)
        return dataclasses.replace(copy, result=state)

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

    def _retention_for(self, tenant: str) -> Retention | None:
        """The retention policy of ``tenant`` under this saver's ``retention=``."""
        return resolve_retention(self.retention, tenant)


def _safe(metadata: Any) -> dict[str, Any]:
    return json_safe_metadata(dict(metadata or {}))
