"""Setup, the stored retention policy, deletes, copies, pruning, data keys.

Pure (no boto3 import, no I/O, no clock but the injected ``now``).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Generator, Sequence
from typing import Any

from .._core.audit import trim_refused
from .._core.records import StoredDataKey
from .._core.retention import PruneRequest, Retention
from .._core.sansio import Sleep, operation
from ..errors import InvalidInputError, SchemaError, StorageError, StorageUnavailableError
from ._calls import ConditionFailedError, TableInUseError, TableNotFoundError
from ._chain import ChainOps
from ._deltas import DELTA_ATTRIBUTES
from ._effects import is_effect_sk
from ._items import (
    DATA_KEYS_MARK,
    HEAD_SK,
    HEADED,
    META_PK,
    RETENTION_SK,
    TTL_ATTRIBUTE,
    B,
    N,
    S,
    _is_live,
    _str,
    data_key_sk,
    data_keys_pk,
    data_keys_tenant,
    head_live,
    is_pointer_sk,
    parse_checkpoint_sk,
    pointer_sk,
    stored_data_key,
    thread_pk,
)
from ._objects import OBJECT_ATTRIBUTES, object_keys_of, retarget
from ._prune import Pruner, trim_breaks, trim_plan
from ._threads import Expiry


class AdminOps(ChainOps):
    """Setup, deletes, copies, pruning and the data keys of envelope encryption
    (and, from :class:`~._chain.ChainOps`, ``thread_page`` and trim tombstones)."""

    # ---- setup -------------------------------------------------------------------

    @operation
    def setup(self, create: bool, retention: str | None = None) -> Generator[Any, Any, list[str]]:
        """Create the table (and enable TTL) if asked, then check it.

        Args:
            create: Create a missing table and enable its TTL (else only check).
            retention: The saver's retention policy as JSON, stored for the
                command line (``meta`` item ``retention``); None stores nothing.

        Returns:
            What this call changed (e.g. ``["created table", "enabled TTL"]``).
        """
        done: list[str] = []
        table = self.table
        try:
            desc = yield from self._call("describe_table", {"TableName": table})
        except TableNotFoundError:
            if not create:
                raise TableNotFoundError(
                    f"DynamoDB table {table!r} does not exist: call setup() with "
                    "create_table=True, or create it with partition key 'pk' (S) and sort key "
                    "'sk' (S)"
                ) from None
            try:
                yield from self._call(
                    "create_table",
                    {
                        "TableName": table,
                        "KeySchema": [
                            {"AttributeName": "pk", "KeyType": "HASH"},
                            {"AttributeName": "sk", "KeyType": "RANGE"},
                        ],
                        "AttributeDefinitions": [
                            {"AttributeName": "pk", "AttributeType": "S"},
                            {"AttributeName": "sk", "AttributeType": "S"},
                        ],
                        "BillingMode": "PAY_PER_REQUEST",
                    },
                )
                done.append("created table")
            except TableInUseError:
                pass  # another process is creating it
            desc = yield from self._wait_active()
        status = desc["Table"].get("TableStatus")
        if status == "CREATING":
            desc = yield from self._wait_active()
        self._check_key_schema(desc["Table"])
        if self.ttl_needed:
            ttl = yield from self._call("describe_time_to_live", {"TableName": table})
            info = ttl.get("TimeToLiveDescription") or {}
            state, attribute = info.get("TimeToLiveStatus"), info.get("AttributeName")
            if attribute not in (None, TTL_ATTRIBUTE) and state in ("ENABLED", "ENABLING"):
                raise SchemaError(
                    f"table {table!r} has TTL on attribute {attribute!r}, but the saver stamps "
                    f"{TTL_ATTRIBUTE!r} (a table has one TTL attribute): use another table, or "
                    "disable that TTL first"
                )
            if state not in ("ENABLED", "ENABLING"):
                if not create:
                    raise SchemaError(
                        f"table {table!r} has TTL {state or 'DISABLED'}, but the saver was "
                        "given a retention policy that expires threads: enable TTL on "
                        f"attribute {TTL_ATTRIBUTE!r} (or call setup() with create_table=True, "
                        "which does)"
                    )
                if state == "DISABLING":
                    raise SchemaError(
                        f"table {table!r} is still disabling its TTL; DynamoDB allows enabling "
                        "it again about an hour later: retry setup() then"
                    )
                try:
                    yield from self._call(
                        "update_time_to_live",
                        {
                            "TableName": table,
                            "TimeToLiveSpecification": {
                                "Enabled": True,
                                "AttributeName": TTL_ATTRIBUTE,
                            },
                        },
                    )
                    done.append("enabled TTL")
                except StorageError:
                    # another process may have enabled it a moment ago
                    again = yield from self._call("describe_time_to_live", {"TableName": table})
                    info = again.get("TimeToLiveDescription") or {}
                    if info.get("AttributeName") != TTL_ATTRIBUTE or info.get(
                        "TimeToLiveStatus"
                    ) not in ("ENABLED", "ENABLING"):
                        raise
        if retention is not None:
            yield from self.retention_set(retention).steps
        return done

    @operation
    def retention_get(self) -> Generator[Any, Any, str | None]:
        """The retention policy ``setup()`` stored (JSON), or None: one GetItem."""
        resp = yield from self._call(
            "get_item",
            {
                "TableName": self.table,
                "Key": {"pk": S(META_PK), "sk": S(RETENTION_SK)},
                "ConsistentRead": True,
            },
        )
        return _str(resp.get("Item") or {}, "policy")

    @operation
    def retention_set(self, text: str) -> Generator[Any, Any, None]:
        """Store the table's retention policy (JSON): one PutItem."""
        item = {
            "pk": S(META_PK),
            "sk": S(RETENTION_SK),
            "policy": S(text),
            "ts": N(int(self.now())),
        }
        yield from self._call("put_item", {"TableName": self.table, "Item": item})
        return None

    def _wait_active(self) -> Generator[Any, Any, Any]:
        for _ in range(300):
            desc = yield from self._call("describe_table", {"TableName": self.table})
            if desc["Table"].get("TableStatus") == "ACTIVE":
                return desc
            yield Sleep(1.0)
        raise StorageUnavailableError(f"table {self.table!r} did not become ACTIVE in 5 minutes")

    def _check_key_schema(self, table: dict[str, Any]) -> None:
        keys = {k["AttributeName"]: k["KeyType"] for k in table.get("KeySchema", [])}
        types = {
            a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])
        }
        problems = []
        if keys.get("pk") != "HASH" or types.get("pk") != "S":
            problems.append("partition key must be 'pk' of type S")
        if keys.get("sk") != "RANGE" or types.get("sk") != "S":
            problems.append("sort key must be 'sk' of type S")
        if len(keys) != 2 and not problems:
            problems.append("key schema must be exactly pk (HASH) and sk (RANGE)")
        if problems:
            found = ", ".join(f"{n} ({k}, {types.get(n, '?')})" for n, k in keys.items())
            raise SchemaError(
                f"table {self.table!r} cannot hold checkpoints: its "
                + " and its ".join(problems)
                + f"; it has {found or 'no keys'}. Use another table name (setup() creates it)"
            )

    # ---- deletes, copies, pruning -------------------------------------------------

    @operation
    def delete_thread(self, tenant: str, thread_id: str) -> Generator[Any, Any, None]:
        """Delete every item of one thread (all namespaces), then its S3 objects."""
        self._forget_thread(tenant, thread_id)
        yield from self._delete_partition(thread_pk(tenant, thread_id))
        return None

    def _delete_partition(self, pk: str) -> Generator[Any, Any, None]:
        """Delete a thread's items, then the S3 objects they referenced.

        Only referenced objects: an object written for a checkpoint whose
        transaction has not committed yet is not one of them (the pruner
        deletes such objects once they are orphans).
        """
        items = yield from self._query_all(pk, None, ("pk", "sk", *OBJECT_ATTRIBUTES))
        keys = [i["sk"]["S"] for i in items]
        yield from self._delete_keys(pk, keys)
        yield from self._delete_objects([k for i in items for k in object_keys_of(i)])
        return None

    @operation
    def delete_for_runs(self, tenant: str, run_ids: Sequence[str]) -> Generator[Any, Any, int]:
        """Delete the checkpoints (and their writes) made by the given runs.

        A consistent Scan of the tenant's checkpoint items (DynamoDB has no
        index by run without a GSI); returns how many checkpoints went. A
        checkpoint that stays while its parent goes first gets a chain
        tombstone in its body, as in a ``keep_latest`` trim
        (:meth:`~._chain.ChainOps._tombstone_trim`), in every thread before
        anything is deleted (without the chain key, a chained survivor refuses
        the whole call with ``ChainKeyRequiredError``).
        """
        ids = {str(r) for r in run_ids}
        if not ids:
            return 0
        items = yield from self._scan_tenant(
            tenant, "c#", ("pk", "sk", "r", "p", *OBJECT_ATTRIBUTES)
        )
        doomed: set[tuple[str, str]] = set()
        for item in items:
            sk = item["sk"]["S"]
            if _str(item, "r") in ids and parse_checkpoint_sk(sk).kind == "pointer":
                doomed.add((item["pk"]["S"], sk))
        by_pk: dict[str, list[dict[str, Any]]] = {}  # what goes, per thread
        of_pk: dict[str, list[dict[str, Any]]] = {}  # every item, per thread
        stored_in: list[str] = []
        for item in items:
            pk, sk = item["pk"]["S"], item["sk"]["S"]
            of_pk.setdefault(pk, []).append(item)
            ik = parse_checkpoint_sk(sk)
            if (pk, pointer_sk(ik.ns, ik.checkpoint_id)) in doomed:
                by_pk.setdefault(pk, []).append(item)
                stored_in.extend(object_keys_of(item))
        for pk, gone in by_pk.items():
            yield from self._tombstone_trim(pk, of_pk[pk], gone)
        for pk, gone in by_pk.items():
            yield from self._delete_keys(pk, [i["sk"]["S"] for i in gone])
        # what of those checkpoints and writes went to S3 (blobs stay: they are shared)
        yield from self._delete_objects(stored_in)
        return len(doomed)

    @operation
    def copy_thread(self, tenant: str, source: str, target: str) -> Generator[Any, Any, None]:
        """Copy every checkpoint, blob, write and effect-journal entry of a thread to
        another thread id (entries the target has already are kept).

        Payloads offloaded to S3 are copied to the target's keys first (one
        CopyObject each), then the items, checkpoint pointers last. The
        target's live items are read first (one Query, keys only) and are
        neither overwritten nor have their S3 objects replaced: checkpoints
        stay append-only (BatchWriteItem has no condition; a copy racing other
        writes of the same keys to the target is not guarded).
        """
        if source == target:
            raise InvalidInputError("copy_thread: source and target thread ids are the same")
        src, dst = thread_pk(tenant, source), thread_pk(tenant, target)
        items = yield from self._query_all(src)
        now = self.now()
        head = next((i for i in items if i["sk"]["S"] == HEAD_SK), None)
        if head is not None and not head_live(head, now):
            return None  # the source thread expired or is being deleted
        exp = self._expiry(tenant)
        stamp = self._stamp(exp, now)
        kept = yield from self._query_all(dst, None, ("sk", TTL_ATTRIBUTE))
        present = {i["sk"]["S"] for i in kept if _is_live(i, now)}
        copies = []
        for item in items:
            sk = item["sk"]["S"]
            if sk == HEAD_SK or sk in present or not _is_live(item, now):
                continue
            copy = {k: v for k, v in item.items() if k not in (TTL_ATTRIBUTE, HEADED)}
            copy.update(stamp)
            copy["pk"] = S(dst)
            for name in OBJECT_ATTRIBUTES:
                if name in copy:
                    moved = retarget(self.object_prefix, copy[name]["S"], target)
                    yield from self._copy_object(copy[name]["S"], moved)
                    copy[name] = S(moved)
            copies.append(copy)
        if not copies:
            return None
        if exp is not None:
            yield from self._call(
                "put_item", {"TableName": self.table, "Item": self._head_item(dst, now, exp)}
            )
        entries = [c for c in copies if is_effect_sk(c["sk"]["S"])]
        copies = [c for c in copies if not is_effect_sk(c["sk"]["S"])]
        if entries:
            yield from self._copy_effects(dst, exp, entries, target)
        # payloads first, checkpoint pointers last
        copies.sort(key=lambda i: is_pointer_sk(i["sk"]["S"]))
        yield from self._batch_write([{"PutRequest": {"Item": c}} for c in copies])
        return None

    @operation
    def prune(
        self, tenant: str, thread_ids: Sequence[str], strategy: str
    ) -> Generator[Any, Any, None]:
        """Prune threads: ``keep_latest`` per namespace, or ``delete`` everything.

        ``keep_latest`` keeps each namespace's latest checkpoint and what it
        needs (:func:`trim_plan` with ``keep=1``: a DeltaChannel value's
        ancestors included, so the thread still resumes). With ``integrity=``,
        each kept checkpoint whose parent goes first gets a tombstone in its
        body (:meth:`~._chain.ChainOps._tombstone_trim`: one more BatchGetItem
        and one TransactWriteItems per thread), then the deletes follow; first
        the thread is checked as ``verify`` checks it, and a broken link in what
        would go raises ``IntegrityError`` (that thread is not trimmed; the
        threads before it in ``thread_ids`` are).
        """
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(
                f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'"
            )
        thread_ids = [str(t) for t in thread_ids]
        for thread_id in thread_ids:
            self._forget_thread(tenant, thread_id)
        if strategy == "delete":
            for thread_id in thread_ids:
                yield from self._delete_partition(thread_pk(tenant, thread_id))
            return None
        projection = ("pk", "sk", "mi", "refs", "fv", "p", "ch", *DELTA_ATTRIBUTES)
        for thread_id in thread_ids:
            pk = thread_pk(tenant, thread_id)
            items = yield from self._query_all(pk, None, (*projection, *OBJECT_ATTRIBUTES))
            doomed = trim_plan(items, 1)
            broken = yield from trim_breaks(self, pk, doomed)
            if broken:  # never sign tombstones over a link not verified
                raise trim_refused(broken)
            yield from self._tombstone_trim(pk, items, doomed)
            yield from self._delete_keys(pk, [i["sk"]["S"] for i in doomed])
            yield from self._delete_objects([k for i in doomed for k in object_keys_of(i)])
        return None

    @operation
    def prune_expired(
        self, request: PruneRequest, policy: Callable[[str], Retention | None] | None
    ) -> Generator[Any, Any, None]:
        """The pruner: remove (or trim) the threads retention says have expired.

        Emits a ``PruneProgress`` after each batch of threads and, last, one
        ``PruneReport``. See :class:`~langgraph_durable.dynamodb._prune.Pruner`.

        Args:
            request: The run (policy override, tenant, dry run, clock, budget, batch).
            policy: The policy of a tenant; None decides by each thread's
                stored expiry (its head's ``live_until`` / ``dies_at``).
        """
        yield from Pruner(self, request, policy).run()
        return None

    def _copy_effects(
        self,
        pk: str,
        exp: Expiry | None,
        entries: builtins.list[dict[str, Any]],
        target: str,
    ) -> Generator[Any, Any, None]:
        """Insert copied entries where the target has none (conditional Puts, in
        transactions of up to 100; an entry already there is kept)."""

        def build(now: float) -> builtins.list[builtins.list[dict[str, Any]]]:
            stamp = self._stamp(exp, now)
            return [[self._put_action({**e, **stamp}, insert_only=True)] for e in entries]

        what = f"{len(entries)} effect-journal entries of thread {target!r}"
        yield from self._write_groups(pk, exp, build, True, what, whole_limit=False)
        return None

    # ---- data keys (envelope encryption) ----------------------------------------

    @operation
    def data_keys(self, tenant: str) -> Generator[Any, Any, builtins.list[StoredDataKey]]:
        """Every stored data-key version of a tenant, oldest first, shredded ones included.

        A consistent Query of the tenant's key partition, all pages.
        """
        items = yield from self._query_all(data_keys_pk(tenant))
        return [stored_data_key(item) for item in items]

    @operation
    def add_data_key(self, tenant: str, key: StoredDataKey) -> Generator[Any, Any, bool]:
        """Store a new data-key version: a PutItem on condition it is not stored yet.

        Returns:
            False, writing nothing, when that version is already stored.
        """
        item = {
            "pk": S(data_keys_pk(tenant)),
            "sk": S(data_key_sk(key.version)),
            "key_id": S(key.key_id),
            "created": N(key.created),
        }
        if key.wrapped is not None:
            item["wrapped"] = B(key.wrapped)
        params = {**self._put_action(item, insert_only=True)["Put"]}
        try:
            yield from self._call("put_item", params)
        except ConditionFailedError:
            return False
        return True

    @operation
    def rewrap_data_key(
        self, tenant: str, version: int, old_wrapped: bytes, key_id: str, wrapped: bytes
    ) -> Generator[Any, Any, bool]:
        """Replace one version's wrapped key if it still is ``old_wrapped``.

        Returns:
            Whether it was replaced (False: rewrapped or shredded meanwhile).
        """
        params = self._data_key_update(
            tenant,
            version,
            "SET #w = :w, #k = :k, #t = :now",
            "#w = :old",
            {":w": B(wrapped), ":k": S(key_id), ":old": B(old_wrapped)},
            {"#t": "rotated_at"},
        )
        try:
            yield from self._call("update_item", params)
        except ConditionFailedError:
            return False
        return True

    @operation
    def shred_data_keys(self, tenant: str) -> Generator[Any, Any, int]:
        """Remove the wrapped key of every version of a tenant (kept as tombstones).

        Returns:
            How many versions still had their wrapped key.
        """
        items = yield from self._query_all(data_keys_pk(tenant), None, ("sk", "wrapped"))
        shredded = 0
        for item in items:
            if "wrapped" not in item:
                continue
            params = self._data_key_update(
                tenant,
                int(item["sk"]["S"]),
                "SET #k = :k, #t = :now REMOVE #w",
                "attribute_exists(#w)",
                {":k": S("")},
                {"#t": "shredded_at"},
            )
            try:
                yield from self._call("update_item", params)
            except ConditionFailedError:
                continue  # shredded meanwhile by another call
            shredded += 1
        return shredded

    @operation
    def data_key_tenants(self) -> Generator[Any, Any, builtins.list[str]]:
        """Every tenant with stored data keys (shredded ones included).

        A consistent, paged Scan of the table for the ``<tenant>##keys``
        partitions (an admin operation, for ``rotate_keys()`` without a
        tenant). A registry partition would spare the Scan, but every
        tenant's first data key would then write outside the tenant's
        ``<tenant>#`` key prefix, which ``dynamodb:LeadingKeys`` policies
        confine a tenant's role to, and any role allowed to write it could
        read every tenant's name.
        """
        items = yield from self._scan_pages(
            {
                "TableName": self.table,
                "ConsistentRead": True,
                "FilterExpression": "contains(#pk, :mark)",
                "ProjectionExpression": "#pk",
                "ExpressionAttributeNames": {"#pk": "pk"},
                "ExpressionAttributeValues": {":mark": S(DATA_KEYS_MARK)},
            }
        )
        pks = {item["pk"]["S"] for item in items}
        return sorted(data_keys_tenant(pk) for pk in pks if pk.endswith(DATA_KEYS_MARK))

    def _data_key_update(
        self,
        tenant: str,
        version: int,
        update: str,
        condition: str,
        values: dict[str, Any],
        names: dict[str, str],
    ) -> dict[str, Any]:
        """UpdateItem parameters for one data-key version (``:now``, ``#w``, ``#k`` bound)."""
        return {
            "TableName": self.table,
            "Key": {"pk": S(data_keys_pk(tenant)), "sk": S(data_key_sk(version))},
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#w": "wrapped", "#k": "key_id", **names},
            "ExpressionAttributeValues": {":now": N(self.now()), **values},
        }
