"""The store's Redis operations (pure: no redis import, no I/O).

Key layout (``P`` is the saver's prefix, ``T`` the tenant percent-encoded as in
the saver's hash tags, so a crafted tenant cannot close the tag or reach another
tenant's slot)::

    P:store:{T}:k   zset   "<ns>\\0<key>", score 0: every item of the tenant
    P:store:{T}:n   zset   "<ns>", score 0: every namespace that holds an item
    P:store:{T}:c   hash   "<ns>" -> how many items it holds
    P:store:{T}:x   zset   "<ns>\\0<key>" -> expires_at: the items with a TTL
    P:store:{T}:i:<ns>\\0<key>   hash   one item: vt, v (value: type, bytes),
                    wt, w (vectors: type, bytes; "" without), c, u (created,
                    updated), t (TTL minutes, "" none), x (expires_at, "" none),
                    f (the item's format, ``ITEM_FORMAT``)

``<ns>`` is the namespace's labels joined by ``.``: labels hold neither ``.`` nor
NUL (``_core.store.check_labels``), so the text names one namespace and the first
NUL of a member ends it. Every key of a tenant carries the one hash tag ``{T}``
(the first ``{`` of the name is the tag's: the prefix may not hold one, ``T``
holds no ``}``), so labels that hold braces cannot move an item to another slot,
and a tenant's whole store is in one cluster slot: a batch is one script, atomic,
whatever its ops. The price: a tenant's store must fit on one node (tenants spread
over the cluster, one tenant does not).

The namespaces under a prefix are one lexicographic range of ``k`` (and of
``n``), so a search or a listing reads only that range, never the keyspace
(no SCAN); a search reading more than ``max_search_items`` items is refused
before anything is read or written. A namespace is listed while it holds more
items (``c``) than items expired by the batch's time (``x``).

Times are Unix seconds from the store's clock. A read skips an item whose stored
expiry has passed, whether Redis still holds it or not; an item with a TTL also
gets a native expiry a grace period after its own (``NATIVE_GRACE_S``): a
backstop that frees memory (its index entries stay until the next write of the
item, a ``delete_namespace`` or a sweep, and count as expired meanwhile).
``sweep`` deletes expired items at once.

Values and vectors are sealed by the record pipeline (redaction, serialization,
encryption and the ``integrity=`` tag bound to the tenant, the namespace, the key and
the clear fields a read trusts: see ``core.item_identity``). The write's time ``u`` is
the batch's ``now``, which Python seals under and the script stores as sent. Every
decision (filters, ordering, scores, offset/limit, which items a read refreshes)
is the pure core's (``langgraph_durable._core.store``); the batch script extends
the TTL of the items the gets Python names read (``refreshed_by_gets``), the
refresh of search results is a second call (``refresh_script``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

from langgraph.store.base import GetOp

from .._core import store as core
from .._core.records import RecordIdentity, Sealed
from .._core.store_settings import DEFAULT_MAX_SEARCH_ITEMS, search_too_large
from ..errors import CorruptRecordError
from ._keys import KeyLayout, _glob_escape, _ident, _tag_part, _untag
from ._requests import ScanKeys, Script
from ._scripts import load_script

__all__ = [
    "StoreOps",
    "StoreKeys",
    "ITEM_FORMAT",
    "MAX_SEARCH_ITEMS",
    "NATIVE_GRACE_S",
    "DROP_CHUNK",
]

BATCH = load_script("store_batch")
REFRESH = load_script("store_refresh")
DROP = load_script("store_drop")
SWEEP = load_script("store_sweep")
#: The store's scripts (``setup()`` loads them).
STORE_SCRIPTS = (BATCH, REFRESH, DROP, SWEEP)

#: Items a search may read under its prefix by default (``max_search_items``).
MAX_SEARCH_ITEMS = DEFAULT_MAX_SEARCH_ITEMS
#: Seconds after an item's own expiry that Redis deletes its key (the backstop).
NATIVE_GRACE_S = 3600.0
#: Items per script call of ``delete_namespace`` and ``sweep_expired``.
DROP_CHUNK = 1000

_NO_VECTORS = Sealed("", b"")
#: Fields the scripts return per item (``ITEM_FIELDS`` of ``lua/lib/store_items.lua``).
_FIELDS = 9
#: The format of the items this version writes (``f``): 2 binds the write's time and
#: whether embeddings go with the value; items without it were written before.
ITEM_FORMAT = "2"


class StoreKeys:
    """The key names of one tenant's store (see the module docstring)."""

    def __init__(self, layout: KeyLayout, tenant: str) -> None:
        tag = "{" + _tag_part(_ident(tenant, "tenant id")) + "}"
        head = f"{layout.prefix}:store:{tag}:"
        self.indexes = (head + "k", head + "n", head + "c", head + "x")
        self.base = head + "i:"

    def item(self, namespace: tuple[str, ...], key: str) -> str:
        return self.base + member(namespace, key)


def member(namespace: tuple[str, ...], key: str) -> str:
    """An item's member in the tenant's indexes (and the end of its key's name)."""
    return core.ns_text(namespace) + "\x00" + key


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


def item_ranges(prefix: tuple[str, ...]) -> list[str]:
    """ZRANGEBYLEX (min, max) pairs of ``k`` holding the items under ``prefix``."""
    bounds = core.ns_prefix_bounds(prefix)
    if bounds is None:
        return ["-", "+"]
    exact = core.ns_text(prefix)
    return ["[" + exact + "\x00", "(" + exact + "\x01", "[" + bounds[0], "(" + bounds[1]]


def namespace_ranges(prefix: tuple[str, ...]) -> list[str]:
    """ZRANGEBYLEX (min, max) pairs of ``n`` holding the namespaces under ``prefix``."""
    bounds = core.ns_prefix_bounds(prefix)
    if bounds is None:
        return ["-", "+"]
    exact = core.ns_text(prefix)
    return ["[" + exact, "[" + exact, "[" + bounds[0], "(" + bounds[1]]


def refreshed_by_gets(plan: core.BatchPlan) -> set[tuple[tuple[str, ...], str]]:
    """The items whose TTL a batch's script extends as it reads them: those a get with
    ``refresh_ttl`` reads that the batch does not put (as ``core.answer`` chooses; the
    script extends only a live item stored with a TTL, as ``core.refreshed`` does)."""
    out = set()
    for i in plan.gets:
        op = plan.ops[i]
        assert isinstance(op, GetOp)
        if op.refresh_ttl and (op.namespace, op.key) not in plan.puts:
            out.add((op.namespace, op.key))
    return out


def _native_ms(expires_at: float, now: float) -> str:
    """The native expiry (PEXPIRE ms) of an item expiring at ``expires_at``."""
    return str(max(1, round((expires_at - now + NATIVE_GRACE_S) * 1000)))


class StoreOps:
    """The store's operations on one key prefix, as sans-IO generators.

    Args:
        prefix: The key prefix (the saver's).
        max_search_items: Most items a search may read under its prefix; a search
            over more raises ``InvalidInputError`` (nothing of its batch is written).
    """

    def __init__(self, prefix: str, max_search_items: int = MAX_SEARCH_ITEMS) -> None:
        self.layout = KeyLayout(prefix)
        self.max_search_items = max_search_items

    def keys(self, tenant: str) -> StoreKeys:
        return StoreKeys(self.layout, tenant)

    def batch_script(
        self,
        tenant: str,
        plan: core.BatchPlan,
        now: float,
        writes: Sequence[core.ItemWrite],
        seal: Callable[[RecordIdentity, Any], Sealed],
    ) -> Script:
        """The one script call that reads what a batch needs, then applies its writes."""
        keys = self.keys(tenant)
        args: list[Any] = [
            keys.base,
            repr(float(now)),
            self.max_search_items,
            NATIVE_GRACE_S,
            ITEM_FORMAT,
        ]
        args.append(len(plan.get_keys))
        refreshing = refreshed_by_gets(plan)
        for place in plan.get_keys:
            args.extend((member(*place), "1" if place in refreshing else "0"))
        args.append(len(plan.search_prefixes))
        for prefix in plan.search_prefixes:
            ranges = item_ranges(prefix)
            args.append(len(ranges) // 2)
            args.extend(ranges)
        heads = [core.listing_prefix(plan.ops[i]) for i in plan.listings]  # type: ignore[arg-type]
        listing: list[str] = []
        for prefix in core.covering(heads) if plan.listings else []:
            listing.extend(namespace_ranges(prefix))
        args.append(len(listing) // 2)
        args.extend(listing)
        deletes = [w for w in writes if w.value is None]
        puts = [w for w in writes if w.value is not None]
        args.append(len(deletes))
        args.extend(member(w.namespace, w.key) for w in deletes)
        args.append(len(puts))
        for w in puts:
            # the script stores ``now`` (args[1], the same text) as the item's ``u``
            ns = core.ns_text(w.namespace)
            identity = core.item_identity(tenant, ns, w.key, w.ttl_minutes, now, bool(w.vectors))
            value = seal(identity, w.value)
            vectors = (
                seal(core.vectors_identity(tenant, ns, w.key, now), w.vectors)
                if w.vectors
                else _NO_VECTORS
            )
            expiry = "" if w.expires_at is None else repr(float(w.expires_at))
            native = "" if w.expires_at is None else _native_ms(w.expires_at, now)
            args.extend(
                (
                    member(w.namespace, w.key),
                    value.type,
                    value.data,
                    vectors.type,
                    vectors.data,
                    core.ttl_text(w.ttl_minutes),
                    expiry,
                    native,
                )
            )
        return Script(BATCH, keys.indexes, tuple(args))

    def read_reply(
        self,
        tenant: str,
        plan: core.BatchPlan,
        reply: Sequence[Any],
        open: Callable[[RecordIdentity, Sealed], Any],
    ) -> tuple[dict[Any, core.StoredItem], list[core.StoredItem], list[Any]]:
        """The items (opened) and namespaces a batch script read: (found by key, searched,
        namespaces)."""
        status = _text(reply[0])
        if status == "too-many":
            prefix = plan.search_prefixes[int(reply[1]) - 1]
            raise search_too_large(prefix, int(reply[2]), self.max_search_items)
        cache: dict[str, core.StoredItem] = {}
        found = {(s.namespace, s.key): s for s in _items(tenant, reply[1], open, cache)}
        searched = _items(tenant, reply[2], open, cache)
        names = [core.ns_from_text(_text(ns)) for ns in reply[3]]
        return found, searched, names

    def refresh_script(
        self, tenant: str, plan: core.BatchPlan, now: float, refreshes: Sequence[core.Refresh]
    ) -> Script | None:
        """The script call that extends the expiry of items a refreshing search returned
        (None: nothing left to extend; the batch's script extended what its gets read)."""
        done = refreshed_by_gets(plan)
        refreshes = [r for r in refreshes if (r.namespace, r.key) not in done]
        if not refreshes:
            return None
        keys = self.keys(tenant)
        args: list[Any] = [keys.base]
        for r in refreshes:
            args.extend(
                (
                    member(r.namespace, r.key),
                    repr(float(r.expires_at)),
                    _native_ms(r.expires_at, now),
                )
            )
        return Script(REFRESH, keys.indexes, tuple(args))

    def delete_namespace(self, tenant: str, prefix: tuple[str, ...]) -> Generator[Any, Any, int]:
        """Delete every item of ``tenant`` under ``prefix``, a chunk per call; the count."""
        keys = self.keys(tenant)
        done = 0
        while True:
            n = int(
                (yield Script(DROP, keys.indexes, (keys.base, DROP_CHUNK, *item_ranges(prefix))))
            )
            done += n
            if n < DROP_CHUNK:
                return done

    def sweep(self, tenant: str, now: float) -> Generator[Any, Any, int]:
        """Delete the items of ``tenant`` expired at ``now``, a chunk per call; the count."""
        keys = self.keys(tenant)
        done = 0
        while True:
            n = int((yield Script(SWEEP, keys.indexes, (keys.base, repr(float(now)), DROP_CHUNK))))
            done += n
            if n < DROP_CHUNK:
                return done

    def sweep_all(self, now: float) -> Generator[Any, Any, dict[str, int]]:
        """Sweep every tenant that has items with a TTL: {tenant: items deleted}, for
        the tenants that had any (as on every backend).

        The tenants are found by their expiry index (``P:store:{T}:x``, which exists
        while a tenant has items with a TTL): one SCAN over the keys of that kind, as
        the saver finds its tenant indexes, never over the items.
        """
        pattern = _glob_escape(self.layout.prefix) + ":store:{*}:x"
        head = self.layout.prefix + ":store:{"
        found = yield ScanKeys(pattern)
        out: dict[str, int] = {}
        for name in sorted({_text(k) for k in found}):
            tag = name[len(head) : -len("}:x")]
            if not name.startswith(head) or any(c in tag for c in "{}"):
                continue
            tenant = _untag(tag)
            swept = yield from self.sweep(tenant, now)
            if swept:
                out[tenant] = swept
        return out


def _items(
    tenant: str,
    flat: Sequence[Any],
    open: Callable[[RecordIdentity, Sealed], Any],
    cache: dict[str, core.StoredItem],
) -> list[core.StoredItem]:
    out = []
    for j in range(0, len(flat), _FIELDS + 1):
        name = _text(flat[j])
        stored = cache.get(name)
        if stored is None:
            stored = cache[name] = _stored(tenant, name, flat[j + 1 : j + 1 + _FIELDS], open)
        out.append(stored)
    return out


def _float(value: Any) -> float | None:
    text = _text(value)
    try:
        return None if text == "" else float(text)
    except ValueError as exc:
        raise CorruptRecordError(f"a store item's field holds {text!r}, not a number") from exc


def _stored(
    tenant: str, name: str, fields: Sequence[Any], open: Callable[[RecordIdentity, Sealed], Any]
) -> core.StoredItem:
    ns, _, key = name.partition("\x00")
    vtype, value, wtype, vectors, created, updated, ttl, expiry, form = fields
    where = f"store item {key!r} of namespace {ns!r} (tenant {tenant!r})"
    if _text(form) != ITEM_FORMAT:
        raise CorruptRecordError(
            f"{where} was stored in another format ({_text(form) or 'the first'}, this "
            f"version reads {ITEM_FORMAT}): an item written by an earlier development "
            "version of the store, or altered; put it again or delete its namespace"
        )
    ttl_minutes = _float(ttl)
    created_at, updated_at = _float(created), _float(updated)
    if created_at is None or updated_at is None:
        raise CorruptRecordError(f"{where} has no times")
    has_vectors = bool(_text(wtype))
    identity = core.item_identity(tenant, ns, key, ttl_minutes, updated_at, has_vectors)
    opened = open(identity, Sealed(_text(vtype), bytes(value)))
    if not isinstance(opened, dict):
        raise CorruptRecordError(f"{where} does not hold a dict")
    vecs: Mapping[str, Any] = {}
    if has_vectors:
        vecs = open(
            core.vectors_identity(tenant, ns, key, updated_at), Sealed(_text(wtype), bytes(vectors))
        )
    return core.StoredItem(
        core.ns_from_text(ns),
        key,
        opened,
        created_at,
        updated_at,
        _float(expiry),
        ttl_minutes,
        {str(p): list(v) for p, v in vecs.items()},
    )
