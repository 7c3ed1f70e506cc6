"""The tenants' wrapped data keys on PostgreSQL (envelope encryption).

One statement each; the rows live in ``data_keys``. Pure: no psycopg import, no I/O.
"""

from __future__ import annotations

import builtins
from collections.abc import Generator
from typing import Any

from .._core.records import StoredDataKey
from .._core.sansio import operation
from . import _rls
from ._base import OpsBase
from ._query import Query
from ._rls import tenant_scoped

__all__ = ["DataKeyOps"]


class DataKeyOps(OpsBase):
    """Reads and writes of the tenants' wrapped data keys."""

    @operation
    @tenant_scoped
    def data_keys(self, tenant: str) -> Generator[Any, Any, builtins.list[StoredDataKey]]:
        """Every stored data-key version of a tenant, shredded ones included."""
        rows = yield Query(
            f"SELECT version, key_id, wrapped, created FROM {self._s}.data_keys "
            "WHERE tenant_id = %(tenant)s ORDER BY version",
            {"tenant": tenant},
            "all",
        )
        return [
            StoredDataKey(int(v), k, None if w is None else bytes(w), float(c))
            for v, k, w, c in rows
        ]

    @operation
    @tenant_scoped
    def add_data_key(self, tenant: str, key: StoredDataKey) -> Generator[Any, Any, bool]:
        """Store a new data-key version; False if that version exists."""
        row = yield Query(
            f"INSERT INTO {self._s}.data_keys (tenant_id, version, key_id, wrapped, created) "
            "VALUES (%(tenant)s, %(version)s, %(key_id)s, %(wrapped)s, %(created)s) "
            "ON CONFLICT DO NOTHING RETURNING version",
            {
                "tenant": tenant,
                "version": key.version,
                "key_id": key.key_id,
                "wrapped": key.wrapped,
                "created": key.created,
            },
            "one",
        )
        return row is not None

    @operation
    @tenant_scoped
    def rewrap_data_key(
        self, tenant: str, version: int, old_wrapped: bytes, key_id: str, wrapped: bytes
    ) -> Generator[Any, Any, bool]:
        """Replace one version's wrapped key if it is still ``old_wrapped``."""
        row = yield Query(
            f"UPDATE {self._s}.data_keys SET key_id = %(key_id)s, wrapped = %(wrapped)s, "
            "rotated_at = now() WHERE tenant_id = %(tenant)s AND version = %(version)s "
            "AND wrapped = %(old)s RETURNING version",
            {
                "tenant": tenant,
                "version": version,
                "old": old_wrapped,
                "key_id": key_id,
                "wrapped": wrapped,
            },
            "one",
        )
        return row is not None

    @operation
    @tenant_scoped
    def shred_data_keys(self, tenant: str) -> Generator[Any, Any, int]:
        """Delete every wrapped data key of a tenant (the versions stay as tombstones)."""
        rows = yield Query(
            f"UPDATE {self._s}.data_keys SET wrapped = NULL, key_id = '', "
            "shredded_at = now() WHERE tenant_id = %(tenant)s AND wrapped IS NOT NULL "
            "RETURNING version",
            {"tenant": tenant},
            "all",
        )
        return len(rows)

    @operation
    def data_key_tenants(self) -> Generator[Any, Any, builtins.list[str]]:
        """Every tenant with stored data keys (across tenants: see ``_rls.require_bypass``)."""
        yield from _rls.require_bypass(self.schema, "listing the tenants with data keys")
        rows = yield Query(
            f"SELECT DISTINCT tenant_id FROM {self._s}.data_keys ORDER BY tenant_id", {}, "all"
        )
        return [r[0] for r in rows]
