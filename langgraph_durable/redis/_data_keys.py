"""The tenants' data keys (envelope encryption) on Redis.

A tenant's data-key versions are the hash ``P:keys:{tenant}`` (version ->
packed key, see ``_records.encode_data_key``), and the set ``P:key-tenants``
lists the tenants that have some. They never expire and are not touched by
``delete_thread`` or ``prune``: a tenant's keys outlive its threads. A rewrap
or a shred swaps values with a compare-and-set (``lua/swap_data_keys.lua``).
Pure: no redis import, no I/O.
"""

from __future__ import annotations

import builtins
from collections.abc import Generator
from typing import Any

from .._core.records import StoredDataKey
from .._core.sansio import operation
from ._base import OpsBase
from ._keys import _ident
from ._records import _hash_pairs, _text, decode_data_key, encode_data_key
from ._requests import Command, Script
from ._scripts import SWAP_DATA_KEYS

__all__ = ["DataKeyOps"]


class DataKeyOps(OpsBase):
    """Store, rewrap, shred and list the tenants' data keys."""

    @operation
    def data_keys(self, tenant: str) -> Generator[Any, Any, builtins.list[StoredDataKey]]:
        """Every stored data-key version of a tenant, oldest first, shredded ones included."""
        rows = yield from self._data_key_rows(_ident(tenant, "tenant id"))
        return [row for _raw, row in rows]

    def _data_key_rows(
        self, tenant: str
    ) -> Generator[Any, Any, builtins.list[tuple[bytes, StoredDataKey]]]:
        """(stored value, decoded version) of each of a tenant's data keys, oldest first."""
        reply = yield Command(("HGETALL", self.keys.data_keys(tenant)))
        rows = [(raw, decode_data_key(f, raw)) for f, raw in _hash_pairs(reply)]
        rows.sort(key=lambda item: item[1].version)
        return rows

    @operation
    def add_data_key(self, tenant: str, key: StoredDataKey) -> Generator[Any, Any, bool]:
        """Store a new data-key version unless it exists (HSETNX); whether it was stored.

        The tenant joins the set of key tenants first, so a tenant with keys is
        always listed (on a cluster the set is in another slot).
        """
        tenant = _ident(tenant, "tenant id")
        yield Command(("SADD", self.keys.key_tenants(), tenant))
        added = yield Command(
            ("HSETNX", self.keys.data_keys(tenant), str(int(key.version)), encode_data_key(key))
        )
        return bool(int(added))

    @operation
    def rewrap_data_key(
        self, tenant: str, version: int, old_wrapped: bytes, key_id: str, wrapped: bytes
    ) -> Generator[Any, Any, bool]:
        """Replace one version's wrapped key if it still is ``old_wrapped``.

        Reads the version, then swaps it with a compare-and-set on the value
        read (one script), so a concurrent rewrap or shred wins and this
        returns False.
        """
        hash_key = self.keys.data_keys(_ident(tenant, "tenant id"))
        field = str(int(version))
        raw = yield Command(("HGET", hash_key, field))
        if raw is None:
            return False
        row = decode_data_key(field, bytes(raw))
        if row.wrapped is None or row.wrapped != bytes(old_wrapped):
            return False
        new = encode_data_key(StoredDataKey(row.version, key_id, bytes(wrapped), row.created))
        swapped = yield Script(SWAP_DATA_KEYS, (hash_key,), (field, bytes(raw), new))
        return bool(int(swapped))

    @operation
    def shred_data_keys(self, tenant: str) -> Generator[Any, Any, int]:
        """Replace every live version's wrapped key with a tombstone; how many were live.

        A tombstone keeps the version and its creation time (wrapped None, key
        id empty), so a record naming it reads as shredded, not as missing. A
        version rewrapped between the read and the swap is read and shredded
        again.
        """
        tenant = _ident(tenant, "tenant id")
        hash_key = self.keys.data_keys(tenant)
        total = 0
        while True:
            rows = yield from self._data_key_rows(tenant)
            live = [(raw, row) for raw, row in rows if row.wrapped is not None]
            if not live:
                return total
            args: builtins.list[Any] = []
            for raw, row in live:
                tomb = StoredDataKey(row.version, "", None, row.created)
                args.extend((str(row.version), raw, encode_data_key(tomb)))
            done = int((yield Script(SWAP_DATA_KEYS, (hash_key,), tuple(args))))
            total += done
            if done == len(live):
                return total

    @operation
    def data_key_tenants(self) -> Generator[Any, Any, builtins.list[str]]:
        """Every tenant with stored data keys (shredded ones included), sorted."""
        members = yield Command(("SMEMBERS", self.keys.key_tenants()))
        return sorted(_text(m) for m in members or ())
