"""Stored items and their TTL (pure; times are Unix seconds from an injected clock)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import Item, SearchItem

from ..records import RecordIdentity, RecordKind

# ---- stored items and TTL ----------------------------------------------------


@dataclass(slots=True)
class StoredItem:
    """One item as a backend reads it back (value opened), times in Unix seconds.

    Attributes:
        namespace, key: The item's place.
        value: Its value (a dict).
        created_at, updated_at: When it was first stored and last written.
        expires_at: When it expires (None: never).
        ttl_minutes: The TTL it was stored with, for refreshes (None: none).
        vectors: Its embeddings by field path (empty when not indexed).
    """

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: float
    updated_at: float
    expires_at: float | None = None
    ttl_minutes: float | None = None
    vectors: dict[str, list[float]] = field(default_factory=dict)

    def item(self) -> Item:
        return Item(
            value=self.value,
            key=self.key,
            namespace=self.namespace,
            created_at=to_datetime(self.created_at),
            updated_at=to_datetime(self.updated_at),
        )

    def search_item(self, score: float | None = None) -> SearchItem:
        return SearchItem(
            namespace=self.namespace,
            key=self.key,
            value=self.value,
            created_at=to_datetime(self.created_at),
            updated_at=to_datetime(self.updated_at),
            score=score,
        )


def to_datetime(seconds: float) -> datetime:
    """Unix seconds as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, timezone.utc)


def expires_at(ttl_minutes: float | None, now: float) -> float | None:
    """When an item written or refreshed at ``now`` with ``ttl_minutes`` expires."""
    if ttl_minutes is None:
        return None
    return now + float(ttl_minutes) * 60.0


def is_live(expiry: float | None, now: float) -> bool:
    """Whether an item with this expiry may still be returned at ``now``."""
    return expiry is None or expiry > now


def refreshed(item: StoredItem, now: float) -> float | None:
    """The new expiry of an item a refreshing read returned; None: nothing to refresh."""
    if item.ttl_minutes is None:
        return None
    return expires_at(item.ttl_minutes, now)


# ---- what a stored item is sealed under --------------------------------------


def ttl_text(ttl_minutes: float | None) -> str:
    """An item's TTL as its identity binds it (``""``: none)."""
    return "" if ttl_minutes is None else repr(float(ttl_minutes))


def item_identity(
    tenant: str,
    ns: str,
    key: str,
    ttl_minutes: float | None,
    updated_at: float,
    has_vectors: bool,
) -> RecordIdentity:
    """The identity an item's value is sealed under, on every backend (``ns``: the
    namespace as ``ns_text`` writes it).

    Besides tenant, namespace and key it binds the clear fields stored beside it
    that a read trusts: the TTL, the write's time (``updated_at``: the order of a
    search) and whether embeddings go with it (so they cannot be stripped).
    """
    extra = f"{ttl_text(ttl_minutes)}|{float(updated_at)!r}|{int(has_vectors)}"
    return RecordIdentity(tenant, "", ns, RecordKind.STORE_ITEM, key=key, extra=extra)


def vectors_identity(tenant: str, ns: str, key: str, updated_at: float) -> RecordIdentity:
    """The identity an item's embeddings are sealed under (bound to the write's time,
    so an older write's embeddings do not open beside a newer value)."""
    return RecordIdentity(
        tenant, "", ns, RecordKind.STORE_VECTORS, key=key, extra=repr(float(updated_at))
    )
