"""Chain tombstones for ``keep_latest`` trims on Redis (savers with ``integrity=``).

Pure: no redis import, no I/O. A trim removes checkpoints that surviving ones
name as their parent; with the hash chain on, each such survivor's stored
body gets a tombstone in its chain block (``_core.chain.tombstone_bodies``)
saying what was removed, so ``verify`` tells a trim from tampering.

The pruner (``_prune``) plans a batch of trims, then asks :func:`tombstone_args`
for them: one pipelined round trip of ``HMGET`` on the threads' payload hashes
(the survivors' payloads and their removed parents'), then the new payloads
are computed here and handed to ``PRUNE_TRIM`` with the SHA-1 of each payload
as read. The script rewrites them and deletes the removed checkpoints in one
atomic step, and only if every payload is still the one read (else the
thread is read again, like a thread written meanwhile). Without the chain
key the same round trip reads the survivors only: a trim of a chained thread
without the key would break its chain, so it raises ``ChainKeyRequiredError``
instead, and ``PRUNE_TRIM`` gets no rewrites.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Iterable, Sequence
from typing import Any

import ormsgpack

from .._core.chain import ChainKey, refuse_unkeyed_trim, tombstone_bodies
from .._core.records import Sealed
from .._core.retention import CheckpointNode
from ..errors import ChainKeyRequiredError, CorruptRecordError, DurableError
from ._keys import SEP, KeyLayout
from ._records import _pack
from ._requests import Batch, Command, _first_error

__all__ = ["Links", "links", "tombstone_args", "signed_trims"]

#: Namespace -> (surviving checkpoint id -> its removed parent's id, every
#: removed checkpoint id of the namespace); only namespaces with such a survivor.
Links = dict[str, tuple[dict[str, str], list[str]]]


def links(nodes: Iterable[CheckpointNode], kept: set[tuple[str, str]]) -> Links:
    """What a trim that keeps ``kept`` removes under surviving checkpoints."""
    nodes = list(nodes)
    removed: dict[str, list[str]] = {}
    for node in nodes:
        if (node.ns, node.checkpoint_id) not in kept:
            removed.setdefault(node.ns, []).append(node.checkpoint_id)
    gone = {ns: set(ids) for ns, ids in removed.items()}
    out: Links = {}
    for node in nodes:
        if (node.ns, node.checkpoint_id) not in kept or not node.parent_id:
            continue
        if node.parent_id in gone.get(node.ns, ()):
            survivors, _ids = out.setdefault(node.ns, ({}, sorted(removed[node.ns])))
            survivors[node.checkpoint_id] = node.parent_id
    return out


def _field(ns: str, checkpoint_id: str) -> bytes:
    return (ns + SEP + checkpoint_id).encode()


def _fields(found: Links, parents: bool = True) -> list[bytes]:
    """The payload fields to read: the survivors and (``parents``) their removed parents."""
    out: set[bytes] = set()
    for ns, (survivors, _removed) in found.items():
        for survivor, parent in survivors.items():
            out.add(_field(ns, survivor))
            if parents:
                out.add(_field(ns, parent))
    return sorted(out)


def _payload(raw: bytes, where: str) -> list[Any]:
    """A stored payload (``_records.encode_payload``) as its five parts."""
    try:
        parts = ormsgpack.unpackb(raw)
        if not isinstance(parts, list) or len(parts) != 5:
            raise TypeError("not a list of five")
        if not isinstance(parts[1], str) or not isinstance(parts[2], bytes):
            raise TypeError("no body")
    except (ValueError, TypeError) as exc:
        raise CorruptRecordError(
            f"checkpoint {where}: its stored record cannot be read: {exc}"
        ) from exc
    return parts


def rewrites(
    chain: ChainKey,
    tenant: str,
    thread: str,
    found: Links,
    stored: dict[bytes, bytes | None],
) -> list[bytes]:
    """PRUNE_TRIM's rewrites: (field, SHA-1 hex of the payload read, new payload) each.

    ``stored`` maps the fields of :func:`_fields` to the payloads read (None:
    gone meanwhile; the trim script then finds the thread changed).

    Raises:
        CorruptRecordError: A payload or chain block read cannot be decoded
            (``IntegrityError`` for a malformed chain block).
    """
    out: list[bytes] = []
    for ns, (survivors, removed) in sorted(found.items()):
        bodies: dict[str, tuple[str | None, Sealed]] = {}
        parts_of: dict[str, tuple[bytes, list[Any]]] = {}
        parents: dict[str, Sealed | None] = dict.fromkeys(removed)
        for survivor, parent in survivors.items():
            raw = stored.get(_field(ns, survivor))
            if raw is not None:
                parts = _payload(raw, f"{survivor} of thread {thread!r}")
                bodies[survivor] = (parent, Sealed(parts[1], parts[2]))
                parts_of[survivor] = (raw, parts)
            raw = stored.get(_field(ns, parent))
            if raw is not None:
                parts = _payload(raw, f"{parent} of thread {thread!r}")
                parents[parent] = Sealed(parts[1], parts[2])
        new = tombstone_bodies(chain, tenant, thread, ns, bodies, parents)
        for survivor, body in sorted(new.items()):
            raw, parts = parts_of[survivor]
            out.append(_field(ns, survivor))
            out.append(hashlib.sha1(raw).hexdigest().encode())
            out.append(_pack([parts[0], parts[1], body.data, parts[3], parts[4]]))
    return out


def tombstone_args(
    keys: KeyLayout,
    chain: ChainKey | None,
    trims: Sequence[tuple[str, str, Links]],
) -> Generator[Any, Any, list[list[bytes] | DurableError]]:
    """PRUNE_TRIM's rewrite arguments for each (tenant, thread, links) of a batch.

    One pipelined round trip (``HMGET`` of each thread's payloads), none when
    no survivor loses its parent. Without the chain key the survivors are read
    to check that none carries a chain block; a thread with one gets a
    ``ChainKeyRequiredError`` (and no rewrites). A thread whose records cannot
    be read gets its error instead (not trimmed: the caller decides whether to
    raise).
    """
    out: list[list[bytes] | DurableError] = [[] for _ in trims]
    asked: list[tuple[int, list[bytes]]] = []
    requests: list[Command] = []
    for j, (tenant, thread, found) in enumerate(trims):
        # without the key only the survivors: a chained one stops the trim
        fields = _fields(found, parents=chain is not None)
        if fields:
            asked.append((j, fields))
            requests.append(Command(("HMGET", keys.thread(tenant, thread)[1], *fields)))
    if not requests:
        return out
    results = yield Batch(tuple(requests))
    _first_error(results)
    for (j, fields), values in zip(asked, results, strict=True):
        tenant, thread, found = trims[j]
        stored = {f: None if v is None else bytes(v) for f, v in zip(fields, values, strict=True)}
        try:
            if chain is None:
                bodies = (_body(raw, thread) for raw in stored.values() if raw is not None)
                refuse_unkeyed_trim(tenant, thread, bodies)
            else:
                out[j] = rewrites(chain, tenant, thread, found, stored)
        except (CorruptRecordError, ChainKeyRequiredError) as exc:
            out[j] = exc
    return out


def _body(raw: bytes, thread: str) -> Sealed:
    parts = _payload(raw, f"of thread {thread!r}")
    return Sealed(parts[1], parts[2])


def signed_trims(
    keys: KeyLayout,
    chain: ChainKey | None,
    trims: Sequence[tuple[str, str, Links]],
) -> Generator[Any, Any, list[list[bytes]]]:
    """:func:`tombstone_args` for callers that stop at the first thread it cannot sign."""
    out: list[list[bytes]] = []
    for args in (yield from tombstone_args(keys, chain, trims)):
        if isinstance(args, DurableError):
            raise args
        out.append(args)
    return out
