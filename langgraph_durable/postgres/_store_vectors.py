"""Search by meaning with pgvector: the store's vector table, its index, its SQL (pure).

No psycopg import, no I/O: statements and the reading of their rows, as ``_store``.

Where the server has the ``vector`` extension, a store with an ``index`` whose
embeddings may be stored in the clear (encryption off, or ``clear_vectors=True``)
keeps each item's embeddings twice: sealed beside its value (``store_items.vectors``,
as without pgvector: what scores are computed from) and in ``store_vectors``, one
row per (tenant, namespace, key, field path) in pgvector's type, under an HNSW index
(or none: ``kind="flat"``) for the index's distance. The vector table only picks a
search's candidates: a search with a query and no filter asks the index for the
nearest ``2 * (offset + limit)`` vectors per field (``core.ann_candidates``), in
the batch's one statement, beside the items whose embeddings are not in the vector
table (``store_items.vectors_indexed`` false, migration 10: written before, or by a
store that seals them only) and the newest ``limit`` items without embeddings (they
fill a page the scored items leave short, as in ``InMemoryStore``). The pure core
then scores the candidates exactly from their opened embeddings.

Decided at ``setup()`` (:meth:`VectorOps.setup`), never per call:

* the extension: ``CREATE EXTENSION IF NOT EXISTS vector`` when the server has it
  and the role may (else, and on a server without it, exact search: every item
  under the search's prefix read, opened and scored);
* the table, with ``dims`` from the index, a foreign key to ``store_items`` (an
  item's vectors go with it, whatever deletes it), row-level security as every
  table of the schema when that is on; a table made before with other dimensions
  is a :class:`~langgraph_durable.errors.ConfigurationError`;
* the index, ``store_vectors_<kind>_<distance>_idx`` (one per distance type, made
  once: later ``m`` / ``ef_construction`` do not rebuild it).

With encryption on and no ``clear_vectors``, nothing goes to the vector table (a
vector is a value: the text it embeds can be approximated from it): search stays
exact, after decryption; a put removes the item's rows a clear-vector store left.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._core import store as core
from ..errors import ConfigurationError, InvalidInputError
from ._query import Query

__all__ = ["VectorIndex", "VectorMode", "VectorOps", "EXACT", "index_settings"]

#: pgvector's operator and operator class suffix for each distance type.
_OPERATORS = {"cosine": "<=>", "l2": "<->", "inner_product": "<#>"}
_OPCLASS = {"cosine": "cosine_ops", "l2": "l2_ops", "inner_product": "ip_ops"}
_KINDS = ("hnsw", "flat")
_VECTOR_TYPES = ("vector", "halfvec")
#: pgvector's default ``hnsw.ef_search``: a search that needs more candidates sets it.
_DEFAULT_EF_SEARCH = 40


@dataclass(frozen=True, slots=True)
class VectorIndex:
    """The vector settings of a store's ``index`` (LangGraph's ``PostgresIndexConfig``).

    Attributes:
        dims: The embeddings' dimensions (None: no vector table, exact search).
        distance_type: ``cosine``, ``l2`` or ``inner_product`` (scores and index).
        kind: ``hnsw`` (an HNSW index) or ``flat`` (no index: exact order in SQL).
        vector_type: ``vector`` or ``halfvec`` (pgvector 0.7+).
        m, ef_construction: The HNSW index's parameters (None: pgvector's defaults).
        per_item: The field paths an item's embeddings come from by default.
        clear: Whether embeddings may go to the vector table (encryption off, or
            ``clear_vectors``).
    """

    dims: int | None
    distance_type: str = "cosine"
    kind: str = "hnsw"
    vector_type: str = "vector"
    m: int | None = None
    ef_construction: int | None = None
    per_item: int = 1
    clear: bool = True

    @property
    def wants_table(self) -> bool:
        return self.clear and self.dims is not None


def _positive(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"index ann_index_config {name} must be a positive integer")
    return value


def index_settings(
    index: Mapping[str, Any] | None, encrypted: bool, clear_vectors: bool
) -> VectorIndex | None:
    """The vector settings of ``index`` (already checked as an ``IndexConfig``).

    Raises:
        ConfigurationError: an unknown ``distance_type``, ``kind`` or ``vector_type``,
            or a non-integer HNSW parameter.
    """
    if not isinstance(clear_vectors, bool):
        raise ConfigurationError(f"clear_vectors must be True or False, got {clear_vectors!r}")
    if not index:
        return None
    distance = index.get("distance_type") or "cosine"
    if distance not in core.DISTANCE_TYPES:
        raise ConfigurationError(
            f"index distance_type must be one of {', '.join(core.DISTANCE_TYPES)}, got {distance!r}"
        )
    ann = index.get("ann_index_config") or {}
    if not isinstance(ann, Mapping):
        raise ConfigurationError(f"index ann_index_config must be a dict, got {ann!r}")
    kind = ann.get("kind") or "hnsw"
    if kind not in _KINDS:
        raise ConfigurationError(
            f"index ann_index_config kind must be 'hnsw' or 'flat', got {kind!r}"
        )
    vector_type = ann.get("vector_type") or "vector"
    if vector_type not in _VECTOR_TYPES:
        raise ConfigurationError(
            f"index ann_index_config vector_type must be 'vector' or 'halfvec', got {vector_type!r}"
        )
    return VectorIndex(
        dims=index.get("dims"),
        distance_type=distance,
        kind=kind,
        vector_type=vector_type,
        m=_positive(ann.get("m"), "m"),
        ef_construction=_positive(ann.get("ef_construction"), "ef_construction"),
        per_item=max(1, len(core.index_fields(index))),
        clear=clear_vectors or not encrypted,
    )


@dataclass(frozen=True, slots=True)
class VectorMode:
    """What a store does with the vector table, as its ``setup()`` found it.

    Attributes:
        table: ``store_vectors`` exists (a put removes its item's stale rows).
        ann: Embeddings go to it and searches take candidates from it.
        extension: The schema of pgvector's types and operators (quoted).
        column: The column's type (``vector(8)``), schema-qualified.
        index: The store's vector settings.
    """

    table: bool = False
    ann: bool = False
    extension: str = ""
    column: str = ""
    index: VectorIndex | None = None

    @property
    def operator(self) -> str:
        assert self.index is not None
        return f"OPERATOR({self.extension}.{_OPERATORS[self.index.distance_type]})"


#: No vector table: exact search.
EXACT = VectorMode()


def vector_text(vector: Sequence[float]) -> str:
    """A vector in pgvector's text form.

    Raises:
        InvalidInputError: a component is NaN or infinite (pgvector refuses them).
    """
    parts = []
    for x in vector:
        value = float(x)
        if not math.isfinite(value):
            raise InvalidInputError(
                f"an embedding holds {value!r}: the vector index takes finite numbers only"
            )
        parts.append(repr(value))
    return "[" + ",".join(parts) + "]"


def _range(alias: str, name: str) -> str:
    """The namespaces under a search's prefix (``_store._RANGE`` with named parameters)."""
    p = f"{alias}.prefix"
    return (
        f"({p} = %(x{name})s OR ({p} >= %(l{name})s AND "
        f"(%(h{name})s::text IS NULL OR {p} < %(h{name})s)))"
    )


class VectorOps:
    """The vector table's statements on one schema (quoted as ``s``)."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._s = f'"{schema}"'

    # ---- setup -----------------------------------------------------------------

    def setup(self, index: VectorIndex | None) -> Any:
        """Make the extension, table and index where they can be (inside a transaction);
        the store's :class:`VectorMode`."""
        s = self._s
        yield Query(
            "SELECT pg_advisory_xact_lock(hashtext(%s))",
            (self.schema + ":store_vectors",),
            "one",
            False,
        )
        if index is not None and index.wants_table:
            row = yield Query(
                "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector'), "
                "EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')",
                (),
                "one",
                False,
            )
            if row[0] and not row[1]:
                # Only a role that may create it (a superuser, or the database owner for a
                # trusted extension); any other keeps exact search (docs/stores.md).
                yield Query(
                    "DO $fn$ BEGIN CREATE EXTENSION IF NOT EXISTS vector; "
                    "EXCEPTION WHEN insufficient_privilege THEN NULL; END $fn$",
                    (),
                    "none",
                    False,
                )
            mode = yield from self.detect(index)
            if mode.extension and not mode.table and (yield from self._has_type(mode, index)):
                yield Query(self._table_sql(mode, index), (), "none", False)
                yield Query(f"SELECT {s}.apply_row_level_security()", (), "one", False)
            mode = yield from self.detect(index)
            if mode.ann and index.kind == "hnsw":
                yield Query(self._index_sql(mode, index), (), "none", False)
            return mode
        return (yield from self.detect(index))

    def _has_type(self, mode: VectorMode, index: VectorIndex) -> Any:
        row = yield Query(
            "SELECT to_regtype(%s) IS NOT NULL",
            (f"{mode.extension}.{index.vector_type}",),
            "one",
            False,
        )
        return bool(row[0])

    def _table_sql(self, mode: VectorMode, index: VectorIndex) -> str:
        s = self._s
        return (
            f"CREATE TABLE IF NOT EXISTS {s}.store_vectors ("
            'tenant_id text NOT NULL, prefix text COLLATE "C" NOT NULL, '
            'key text COLLATE "C" NOT NULL, path text COLLATE "C" NOT NULL, '
            f"embedding {mode.extension}.{index.vector_type}({int(index.dims or 0)}) NOT NULL, "
            "PRIMARY KEY (tenant_id, prefix, key, path), "
            f"FOREIGN KEY (tenant_id, prefix, key) REFERENCES {s}.store_items "
            "(tenant_id, prefix, key) ON DELETE CASCADE)"
        )

    def _index_sql(self, mode: VectorMode, index: VectorIndex) -> str:
        options = [
            f"{name} = {int(value)}"
            for name, value in (("m", index.m), ("ef_construction", index.ef_construction))
            if value is not None
        ]
        using = f" WITH ({', '.join(options)})" if options else ""
        opclass = f"{mode.extension}.{index.vector_type}_{_OPCLASS[index.distance_type]}"
        return (
            f"CREATE INDEX IF NOT EXISTS store_vectors_hnsw_{index.distance_type}_idx "
            f"ON {self._s}.store_vectors USING hnsw (embedding {opclass}){using}"
        )

    def detect(self, index: VectorIndex | None) -> Any:
        """The :class:`VectorMode` the schema allows ``index`` (one catalog query).

        Raises:
            ConfigurationError: the vector table's column has other dimensions or
                another type than ``index`` names.
        """
        table = f"{self._s}.store_vectors"
        row = yield Query(
            "SELECT (SELECT quote_ident(n.nspname) FROM pg_extension e "
            "JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'), "
            "to_regclass(%(t)s) IS NOT NULL, "
            "(SELECT t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = to_regclass(%(t)s) AND a.attname = 'embedding'), "
            "(SELECT a.atttypmod FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass(%(t)s) AND a.attname = 'embedding')",
            {"t": table},
            "one",
            False,
        )
        extension, exists, typname, typmod = row[0] or "", bool(row[1]), row[2], row[3]
        if not exists:
            return VectorMode(False, False, extension, "", index)
        if index is None or not index.wants_table or not extension:
            return VectorMode(True, False, extension, "", index)
        if typname != index.vector_type or typmod != index.dims:
            raise ConfigurationError(
                f"schema {self.schema!r} has a vector table of {typname}({typmod}), and this "
                f"store's index says {index.vector_type}({index.dims}): one schema holds "
                "embeddings of one size (use another schema for another embedding model)"
            )
        column = f"{extension}.{index.vector_type}({int(index.dims or 0)})"
        return VectorMode(True, True, extension, column, index)

    # ---- reads -----------------------------------------------------------------

    def search_parts(
        self,
        mode: VectorMode,
        name: str,
        prefix: tuple[str, ...],
        query_vector: Sequence[float],
        k: int,
        n: int,
        columns: str,
        live: str,
    ) -> tuple[list[str], dict[str, Any]]:
        """The ``UNION ALL`` parts that read one search's candidates, and their parameters.

        ``name`` tells its parameters apart; ``k`` is how many nearest vectors the index
        gives, ``n`` how many of the newest items without embeddings (the search's
        limit); ``columns`` and ``live`` are ``_store``'s (item ``i``, part ``'s'``).
        """
        bounds = core.ns_prefix_bounds(prefix)
        exact = core.ns_text(prefix) if bounds is not None else None
        low, high = bounds if bounds is not None else ("", None)
        params = {
            f"x{name}": exact,
            f"l{name}": low,
            f"h{name}": high,
            f"q{name}": vector_text(query_vector),
            f"k{name}": k,
            f"n{name}": n,
        }
        s = self._s
        items = f"{s}.store_items i WHERE i.tenant_id = %(tenant)s AND {_range('i', name)}"
        parts = [
            # the index's nearest vectors (an item with several may come more than once)
            f"(SELECT 's', {columns} FROM {s}.store_vectors v JOIN {s}.store_items i "
            "ON i.tenant_id = v.tenant_id AND i.prefix = v.prefix AND i.key = v.key "
            f"WHERE v.tenant_id = %(tenant)s AND {_range('v', name)} AND {live} "
            f"ORDER BY v.embedding {mode.operator} CAST(%(q{name})s AS {mode.column}) "
            f"LIMIT %(k{name})s)",
            # items whose embeddings are not in the vector table (the partial index)
            f"SELECT 's', {columns} FROM {items} AND {live} "
            "AND i.vectors_type <> '' AND NOT i.vectors_indexed",
            # the newest items without embeddings
            f"(SELECT 's', {columns} FROM {items} AND {live} AND i.vectors_type = '' "
            f"ORDER BY i.updated_at DESC, i.prefix, i.key LIMIT %(n{name})s)",
        ]
        return parts, params

    @staticmethod
    def settings(mode: VectorMode, most: int) -> tuple[tuple[str, str], ...]:
        """The settings a statement whose index searches ask for ``most`` vectors needs
        (``hnsw.ef_search``: an HNSW scan gives no more rows than it)."""
        if mode.index is None or mode.index.kind != "hnsw" or most <= _DEFAULT_EF_SEARCH:
            return ()
        return (("hnsw.ef_search", str(most)),)

    # ---- writes ----------------------------------------------------------------

    def write_ctes(
        self, mode: VectorMode, puts: Sequence[core.ItemWrite], only: str = ""
    ) -> tuple[str, dict[str, Any]]:
        """``, vdel AS (...), vins AS (...)`` for a batch's puts (after ``ins``): the put
        items' rows of other field paths removed, their embeddings upserted (``ann``);
        nothing without the table. ``only``: `` AND <condition>`` both apply under
        (the batch's guard), or empty."""
        if not mode.table:
            return "", {}
        s = self._s
        cols: dict[str, list[str]] = {"vp": [], "vk": [], "vf": [], "ve": []}
        if mode.ann:
            for w in puts:
                prefix = core.ns_text(w.namespace)
                for path, vector in w.vectors.items():
                    cols["vp"].append(prefix)
                    cols["vk"].append(w.key)
                    cols["vf"].append(path)
                    cols["ve"].append(vector_text(vector))
        sql = f""", vdel AS (
    DELETE FROM {s}.store_vectors v USING unnest(%(pp)s::text[], %(pk)s::text[]) AS u(p, k)
    WHERE v.tenant_id = %(tenant)s AND v.prefix = u.p AND v.key = u.k
        AND NOT EXISTS (SELECT 1 FROM unnest(%(vp)s::text[], %(vk)s::text[], %(vf)s::text[])
                        AS n(p, k, f) WHERE n.p = v.prefix AND n.k = v.key AND n.f = v.path){only}
    RETURNING 1
)"""
        if mode.ann:
            sql += f""", vins AS (
    INSERT INTO {s}.store_vectors AS v (tenant_id, prefix, key, path, embedding)
    SELECT %(tenant)s, n.p, n.k, n.f, CAST(n.e AS {mode.column})
    FROM unnest(%(vp)s::text[], %(vk)s::text[], %(vf)s::text[], %(ve)s::text[]) AS n(p, k, f, e)
    WHERE true{only}
    ON CONFLICT (tenant_id, prefix, key, path) DO UPDATE SET embedding = excluded.embedding
    RETURNING 1
)"""
        return sql, dict(cols)
