"""Search results (ordering, scoring, pages) and embeddings (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import PutOp, SearchItem, SearchOp
from langgraph.store.base.embed import get_text_at_path, tokenize_path

from ...errors import InvalidInputError
from .filters import matches
from .items import StoredItem, is_live
from .namespaces import ns_text, under

# ---- search ------------------------------------------------------------------


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors (0.0 when either is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if na == 0 or nb == 0:
        return 0.0
    return dot / (na * nb)


#: The distance types an index may name (LangGraph's ``PostgresIndexConfig`` names).
DISTANCE_TYPES = ("cosine", "l2", "inner_product")


def similarity(a: Sequence[float], b: Sequence[float], distance_type: str = "cosine") -> float:
    """The score of ``b`` for query ``a``, higher is closer: cosine similarity
    (``cosine``), the negated Euclidean distance (``l2``) or the dot product
    (``inner_product``), as pgvector's operators rank them.
    """
    if distance_type == "cosine":
        return cosine(a, b)
    if distance_type == "l2":
        return -math.sqrt(sum((x - y) * (x - y) for x, y in zip(a, b, strict=False)))
    if distance_type == "inner_product":
        return sum(x * y for x, y in zip(a, b, strict=False))
    raise InvalidInputError(
        f"unknown distance_type {distance_type!r}: use one of {', '.join(DISTANCE_TYPES)}"
    )


def _recency(item: StoredItem) -> tuple[float, str, str]:
    """Newest first; ties by the namespace's text form, then the key, in code-point order
    (what a backend's ``ORDER BY updated_at DESC, prefix, key`` under the C collation
    gives, so a page it cuts in SQL is the page cut here)."""
    return (-item.updated_at, ns_text(item.namespace), item.key)


def search(
    op: SearchOp,
    candidates: Iterable[StoredItem],
    now: float,
    query_vector: Sequence[float] | None = None,
    distance_type: str = "cosine",
) -> list[SearchItem]:
    """The result of one search over ``candidates`` (items a backend read under a prefix
    that covers ``op.namespace_prefix``; expired and out-of-prefix ones are dropped here).

    With ``query_vector`` (the store has an index and the op a query), items are
    ranked by their best vector's cosine similarity; ``offset`` skips ranked items and
    items without vectors fill what ``limit`` leaves (as ``InMemoryStore`` does).
    Otherwise newest ``updated_at`` first.
    """
    kept = [
        c
        for c in candidates
        if under(c.namespace, op.namespace_prefix)
        and is_live(c.expires_at, now)
        and matches(c.value, op.filter)
    ]
    if query_vector is None or not op.query:
        kept.sort(key=_recency)
        return [c.search_item() for c in kept[op.offset : op.offset + op.limit]]
    scored: list[tuple[float, StoredItem]] = []
    scoreless: list[StoredItem] = []
    for c in kept:
        if c.vectors:
            best = max(similarity(query_vector, v, distance_type) for v in c.vectors.values())
            scored.append((best, c))
        else:
            scoreless.append(c)
    scored.sort(key=lambda pair: (-pair[0], *_recency(pair[1])))
    page: list[SearchItem] = [
        c.search_item(float(s)) for s, c in scored[op.offset : op.offset + op.limit]
    ]
    if scoreless and len(page) < op.limit:
        scoreless.sort(key=_recency)
        page.extend(c.search_item() for c in scoreless[: op.limit - len(page)])
    return page


def cut_in_storage(op: SearchOp, indexed: bool) -> int | None:
    """How many of the newest items under its prefix a search needs, when that is all
    it needs (no filter, no scoring): ``offset + limit``; else None (every item)."""
    if op.filter or (indexed and op.query):
        return None
    return op.offset + op.limit


#: The most candidate vectors an index search asks for (pgvector's ``hnsw.ef_search``
#: cannot go higher); a search that would need more is scored exactly.
MAX_ANN_CANDIDATES = 1000


def ann_candidates(op: SearchOp, ann: bool, vectors_per_item: int = 1) -> int | None:
    """How many nearest vectors a search asks a vector index for, when an index may
    choose its candidates; else None (the search reads every item under its prefix).

    Only a search with a query and no filter (a filter needs the opened values) on a
    store whose vectors are indexed (``ann``): twice the ``offset + limit`` items'
    vectors (``vectors_per_item`` each), so that exact scoring of the candidates
    still finds the nearest items when the index's order is approximate. None when
    that is more than :data:`MAX_ANN_CANDIDATES`.
    """
    if not ann or not op.query or op.filter:
        return None
    wanted = (op.offset + op.limit) * max(1, vectors_per_item) * 2
    if wanted > MAX_ANN_CANDIDATES:
        return None
    return max(1, wanted)


# ---- embeddings --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EmbedTask:
    """One text of one put to embed, and where its vector goes."""

    namespace: tuple[str, ...]
    key: str
    path: str
    text: str


def index_fields(index: Mapping[str, Any] | None) -> list[str]:
    """The field paths an index embeds by default (``["$"]``: the whole value)."""
    if not index:
        return []
    return list(index.get("fields") or ["$"])


def texts_to_embed(puts: Iterable[PutOp], fields: Sequence[str]) -> list[EmbedTask]:
    """The texts of ``puts`` an index with ``fields`` embeds (none without an index).

    A put's ``index`` overrides ``fields`` (``False``: not embedded); a path that
    yields several texts stores one vector per text (``path.0``, ``path.1``, ...).
    """
    if not fields:
        return []
    tasks: list[EmbedTask] = []
    for op in puts:
        if op.value is None or op.index is False:
            continue
        paths = fields if op.index is None else list(op.index)
        for path in paths:
            texts = get_text_at_path(op.value, path if path == "$" else tokenize_path(path))
            if len(texts) == 1:
                tasks.append(EmbedTask(op.namespace, op.key, path, texts[0]))
            else:
                tasks.extend(
                    EmbedTask(op.namespace, op.key, f"{path}.{i}", text)
                    for i, text in enumerate(texts)
                )
    return tasks


def vectors_by_item(
    tasks: Sequence[EmbedTask], vectors: Sequence[Sequence[float]], dims: int | None = None
) -> dict[tuple[tuple[str, ...], str], dict[str, list[float]]]:
    """The embeddings of each put item, by field path.

    Raises:
        InvalidInputError: the embedder returned another number of vectors than texts,
            or a vector of another size than ``dims``.
    """
    if len(vectors) != len(tasks):
        raise InvalidInputError(
            f"the embedding function returned {len(vectors)} vectors for {len(tasks)} texts"
        )
    out: dict[tuple[tuple[str, ...], str], dict[str, list[float]]] = {}
    for task, vector in zip(tasks, vectors, strict=True):
        values = [float(x) for x in vector]
        if dims is not None and len(values) != dims:
            raise InvalidInputError(
                f"the embedding function returned a vector of {len(values)} dimensions, "
                f"the index says dims={dims}"
            )
        out.setdefault((task.namespace, task.key), {})[task.path] = values
    return out
