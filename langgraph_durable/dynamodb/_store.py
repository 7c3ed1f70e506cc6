"""The DynamoDB store's operations (pure: no boto3 import, no I/O).

Keys and item shapes are in ``_store_keys``; every call goes through the saver's
operations (``_calls.OpsBase``: retries of throttled calls, unprocessed batch
keys, transaction conflicts). A batch makes the fewest calls the API allows:

* reads: one BatchGetItem per 100 gets; for searches and listings one Query of
  the tenant's namespace index per covering prefix, then one Query of each live
  namespace's partition a search covers (all pages, consistent reads);
* writes: the items a batch puts, deletes and refreshes, with their index
  entries, in TransactWriteItems of up to 100 actions (an item and its entry
  change together); a TTL refresh whose item changed meanwhile is dropped.

Everything between the reads and the writes (filters, ordering, scoring,
limits, TTL) is decided by the pure core (``langgraph_durable._core.store``)
after the values are opened.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._core import store as core
from .._core.records import RecordIdentity, Sealed
from .._core.store_settings import DEFAULT_MAX_SEARCH_ITEMS, search_too_large
from ._calls import OpsBase, TransactionCanceledError, new_token
from ._items import TRANSACTION_ITEMS, N, S
from ._store_keys import (
    DROPPED,
    entry_name,
    entry_value,
    index_keys,
    index_pk,
    index_prefix,
    index_sk,
    item_pk,
    item_sk,
    item_update,
    key_of_entry,
    key_of_sk,
    live_counts,
    live_namespaces,
    namespace_of_index_sk,
    shard_of,
    stale_entries,
    stored_item,
)

__all__ = ["StoreOps", "Read", "DEFAULT_MAX_SEARCH_ITEMS", "FORGET_PASSES"]

#: Expired entries one update removes from an index item (its expressions stay < 4 KB).
_STALE_PER_UPDATE = 100
#: Bytes of one transaction's actions we allow (DynamoDB's limit is 4 MB).
_TRANSACTION_BUDGET = 3_800_000
#: Passes of ``forget_under`` (each one Query of the index, then the deletes): items put
#: under the prefix while it runs are found by the next pass.
FORGET_PASSES = 3

Open = Callable[[RecordIdentity, Sealed], Any]
Seal = Callable[[RecordIdentity, Any], Sealed]
Place = tuple[tuple[str, ...], str]


@dataclass
class Read:
    """What a batch's reads found.

    Attributes:
        found: The items the gets read, by (namespace, key).
        searched: The items under the searches' prefixes.
        namespaces: The namespaces holding live items (under the listings' prefixes).
        stamps: Each item's ``ua`` as stored (a refresh applies while it is unchanged).
        stale: Index entries of expired items, by index item key: (pk, sk) -> {name: value}.
    """

    found: dict[Place, core.StoredItem] = field(default_factory=dict)
    searched: list[core.StoredItem] = field(default_factory=list)
    namespaces: list[tuple[str, ...]] = field(default_factory=list)
    stamps: dict[Place, str] = field(default_factory=dict)
    stale: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Unit:
    """One item's change: its action and its index entry (None: removed)."""

    namespace: tuple[str, ...]
    key: str
    action: dict[str, Any]
    entry: dict[str, Any] | None
    size: int
    refresh: bool = False

    @property
    def group(self) -> tuple[tuple[str, ...], int]:
        return (self.namespace, shard_of(self.key))


@dataclass
class _Part:
    """Items of one index item to delete in one transaction, with that index item.

    Attributes:
        namespace: Their namespace.
        index_key: The index item's key, or None when none was read (only items
            stored with no entry: their index item is gone).
        keys: The item keys (each is deleted only while it exists: the counts are of
            items deleted, not of entries).
        entries: Of ``keys``, those the index item holds an entry for.
        expect: When this is the index item's last part, its ``ver`` as it will be
            (``None``: it has none), and it is deleted under that condition; else None
            and the entries of ``keys`` are removed (``ver`` raised).
        last: Whether this is the index item's last part.
        kept: The index item changed since it was read (a put meanwhile): its entries
            of ``keys`` are removed, the item itself stays.
    """

    namespace: tuple[str, ...]
    index_key: dict[str, Any] | None
    keys: list[str]
    entries: set[str]
    expect: int | None = None
    last: bool = True
    kept: bool = False


#: Keys of one index item a forget transaction deletes at most (with the index item: 100).
_PART_KEYS = TRANSACTION_ITEMS - 1


def _forget_transactions(parts: Sequence[_Part]) -> list[list[_Part]]:
    """Parts packed in transactions of at most 100 actions, in order (a part never split)."""
    out: list[list[_Part]] = []
    current: list[_Part] = []
    used = 0
    for part in parts:
        size = len(part.keys) + (part.index_key is not None)
        if current and used + size > TRANSACTION_ITEMS:
            out.append(current)
            current, used = [], 0
        current.append(part)
        used += size
    if current:
        out.append(current)
    return out


class StoreOps:
    """The store's reads and writes on the saver's table.

    Args:
        calls: The saver's operations (table, retries).
        max_search_items: Items one batch's searches may read at most.
    """

    def __init__(self, calls: OpsBase, max_search_items: int = DEFAULT_MAX_SEARCH_ITEMS) -> None:
        self.calls = calls
        self.max_search_items = max_search_items

    @property
    def table(self) -> str:
        return self.calls.table

    # ---- reads -------------------------------------------------------------------------

    def _index(
        self, tenant: str, prefixes: Iterable[tuple[str, ...]]
    ) -> Generator[Any, Any, list[dict[str, Any]]]:
        """The index items of every namespace under ``prefixes`` (one Query per covering one)."""
        items: list[dict[str, Any]] = []
        for prefix in core.covering(list(prefixes)):
            items += yield from self.calls._query_all(index_pk(tenant), index_prefix(prefix))
        return items

    def read(
        self, tenant: str, plan: core.BatchPlan, now: float, open: Open
    ) -> Generator[Any, Any, Read]:
        """Read what a batch's gets, searches and listings need, values opened."""
        out = Read()
        if plan.get_keys:
            keys = {(item_pk(tenant, ns), item_sk(k)): (ns, k) for ns, k in plan.get_keys}
            got = yield from self.calls._batch_get(list(keys))
            for where, place in keys.items():
                item = got.get(where)
                if item is not None:
                    out.found[place] = stored_item(tenant, place[0], item, open)
                    out.stamps[place] = item["ua"]["N"]
        heads = list(plan.search_prefixes)
        heads += [core.listing_prefix(plan.ops[i]) for i in plan.listings]  # type: ignore[arg-type]
        if not heads:
            return out
        index = yield from self._index(tenant, heads)
        live = live_namespaces(index, now)
        out.namespaces = live
        for item in index:
            stale = stale_entries(item, now)
            if stale:
                out.stale[(item["pk"]["S"], item["sk"]["S"])] = stale
        budget = self.max_search_items
        for ns in live:
            if not any(core.under(ns, p) for p in plan.search_prefixes):
                continue
            prefix = next(p for p in plan.search_prefixes if core.under(ns, p))
            items = yield from self._items(tenant, ns, budget, prefix)
            budget -= len(items)
            for item in items:
                stored = stored_item(tenant, ns, item, open)
                out.searched.append(stored)
                out.stamps[(ns, stored.key)] = item["ua"]["N"]
        return out

    def _items(
        self, tenant: str, ns: tuple[str, ...], budget: int, prefix: tuple[str, ...]
    ) -> Generator[Any, Any, list[dict[str, Any]]]:
        """Every item of a namespace (all pages), refused past ``budget`` items."""
        params = self.calls._query_params(item_pk(tenant, ns), None)
        items: list[dict[str, Any]] = []
        while True:
            resp = yield from self.calls._call("query", params)
            items.extend(resp.get("Items") or [])
            if len(items) > budget:
                raise search_too_large(prefix, None, self.max_search_items)
            last = resp.get("LastEvaluatedKey")
            if not last:
                return items
            params = {**params, "ExclusiveStartKey": last}

    # ---- writes ------------------------------------------------------------------------

    def _key(self, tenant: str, namespace: tuple[str, ...], key: str) -> dict[str, Any]:
        return {"pk": S(item_pk(tenant, namespace)), "sk": S(item_sk(key))}

    def _units(
        self,
        tenant: str,
        now: float,
        writes: Sequence[core.ItemWrite],
        refreshes: Sequence[core.Refresh],
        stamps: dict[Place, str],
        seal: Seal,
    ) -> list[_Unit]:
        units: list[_Unit] = []
        table = self.table
        for w in writes:
            key = self._key(tenant, w.namespace, w.key)
            if w.value is None:
                action = {"Delete": {"TableName": table, "Key": key}}
                units.append(_Unit(w.namespace, w.key, action, None, 300))
                continue
            update = item_update(tenant, w, now, seal)
            size = sum(len(v.get("B", b"")) for v in update["ExpressionAttributeValues"].values())
            action = {"Update": {"TableName": table, "Key": key, **update}}
            units.append(_Unit(w.namespace, w.key, action, entry_value(w.expires_at), size + 600))
        for r in refreshes:
            stamp = stamps.get((r.namespace, r.key))
            if stamp is None:
                continue
            action = {
                "Update": {
                    "TableName": table,
                    "Key": self._key(tenant, r.namespace, r.key),
                    "UpdateExpression": "SET #xp = :xp, #ea = :ea",
                    "ConditionExpression": "#ua = :ua AND attribute_exists(#tm)",
                    "ExpressionAttributeNames": {
                        "#xp": "xp",
                        "#ea": "expires_at",
                        "#ua": "ua",
                        "#tm": "tm",
                    },
                    "ExpressionAttributeValues": {
                        ":xp": N(r.expires_at),
                        ":ea": N(math.ceil(r.expires_at)),
                        ":ua": {"N": stamp},
                    },
                }
            }
            units.append(
                _Unit(r.namespace, r.key, action, entry_value(r.expires_at), 400, refresh=True)
            )
        return units

    def _index_action(
        self, tenant: str, group: tuple[tuple[str, ...], int], units: Sequence[_Unit]
    ) -> dict[str, Any]:
        """One index item's update: its entries set or removed, its version raised."""
        names = {"#ver": "ver"}
        values: dict[str, Any] = {":one": N(1)}
        sets, removes = [], []
        for i, unit in enumerate(units):
            names[f"#e{i}"] = entry_name(unit.key)
            if unit.entry is None:
                removes.append(f"#e{i}")
            else:
                values[f":e{i}"] = unit.entry
                sets.append(f"#e{i} = :e{i}")
        expr = ""
        if sets:
            expr += "SET " + ", ".join(sets) + " "
        if removes:
            expr += "REMOVE " + ", ".join(removes) + " "
        expr += "ADD #ver :one"
        return {
            "Update": {
                "TableName": self.table,
                "Key": {"pk": S(index_pk(tenant)), "sk": S(index_sk(*group))},
                "UpdateExpression": expr,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def _transactions(self, tenant: str, units: Sequence[_Unit]) -> list[list[_Unit]]:
        """Units packed in transactions: at most 100 actions (items plus one index item per
        group) and ~4 MB each, a group's units together where they fit."""
        ordered = sorted(units, key=lambda u: (u.namespace, shard_of(u.key), u.key))
        out: list[list[_Unit]] = []
        current: list[_Unit] = []
        groups: set[tuple[tuple[str, ...], int]] = set()
        size = 0
        for unit in ordered:
            extra = 1 + (unit.group not in groups)
            if current and (
                len(current) + len(groups) + extra > TRANSACTION_ITEMS
                or size + unit.size > _TRANSACTION_BUDGET
            ):
                out.append(current)
                current, groups, size = [], set(), 0
                extra = 2
            current.append(unit)
            groups.add(unit.group)
            size += unit.size
        if current:
            out.append(current)
        return out

    def _transact(self, tenant: str, units: list[_Unit]) -> Generator[Any, Any, int]:
        """Apply one transaction's units; refreshes (and sweeps) whose item changed
        meanwhile are dropped. The number of units applied."""
        while units:
            actions: list[dict[str, Any]] = []
            owners: list[_Unit | None] = []
            by_group: dict[tuple[tuple[str, ...], int], list[_Unit]] = {}
            for unit in units:
                actions.append(unit.action)
                owners.append(unit)
                by_group.setdefault(unit.group, []).append(unit)
            for group, members in by_group.items():
                actions.append(self._index_action(tenant, group, members))
                owners.append(None)
            params = {"TransactItems": actions, "ClientRequestToken": new_token()}
            try:
                yield from self.calls._call("transact_write_items", params)
                return len(units)
            except TransactionCanceledError as exc:
                failed = {
                    id(owners[i])
                    for i, reason in enumerate(exc.reasons)
                    if reason == "ConditionalCheckFailed" and i < len(owners)
                }
                gone = [u for u in units if id(u) in failed]
                if not gone or not all(u.refresh for u in gone):
                    raise
                units = [u for u in units if id(u) not in failed]
        return 0

    def write(
        self,
        tenant: str,
        now: float,
        writes: Sequence[core.ItemWrite],
        refreshes: Sequence[core.Refresh],
        stamps: dict[Place, str],
        seal: Seal,
    ) -> Generator[Any, Any, int]:
        """Apply a batch's puts, deletes and TTL refreshes; the number of transactions."""
        units = self._units(tenant, now, writes, refreshes, stamps, seal)
        transactions = self._transactions(tenant, units)
        for chunk in transactions:
            yield from self._transact(tenant, chunk)
        return len(transactions)

    def drop_stale(self, stale: dict[tuple[str, str], dict[str, Any]]) -> Generator[Any, Any, None]:
        """Remove the index entries of expired items a read saw, each index item's while
        they are as read (a put meanwhile keeps its entry): conditional updates, 100 per
        TransactWriteItems, a failed condition drops its index item until a later read.
        The index item counts them in ``dx``: until DynamoDB's TTL deletes their items,
        those are stored with no entry, which deleting the namespace looks for."""
        actions = []
        for (pk, sk), entries in stale.items():
            chosen = list(entries.items())[:_STALE_PER_UPDATE]
            names = {f"#e{i}": name for i, (name, _) in enumerate(chosen)}
            values = {f":e{i}": value for i, (_, value) in enumerate(chosen)}
            condition = " AND ".join(f"{n} = :{n[1:]}" for n in names)
            actions.append(
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": {"pk": S(pk), "sk": S(sk)},
                        # dx: their items may still be stored (see forget_under)
                        "UpdateExpression": "REMOVE " + ", ".join(names) + " ADD #dx :dx",
                        "ConditionExpression": condition,
                        "ExpressionAttributeNames": {**names, "#dx": DROPPED},
                        "ExpressionAttributeValues": {**values, ":dx": N(len(chosen))},
                    }
                }
            )
        yield from self.calls._transact_updates(actions)
        return None

    # ---- the sweep ---------------------------------------------------------------------

    def sweep(self, tenant: str, now: float) -> Generator[Any, Any, int]:
        """Delete the items of ``tenant`` expired at ``now``; the number swept.

        One Query of the tenant's namespace index (all pages) finds them, by the expiry
        each entry holds; each item goes with its entry, in transactions, on condition
        that it is still expired (or already gone: DynamoDB's TTL deleted it, its entry
        is swept and counted); an item put again meanwhile stays.
        """
        index = yield from self._index(tenant, [()])
        table = self.table
        units = []
        for item in index:
            ns = namespace_of_index_sk(item["sk"]["S"])
            for name in stale_entries(item, now):
                key = key_of_entry(name)
                assert key is not None
                action = {
                    "Delete": {
                        "TableName": table,
                        "Key": self._key(tenant, ns, key),
                        "ConditionExpression": "attribute_not_exists(#pk) OR #xp <= :now",
                        "ExpressionAttributeNames": {"#pk": "pk", "#xp": "xp"},
                        "ExpressionAttributeValues": {":now": N(now)},
                    }
                }
                # dropped, as a refresh is, when its condition fails (put again meanwhile)
                units.append(_Unit(ns, key, action, None, 300, refresh=True))
        swept = 0
        for chunk in self._transactions(tenant, units):
            swept += yield from self._transact(tenant, chunk)
        return swept

    # ---- forgetting: every item under a prefix, counted -------------------------------

    def count_under(
        self, tenant: str, prefix: tuple[str, ...], now: float
    ) -> Generator[Any, Any, dict[tuple[str, ...], int]]:
        """The live items of ``tenant`` under ``prefix`` (``()``: all), per namespace, from
        the namespace index alone: one paged Query, no item read or opened."""
        index = yield from self._index(tenant, [prefix])
        return live_counts(index, now)

    def forget_under(
        self,
        tenant: str,
        prefix: tuple[str, ...],
        counts: dict[tuple[str, ...], int] | None = None,
        passes: int = FORGET_PASSES,
    ) -> Generator[Any, Any, dict[tuple[str, ...], int]]:
        """Delete every item of ``tenant`` under ``prefix`` (``()``: all) and the index
        items of their namespaces; the items deleted per namespace.

        A pass is one paged Query of the tenant's namespace index under the prefix (every
        stored key has its entry there, written with it; a namespace whose index items say
        a read dropped entries of expired items, ``dx``, also has its partition read, as
        those items may still be stored), then TransactWriteItems of up to 100 actions:
        the items, each deleted only while it exists (an entry whose item DynamoDB's TTL
        deleted counts nothing), with their index item, deleted while its ``ver`` is as
        read (a put meanwhile keeps it: only the entries read are removed). Passes repeat
        (at most ``passes``) until the Query finds nothing: items put meanwhile go too.

        Args:
            tenant: The tenant.
            prefix: The namespace prefix.
            counts: Filled as each transaction is applied (so a failure still tells
                what was deleted before it).
            passes: Passes at most.
        """
        counts = {} if counts is None else counts
        for _ in range(passes):
            index = yield from self._index(tenant, [prefix])
            if not index:
                break
            parts = yield from self._forget_parts(tenant, index)
            for chunk in _forget_transactions(parts):
                yield from self._forget_transaction(tenant, chunk)
                for part in chunk:
                    if part.keys:
                        counts[part.namespace] = counts.get(part.namespace, 0) + len(part.keys)
        return counts

    def _forget_parts(
        self, tenant: str, index: list[dict[str, Any]]
    ) -> Generator[Any, Any, list[_Part]]:
        """What a pass deletes, per index item (split in parts of at most 99 keys)."""
        groups: dict[tuple[tuple[str, ...], int], _Part] = {}
        dropped: set[tuple[str, ...]] = set()
        versions: dict[tuple[tuple[str, ...], int], int | None] = {}
        for item in index:
            ns = namespace_of_index_sk(item["sk"]["S"])
            shard = int(item["sk"]["S"].rsplit("!", 1)[1], 16)
            keys = index_keys(item)
            groups[(ns, shard)] = _Part(ns, {"pk": item["pk"], "sk": item["sk"]}, keys, set(keys))
            versions[(ns, shard)] = int(item["ver"]["N"]) if "ver" in item else None
            if DROPPED in item:
                dropped.add(ns)
        for ns in sorted(dropped):  # items whose entries a read dropped: their partition
            stored = yield from self.calls._query_all(item_pk(tenant, ns), projection=("sk",))
            for found in stored:
                key = key_of_sk(found["sk"]["S"])
                group = groups.setdefault((ns, shard_of(key)), _Part(ns, None, [], set()))
                if key not in group.entries:
                    group.keys.append(key)
        parts: list[_Part] = []
        for where, group in sorted(groups.items()):
            keys = group.keys
            pieces = [keys[i : i + _PART_KEYS] for i in range(0, len(keys), _PART_KEYS)] or [[]]
            version = versions.get(where)
            for n, piece in enumerate(pieces):
                last = n == len(pieces) - 1
                expect = None
                if last and group.index_key is not None:
                    expect = (version or 0) + n if (version is not None or n) else None
                parts.append(
                    _Part(
                        group.namespace,
                        group.index_key,
                        piece,
                        group.entries & set(piece),
                        expect,
                        last,
                    )
                )
        return parts

    def _forget_actions(
        self, tenant: str, chunk: Sequence[_Part]
    ) -> tuple[list[dict[str, Any]], list[tuple[_Part, str | None]]]:
        """One transaction's actions, and per action its part and key (None: the index item)."""
        actions: list[dict[str, Any]] = []
        owners: list[tuple[_Part, str | None]] = []
        for part in chunk:
            for key in part.keys:
                actions.append(
                    {
                        "Delete": {
                            "TableName": self.table,
                            "Key": self._key(tenant, part.namespace, key),
                            "ConditionExpression": "attribute_exists(#sk)",
                            "ExpressionAttributeNames": {"#sk": "sk"},
                        }
                    }
                )
                owners.append((part, key))
            if part.index_key is None:
                continue
            owners.append((part, None))
            if part.last and not part.kept:
                names = {"#ver": "ver"}
                if part.expect is None:
                    condition: dict[str, Any] = {
                        "ConditionExpression": "attribute_not_exists(#ver)"
                    }
                else:
                    condition = {
                        "ConditionExpression": "#ver = :ver",
                        "ExpressionAttributeValues": {":ver": N(part.expect)},
                    }
                actions.append(
                    {
                        "Delete": {
                            "TableName": self.table,
                            "Key": part.index_key,
                            "ExpressionAttributeNames": names,
                            **condition,
                        }
                    }
                )
                continue
            entries = sorted(part.entries)
            names = {"#ver": "ver", **{f"#e{i}": entry_name(k) for i, k in enumerate(entries)}}
            expr = (
                "REMOVE " + ", ".join(list(names)[1:]) + " " if entries else ""
            ) + "ADD #ver :one"
            actions.append(
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": part.index_key,
                        "UpdateExpression": expr,
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": {":one": N(1)},
                    }
                }
            )
        return actions, owners

    def _forget_transaction(self, tenant: str, chunk: Sequence[_Part]) -> Generator[Any, Any, None]:
        """Apply one transaction of a pass: items already gone are dropped from it (and
        from the counts), an index item changed meanwhile is kept (its entries read go)."""
        while True:
            actions, owners = self._forget_actions(tenant, chunk)
            if not actions:
                return None
            params = {"TransactItems": actions, "ClientRequestToken": new_token()}
            try:
                yield from self.calls._call("transact_write_items", params)
                return None
            except TransactionCanceledError as exc:
                failed = [
                    owners[i]
                    for i, reason in enumerate(exc.reasons)
                    if reason == "ConditionalCheckFailed" and i < len(owners)
                ]
                changed = False
                for part, key in failed:
                    if key is None and not part.kept:
                        part.kept = changed = True
                    elif key is not None and key in part.keys:
                        part.keys.remove(key)
                        part.entries.discard(key)
                        changed = True
                if not changed:  # no condition of ours failed: not ours to drop
                    raise

    # ---- deleting a namespace --------------------------------------------------------

    def delete_namespace(self, tenant: str, prefix: tuple[str, ...]) -> Generator[Any, Any, int]:
        """Delete every item of ``tenant`` under ``prefix``, their index entries and the
        index items left empty (one pass of :meth:`forget_under`); the number of items
        deleted."""
        counts = yield from self.forget_under(tenant, prefix, passes=1)
        return sum(counts.values())
