"""The DynamoDB store's keys and item shapes (pure: no boto3 import, no I/O).

The store lives in the saver's table (partition key ``pk``, sort key ``sk``, TTL
attribute ``expires_at``), in partitions no thread, data-key or table-wide item
uses: an escaped tenant (``_items.enc``: no ``#`` in it) followed by ``##``,
which no thread's partition key holds (it has exactly one ``#``). Namespace
labels are escaped the same way and each is followed by ``#``, so a (tenant,
namespace) pair maps to one key and back, and no crafted label can reach another
tenant's or another namespace's items:

* ``<tenant>##s#<l1>#<l2>#...`` one partition per namespace: its items, sort key
  ``k#<key>``, with the sealed value (``vt``, ``v``) and embeddings (``wt``,
  ``w``), ``ca`` / ``ua`` (created / updated, Unix seconds), ``tm`` (the TTL in
  minutes it was put with), ``xp`` (when it expires, exactly) and
  ``expires_at`` (the same, whole seconds up: the table's native TTL deletes it
  some time after; reads never return it once ``xp`` has passed);
* ``<tenant>##n`` the tenant's namespace index: per namespace a few items
  (``n#<l1>#<l2>#...!<shard>``, one per shard of its keys) with one attribute
  per stored key (``k<key>``: its expiry, ``-1`` for never). A listing or the
  namespaces a search reads are one Query of that partition (``begins_with`` on
  the prefix), never a Scan; an item and its index entry change in one
  transaction, so a namespace is listed exactly while one of its items lives.
  An index item from which a read dropped the entries of expired items carries
  ``dx`` (how many it dropped): those items may still be stored until DynamoDB's
  TTL deletes them, so deleting the namespace reads its partition too.

The index sort keys start with ``n#`` and the item sort keys with ``k#``, which no
saver scan (``c#``, ``b#``, ``e#``, ``h``) selects.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

from .._core import store as core
from .._core.records import Sealed
from ..errors import CorruptRecordError, InvalidInputError
from ._items import ITEM_LIMIT, PK_LIMIT, SK_LIMIT, B, N, S, dec, enc, item_size

__all__ = [
    "SHARDS",
    "NEVER",
    "item_pk",
    "item_sk",
    "index_pk",
    "index_sk",
    "index_prefix",
    "namespace_of_index_sk",
    "shard_of",
    "entry_name",
    "key_of_entry",
    "live_namespaces",
    "stale_entries",
    "stored_item",
    "item_update",
    "key_of_sk",
    "entry_value",
    "live_entries",
    "DROPPED",
    "index_keys",
    "live_counts",
]

#: Index items per namespace (a key's entry goes to one, by a hash of the key). A
#: namespace's entries are spread over this many items of at most 400 KB each; and
#: a write costs write units for the size of the index item it changes, which the
#: shards keep small (a namespace of 10,000 keys: ~160 entries, ~8 KB per item).
SHARDS = 64
#: The index entry of an item that never expires.
NEVER = -1
_ITEM_MARK = "##s#"
_INDEX_MARK = "##n"
_ITEM_SK = "k#"
_INDEX_SK = "n#"
_SHARD_MARK = "!"  # escaped labels hold no "!" (enc escapes every character up to "#")
_ENTRY = "k"
#: The index item attribute counting the entries of expired items a read dropped.
DROPPED = "dx"


def _labels(namespace: Iterable[str]) -> str:
    return "".join(enc(label) + "#" for label in namespace)


def item_pk(tenant: str, namespace: tuple[str, ...]) -> str:
    """The partition of one namespace's items."""
    pk = enc(tenant) + _ITEM_MARK + _labels(namespace)
    if len(pk.encode("utf-8")) > PK_LIMIT:
        raise InvalidInputError(
            f"namespace {namespace!r} is too long for a DynamoDB partition key "
            f"({len(pk.encode())} bytes with the tenant, escaped; at most {PK_LIMIT})"
        )
    return pk


def item_sk(key: str) -> str:
    """The sort key of one item in its namespace's partition."""
    sk = _ITEM_SK + key
    if len(sk.encode("utf-8")) > SK_LIMIT:
        raise InvalidInputError(
            f"store key {key[:40]!r}... is too long for DynamoDB "
            f"(at most {SK_LIMIT - len(_ITEM_SK)} bytes)"
        )
    return sk


def key_of_sk(sk: str) -> str:
    """The key of an item's sort key."""
    if not sk.startswith(_ITEM_SK):
        raise CorruptRecordError(f"store item sort key {sk!r} does not start with {_ITEM_SK!r}")
    return sk[len(_ITEM_SK) :]


def index_pk(tenant: str) -> str:
    """The partition of a tenant's namespace index."""
    return enc(tenant) + _INDEX_MARK


def shard_of(key: str) -> int:
    """The index shard of a key (stable across processes)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()[0] % SHARDS


def index_sk(namespace: tuple[str, ...], shard: int) -> str:
    """The sort key of one index shard of a namespace."""
    sk = f"{_INDEX_SK}{_labels(namespace)}{_SHARD_MARK}{shard:x}"
    if len(sk.encode("utf-8")) > SK_LIMIT:
        raise InvalidInputError(
            f"namespace {namespace!r} is too long for the DynamoDB store's namespace index "
            f"({len(sk.encode())} bytes escaped; at most {SK_LIMIT - 6})"
        )
    return sk


def index_prefix(prefix: tuple[str, ...]) -> str:
    """The ``begins_with`` of the index items of every namespace under ``prefix``
    (``prefix`` itself included; ``n#`` for every namespace)."""
    return _INDEX_SK + _labels(prefix)


def namespace_of_index_sk(sk: str) -> tuple[str, ...]:
    """The namespace of an index item's sort key."""
    if not sk.startswith(_INDEX_SK) or _SHARD_MARK not in sk:
        raise CorruptRecordError(f"store index sort key {sk!r} is not n#<labels>!<shard>")
    labels = sk[len(_INDEX_SK) : sk.rindex(_SHARD_MARK)]
    return tuple(dec(label) for label in labels.split("#")[:-1])


def entry_name(key: str) -> str:
    """The index attribute of a key (its expiry, :data:`NEVER` for none)."""
    return _ENTRY + key


def key_of_entry(name: str) -> str | None:
    """The key of an index attribute, or None for the item's own attributes."""
    if name in ("pk", "sk") or not name.startswith(_ENTRY):
        return None
    return name[len(_ENTRY) :]


def entry_value(expiry: float | None) -> dict[str, Any]:
    """An index entry's attribute value."""
    return N(NEVER) if expiry is None else N(expiry)


def live_entries(item: Mapping[str, Any], now: float) -> list[str]:
    """The keys of an index item whose entries say they live at ``now``."""
    out = []
    for name, value in item.items():
        key = key_of_entry(name)
        if key is None:
            continue
        expiry = float(value["N"])
        if expiry == NEVER or core.is_live(expiry, now):
            out.append(key)
    return out


def stale_entries(item: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The entries of an index item whose items have expired at ``now`` (name: value)."""
    out = {}
    for name, value in item.items():
        if key_of_entry(name) is None:
            continue
        expiry = float(value["N"])
        if expiry != NEVER and not core.is_live(expiry, now):
            out[name] = value
    return out


def live_namespaces(index_items: Iterable[Mapping[str, Any]], now: float) -> list[tuple[str, ...]]:
    """The namespaces whose index items hold an entry that lives at ``now``, sorted."""
    found: set[tuple[str, ...]] = set()
    for item in index_items:
        ns = namespace_of_index_sk(item["sk"]["S"])
        if ns not in found and live_entries(item, now):
            found.add(ns)
    return sorted(found)


def index_keys(item: Mapping[str, Any]) -> list[str]:
    """The keys an index item holds entries for, live or not."""
    return [key for key in map(key_of_entry, item) if key is not None]


def live_counts(index_items: Iterable[Mapping[str, Any]], now: float) -> dict[tuple[str, ...], int]:
    """Per namespace the entries that live at ``now`` (an item's entry is written with it:
    the live items), for the namespaces holding any."""
    counts: dict[tuple[str, ...], int] = {}
    for item in index_items:
        live = len(live_entries(item, now))
        if live:
            ns = namespace_of_index_sk(item["sk"]["S"])
            counts[ns] = counts.get(ns, 0) + live
    return counts


# ---- values ------------------------------------------------------------------------


def _number(item: Mapping[str, Any], name: str) -> float | None:
    value = item.get(name)
    if value is None:
        return None
    try:
        return float(value["N"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptRecordError(f"store item attribute {name!r} is not a number") from exc


def _sealed(item: Mapping[str, Any], type_name: str, data_name: str) -> Sealed | None:
    if data_name not in item:
        return None
    try:
        return Sealed(str(item[type_name]["S"]), bytes(item[data_name]["B"]))
    except (KeyError, TypeError) as exc:
        raise CorruptRecordError(
            f"store item attributes {type_name!r} / {data_name!r} are malformed"
        ) from exc


def stored_item(
    tenant: str, namespace: tuple[str, ...], item: Mapping[str, Any], open: Any
) -> core.StoredItem:
    """One item of a namespace's partition, its value and embeddings opened."""
    key = key_of_sk(item["sk"]["S"])
    ttl = _number(item, "tm")
    sealed = _sealed(item, "vt", "v")
    created, updated = _number(item, "ca"), _number(item, "ua")
    if sealed is None or created is None or updated is None:
        raise CorruptRecordError(f"store item {key!r} of {namespace!r} has no value or times")
    sealed_vectors = _sealed(item, "wt", "w")
    identity = core.item_identity(
        tenant, core.ns_text(namespace), key, ttl, updated, sealed_vectors is not None
    )
    value = open(identity, sealed)
    if not isinstance(value, dict):
        raise CorruptRecordError(
            f"store item {key!r} of namespace {namespace!r} (tenant {tenant!r}) "
            "does not hold a dict"
        )
    vectors: Mapping[str, Any] = {}
    if sealed_vectors is not None:
        vectors = open(
            core.vectors_identity(tenant, core.ns_text(namespace), key, updated), sealed_vectors
        )
    return core.StoredItem(
        namespace,
        key,
        value,
        created,
        updated,
        _number(item, "xp"),
        ttl,
        {str(p): [float(x) for x in v] for p, v in vectors.items()},
    )


def item_update(tenant: str, write: core.ItemWrite, now: float, seal: Any) -> dict[str, Any]:
    """The UpdateItem parameters (no table, no key) that store a put's item.

    An update, not a Put: ``ca`` of an item put again is kept.

    Raises:
        InvalidInputError: The item would exceed DynamoDB's 400 KB.
    """
    assert write.value is not None
    identity = core.item_identity(
        tenant,
        core.ns_text(write.namespace),
        write.key,
        write.ttl_minutes,
        now,
        bool(write.vectors),
    )
    value: Sealed = seal(identity, write.value)
    sets = {"vt": S(value.type), "v": B(value.data), "ua": N(now)}
    removes = []
    if write.vectors:
        vectors: Sealed = seal(
            core.vectors_identity(tenant, core.ns_text(write.namespace), write.key, now),
            write.vectors,
        )
        sets.update(wt=S(vectors.type), w=B(vectors.data))
    else:
        removes += ["wt", "w"]
    if write.ttl_minutes is None or write.expires_at is None:
        removes += ["tm", "xp", "expires_at"]
    else:
        sets.update(
            tm=N(write.ttl_minutes),
            xp=N(write.expires_at),
            expires_at=N(math.ceil(write.expires_at)),
        )
    size = item_size(sets) + len(item_sk(write.key)) + 200
    if size > ITEM_LIMIT:
        raise InvalidInputError(
            f"store item {write.key!r} of {write.namespace!r} takes {size} bytes stored, "
            f"more than one DynamoDB item holds ({ITEM_LIMIT}): keep large values elsewhere"
        )
    values = {f":{n}": v for n, v in sets.items()}
    values[":now"] = N(now)
    expr = "SET " + ", ".join([*(f"#{n} = :{n}" for n in sets), "#ca = if_not_exists(#ca, :now)"])
    if removes:
        expr += " REMOVE " + ", ".join(f"#{n}" for n in removes)
    return {
        "UpdateExpression": expr,
        "ExpressionAttributeNames": {f"#{n}": n for n in [*sets, "ca", *removes]},
        "ExpressionAttributeValues": values,
    }
