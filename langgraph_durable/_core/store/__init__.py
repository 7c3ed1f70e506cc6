"""The decisions of a LangGraph store (``BaseStore``), independent of any backend.

Pure: no driver import, no I/O, no clock (every time is an injected ``now`` in
Unix seconds). A backend's store reads candidate items, hands them here, and
stores what this module decides:

- namespaces: LangGraph's rules (:func:`check_namespace`, :func:`check_labels`)
  and their text form (:func:`ns_text`, :func:`ns_prefix_bounds`);
- a batch: :func:`plan_batch` dedupes its ops as LangGraph's batching does (reads
  see the store as it was before the batch; of several puts of one item the last
  wins) and says which reads and writes it needs;
- filters (:func:`matches`): ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``,
  ``$lte``, nested dicts and lists, numbers compared as numbers, strings as
  strings (a comparison across types is false, never an error);
- search results (:func:`search`): with a query, by cosine similarity of the
  item's best vector, items without vectors after them (as ``InMemoryStore``);
  without one, by ``updated_at`` newest first (ties by namespace text and key);
  ``offset``/``limit`` counted after the filter;
- namespace listings (:func:`list_namespaces`): prefix and suffix conditions with
  ``*`` wildcards, ``max_depth``, sorted, then ``offset``/``limit``;
- TTL (:func:`expires_at`, :func:`is_live`, :func:`refreshed`): an expired item is
  never returned; a read with ``refresh_ttl`` extends the items it returns;
- embeddings (:func:`texts_to_embed`, :func:`similarity`): which texts of a put are
  embedded (``IndexConfig.fields`` or the put's ``index``), exact scoring (cosine,
  l2 or inner product); :func:`ann_candidates`: when a vector index may pick a
  search's candidates, and how many.
"""

from __future__ import annotations

from .batch import BatchPlan, ItemWrite, Refresh, answer, check_op, item_writes, plan_batch
from .filters import matches
from .items import (
    StoredItem,
    expires_at,
    is_live,
    item_identity,
    refreshed,
    to_datetime,
    ttl_text,
    vectors_identity,
)
from .namespaces import (
    RESERVED_ROOT,
    SEP,
    check_labels,
    check_namespace,
    covering,
    list_namespaces,
    listing_prefix,
    namespace_matches,
    ns_from_text,
    ns_prefix_bounds,
    ns_text,
    under,
)
from .search import (
    DISTANCE_TYPES,
    MAX_ANN_CANDIDATES,
    EmbedTask,
    ann_candidates,
    cosine,
    cut_in_storage,
    index_fields,
    search,
    similarity,
    texts_to_embed,
    vectors_by_item,
)

__all__ = [
    "RESERVED_ROOT",
    "SEP",
    "StoredItem",
    "item_identity",
    "vectors_identity",
    "ttl_text",
    "BatchPlan",
    "ItemWrite",
    "Refresh",
    "answer",
    "item_writes",
    "EmbedTask",
    "check_namespace",
    "check_labels",
    "check_op",
    "ns_text",
    "ns_from_text",
    "ns_prefix_bounds",
    "matches",
    "plan_batch",
    "search",
    "list_namespaces",
    "namespace_matches",
    "expires_at",
    "is_live",
    "refreshed",
    "texts_to_embed",
    "cosine",
    "covering",
    "cut_in_storage",
    "ann_candidates",
    "similarity",
    "DISTANCE_TYPES",
    "MAX_ANN_CANDIDATES",
    "under",
    "listing_prefix",
    "index_fields",
    "vectors_by_item",
    "to_datetime",
]
