#!/usr/bin/env python
"""Our ``PostgresStore`` against upstream's (langgraph-checkpoint-postgres), same run, same data.

    python benchmarks/store.py                        # on an embedded PostgreSQL with pgvector
    python benchmarks/store.py --quick                # smoke run
    python benchmarks/store.py --url postgresql://postgres@127.0.0.1:5432/test
    python benchmarks/store.py --items 5000 --repeat 7 --calls 30

Variants (``--variants``): ``upstream`` (``langgraph.store.postgres.PostgresStore`` on a
pool of two connections), ``ours`` (``langgraph_durable.postgres.PostgresStore``, no
protection) and ``ours-enc`` (ours with ``encryption=`` from a local keyring). Every store
gets the same ``--items`` items (values with nested numbers and strings, spread over
``--namespaces`` namespaces under ``("bench", ...)``) and the same ``index=`` config: a
deterministic hashing bag-of-words embedding of ``text`` (``--dims``), so puts embed and
searches with a ``query`` rank by meaning. Upstream's config asks for an HNSW index with
cosine distance (``ann_index_config``, ``distance_type``); ours gets those keys too if its
constructor takes them, and the output says whether an ANN index then exists in its schema.

The operations (``OPS``) run round by round: in each of ``--repeat`` rounds every operation
runs ``--calls`` times on each store in turn, the stores' order rotating, all in this
process. Per operation and store: p50 and p99 latency over every call, the median over
rounds of each round's p50 ratio to upstream, client CPU per call (process time), and, in an
untimed pass through ``instrument.RoundTripProxy`` (one connection per store), round trips
and bytes per call. A check pass compares what the stores return: filtered searches must
give the same keys; vector searches give each store's top-10 overlap with the exact
top-10 (computed here from the same embeddings).

By default the run starts its own PostgreSQL from the ``pgserver`` wheel (which ships
pgvector), so upstream's vector search works; ``--url`` names another server (then
upstream gets no ``index=`` unless the server has pgvector, and its vector rows stay
empty). Schemas ``lgd_bench_store_*`` are created and dropped; on a server with pgvector the
extension is created in ``public`` if missing. Writes ``store-<timestamp>.json`` and ``.md``
(also ``latest.store.*``) to ``--out``. See benchmarks/NOTES.md.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import json
import math
import os
import random
import shutil
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _p in (str(HERE.parent), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from instrument import RoundTripProxy, percentile  # noqa: E402
from run import environment, log  # noqa: E402
from savers import UPSTREAM_CONN_KWARGS, admin_connect, create_schema, drop_schema  # noqa: E402

VARIANTS = ("upstream", "ours", "ours-enc", "upstream-async", "ours-async")
DEFAULT_VARIANTS = VARIANTS[:3]
LANGS = ("en", "fr", "de", "es")
SOURCES = ("chat", "email", "doc", "web")
# What upstream is asked for (its defaults spelled out); ours gets it only if it takes it.
ANN_KEYS = {
    "ann_index_config": {"kind": "hnsw", "vector_type": "vector"},
    "distance_type": "cosine",
}
FIXED_KEK = bytes(range(32))  # the benchmark's local keyring key (not a secret)


# --------------------------------------------------------------------------- data


def _vocabulary(rng: random.Random, size: int = 500) -> list[str]:
    syll = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "gu", "re", "fi"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syll) for _ in range(rng.randint(2, 4))))
    return sorted(words)


class Data:
    """The items every store gets, and the arguments of every timed call (seeded)."""

    def __init__(self, items: int, namespaces: int, seed: int = 7) -> None:
        rng = random.Random(seed)
        self.vocab = _vocabulary(rng)
        self.namespaces = [("bench", f"u{i:03d}", "memories") for i in range(namespaces)]
        self.items: list[tuple[tuple[str, ...], str, dict[str, Any]]] = []
        for i in range(items):
            ns = self.namespaces[i % namespaces]
            self.items.append((ns, f"m{i:06d}", self.value(rng, i)))
        self.seed = seed

    def text(self, rng: random.Random, n: int) -> str:
        return " ".join(rng.choice(self.vocab) for _ in range(n))

    def value(self, rng: random.Random, i: int) -> dict[str, Any]:
        return {
            "text": self.text(rng, rng.randint(12, 30)),
            "score": rng.randint(0, 9),  # one digit: upstream compares $gt as text
            "lang": rng.choice(LANGS),
            "meta": {
                "source": rng.choice(SOURCES),
                "turn": rng.randint(1, 200),
                "weight": round(rng.random(), 4),
                "tags": rng.sample(["a", "b", "c", "d", "e", "f"], 2),
            },
            "counts": {"views": rng.randint(0, 10_000), "likes": rng.randint(0, 500)},
            "seq": i,
        }

    def rng(self, *parts: Any) -> random.Random:
        """A generator for one call: the same arguments for every store."""
        digest = hashlib.blake2b(repr((self.seed, *parts)).encode(), digest_size=8).digest()
        return random.Random(int.from_bytes(digest, "little"))


@functools.lru_cache(maxsize=65536)
def _slot(word: str, dims: int) -> tuple[int, float]:
    h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
    return h % dims, 1.0 if (h >> 40) & 1 else -1.0


def make_embed(dims: int) -> Callable[[list[str]], list[list[float]]]:
    """A deterministic local embedding: signed hashing of the words, L2-normalised."""

    def embed(texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            v = [0.0] * dims
            for word in text.lower().split():
                i, sign = _slot(word, dims)
                v[i] += sign
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            out.append([x / norm for x in v])
        return out

    return embed


# --------------------------------------------------------------------------- operations


def _put(store: Any, d: Data, r: int, i: int) -> None:
    rng = d.rng("put", r, i)
    store.put(("writes", f"r{r}"), f"k{i}", d.value(rng, i))


def _put_batch10(store: Any, d: Data, r: int, i: int) -> None:
    from langgraph.store.base import PutOp

    rng = d.rng("putb", r, i)
    store.batch([PutOp(("writes", f"b{r}"), f"k{i}-{j}", d.value(rng, j)) for j in range(10)])


def _pick(d: Data, *parts: Any) -> tuple[tuple[str, ...], str, dict[str, Any]]:
    return d.items[d.rng(*parts).randrange(len(d.items))]


def _get(store: Any, d: Data, r: int, i: int) -> None:
    ns, key, _ = _pick(d, "get", r, i)
    if store.get(ns, key) is None:
        raise RuntimeError(f"missing item {ns} {key}")


def _get_batch10(store: Any, d: Data, r: int, i: int) -> None:
    from langgraph.store.base import GetOp

    ops = [GetOp(*_pick(d, "getb", r, i, j)[:2]) for j in range(10)]
    if any(x is None for x in store.batch(ops)):
        raise RuntimeError("missing item in a batch of gets")


def _user(d: Data, *parts: Any) -> tuple[str, ...]:
    return d.namespaces[d.rng(*parts).randrange(len(d.namespaces))][:2]


def _search_gt(store: Any, d: Data, r: int, i: int) -> None:
    store.search(_user(d, "sgt", r, i), filter={"score": {"$gt": 5}}, limit=10)


def _search_eq(store: Any, d: Data, r: int, i: int) -> None:
    lang = LANGS[d.rng("seq", r, i).randrange(len(LANGS))]
    store.search(_user(d, "seq", r, i), filter={"lang": {"$eq": lang}}, limit=10)


def _search_wide(store: Any, d: Data, r: int, i: int) -> None:
    lang = LANGS[d.rng("swide", r, i).randrange(len(LANGS))]
    store.search(("bench",), filter={"score": {"$gt": 5}, "lang": lang}, limit=10)


def _list_ns(store: Any, d: Data, r: int, i: int) -> None:
    store.list_namespaces(prefix=("bench",), limit=100)


def _query(d: Data, *parts: Any) -> str:
    return d.text(d.rng(*parts), 4)


def _vector(store: Any, d: Data, r: int, i: int) -> None:
    store.search(_user(d, "vec", r, i), query=_query(d, "vec", r, i), limit=10)


def _vector_wide(store: Any, d: Data, r: int, i: int) -> None:
    store.search(("bench",), query=_query(d, "vecw", r, i), limit=10)


# name -> (call, needs an index on the store, what it does)
OPS: dict[str, tuple[Callable[[Any, Data, int, int], None], bool, str]] = {
    "put": (_put, False, "`put` of a new item (its text embedded)"),
    "put_batch10": (_put_batch10, False, "`batch` of 10 `PutOp`s"),
    "get": (_get, False, "`get` of an existing item"),
    "get_batch10": (_get_batch10, False, "`batch` of 10 `GetOp`s"),
    "search_gt": (
        _search_gt,
        False,
        "`search` of one namespace, `{'score': {'$gt': 5}}`, limit 10",
    ),
    "search_eq": (
        _search_eq,
        False,
        "`search` of one namespace, `{'lang': {'$eq': ...}}`, limit 10",
    ),
    "search_wide": (
        _search_wide,
        False,
        "`search` of every namespace, `$gt` and equality, limit 10",
    ),
    "list_namespaces": (_list_ns, False, "`list_namespaces(prefix=('bench',), limit=100)`"),
    "vector": (_vector, True, "`search` of one namespace with `query=`, limit 10"),
    "vector_wide": (_vector_wide, True, "`search` of every namespace with `query=`, limit 10"),
}


# --------------------------------------------------------------------------- stores


class Server:
    """Where the stores live: ``--url``, or a PostgreSQL started from the pgserver wheel."""

    def __init__(self, url: str | None) -> None:
        self.embedded: Any = None
        if url is None:
            from langgraph_durable.postgres.embedded import start_embedded_postgres

            log("starting an embedded PostgreSQL (pgserver wheel) ...")
            self.embedded = start_embedded_postgres(source="wheel")
            url = self.embedded.url
        self.url: str = url
        with admin_connect(url) as conn:
            self.version = conn.execute("SHOW server_version").fetchone()[0]
            row = conn.execute(
                "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone()
            self.pgvector = row[0] if row else None
            if self.pgvector:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")

    def describe(self) -> dict[str, Any]:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(self.url)
        return {
            "server": "embedded (pgserver wheel)" if self.embedded else "given by --url",
            "postgres": self.version,
            "pgvector": self.pgvector,
            "host": f"{params.get('host')}:{params.get('port')}",
        }

    def via(self, proxy: RoundTripProxy) -> str:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(self.url)
        params.update(host="127.0.0.1", port=str(proxy.port), sslmode="disable")
        return make_conninfo(**params)

    def relay_target(self) -> tuple[str, int]:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(self.url)
        return str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)

    def close(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()


class Opened:
    """A store under test and what was learnt opening it."""

    def __init__(self, store: Any, notes: list[str], indexed: bool) -> None:
        self.store = store
        self.notes = notes
        self.indexed = indexed


def schema_of(variant: str, tag: str) -> str:
    return f"lgd_bench_store_{variant.replace('-', '_')}_{tag}"


class OnLoop:
    """An async store behind the sync calls the operations make: each runs to completion on
    ``loop`` (``aput``, ``aget``, ``asearch``, ``alist_namespaces``, ``abatch``)."""

    def __init__(self, store: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.store, self.loop = store, loop

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def put(self, *args: Any, **kwargs: Any) -> Any:
        return self._run(self.store.aput(*args, **kwargs))

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self._run(self.store.aget(*args, **kwargs))

    def search(self, *args: Any, **kwargs: Any) -> Any:
        return self._run(self.store.asearch(*args, **kwargs))

    def list_namespaces(self, *args: Any, **kwargs: Any) -> Any:
        return self._run(self.store.alist_namespaces(*args, **kwargs))

    def batch(self, ops: Any) -> Any:
        return self._run(self.store.abatch(ops))


@contextmanager
def open_store(
    variant: str,
    url: str,
    schema: str,
    index: dict[str, Any],
    pgvector: bool,
    pool_size: int,
    setup: bool,
    loop: asyncio.AbstractEventLoop,
) -> Iterator[Opened]:
    """A store of ``variant`` on ``schema``, set up when ``setup`` (else opened on it as is).

    An async variant is driven on ``loop`` through :class:`OnLoop`.
    """
    notes: list[str] = []
    is_async = variant.endswith("-async")
    if variant.startswith("upstream"):
        if setup:
            create_schema(url, schema)
        kwargs = {**UPSTREAM_CONN_KWARGS, "options": f"-c search_path={schema},public"}
        config = {"index": {**index, **ANN_KEYS}} if pgvector else {}
        if not pgvector:
            notes.append("no pgvector on this server: upstream has no index=")
        if is_async:
            from langgraph.store.postgres.aio import AsyncPostgresStore as UpstreamAsync
            from psycopg_pool import AsyncConnectionPool

            apool = AsyncConnectionPool(
                url, min_size=pool_size, max_size=pool_size, kwargs=kwargs, open=False
            )

            async def start() -> Any:
                await apool.open(wait=True)
                astore = UpstreamAsync(apool, **config)  # type: ignore[arg-type]
                if setup:
                    await astore.setup()
                return astore

            try:
                store: Any = OnLoop(loop.run_until_complete(start()), loop)
                yield Opened(store, _ann_notes(url, schema, setup and pgvector, notes), pgvector)
            finally:
                loop.run_until_complete(apool.close())
            return
        from langgraph.store.postgres import PostgresStore as UpstreamStore
        from psycopg_pool import ConnectionPool

        pool = ConnectionPool(url, min_size=pool_size, max_size=pool_size, kwargs=kwargs)
        try:
            pool.wait()
            store = UpstreamStore(pool, **config)  # type: ignore[arg-type]
            if setup:
                store.setup()
            yield Opened(store, _ann_notes(url, schema, setup and pgvector, notes), pgvector)
        finally:
            pool.close()
        return

    from langgraph_durable.errors import ConfigurationError
    from langgraph_durable.postgres import AsyncPostgresStore as OursAsync
    from langgraph_durable.postgres import PostgresStore as OursStore

    options: dict[str, Any] = {"schema": schema, "tenant": "bench", "pool_size": pool_size}
    if variant == "ours-enc":
        from langgraph_durable.protect import Encryption, LocalKeyring

        options["encryption"] = Encryption(LocalKeyring({"bench": FIXED_KEK}, "bench"))
    if not is_async:
        try:
            ours = OursStore(url, index={**index, **ANN_KEYS}, **options)
            notes.append("took ann_index_config/distance_type")
        except (ConfigurationError, TypeError) as exc:
            ours = OursStore(url, index=index, **options)
            notes.append(f"refused ann_index_config/distance_type ({exc}); exact search")
        try:
            if setup:
                ours.setup()
            yield Opened(ours, _ann_notes(url, schema, setup, notes), True)
        finally:
            ours.close()
        return
    cm: Any = OursAsync.from_conn_string(url, index={**index, **ANN_KEYS}, **options)
    try:
        aours = loop.run_until_complete(cm.__aenter__())
        notes.append("took ann_index_config/distance_type")
    except (ConfigurationError, TypeError) as exc:
        cm = OursAsync.from_conn_string(url, index=index, **options)
        aours = loop.run_until_complete(cm.__aenter__())
        notes.append(f"refused ann_index_config/distance_type ({exc}); exact search")
    try:
        if setup:
            loop.run_until_complete(aours.setup())
        yield Opened(OnLoop(aours, loop), _ann_notes(url, schema, setup, notes), True)
    finally:
        loop.run_until_complete(cm.__aexit__(None, None, None))


def _ann_notes(url: str, schema: str, look: bool, notes: list[str]) -> list[str]:
    """``notes`` and, after a setup, the ANN indexes found in ``schema``."""
    if look:
        ann = ann_indexes(url, schema)
        notes.append(f"ANN index: {'; '.join(ann)}" if ann else "no ANN index in its schema")
    return notes


def ann_indexes(url: str, schema: str) -> list[str]:
    """The HNSW / IVFFlat indexes in ``schema``: which search a store's ``query=`` runs."""
    with admin_connect(url) as conn:
        rows = conn.execute(
            "SELECT indexname || ' (' || substring(indexdef from 'USING (\\w+ \\(.*)') || ')'"
            " FROM pg_indexes WHERE schemaname = %s"
            " AND (indexdef ILIKE '%%using hnsw%%' OR indexdef ILIKE '%%using ivfflat%%')",
            (schema,),
        ).fetchall()
    return [r[0] for r in rows]


def load(store: Any, d: Data, chunk: int = 100) -> float:
    from langgraph.store.base import PutOp

    t0 = time.perf_counter()
    for k in range(0, len(d.items), chunk):
        store.batch([PutOp(ns, key, value) for ns, key, value in d.items[k : k + chunk]])
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- passes


def timed_pass(
    stores: dict[str, Opened], d: Data, ops: list[str], repeat: int, calls: int, warmup: int
) -> dict[str, Any]:
    """Every op on every store, round by round (order rotating); samples per round."""
    names = list(stores)
    wall: dict[str, dict[str, list[list[float]]]] = defaultdict(lambda: defaultdict(list))
    cpu: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for op in ops:  # warm-up: past psycopg's prepare threshold, caches filled
        fn, needs_index, _ = OPS[op]
        for n in names:
            if needs_index and not stores[n].indexed:
                continue
            for i in range(warmup):
                fn(stores[n].store, d, -1, i)
    clock, proc = time.perf_counter, time.process_time
    for r in range(repeat):
        t_round = clock()
        for k, op in enumerate(ops):
            fn, needs_index, _ = OPS[op]
            shift = (r + k) % len(names)
            for n in names[shift:] + names[:shift]:
                if needs_index and not stores[n].indexed:
                    continue
                store, samples = stores[n].store, []
                for i in range(calls):
                    c0, t0 = proc(), clock()
                    fn(store, d, r, i)
                    t1, c1 = clock(), proc()
                    samples.append(t1 - t0)
                    cpu[n][op].append(c1 - c0)
                wall[n][op].append(samples)
        log(
            f"round {r + 1}/{repeat} done ({clock() - t_round:.1f}s, load {os.getloadavg()[0]:.1f})"
        )
    out: dict[str, Any] = {}
    for n in names:
        per: dict[str, Any] = {}
        for op, rounds in wall[n].items():
            flat = [x for rs in rounds for x in rs]
            per[op] = {
                "n": len(flat),
                "p50_ms": percentile(flat, 50) * 1e3,  # type: ignore[operator]
                "p99_ms": percentile(flat, 99) * 1e3,  # type: ignore[operator]
                "mean_ms": statistics.fmean(flat) * 1e3,
                "p50_ms_by_round": [percentile(rs, 50) * 1e3 for rs in rounds],  # type: ignore[operator]
                "cpu_ms_mean": statistics.fmean(cpu[n][op]) * 1e3,
            }
        out[n] = per
    return out


def count_pass(
    variants: list[str],
    server: Server,
    schemas: dict[str, str],
    index: dict[str, Any],
    d: Data,
    ops: list[str],
    calls: int,
    warmup: int,
    loop: asyncio.AbstractEventLoop,
) -> dict[str, Any]:
    """Untimed: round trips and bytes per call, each store on one connection via the relay."""
    out: dict[str, Any] = {}
    for n in variants:
        proxy = RoundTripProxy(*server.relay_target())
        try:
            url = server.via(proxy)
            pgv = bool(server.pgvector)
            with open_store(n, url, schemas[n], index, pgv, 1, False, loop) as o:
                per: dict[str, Any] = {}
                for op in ops:
                    fn, needs_index, _ = OPS[op]
                    if needs_index and not o.indexed:
                        continue
                    for i in range(warmup):
                        fn(o.store, d, -2, i)
                    rows = []
                    for i in range(calls):
                        rt0, up0, down0 = proxy.snapshot()
                        fn(o.store, d, -3, i)
                        rt1, up1, down1 = proxy.snapshot()
                        rows.append((rt1 - rt0, up1 - up0, down1 - down0))
                    per[op] = {
                        "round_trips": statistics.fmean(r[0] for r in rows),
                        "min": min(r[0] for r in rows),
                        "max": max(r[0] for r in rows),
                        "bytes_up": statistics.fmean(r[1] for r in rows),
                        "bytes_down": statistics.fmean(r[2] for r in rows),
                    }
                out[n] = per
        finally:
            proxy.close()
        log(
            f"round trips {n:10s} "
            + " ".join(f"{op}={v['round_trips']:g}" for op, v in per.items())
        )
    return out


def check_pass(stores: dict[str, Opened], d: Data, embed: Callable, dims: int) -> dict[str, Any]:
    """What the stores return: filtered keys must agree; vector top-10 against the exact one.

    Recall@10 counts a returned key as a hit when its exact cosine score is at least the
    exact 10th best (ties at the 10th are common with a hashing embedding of short texts).
    """
    out: dict[str, Any] = {"filters_agree": True, "filter_mismatches": [], "recall_at_10": {}}
    filters = [{"score": {"$gt": 5}}, {"lang": {"$eq": "fr"}}, {"score": {"$gt": 5}, "lang": "de"}]
    for prefix in (d.namespaces[0][:2], ("bench",)):
        for flt in filters:
            got = {
                n: sorted(it.key for it in o.store.search(prefix, filter=flt, limit=100_000))
                for n, o in stores.items()
            }
            if len({tuple(v) for v in got.values()}) > 1:
                out["filters_agree"] = False
                counts = {n: len(v) for n, v in got.items()}
                out["filter_mismatches"].append({"prefix": prefix, "filter": flt, "counts": counts})
    vectors = dict(
        zip((it[1] for it in d.items), embed([it[2]["text"] for it in d.items]), strict=True)
    )
    by_ns: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for ns, key, _ in d.items:
        by_ns[ns[:2]].append(key)
    every = [it[1] for it in d.items]
    hits: dict[str, list[float]] = defaultdict(list)
    returned: dict[str, list[int]] = defaultdict(list)  # results per query (asked for 10)
    for q in range(20):
        prefix = d.namespaces[q % len(d.namespaces)][:2] if q % 2 else ("bench",)
        text = _query(d, "check", q)
        qv = embed([text])[0]
        pool = by_ns[prefix] if len(prefix) > 1 else every
        score = {k: sum(a * b for a, b in zip(qv, vectors[k], strict=True)) for k in pool}
        exact = sorted(pool, key=lambda k: -score[k])[:10]
        tenth = score[exact[-1]] - 1e-9  # a key tied with the exact 10th counts as a hit
        for n, o in stores.items():
            if not o.indexed:
                continue
            got = {it.key for it in o.store.search(prefix, query=text, limit=10)}
            where = " one namespace" if len(prefix) > 1 else " every namespace"
            hits[n + where].append(sum(1 for k in got if score[k] >= tenth) / len(exact))
            returned[n + where].append(len(got))
    out["recall_at_10"] = {k: statistics.fmean(v) for k, v in hits.items()}
    out["returned_of_10"] = {k: statistics.fmean(v) for k, v in returned.items()}
    return out


# --------------------------------------------------------------------------- output


def _f(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def rows(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = [
        "op",
        "store",
        "p50 ms",
        "p99 ms",
        "p50 vs upstream",  # the async upstream for an async store
        "client CPU ms",
        "round trips",
        "KB up/down",
    ]
    body = []
    res = doc["results"]
    for op in doc["settings"]["ops"]:
        for n in doc["settings"]["variants"]:
            t = res.get("timed", {}).get(n, {}).get(op)
            if t is None:
                continue
            c = res.get("round_trips", {}).get(n, {}).get(op)
            ratio = res.get("ratios", {}).get(n, {}).get(op)
            rt = "–"
            if c:
                rt = f"{c['round_trips']:g}"
                if c["min"] != c["max"]:
                    rt += f" ({c['min']:g}–{c['max']:g})"
            body.append(
                [
                    op,
                    n,
                    _f(t["p50_ms"]),
                    _f(t["p99_ms"]),
                    "–" if ratio is None else f"{ratio:.2f}x",
                    _f(t["cpu_ms_mean"]),
                    rt,
                    "–" if not c else f"{c['bytes_up'] / 1024:.1f}/{c['bytes_down'] / 1024:.1f}",
                ]
            )
    return header, body


def baseline(variant: str) -> str:
    """The upstream store a variant is compared with: the async one for an async variant."""
    return "upstream-async" if variant.endswith("-async") else "upstream"


def ratios(timed: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per store and op: the median over rounds of upstream's p50 / the store's p50 (>1: faster;
    an async store against upstream's async store)."""
    out: dict[str, dict[str, float]] = {}
    for n, per in timed.items():
        up = timed.get(baseline(n), {})
        for op, t in per.items():
            if op not in up:
                continue
            pairs = zip(up[op]["p50_ms_by_round"], t["p50_ms_by_round"], strict=True)
            out.setdefault(n, {})[op] = statistics.median(a / b for a, b in pairs if b)
    return out


def preamble(doc: dict[str, Any]) -> list[str]:
    st, env, chk = doc["settings"], doc["environment"], doc["results"].get("check", {})
    lines = [
        f"{st['items']} items in {st['namespaces']} namespaces, {st['dims']}-dim embeddings, "
        f"{st['repeat']} rounds x {st['calls']} calls per op and store; "
        f"server: {env['server']} PostgreSQL {env['postgres']}, pgvector {env['pgvector']}; "
        f"load average {doc['load_before']:.1f} before, {doc['load_after']:.1f} after, "
        f"{env.get('cpu_count')} CPUs",
    ]
    if any(n.endswith("-async") for n in st["variants"]):
        lines.append("an async store's p50 is compared with upstream-async's")
    for n, notes in doc["results"].get("notes", {}).items():
        lines.append(f"{n}: " + "; ".join(notes))
    for n, s in doc["results"].get("load_s", {}).items():
        lines.append(f"{n}: loaded in {s:.1f}s")
    if chk:
        lines.append(
            "filtered searches agree across stores: "
            + ("yes" if chk["filters_agree"] else f"NO {chk['filter_mismatches']}")
        )
        lines.append(
            "vector recall@10 against exact cosine (ties at the 10th count): "
            + ", ".join(f"{k} {v:.2f}" for k, v in chk["recall_at_10"].items())
        )
        lines.append(
            "vector results returned per query (limit 10): "
            + ", ".join(f"{k} {v:.1f}" for k, v in chk.get("returned_of_10", {}).items())
        )
    return lines


def markdown(doc: dict[str, Any]) -> str:
    header, body = rows(doc)
    out = [f"`{doc['command']}`", ""]
    out += [f"- {x}" for x in preamble(doc)]
    out += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(out) + "\n"


def text(doc: dict[str, Any]) -> str:
    header, body = rows(doc)
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i > 1 else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join(
        preamble(doc)
        + ["", line(header), line(["-" * w for w in widths])]
        + [line(r) for r in body]
    )


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--url",
        default=os.environ.get("BENCH_PG_URL") or None,
        help="PostgreSQL URL (env BENCH_PG_URL); default: start one from the pgserver wheel",
    )
    p.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help="comma list from: " + ", ".join(VARIANTS) + " (default %(default)s)",
    )
    p.add_argument("--ops", default=",".join(OPS), help="comma list from: " + ", ".join(OPS))
    p.add_argument("--items", type=int, default=3000, help="items loaded in every store")
    p.add_argument("--namespaces", type=int, default=30, help="namespaces the items spread over")
    p.add_argument("--dims", type=int, default=128, help="embedding dimensions")
    p.add_argument("--repeat", type=int, default=5, help="interleaved rounds")
    p.add_argument("--calls", type=int, default=20, help="calls per op, store and round")
    p.add_argument("--warmup", type=int, default=8, help="untimed calls per op and store first")
    p.add_argument("--counted", type=int, default=5, help="calls per op in the counting pass")
    p.add_argument("--pool-size", type=int, default=2, help="connections per store (timed pass)")
    p.add_argument("--no-round-trips", action="store_true", help="skip the counting pass")
    p.add_argument("--no-check", action="store_true", help="skip the results check")
    p.add_argument("--out", default=str(HERE / "results"), help="output directory")
    p.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    args = p.parse_args(argv)
    if args.quick:
        args.items, args.namespaces, args.repeat, args.calls = 300, 6, 2, 3
        args.warmup, args.counted = 6, 2
    for name, allowed in (("variants", VARIANTS), ("ops", tuple(OPS))):
        picked = [x.strip() for x in getattr(args, name).split(",") if x.strip()]
        bad = [x for x in picked if x not in allowed]
        if bad or not picked:
            p.error(f"--{name}: unknown {bad or 'empty list'}; choose from {', '.join(allowed)}")
        setattr(args, name, picked)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    load_before = os.getloadavg()[0]
    d = Data(args.items, args.namespaces)
    embed = make_embed(args.dims)
    index = {"dims": args.dims, "embed": embed, "fields": ["text"]}
    tag = str(os.getpid())
    schemas = {n: schema_of(n, tag) for n in args.variants}
    server = Server(args.url)
    results: dict[str, Any] = {"notes": {}, "load_s": {}}
    loop = asyncio.new_event_loop()
    try:
        with ExitStack() as stack:
            stores: dict[str, Opened] = {}
            for n in args.variants:
                drop_schema(server.url, schemas[n])
                stores[n] = stack.enter_context(
                    open_store(
                        n,
                        server.url,
                        schemas[n],
                        index,
                        bool(server.pgvector),
                        args.pool_size,
                        True,
                        loop,
                    )
                )
                results["notes"][n] = stores[n].notes
                results["load_s"][n] = load(stores[n].store, d)
                log(
                    f"{n}: loaded {args.items} items in {results['load_s'][n]:.1f}s; "
                    + "; ".join(stores[n].notes)
                )
            if not args.no_check:
                results["check"] = check_pass(stores, d, embed, args.dims)
            results["timed"] = timed_pass(stores, d, args.ops, args.repeat, args.calls, args.warmup)
        results["ratios"] = ratios(results["timed"])
        if not args.no_round_trips:
            results["round_trips"] = count_pass(
                args.variants, server, schemas, index, d, args.ops, args.counted, args.warmup, loop
            )
        env = environment([]) | server.describe()
    finally:
        try:
            for s in schemas.values():
                drop_schema(server.url, s)
        finally:
            # upstream's async store leaves its batching task on the loop
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()
            server.close()
    doc: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "python benchmarks/store.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "settings": {
            k: getattr(args, k)
            for k in (
                "variants",
                "ops",
                "items",
                "namespaces",
                "dims",
                "repeat",
                "calls",
                "warmup",
                "counted",
                "pool_size",
            )
        },
        "ops": {op: OPS[op][2] for op in args.ops},
        "environment": env,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "results": results,
        "elapsed_s": time.time() - started,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jpath, mpath = out / f"store-{stamp}.json", out / f"store-{stamp}.md"
    jpath.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    mpath.write_text(markdown(doc))
    shutil.copyfile(jpath, out / "latest.store.json")
    shutil.copyfile(mpath, out / "latest.store.md")
    print(text(doc))
    print(f"wrote {jpath}, {mpath.name} ({doc['elapsed_s']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
