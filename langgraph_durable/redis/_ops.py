"""Every Redis key, Lua script and command of the saver, and the operations that use them.

This module is pure (no redis import, no I/O): each saver operation is a
generator that yields requests (:class:`Command`, :class:`Script`,
:class:`Batch`) and receives their results (see
``langgraph_durable._core.sansio``). ``RedisSaver`` and ``AsyncRedisSaver`` run
the same generators through a sync or async driver.

Key layout (``P`` is the saver's prefix, ``T`` the thread's hash tag
``{tenant:thread}`` with both parts percent-encoded, so distinct pairs never
share a tag and every key of a thread lives in one cluster slot)::

    P:{T}:h   hash   "<ns>\\0<id>" -> record header (msgpack: v, parent, run_id,
                     blob refs, DeltaChannel flag); field "\\0" marks a thread
                     registered in its tenant's index; fields "\\0\\0created" and
                     "\\0\\0touched" hold the server times (ms) of its first and
                     last write (the pruner's clock)
    P:{T}:c   hash   "<ns>\\0<id>" -> record payload (msgpack: metadata index
                     JSON, body type, body, metadata type, metadata)
    P:{T}:b   hash   "<ns>\\0<channel>\\0<version>" -> blob (msgpack: type, bytes),
                     or a delta of a list value: "D", >I meta length, meta
                     (msgpack: the version it extends, that version's item
                     count), then the added items (msgpack: type, bytes)
    P:{T}:w   hash   "<ns>\\0<id>" -> task ids that wrote (msgpack list);
                     "<ns>\\0<id>\\0<task>" -> that task's writes (frames)
    P:{T}:i   zset   "<ns>\\0<id>", score 0: by namespace, then id
    P:{T}:n   zset   "<id>\\0<ns>", score 0: by id across namespaces
    P:{T}:e   set    effect ids of the thread's effect journal
    P:{T}:e:<effect id>  hash  one journal entry: state, token, attempt,
                     lease_until, request_type, request, outcome, result_type,
                     result, created, completed (times as Python float reprs),
                     and call (the id of the last call that changed it)
    P:threads:{tenant}   zset   thread id -> server time (ms) it was registered
    P:keys:{tenant}      hash   data-key version -> msgpack [key id, wrapped key
                                or nil once shredded, created (Unix seconds)]
    P:key-tenants        set    tenants that have data keys (envelope encryption)
    P:retention          string the saver's retention policy (JSON), set by setup()
    P:prune-lock         string the running pruner (host:pid:random), with a lease

The data-key hashes and their set never expire and are not touched by
``delete_thread`` or ``prune``: a tenant's keys outlive its threads.

Six keys per thread whatever its size, plus the effect journal's set and
one hash per entry; an expiry covers them all (seven commands plus one per
journal entry), so every key of a thread always has the same expiry.
Identifiers may not contain NUL, which separates the parts of a field; checkpoint
ids sort in time order, so the lexicographic ranges of the two sorted sets give
the latest checkpoint of a namespace and newest-first listings.

A write frame is ``>i idx, >I header length, header (msgpack: task id, task
path, channel, type), >I data length, data``: the scripts read the index and the
channel of a frame without touching its payload.
"""

from __future__ import annotations

import builtins
import hashlib
import heapq
import json
import logging
import math
import secrets
import struct
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import ormsgpack
from langgraph.checkpoint.serde.types import TASKS

from .._core.codec import CheckpointCodec, StoredCheckpoint, ThreadKey
from .._core.effects import DONE, StoredEffect
from .._core.filters import metadata_matches, normalize_filter
from .._core.records import (
    BlobDelta,
    BlobRecord,
    CheckpointRecord,
    Sealed,
    StoredDataKey,
    WriteRecord,
)
from .._core.retention import DELETE, PruneRequest, Retention
from .._core.sansio import Emit, operation
from ..errors import (
    ConfigurationError,
    CorruptRecordError,
    DurableError,
    InvalidInputError,
    StorageError,
)

__all__ = [
    "Command",
    "Script",
    "Batch",
    "ScanKeys",
    "LuaScript",
    "KeyLayout",
    "RedisOps",
    "SetupResult",
    "SCRIPTS",
    "validate_prefix",
    "split_cluster_url",
    "expiry_spec",
]

log = logging.getLogger("langgraph_durable.redis")

SEP = "\x00"
#: Field of the header hash that says the thread is in its tenant's index.
MARK = "\x00"
#: Fields of the header hash with the server times (ms) of a thread's first and
#: last write (two NULs: never a checkpoint's "<ns>\0<id>").
CREATED_FIELD = "\x00\x00created"
TOUCHED_FIELD = "\x00\x00touched"
#: Checkpoints per list page (one round trip each).
LIST_PAGE_SIZE = 100
#: Scripts per pipeline when an operation touches many threads.
BATCH_SIZE = 100
#: Thread ids per read of a tenant's index.
INDEX_CHUNK = 1000
#: Ids first read per thread when listing across threads.
MERGE_PROBE = 20
#: Payload bytes per script call when copying a thread.
COPY_CHUNK_BYTES = 8 * 1024 * 1024
#: Threads remembered as registered but not yet marked (see ``_register``).
PENDING_MARKS_MAX = 10_000
#: The oldest server the scripts run on (script flags need 7.0).
MIN_SERVER_VERSION = (7, 0)
#: ``maxmemory-policy`` values that evict keys.
EVICTING_POLICIES = frozenset(
    {
        "allkeys-lru",
        "allkeys-lfu",
        "allkeys-random",
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
    }
)

#: The fields of an effect-journal entry's hash, in the order the scripts return them.
EFFECT_FIELDS = (
    "state",
    "token",
    "attempt",
    "lease_until",
    "request_type",
    "request",
    "outcome",
    "result_type",
    "result",
    "created",
    "completed",
)
#: Effect ids per read of a thread's journal (an SSCAN hint).
EFFECT_PAGE_SIZE = 100

_FRAME_HEAD = struct.Struct(">iI")
#: First byte of a delta blob (a full one starts with a msgpack array header).
DELTA_MARK = b"D"
#: Stands for a blob sent earlier in the same reply.
_SENT = b"\x01"
_LEN = struct.Struct(">I")
_INT32 = (-(2**31), 2**31 - 1)


# ---------------------------------------------------------------- requests


@dataclass(frozen=True)
class LuaScript:
    """A Lua script the driver runs with EVALSHA (falling back to EVAL).

    Attributes:
        name: A short name for messages.
        source: The script text.
        sha: Its SHA-1, the name the server caches it under.
    """

    name: str
    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())


@dataclass(frozen=True, slots=True)
class Command:
    """One Redis command.

    Attributes:
        args: The command and its arguments (a multi-word command may be one
            string, e.g. ``"CONFIG GET"``).
        every_primary: Run it on every primary (a cluster) and receive a list
            with one result per primary; on a single server, a list of one.
    """

    args: tuple[Any, ...]
    every_primary: bool = False


@dataclass(frozen=True, slots=True)
class Script:
    """One Lua script call; on a cluster it is routed by its keys (all in one slot)."""

    script: LuaScript
    keys: tuple[str, ...]
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Batch:
    """Requests sent together in one pipeline (not a transaction).

    The result is a list with one entry per request: its result, or the
    (translated) :class:`~langgraph_durable.errors.DurableError` it failed with.
    """

    requests: tuple[Command | Script, ...]


@dataclass(frozen=True, slots=True)
class ScanKeys:
    """Every key name matching a pattern, on every primary (SCAN to the end).

    The result is a list of key names (each once). Meant for the few keys of a
    kind (tenant indexes), not for a thread's keys.
    """

    match: str
    count: int = 1000


@dataclass(frozen=True)
class SetupResult:
    """What ``setup()`` found.

    Attributes:
        versions: The server version of each primary.
        warnings: Configuration problems it logged (also sent to the
            ``langgraph_durable.redis`` logger).
    """

    versions: tuple[str, ...]
    warnings: tuple[str, ...]


# ---------------------------------------------------------------- Lua

_PRELUDE = r"""
local H, C, B, W, I, N = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- The effect journal's set (its entries are E .. ':' .. id), in the thread's slot.
local E = string.sub(H, 1, -2) .. 'e'
local SEP = '\0'
local MARK = '\0'
-- Header-hash fields that are not checkpoints start with two NULs (a checkpoint's
-- field "<ns>\0<id>" has one): the thread's creation and last-write server times.
local CREATED = '\0\0created'
local TOUCHED = '\0\0touched'
local TASKS = '__TASKS__'
local EFFECT_FIELDS = {__EFFECT_FIELDS__}

-- An entry's fields in EFFECT_FIELDS order (false where missing).
local function read_effect(id)
  return redis.call('HMGET', E .. ':' .. id, unpack(EFFECT_FIELDS))
end

-- Refuses (before any write) when a key of the thread holds another type.
local function check_types()
  for k = 1, 6 do
    local want = (k <= 4) and 'hash' or 'zset'
    local t = redis.call('TYPE', KEYS[k])['ok']
    if t ~= 'none' and t ~= want then
      return redis.error_reply('LGD_WRONGTYPE key ' .. KEYS[k] .. ' holds a ' .. t ..
        ', expected a ' .. want .. ': something other than the saver wrote it')
    end
  end
  local t = redis.call('TYPE', E)['ok']
  if t ~= 'none' and t ~= 'set' then
    return redis.error_reply('LGD_WRONGTYPE key ' .. E .. ' holds a ' .. t ..
      ', expected a set: something other than the saver wrote it')
  end
  return nil
end

-- Whether a header-hash field is not a checkpoint (MARK, the times).
local function is_meta(f)
  return f == MARK or string.sub(f, 1, 2) == '\0\0'
end

-- The server's time in milliseconds.
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Records a write (or a read that counts as one) and sets the thread's expiry.
-- spec '': nothing (a read). Otherwise a thread with checkpoints gets its
-- creation time set once and its last-write time now (server times, ms); then
-- '0' leaves every key without an expiry, and '<idle>:<absolute>' (ms, either
-- may be empty) makes every key of the thread (effect journal included) expire
-- together at min(now + idle, creation + absolute).
local function expire_all(spec)
  if spec == '' then return end
  local now = server_ms()
  local created = now
  if redis.call('EXISTS', I) == 1 then
    local stamp = string.format('%.0f', now)
    redis.call('HSETNX', H, CREATED, stamp)
    redis.call('HSET', H, TOUCHED, stamp)
    created = tonumber(redis.call('HGET', H, CREATED)) or now
  end
  local idle, absolute = string.match(spec, '^(%d*):(%d*)$')
  -- without a TTL on the first key, none has one
  if not idle and redis.call('PTTL', H) == -1 then return end
  local at = nil
  if idle and idle ~= '' then at = now + tonumber(idle) end
  if absolute and absolute ~= '' then
    local cut = created + tonumber(absolute)
    if not at or cut < at then at = cut end
  end
  -- a deadline already passed expires the thread right after this script
  if at and at <= now then at = now + 1 end
  local keys = {H, C, B, W, I, N, E}
  for _, id in ipairs(redis.call('SMEMBERS', E)) do keys[#keys + 1] = E .. ':' .. id end
  for _, k in ipairs(keys) do
    if at then
      redis.call('PEXPIREAT', k, string.format('%.0f', at))
    else
      redis.call('PERSIST', k)
    end
  end
end

local function split(s)
  local p = string.find(s, SEP, 1, true)
  return string.sub(s, 1, p - 1), string.sub(s, p + 1)
end

local function tasks_of(f)
  local list = redis.call('HGET', W, f)
  if list then return cmsgpack.unpack(list) end
  return {}
end

local function task_writes(f)
  local out = {}
  for _, task in ipairs(tasks_of(f)) do
    local v = redis.call('HGET', W, f .. SEP .. task)
    if v then out[#out + 1] = v end
  end
  return out
end

-- The version a delta blob extends (nil for a full value).
local function base_of(v)
  if string.byte(v, 1) ~= 68 then return nil end
  local n = struct.unpack('>I', v, 2)
  return cmsgpack.unpack(string.sub(v, 6, 5 + n))[1]
end

-- Appends a blob to out; a blob already in this reply is sent once, later as
-- '\1' (and its chain is not followed again). Python walks the same order.
local function add_blob(out, ns, ch, ver, sent)
  local bf = ns .. SEP .. ch .. SEP .. ver
  if sent[bf] then
    out[#out + 1] = '\1'
    return nil
  end
  sent[bf] = true
  local v = redis.call('HGET', B, bf) or ''
  out[#out + 1] = v
  return v
end

local function collect(ns, id, sent)
  local f = ns .. SEP .. id
  local hdr = redis.call('HGET', H, f)
  if not hdr then return nil end
  local h = cmsgpack.unpack(hdr)
  local refs, blobs = h[4], {}
  for j = 1, #refs, 2 do
    local v = add_blob(blobs, ns, refs[j], refs[j + 1], sent)
    local b = v and base_of(v)
    while b do
      v = add_blob(blobs, ns, refs[j], b, sent)
      b = v and base_of(v)
    end
  end
  local sends = {}
  if h[1] < 4 and h[2] then sends = task_writes(ns .. SEP .. h[2]) end
  return {ns, id, hdr, redis.call('HGET', C, f) or '', blobs, task_writes(f), sends}
end

local function drop(f)
  local ns, id = split(f)
  redis.call('ZREM', I, f)
  redis.call('ZREM', N, id .. SEP .. ns)
  redis.call('HDEL', H, f)
  redis.call('HDEL', C, f)
  for _, task in ipairs(tasks_of(f)) do redis.call('HDEL', W, f .. SEP .. task) end
  redis.call('HDEL', W, f)
end

-- Marks the blobs a checkpoint reads, with the versions its deltas are built on.
local function mark_refs(f, h, refs)
  local ns = split(f)
  local r = h[4]
  for j = 1, #r, 2 do
    local bf = ns .. SEP .. r[j] .. SEP .. r[j + 1]
    while bf and not refs[bf] do
      refs[bf] = true
      local v = redis.call('HGET', B, bf)
      local b = v and base_of(v)
      bf = b and (ns .. SEP .. r[j] .. SEP .. b)
    end
  end
end

local function gc_blobs(refs)
  for _, bf in ipairs(redis.call('HKEYS', B)) do
    if not refs[bf] then redis.call('HDEL', B, bf) end
  end
end

local function has_sends(f)
  for _, s in ipairs(task_writes(f)) do
    local pos, n = 1, #s
    while pos <= n do
      local _, hlen = struct.unpack('>iI', s, pos)
      local hdr = cmsgpack.unpack(string.sub(s, pos + 8, pos + 7 + hlen))
      if hdr[3] == TASKS then return true end
      local dlen = struct.unpack('>I', s, pos + 8 + hlen)
      pos = pos + 12 + hlen + dlen
    end
  end
  return false
end

-- Whether the thread must be added to its tenant's index, and the server time.
-- mark = '1': this process added it after an earlier write; set the mark now,
-- unless the thread was deleted since (its index did not exist before this write).
local function registration(mark, existed)
  if redis.call('HEXISTS', H, MARK) == 1 then return {0, 0} end
  if redis.call('EXISTS', I) == 0 then return {0, 0} end
  if mark == '1' and existed then
    redis.call('HSET', H, MARK, '1')
    return {0, 0}
  end
  return {1, server_ms()}
end

-- Deletes every key of the thread, its effect journal included.
local function drop_thread()
  for _, id in ipairs(redis.call('SMEMBERS', E)) do redis.call('UNLINK', E .. ':' .. id) end
  return redis.call('UNLINK', H, C, B, W, I, N, E)
end
""".replace("__TASKS__", TASKS).replace(
    "__EFFECT_FIELDS__", ", ".join(f"'{name}'" for name in EFFECT_FIELDS)
)


def _lua(name: str, flags: str | None, body: str) -> LuaScript:
    shebang = "#!lua" if flags is None else f"#!lua flags={flags}"
    return LuaScript(name, f"{shebang}\n{_PRELUDE}\n{body.strip()}\n")


# KEYS: the thread's six, then (not on a cluster) its tenant's index.
# ARGV: expiry spec (see expire_all), ns, id, header, payload, mark, thread id,
# number of base fields, the blob fields deltas are built on, then blob
# field/value pairs. Returns {-1} and writes nothing when a base is missing; else
# registration() plus a string of '1'/'0' per blob: created by this write or
# already there. With the index key the script registers the thread itself and
# reports nothing to do.
PUT = _lua(
    "put",
    None,
    r"""
local err = check_types()
if err then return err end
local nb = tonumber(ARGV[8])
for j = 9, 8 + nb do
  if redis.call('HEXISTS', B, ARGV[j]) == 0 then return {-1} end
end
local f = ARGV[2] .. SEP .. ARGV[3]
local existed = redis.call('EXISTS', I) == 1
local created = {}
for j = 9 + nb, #ARGV, 2 do
  created[#created + 1] = tostring(redis.call('HSETNX', B, ARGV[j], ARGV[j + 1]))
end
redis.call('HSET', C, f, ARGV[5])
redis.call('HSET', H, f, ARGV[4])
redis.call('ZADD', I, 0, f)
redis.call('ZADD', N, 0, ARGV[3] .. SEP .. ARGV[2])
expire_all(ARGV[1])
local out = registration(ARGV[6], existed)
if out[1] == 1 and KEYS[7] then
  redis.call('ZADD', KEYS[7], out[2], ARGV[7])
  redis.call('HSET', H, MARK, '1')
  out = {0, 0}
end
out[3] = table.concat(created)
return out
""",
)

# ARGV: expiry spec, "<ns>\0<id>", task id, replace ('1'/'0'), then idx/frame pairs.
PUT_WRITES = _lua(
    "put_writes",
    None,
    r"""
local err = check_types()
if err then return err end
local f, task = ARGV[2], ARGV[3]
local tf = f .. SEP .. task
local cur = redis.call('HGET', W, tf)
local frames, order = {}, {}
if cur then
  local pos, n = 1, #cur
  while pos <= n do
    local idx, hlen = struct.unpack('>iI', cur, pos)
    local dlen = struct.unpack('>I', cur, pos + 8 + hlen)
    local stop = pos + 12 + hlen + dlen
    if frames[idx] == nil then order[#order + 1] = idx end
    frames[idx] = string.sub(cur, pos, stop - 1)
    pos = stop
  end
end
local changed = false
for j = 5, #ARGV, 2 do
  local idx = tonumber(ARGV[j])
  if frames[idx] == nil then
    order[#order + 1] = idx
    frames[idx] = ARGV[j + 1]
    changed = true
  elseif ARGV[4] == '1' then
    frames[idx] = ARGV[j + 1]
    changed = true
  end
end
if changed then
  local parts = {}
  for k, idx in ipairs(order) do parts[k] = frames[idx] end
  redis.call('HSET', W, tf, table.concat(parts))
  if not cur then
    local tasks = tasks_of(f)
    tasks[#tasks + 1] = task
    redis.call('HSET', W, f, cmsgpack.pack(tasks))
  end
end
expire_all(ARGV[1])
return changed and 1 or 0
""",
)

# ARGV: ns, id ('' for the latest), expiry spec ('' to leave it).
GET = _lua(
    "get",
    "allow-oom",
    r"""
local ns, id = ARGV[1], ARGV[2]
if id == '' then
  local m = redis.call('ZREVRANGEBYLEX', I, '(' .. ns .. '\1', '[' .. ns .. SEP, 'LIMIT', 0, 1)
  if #m == 0 then return {} end
  id = string.sub(m[1], #ns + 2)
end
local e = collect(ns, id, {})
if not e then return {} end
expire_all(ARGV[3])
return e
""",
)

# ARGV: 'i' or 'n' (which sorted set), max, min, count, expiry spec.
# Returns {more, last member scanned, entries}.
PAGE = _lua(
    "page",
    "allow-oom",
    r"""
local by_ns = ARGV[1] == 'i'
local count = tonumber(ARGV[4])
local m = redis.call('ZREVRANGEBYLEX', by_ns and I or N, ARGV[2], ARGV[3], 'LIMIT', 0, count + 1)
local more = 0
if #m > count then
  more = 1
  m[#m] = nil
end
local out, sent = {}, {}
for j = 1, #m do
  local a, b = split(m[j])
  local e
  if by_ns then e = collect(a, b, sent) else e = collect(b, a, sent) end
  if e then out[#out + 1] = e end
end
if #out > 0 then expire_all(ARGV[5]) end
return {more, m[#m] or '', out}
""",
)

# ARGV: max, min, count over the by-id set. Returns {thread exists, more, members}.
IDS = _lua(
    "ids",
    "no-writes",
    r"""
local count = tonumber(ARGV[3])
local m = redis.call('ZREVRANGEBYLEX', N, ARGV[1], ARGV[2], 'LIMIT', 0, count + 1)
local more = 0
if #m > count then
  more = 1
  m[#m] = nil
end
return {redis.call('EXISTS', I), more, m}
""",
)

# ARGV: expiry spec, then "<ns>\0<id>" fields. Returns the entries found.
FETCH = _lua(
    "fetch",
    "allow-oom",
    r"""
local out, sent = {}, {}
for j = 2, #ARGV do
  local ns, id = split(ARGV[j])
  local e = collect(ns, id, sent)
  if e then out[#out + 1] = e end
end
if #out > 0 then expire_all(ARGV[1]) end
return out
""",
)

# ARGV: run ids. Returns {checkpoints deleted, thread still has checkpoints}.
DELETE_RUNS = _lua(
    "delete_runs",
    "allow-oom",
    r"""
if redis.call('EXISTS', I) == 0 then return {0, 0} end
local runs = {}
for j = 1, #ARGV do runs[ARGV[j]] = true end
local all = redis.call('HGETALL', H)
local gone, refs = 0, {}
for j = 1, #all, 2 do
  local f = all[j]
  if not is_meta(f) then
    local h = cmsgpack.unpack(all[j + 1])
    if h[3] and runs[h[3]] then
      drop(f)
      gone = gone + 1
    else
      mark_refs(f, h, refs)
    end
  end
end
if gone > 0 then
  gc_blobs(refs)
  -- no checkpoint left: nor is the thread (its times and mark go too)
  if redis.call('EXISTS', I) == 0 then redis.call('HDEL', H, MARK, CREATED, TOUCHED) end
end
return {gone, redis.call('EXISTS', I)}
""",
)

# A consistent snapshot of a thread's hashes (the sorted sets follow from them)
# and of its effect journal ({id, fields in EFFECT_FIELDS order} per entry).
READ_ALL = _lua(
    "read_all",
    "no-writes",
    r"""
local fx = {}
for _, id in ipairs(redis.call('SMEMBERS', E)) do
  local v = read_effect(id)
  if v[1] then fx[#fx + 1] = {id, v} end
end
return {redis.call('HGETALL', H), redis.call('HGETALL', C), redis.call('HGETALL', B),
        redis.call('HGETALL', W), fx}
""",
)

# ARGV: expiry spec, mark, #blobs, #task fields, #task lists, then blob pairs, task-field
# pairs, task-list pairs, and (field, header, payload) triples of records.
# Existing entries of the target win; records (the visible part) are written last.
MERGE = _lua(
    "merge",
    None,
    r"""
local err = check_types()
if err then return err end
local existed = redis.call('EXISTS', I) == 1
local nb, nt, nl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local j = 6
for _ = 1, nb do redis.call('HSETNX', B, ARGV[j], ARGV[j + 1]); j = j + 2 end
for _ = 1, nt do redis.call('HSETNX', W, ARGV[j], ARGV[j + 1]); j = j + 2 end
for _ = 1, nl do
  local f = ARGV[j]
  local tasks, have, changed = tasks_of(f), {}, false
  for _, t in ipairs(tasks) do have[t] = true end
  for _, t in ipairs(cmsgpack.unpack(ARGV[j + 1])) do
    if not have[t] then
      tasks[#tasks + 1] = t
      changed = true
    end
  end
  if changed then redis.call('HSET', W, f, cmsgpack.pack(tasks)) end
  j = j + 2
end
while j <= #ARGV do
  local f = ARGV[j]
  if redis.call('HEXISTS', H, f) == 0 then
    local ns, id = split(f)
    redis.call('HSET', C, f, ARGV[j + 2])
    redis.call('HSET', H, f, ARGV[j + 1])
    redis.call('ZADD', I, 0, f)
    redis.call('ZADD', N, 0, id .. SEP .. ns)
  end
  j = j + 3
end
expire_all(ARGV[1])
return registration(ARGV[2], existed)
""",
)


def _index_lua(name: str, flags: str | None, body: str) -> LuaScript:
    shebang = "#!lua" if flags is None else f"#!lua flags={flags}"
    return LuaScript(name, f"{shebang}\n{body.strip()}\n")


# KEYS: a tenant's index. ARGV: start, stop (ranks). Flat member/score list.
INDEX_PAGE = _index_lua(
    "index_page",
    "no-writes",
    "return redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES')",
)

# KEYS: a tenant's index. ARGV: thread, score. Removes the thread only if it was not
# registered again since the caller read that score.
INDEX_FORGET = _index_lua(
    "index_forget",
    "allow-oom",
    r"""
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
""",
)

# KEYS: a tenant's data-key hash. ARGV: (version, expected value, new value)
# triples. Replaces each version whose stored value still is the expected one
# (compare-and-set on the bytes Python packed); returns how many it replaced.
SWAP_DATA_KEYS = _index_lua(
    "swap_data_keys",
    "allow-oom",
    r"""
local n = 0
for j = 1, #ARGV, 3 do
  if redis.call('HGET', KEYS[1], ARGV[j]) == ARGV[j + 1] then
    redis.call('HSET', KEYS[1], ARGV[j], ARGV[j + 2])
    n = n + 1
  end
end
return n
""",
)

# ---------------------------------------------------------------- Lua: effect journal
#
# An entry is the hash E .. ':' .. id (see the module docstring); E, the set of the
# thread's effect ids, lets a thread's deletion, copy and TTL refresh find them.
# Times are Python float reprs compared with tonumber. The field ``call`` holds
# the id of the last call that claimed or completed the entry, so that call, sent
# again after its reply was lost, finds its own change instead of refusing it.

# KEYS: the thread's six. Deletes them and the thread's effect journal.
DROP = _lua(
    "drop",
    "allow-oom",
    r"""
return drop_thread()
""",
)

# KEYS: the thread's six, E, the entry. ARGV: write spec, read spec, effect id,
# lease_until, now, takeover ('1'/'0'), request type, request, call id.
# Returns {won (1/0), fields in EFFECT_FIELDS order}.
EFFECT_CLAIM = _lua(
    "effect_claim",
    None,
    r"""
local X, id, call = KEYS[8], ARGV[3], ARGV[9]
local function reply(won)
  local out = redis.call('HMGET', X, unpack(EFFECT_FIELDS))
  table.insert(out, 1, won)
  return out
end
if redis.call('EXISTS', X) == 0 then
  redis.call('HSET', X, 'state', 'claimed', 'token', '1', 'attempt', '1', 'lease_until', ARGV[4],
    'request_type', ARGV[7], 'request', ARGV[8], 'created', ARGV[5], 'call', call)
  redis.call('SADD', E, id)
  expire_all(ARGV[1])
  return reply(1)
end
local v = redis.call('HMGET', X, 'state', 'lease_until', 'call')
if v[1] == 'claimed' then
  if v[3] == call then return reply(1) end
  local lease = tonumber(v[2])
  if ARGV[6] == '1' and lease and lease <= tonumber(ARGV[5]) then
    redis.call('HINCRBY', X, 'token', 1)
    redis.call('HINCRBY', X, 'attempt', 1)
    redis.call('HSET', X, 'lease_until', ARGV[4], 'call', call)
    redis.call('SADD', E, id)
    expire_all(ARGV[1])
    return reply(1)
  end
end
expire_all(ARGV[2])
return reply(0)
""",
)

# KEYS: the thread's six, E, the entry. ARGV: expiry spec, token, outcome, result type,
# result, now, call id. Returns 1 when recorded, 0 when refused (changes nothing).
EFFECT_COMPLETE = _lua(
    "effect_complete",
    None,
    r"""
local X = KEYS[8]
local v = redis.call('HMGET', X, 'state', 'token', 'call')
if v[1] == 'done' and v[3] == ARGV[7] then return 1 end
if v[1] ~= 'claimed' or tonumber(v[2]) ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', X, 'state', 'done', 'outcome', ARGV[3], 'result_type', ARGV[4],
  'result', ARGV[5], 'completed', ARGV[6], 'call', ARGV[7])
expire_all(ARGV[1])
return 1
""",
)

# KEYS: E, the entry. ARGV: effect id, token ('' for any state and token).
# Returns whether the entry was deleted.
EFFECT_DELETE = _index_lua(
    "effect_delete",
    "allow-oom",
    r"""
if ARGV[2] ~= '' then
  local v = redis.call('HMGET', KEYS[2], 'state', 'token')
  if v[1] ~= 'claimed' or tonumber(v[2]) ~= tonumber(ARGV[2]) then return 0 end
end
redis.call('SREM', KEYS[1], ARGV[1])
return redis.call('DEL', KEYS[2])
""",
)

# KEYS: the thread's six, E. ARGV: read spec, SSCAN cursor, count.
# Returns {next cursor, {{id, fields in EFFECT_FIELDS order}, ...}}.
EFFECT_PAGE = _lua(
    "effect_page",
    "allow-oom",
    r"""
local r = redis.call('SSCAN', E, ARGV[2], 'COUNT', ARGV[3])
local out = {}
for _, id in ipairs(r[2]) do
  local v = read_effect(id)
  if v[1] then out[#out + 1] = {id, v} end
end
if #out > 0 then expire_all(ARGV[1]) end
return {r[1], out}
""",
)

# KEYS: the thread's six, E. ARGV: expiry spec, overwrite ('1': replace entries the thread
# has, '0': keep them), then per entry: id, number of fields n, n field/value pairs.
# Returns the number of entries written.
EFFECT_WRITE = _lua(
    "effect_write",
    None,
    r"""
local t = redis.call('TYPE', E)['ok']
if t ~= 'none' and t ~= 'set' then
  return redis.error_reply('LGD_WRONGTYPE key ' .. E .. ' holds a ' .. t ..
    ', expected a set: something other than the saver wrote it')
end
local j, written = 3, 0
while j <= #ARGV do
  local id, n = ARGV[j], tonumber(ARGV[j + 1])
  local x = E .. ':' .. id
  if ARGV[2] == '1' or redis.call('EXISTS', x) == 0 then
    redis.call('DEL', x)
    for k = j + 2, j + 2 * n, 2 do redis.call('HSET', x, ARGV[k], ARGV[k + 1]) end
    redis.call('SADD', E, id)
    written = written + 1
  end
  j = j + 2 + 2 * n
end
expire_all(ARGV[1])
return written
""",
)

#: Every script, for ``setup()`` to load.
SCRIPTS: tuple[LuaScript, ...] = (
    PUT,
    PUT_WRITES,
    GET,
    PAGE,
    IDS,
    FETCH,
    DELETE_RUNS,
    READ_ALL,
    MERGE,
    INDEX_PAGE,
    INDEX_FORGET,
    SWAP_DATA_KEYS,
    DROP,
    EFFECT_CLAIM,
    EFFECT_COMPLETE,
    EFFECT_DELETE,
    EFFECT_PAGE,
    EFFECT_WRITE,
)


# ---------------------------------------------------------------- names


def validate_prefix(prefix: str) -> str:
    """Check that ``prefix`` can start the saver's key names and return it."""
    if not isinstance(prefix, str) or not prefix:
        raise ConfigurationError(f"prefix must be a non-empty string, got {prefix!r}")
    bad = [c for c in "{}\x00" if c in prefix]
    if bad or len(prefix) > 128:
        raise ConfigurationError(
            f"prefix {prefix!r} is not allowed: use up to 128 characters without "
            "'{', '}' or NUL (a brace would change the keys' cluster hash slot), e.g. 'lgd'"
        )
    return prefix


def _tag_part(value: str) -> str:
    """Percent-encode the characters that delimit a hash tag or its parts."""
    return value.replace("%", "%25").replace(":", "%3A").replace("{", "%7B").replace("}", "%7D")


def _ident(value: Any, what: str) -> str:
    """``value`` as a string fit for a key or field part (no NUL, valid UTF-8)."""
    text = value if isinstance(value, str) else str(value)
    if SEP in text:
        raise InvalidInputError(f"{what} must not contain NUL characters, got {text!r}")
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{what} is not valid Unicode text: {text!r}") from exc
    return text


class KeyLayout:
    """The key names of one saver prefix (see the module docstring).

    Args:
        prefix: The key prefix (validated).
    """

    SUFFIXES = ("h", "c", "b", "w", "i", "n")

    def __init__(self, prefix: str) -> None:
        self.prefix = validate_prefix(prefix)

    def tag(self, tenant: str, thread: str) -> str:
        """The hash tag shared by every key of one thread (with braces)."""
        return "{" + _tag_part(tenant) + ":" + _tag_part(thread) + "}"

    def thread(self, tenant: str, thread: str) -> tuple[str, ...]:
        """The six keys of a thread, in the order the scripts expect."""
        base = self._base(tenant, thread)
        return tuple(base + s for s in self.SUFFIXES)

    def _base(self, tenant: str, thread: str) -> str:
        return f"{self.prefix}:{self.tag(tenant, thread)}:"

    def effects(self, tenant: str, thread: str) -> str:
        """The set of a thread's effect ids (the scripts derive it from the ``h`` key)."""
        return self._base(tenant, thread) + "e"

    def effect(self, tenant: str, thread: str, effect_id: str) -> str:
        """The hash of one effect-journal entry of a thread (in the thread's slot)."""
        return self._base(tenant, thread) + "e:" + effect_id

    def tenant_index(self, tenant: str) -> str:
        """The sorted set of a tenant's thread ids (its own slot)."""
        return f"{self.prefix}:threads:{{{_tag_part(tenant)}}}"

    def data_keys(self, tenant: str) -> str:
        """The hash of a tenant's data-key versions (one slot, never expires)."""
        return f"{self.prefix}:keys:{{{_tag_part(tenant)}}}"

    def key_tenants(self) -> str:
        """The set of tenants that have data keys."""
        return f"{self.prefix}:key-tenants"

    def retention(self) -> str:
        """The string holding the saver's retention policy (JSON; ``setup()`` writes it)."""
        return f"{self.prefix}:retention"

    def prune_lock(self) -> str:
        """The string naming the running pruner (with a lease)."""
        return f"{self.prefix}:prune-lock"


def split_cluster_url(url: str) -> tuple[str, bool]:
    """A redis-py URL and whether it names a cluster.

    ``redis+cluster://``, ``rediss+cluster://`` and a ``cluster=true`` query
    parameter name a cluster; the returned URL has plain ``redis://`` /
    ``rediss://`` and no ``cluster`` parameter.

    Raises:
        ConfigurationError: Not a Redis URL.
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError(f"a Redis URL is required, got {url!r}")
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    cluster = False
    if scheme.endswith("+cluster"):
        scheme, cluster = scheme[: -len("+cluster")], True
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigurationError(
            f"unsupported Redis URL scheme {parts.scheme!r} in {url!r}: use redis://, "
            "rediss://, unix://, or redis+cluster:// / rediss+cluster:// for a cluster"
        )
    query = []
    named = False
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name.lower() == "cluster":
            named = True
            if value.lower() in ("1", "true", "yes", "on"):
                cluster = True
            elif value.lower() not in ("0", "false", "no", "off", ""):
                raise ConfigurationError(f"cluster={value!r} in {url!r}: use true or false")
            continue
        query.append((name, value))
    if cluster and scheme == "unix":
        raise ConfigurationError(f"a cluster cannot be reached over a unix socket: {url!r}")
    if scheme == parts.scheme.lower() and not named:
        return url.strip(), cluster  # as given: nothing to take out
    rebuilt = urlunsplit((scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))
    return rebuilt, cluster


# ---------------------------------------------------------------- records


def _pack(value: Any) -> bytes:
    try:
        return ormsgpack.packb(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"cannot encode a record for Redis: {exc}") from exc


def encode_header(rec: CheckpointRecord) -> bytes:
    """The part of a record the scripts read (str, int and bool only: Lua's cmsgpack)."""
    refs: list[str] = []
    for channel, version in rec.blob_refs:
        refs.append(_ident(channel, "channel name"))
        refs.append(_ident(version, "channel version"))
    return _pack(
        [
            rec.v,
            False if rec.parent_checkpoint_id is None else str(rec.parent_checkpoint_id),
            False if rec.run_id is None else rec.run_id,
            refs,
            "counters_since_delta_snapshot" in rec.metadata_index,
        ]
    )


def encode_payload(rec: CheckpointRecord) -> bytes:
    """The part of a record only Python reads."""
    index = json.dumps(rec.metadata_index, separators=(",", ":"))
    return _pack([index, rec.body.type, rec.body.data, rec.metadata.type, rec.metadata.data])


def encode_blob(blob: BlobRecord) -> bytes:
    """A channel value (empty, full or a delta; see the module docstring)."""
    sealed = blob.sealed
    if sealed is None:
        return _pack(["empty", None])
    value = _pack([sealed.type, sealed.data])
    if blob.base is None:
        return value
    meta = _pack([_ident(blob.base, "channel version"), blob.prefix])
    return DELTA_MARK + _LEN.pack(len(meta)) + meta + value


def decode_blob(raw: bytes) -> Sealed | BlobDelta | None:
    """What ``encode_blob`` stored (None: the channel is empty)."""
    try:
        if raw[:1] == DELTA_MARK:
            (n,) = _LEN.unpack_from(raw, 1)
            base, prefix = ormsgpack.unpackb(raw[5 : 5 + n])
            b_type, b_data = ormsgpack.unpackb(raw[5 + n :])
            return BlobDelta(str(base), int(prefix), Sealed(b_type, b_data))
        b_type, b_data = ormsgpack.unpackb(raw)
    except (ValueError, TypeError, struct.error) as exc:
        raise CorruptRecordError(f"a stored channel value cannot be read: {exc}") from exc
    return None if b_type == "empty" or b_data is None else Sealed(b_type, b_data)


def encode_frame(record: WriteRecord) -> bytes:
    """One pending write as a frame (see the module docstring)."""
    if not _INT32[0] <= record.idx <= _INT32[1]:
        raise InvalidInputError(f"write index {record.idx} is out of range")
    head = _pack([record.task_id, record.task_path, record.channel, record.sealed.type])
    data = record.sealed.data
    return _FRAME_HEAD.pack(record.idx, len(head)) + head + _LEN.pack(len(data)) + data


def decode_frames(blob: bytes) -> Iterator[tuple[str, str, int, str, Sealed]]:
    """(task id, task path, idx, channel, sealed) of each frame in ``blob``."""
    pos, end = 0, len(blob)
    try:
        while pos < end:
            idx, hlen = _FRAME_HEAD.unpack_from(blob, pos)
            pos += 8
            task_id, task_path, channel, type_ = ormsgpack.unpackb(blob[pos : pos + hlen])
            pos += hlen
            (dlen,) = _LEN.unpack_from(blob, pos)
            pos += 4
            data = bytes(blob[pos : pos + dlen])
            if len(data) != dlen:
                raise ValueError("truncated frame")
            pos += dlen
            yield task_id, task_path, idx, channel, Sealed(type_, data)
    except (struct.error, ValueError, TypeError) as exc:
        raise CorruptRecordError(f"a stored write frame cannot be read: {exc}") from exc


def encode_data_key(key: StoredDataKey) -> bytes:
    """A data-key version as its hash field stores it (the version is the field)."""
    return _pack([key.key_id, key.wrapped, float(key.created)])


def decode_data_key(version: Any, raw: bytes) -> StoredDataKey:
    """What ``encode_data_key`` stored under field ``version``.

    Raises:
        CorruptRecordError: The field or the value is not one the saver wrote.
    """
    try:
        key_id, wrapped, created = ormsgpack.unpackb(raw)
        return StoredDataKey(
            int(_text(version)),
            str(key_id),
            None if wrapped is None else bytes(wrapped),
            float(created),
        )
    except (ValueError, TypeError) as exc:
        raise CorruptRecordError(
            f"stored data-key version {_text(version)!r} cannot be read: {exc}"
        ) from exc


def _hash_pairs(reply: Any) -> list[tuple[bytes, bytes]]:
    """The (field, value) pairs of an HGETALL reply (redis-py's dict, or a flat list)."""
    if isinstance(reply, dict):
        return [(bytes(k), bytes(v)) for k, v in reply.items()]
    return list(_pairs(list(reply or [])))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


class _Entry:
    """One checkpoint as a read script returns it.

    ``seen`` maps (ns, channel, version) to the blobs of earlier entries of the
    same reply: a script sends a blob once per reply.
    """

    __slots__ = (
        "ns",
        "checkpoint_id",
        "header",
        "payload",
        "blobs",
        "bases",
        "writes",
        "sends",
        "_index",
    )

    def __init__(self, raw: Sequence[Any], seen: dict[tuple[str, str, str], Any]) -> None:
        try:
            ns, cid, hdr, payload, blobs, writes, sends = raw
            self.ns = _text(ns)
            self.checkpoint_id = _text(cid)
            self.header = ormsgpack.unpackb(hdr)
            self.payload = ormsgpack.unpackb(payload)
            self.blobs, self.bases = self._walk(self.header[3], list(blobs or []), seen)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise CorruptRecordError(f"a stored checkpoint record cannot be read: {exc}") from exc
        self.writes: list[Any] = list(writes or [])
        self.sends: list[Any] = list(sends or [])
        self._index: dict[str, Any] | None = None

    def _walk(
        self, refs: Sequence[str], values: list[Any], seen: dict[tuple[str, str, str], Any]
    ) -> tuple[
        list[tuple[str, str, Sealed | BlobDelta | None]],
        dict[tuple[str, str], Sealed | BlobDelta | None],
    ]:
        """The values a read script sent, in its order: each referenced version,
        then the versions its delta chain extends. Returns (channel, version,
        blob) of the referenced ones and the chains' blobs by (channel, version)."""
        blobs: list[tuple[str, str, Sealed | BlobDelta | None]] = []
        bases: dict[tuple[str, str], Sealed | BlobDelta | None] = {}
        pos = 0
        for j in range(0, len(refs) - 1, 2):
            channel, version = refs[j], refs[j + 1]
            first, earlier = True, False
            while True:
                where = (self.ns, channel, version)
                if earlier:  # the script sent the rest of this chain earlier in the reply
                    if where not in seen:
                        break
                    blob = seen[where]
                else:
                    raw = values[pos]
                    pos += 1
                    if raw == _SENT:
                        blob, earlier = seen[where], True
                    elif not raw:  # missing: the channel is absent, as in a SQL join
                        seen[where] = None
                        break
                    else:
                        blob = seen[where] = decode_blob(bytes(raw))
                if first:
                    blobs.append((channel, version, blob))
                else:
                    bases[(channel, version)] = blob
                if not isinstance(blob, BlobDelta):
                    break
                version, first = blob.base, False
        return blobs, bases

    def metadata_index(self) -> dict[str, Any]:
        """The clear metadata index as stored (parsed once per entry).

        Not a dict (altered storage) reads as ``{}``, which the encryption
        pipeline then finds differs from the encrypted metadata.
        """
        if self._index is None:
            try:
                index = json.loads(self.payload[0])
            except (ValueError, TypeError, IndexError) as exc:
                raise CorruptRecordError(
                    f"checkpoint {self.checkpoint_id}: stored metadata index cannot be read: {exc}"
                ) from exc
            self._index = index if isinstance(index, dict) else {}
        return self._index

    def stored(self, thread: str) -> StoredCheckpoint:
        """The checkpoint for the codec, with its stored clear metadata index.

        The codec's pipeline compares that index with the opened metadata (when
        it encrypts), so an altered clear index fails like altered ciphertext.
        """
        try:
            _v, parent, _run, _refs, _delta = self.header
            _index, c_type, c_data, m_type, m_data = self.payload
        except (ValueError, TypeError) as exc:
            raise CorruptRecordError(
                f"checkpoint {self.checkpoint_id} of thread {thread!r} has a malformed record"
            ) from exc
        writes = [w for blob in self.writes for w in decode_frames(blob)]
        sends = [
            (task_id, path, idx, sealed)
            for blob in self.sends
            for task_id, path, idx, channel, sealed in decode_frames(blob)
            if channel == TASKS
        ]
        return StoredCheckpoint(
            thread=thread,
            ns=self.ns,
            checkpoint_id=self.checkpoint_id,
            parent_checkpoint_id=parent if isinstance(parent, str) else None,
            body=Sealed(c_type, c_data),
            metadata=Sealed(m_type, m_data),
            blobs=self.blobs,
            bases=self.bases,
            writes=writes,
            parent_sends=sends,
            metadata_index=self.metadata_index(),
        )


def expiry_spec(policy: Retention | None) -> str:
    """The expiry spec a write passes its script (see ``expire_all`` in the scripts).

    ``"0"``: no expiry (no policy, or ``keep_latest``, which the pruner carries
    out); ``"<idle ms>:<absolute ms>"`` (either may be empty) under ``delete``.
    """
    if policy is None or policy.strategy != DELETE:
        return "0"
    idle = "" if policy.idle is None else str(max(1, round(policy.idle.total_seconds() * 1000)))
    absolute = (
        ""
        if policy.absolute is None
        else str(max(1, round(policy.absolute.total_seconds() * 1000)))
    )
    return f"{idle}:{absolute}"


def _is_meta(f: bytes) -> bool:
    """Whether a header-hash field is not a checkpoint (the mark, the thread's times)."""
    return f == MARK.encode() or f[:2] == b"\x00\x00"


def _first_error(results: Iterable[Any]) -> None:
    for result in results:
        if isinstance(result, DurableError):
            raise result


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class _Desc:
    """Heap item that pops the largest key first."""

    __slots__ = ("key", "cursor")

    def __init__(self, key: tuple[str, str, str], cursor: _Cursor) -> None:
        self.key = key
        self.cursor = cursor

    def __lt__(self, other: _Desc) -> bool:
        return self.key > other.key


class _Cursor:
    """Where a cross-thread listing is in one thread."""

    __slots__ = ("thread", "keys", "members", "more", "last")

    def __init__(self, thread: str, keys: tuple[str, ...]) -> None:
        self.thread = thread
        self.keys = keys
        self.members: deque[bytes] = deque()
        self.more = False
        self.last = b""

    def fill(self, more: int, members: Sequence[bytes]) -> None:
        self.members.extend(members)
        self.more = bool(more)
        if members:
            self.last = members[-1]

    def head(self) -> _Desc | None:
        if not self.members:
            return None
        cid, _, ns = self.members[0].partition(b"\x00")
        return _Desc((cid.decode(), self.thread, ns.decode()), self)


# ---------------------------------------------------------------- operations


class RedisOps:
    """The saver's operations on one key prefix, as sans-IO generators.

    Args:
        prefix: Key prefix of every key the saver writes.
        refresh_ttl_on_read: Whether reads also count as writes for retention
            (they restart the thread's idle time).
        page_size: Checkpoints per ``list`` round trip.
        codec: The checkpoint codec (owns the record pipeline).
        index_in_script: Whether ``put`` may touch the tenant's index in its
            script (one server, not a cluster, where the index is in another
            slot): a thread's first write is then one round trip too.
        retention: The retention policy of a tenant (asked on every write), or
            None: threads never expire by themselves.
    """

    def __init__(
        self,
        prefix: str,
        refresh_ttl_on_read: bool,
        page_size: int,
        codec: CheckpointCodec,
        index_in_script: bool = False,
        retention: Callable[[str], Retention | None] | None = None,
    ) -> None:
        self.keys = KeyLayout(prefix)
        self._index_in_script = index_in_script
        self.codec = codec
        self.page_size = page_size
        self._refresh_on_read = refresh_ttl_on_read
        self._retention = retention
        # Threads this process added to their tenant's index whose mark is not yet
        # set; their next write sets it (saving a round trip on the first one).
        self._pending_marks: dict[tuple[str, str], None] = {}

    # ---- setup ---------------------------------------------------------------

    @operation
    def setup(
        self, ttl_set: bool, retention: str | None = None
    ) -> Generator[Any, Any, SetupResult]:
        """Check the servers, load the scripts, warn about unsafe configuration.

        Args:
            ttl_set: Whether threads may have an expiry (for the eviction check).
            retention: The saver's retention policy as JSON, stored for the CLI
                (None leaves a stored one as it is).
        """
        from ._prune import PRUNE_SCRIPTS

        infos = yield Command(("INFO", "server"), every_primary=True)
        versions = tuple(_server_version(info) for info in infos)
        for text in versions:
            if _version_tuple(text) < MIN_SERVER_VERSION:
                raise StorageError(
                    f"Redis {text} is too old: the saver needs Redis 7.0 or later (or "
                    "Valkey 7.2 or later) for its Lua script flags"
                )
        for script in (*SCRIPTS, *PRUNE_SCRIPTS):
            yield Command(("SCRIPT LOAD", script.source))
        if retention is not None:
            yield Command(("SET", self.keys.retention(), retention))
        warnings: list[str] = []
        try:
            configs = yield Command(
                ("CONFIG GET", "maxmemory-policy", "save", "appendonly"), every_primary=True
            )
        except StorageError as exc:  # managed services often disable CONFIG
            log.info("cannot read the Redis configuration (%s); eviction check skipped", exc)
            configs = []
        for config in configs:
            message = _eviction_warning(_config_dict(config), ttl_set)
            if message and message not in warnings:
                warnings.append(message)
                log.warning("%s", message)
        return SetupResult(versions=versions, warnings=tuple(warnings))

    # ---- writes --------------------------------------------------------------

    @operation
    def put(
        self,
        key: ThreadKey,
        config: dict[str, Any],
        checkpoint: Any,
        metadata: Any,
        new_versions: Any,
    ) -> Generator[Any, Any, Any]:
        """Store a checkpoint with its new blobs: one script, one round trip.

        On a cluster the first write of a thread adds it to its tenant's index
        (one more); on one server the script does it.
        A list channel stored as a delta whose base is gone (the thread was
        deleted or expired meanwhile) is written again in full (one more).
        """
        tenant, thread, ns = self._thread_parts(key)
        keys = self.keys.thread(tenant, thread)
        if self._index_in_script:
            keys = (*keys, self.keys.tenant_index(tenant))
        rec = self.codec.encode_checkpoint(key, config, checkpoint, metadata, new_versions)
        checkpoint_id = _ident(rec.checkpoint_id, "checkpoint id")
        if rec.parent_checkpoint_id is not None:
            _ident(rec.parent_checkpoint_id, "parent checkpoint id")
        head = [self._write_spec(tenant), ns, checkpoint_id]
        result = yield Script(PUT, keys, (*head, *self._put_args(tenant, thread, ns, rec)))
        if result and int(result[0]) < 0:
            self.codec.forget_thread(tenant, thread)
            rec = self.codec.encode_checkpoint(
                key, config, checkpoint, metadata, new_versions, allow_delta=False
            )
            result = yield Script(PUT, keys, (*head, *self._put_args(tenant, thread, ns, rec)))
        flags = _text(result[2]) if len(result) > 2 else ""
        self.codec.written(
            rec, [b.channel for b, flag in zip(rec.blobs, flags, strict=False) if flag == "1"]
        )
        yield from self._register(tenant, thread, result)
        return self.codec.config(key, checkpoint_id)

    def _put_args(self, tenant: str, thread: str, ns: str, rec: CheckpointRecord) -> list[Any]:
        """PUT's arguments after the expiry spec, ns and id (see the script)."""
        args: list[Any] = [
            encode_header(rec),
            encode_payload(rec),
            self._mark_flag(tenant, thread),
            thread,
        ]
        fields: list[str] = []
        bases: list[str] = []
        for blob in rec.blobs:
            channel = _ident(blob.channel, "channel name")
            fields.append(ns + SEP + channel + SEP + _ident(blob.version, "channel version"))
            if blob.base is not None:
                bases.append(ns + SEP + channel + SEP + _ident(blob.base, "channel version"))
        args.append(len(bases))
        args.extend(bases)
        for blob, f in zip(rec.blobs, fields, strict=True):
            args.append(f)
            args.append(encode_blob(blob))
        return args

    @operation
    def put_writes(
        self,
        key: ThreadKey,
        checkpoint_id: str,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Generator[Any, Any, None]:
        """Store a task's pending writes: one script, one round trip."""
        if not writes:
            return None
        tenant, thread, ns = self._thread_parts(key)
        field = ns + SEP + _ident(checkpoint_id, "checkpoint id")
        task = _ident(task_id, "task id")
        records, replace = self.codec.encode_writes(key, checkpoint_id, writes, task, task_path)
        args: list[Any] = [self._write_spec(tenant), field, task, "1" if replace else "0"]
        for record in records:
            args.append(record.idx)
            args.append(encode_frame(record))
        yield Script(PUT_WRITES, self.keys.thread(tenant, thread), tuple(args))
        return None

    def _thread_parts(self, key: ThreadKey) -> tuple[str, str, str]:
        return (
            _ident(key.tenant, "tenant id"),
            _ident(key.thread, "thread_id"),
            _ident(key.ns, "checkpoint_ns"),
        )

    def _mark_flag(self, tenant: str, thread: str) -> str:
        return "1" if (tenant, thread) in self._pending_marks else "0"

    def _specs(self, tenant: str) -> tuple[str, str]:
        """The expiry specs (see the scripts' ``expire_all``) of a write and of a read.

        A write always records the thread's times; it sets an expiry only under a
        ``delete`` policy with a time bound (``keep_latest`` leaves trimming to
        the pruner: an expiry would delete the whole thread). A read records
        and refreshes only with ``refresh_ttl_on_read`` and a policy.
        """
        policy = None if self._retention is None else self._retention(tenant)
        if policy is None:
            return "0", ""
        write = expiry_spec(policy)
        return write, write if self._refresh_on_read else ""

    def _write_spec(self, tenant: str) -> str:
        return self._specs(tenant)[0]

    def _read_spec(self, tenant: str) -> str:
        return self._specs(tenant)[1]

    def _register(
        self, tenant: str, thread: str, result: Sequence[Any]
    ) -> Generator[Any, Any, None]:
        """Add a thread its write script reported unregistered to the tenant's index.

        The index lives in another slot, so this is a second step: if it fails,
        the thread stays unmarked and the next write reports it again.
        """
        self._pending_marks.pop((tenant, thread), None)
        if not result or int(result[0]) != 1:
            return None
        try:
            yield Command(("ZADD", self.keys.tenant_index(tenant), int(result[1]), thread))
        except StorageError as exc:
            log.warning(
                "thread %r was stored but not added to tenant %r's index (%s); "
                "its next write adds it",
                thread,
                tenant,
                exc,
            )
            return None
        if len(self._pending_marks) >= PENDING_MARKS_MAX:
            self._pending_marks.clear()
        self._pending_marks[(tenant, thread)] = None
        return None

    # ---- reads ---------------------------------------------------------------

    @operation
    def get_tuple(self, key: ThreadKey, checkpoint_id: str | None) -> Generator[Any, Any, Any]:
        """The latest (or the given) checkpoint of a thread namespace: one round trip."""
        tenant, thread, ns = self._thread_parts(key)
        cid = _ident(checkpoint_id, "checkpoint id") if checkpoint_id else ""
        raw = yield Script(
            GET, self.keys.thread(tenant, thread), (ns, cid, self._read_spec(tenant))
        )
        if not raw:
            return None
        return self.codec.decode(key, _Entry(raw, {}).stored(thread))

    @operation
    def list(
        self,
        tenant: str,
        thread: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        filter: dict[str, Any] | None,
        before_id: str | None,
        limit: int | None,
        echo_tenant: bool,
    ) -> Generator[Any, Any, None]:
        """Stream matching checkpoints newest first, a page per round trip.

        ``thread`` None lists across the tenant's threads (through its index);
        ``ns`` None across namespaces of the thread. Filters are matched in
        Python on each checkpoint's stored metadata index.
        """
        if limit == 0:  # the saver base has checked limit and filter
            return None
        wanted = normalize_filter(filter)
        tenant = _ident(tenant, "tenant id")
        cid = _ident(checkpoint_id, "checkpoint id") if checkpoint_id else None
        before = _ident(before_id, "before checkpoint id") if before_id else None
        if cid is not None and before is not None and not cid < before:
            return None
        if thread is None:
            yield from self._list_threads(tenant, cid, wanted, before, limit, echo_tenant)
            return None
        thread = _ident(thread, "thread_id")
        if ns is not None:
            ns = _ident(ns, "checkpoint_ns")
        zset, hi, lo = _ranges(ns, cid, before)
        keys = self.keys.thread(tenant, thread)
        remaining = limit
        memo = self.codec.list_memo()
        read_spec = self._read_spec(tenant)
        while True:
            count = self.page_size
            if remaining is not None and wanted is None:
                count = min(remaining, count)
            more, last, entries = yield Script(PAGE, keys, (zset, hi, lo, count, read_spec))
            seen: dict[tuple[str, str, str], Any] = {}
            for raw in entries:
                entry = _Entry(raw, seen)
                if wanted is not None and not metadata_matches(entry.metadata_index(), wanted):
                    continue
                row_key = ThreadKey(tenant, thread, entry.ns, echo_tenant)
                yield Emit(self.codec.decode(row_key, entry.stored(thread), memo))
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return None
            if not int(more):
                return None
            hi = "(" + _text(last)

    def _list_threads(
        self,
        tenant: str,
        cid: str | None,
        wanted: dict[str, Any] | None,
        before: str | None,
        limit: int | None,
        echo_tenant: bool,
    ) -> Generator[Any, Any, None]:
        """Merge the newest-first id streams of every thread of a tenant.

        First the ids (a few per thread, a pipeline per ``BATCH_SIZE`` threads),
        then the full checkpoints in pages of the merged order.
        """
        _, hi, lo = _ranges(None, cid, before)
        threads = yield from self._threads(tenant)
        heap: list[_Desc] = []
        gone: list[tuple[str, bytes]] = []
        probe = min(MERGE_PROBE, limit) if limit is not None else MERGE_PROBE
        for chunk in _chunks(threads, BATCH_SIZE):
            cursors = [_Cursor(t, self.keys.thread(tenant, t)) for t, _ in chunk]
            results = yield Batch(tuple(Script(IDS, c.keys, (hi, lo, probe)) for c in cursors))
            _first_error(results)
            for (thread, score), cursor, (exists, more, members) in zip(
                chunk, cursors, results, strict=True
            ):
                if not int(exists):
                    gone.append((thread, score))
                    continue
                cursor.fill(more, members)
                item = cursor.head()
                if item is not None:
                    heapq.heappush(heap, item)
        yield from self._forget(tenant, gone)
        remaining = limit
        memo = self.codec.list_memo()
        read_spec = self._read_spec(tenant)
        while heap:
            want = self.page_size
            if remaining is not None and wanted is None:
                want = min(remaining, want)
            picked: list[tuple[str, str, str]] = []
            while heap and len(picked) < want:
                item = heapq.heappop(heap)
                cursor = item.cursor
                cursor.members.popleft()
                picked.append(item.key)
                if not cursor.members and cursor.more:
                    exists, more, members = yield Script(
                        IDS, cursor.keys, (b"(" + bytes(cursor.last), lo, self.page_size)
                    )
                    cursor.fill(more if int(exists) else 0, members if int(exists) else [])
                nxt = cursor.head()
                if nxt is not None:
                    heapq.heappush(heap, nxt)
            by_thread: dict[str, list[str]] = {}
            for checkpoint_id, thread, ns in picked:
                by_thread.setdefault(thread, []).append(ns + SEP + checkpoint_id)
            order = list(by_thread)
            results = yield Batch(
                tuple(
                    Script(
                        FETCH,
                        self.keys.thread(tenant, t),
                        (read_spec, *by_thread[t]),
                    )
                    for t in order
                )
            )
            _first_error(results)
            found: dict[tuple[str, str, str], _Entry] = {}
            for thread, entries in zip(order, results, strict=True):
                seen: dict[tuple[str, str, str], Any] = {}
                for raw in entries:
                    entry = _Entry(raw, seen)
                    found[(entry.checkpoint_id, thread, entry.ns)] = entry
            for pick in picked:
                hit = found.get(pick)
                if hit is None:  # deleted since its id was read
                    continue
                if wanted is not None and not metadata_matches(hit.metadata_index(), wanted):
                    continue
                thread = pick[1]
                row_key = ThreadKey(tenant, thread, hit.ns, echo_tenant)
                yield Emit(self.codec.decode(row_key, hit.stored(thread), memo))
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return None
        return None

    def _threads(self, tenant: str) -> Generator[Any, Any, Sequence[tuple[str, bytes]]]:
        """Every (thread id, registration score) in a tenant's index."""
        index = self.keys.tenant_index(tenant)
        out: list[tuple[str, bytes]] = []
        seen: set[str] = set()
        start = 0
        while True:
            flat = yield Script(INDEX_PAGE, (index,), (start, start + INDEX_CHUNK - 1))
            for j in range(0, len(flat) - 1, 2):
                thread = _text(flat[j])
                if thread not in seen:
                    seen.add(thread)
                    out.append((thread, bytes(flat[j + 1])))
            if len(flat) < 2 * INDEX_CHUNK:
                return out
            start += INDEX_CHUNK

    def _forget(self, tenant: str, gone: Sequence[tuple[str, bytes]]) -> Generator[Any, Any, None]:
        """Lazily drop threads that expired or lost their checkpoints from the index."""
        index = self.keys.tenant_index(tenant)
        for chunk in _chunks(gone, BATCH_SIZE):
            results = yield Batch(
                tuple(Script(INDEX_FORGET, (index,), (thread, score)) for thread, score in chunk)
            )
            for result in results:
                if isinstance(result, DurableError):
                    log.info("could not drop an expired thread from the index: %s", result)
        return None

    # ---- deletes, copies, pruning -------------------------------------------

    @operation
    def delete_thread(self, tenant: str, thread_id: str) -> Generator[Any, Any, None]:
        """Delete every key of one thread (all namespaces, effect journal): one round trip."""
        yield from self._delete_threads(tenant, [thread_id])
        return None

    def _delete_threads(self, tenant: str, thread_ids: Sequence[str]) -> Generator[Any, Any, None]:
        tenant = _ident(tenant, "tenant id")
        index = self.keys.tenant_index(tenant)
        threads = [_ident(t, "thread_id") for t in thread_ids]
        for chunk in _chunks(threads, BATCH_SIZE):
            requests: list[Command | Script] = []
            for thread in chunk:
                self._pending_marks.pop((tenant, thread), None)
                self.codec.forget_thread(tenant, thread)
                requests.append(Script(DROP, self.keys.thread(tenant, thread)))
                requests.append(Command(("ZREM", index, thread)))
            _first_error((yield Batch(tuple(requests))))
        return None

    @operation
    def delete_for_runs(self, tenant: str, run_ids: Sequence[str]) -> Generator[Any, Any, int]:
        """Delete the checkpoints (and their writes) made by the given runs.

        Visits every thread in the tenant's index, a pipeline per ``BATCH_SIZE``
        threads; each thread's script is atomic.
        """
        ids = [str(r) for r in run_ids]
        if not ids:
            return 0
        tenant = _ident(tenant, "tenant id")
        threads = yield from self._threads(tenant)
        total = 0
        gone: list[tuple[str, bytes]] = []
        for chunk in _chunks(threads, BATCH_SIZE):
            results = yield Batch(
                tuple(
                    Script(DELETE_RUNS, self.keys.thread(tenant, t), tuple(ids)) for t, _ in chunk
                )
            )
            _first_error(results)
            for (thread, score), (deleted, remaining) in zip(chunk, results, strict=True):
                total += int(deleted)
                if not int(remaining):
                    gone.append((thread, score))
        yield from self._forget(tenant, gone)
        return total

    @operation
    def copy_thread(self, tenant: str, source: str, target: str) -> Generator[Any, Any, None]:
        """Copy every checkpoint, blob and write of a thread to another thread id.

        One read of the source (a consistent snapshot), then writes to the
        target in chunks of about ``COPY_CHUNK_BYTES``, blobs and writes first
        and checkpoints last, so a checkpoint is never visible before its parts.
        Entries the target already has are kept. Effect-journal entries are
        copied first (a thread may have some before its first checkpoint).
        """
        if source == target:
            raise InvalidInputError("copy_thread: source and target thread ids are the same")
        tenant = _ident(tenant, "tenant id")
        source = _ident(source, "source thread_id")
        target = _ident(target, "target thread_id")
        h, c, b, w, fx = yield Script(READ_ALL, self.keys.thread(tenant, source))
        yield from self._copy_effects(tenant, target, fx)
        payloads = dict(_pairs(c))
        records = [(f, hdr, payloads.get(f, b"")) for f, hdr in _pairs(h) if not _is_meta(f)]
        if not records:
            return None
        blobs = list(_pairs(b))
        task_fields: list[tuple[bytes, bytes]] = []
        task_lists: list[tuple[bytes, bytes]] = []
        for f, value in _pairs(w):
            (task_fields if f.count(b"\x00") == 2 else task_lists).append((f, value))
        keys = self.keys.thread(tenant, target)
        result: Any = None
        for counts, args in _copy_chunks(blobs, task_fields, task_lists, records):
            result = yield Script(
                MERGE,
                keys,
                (self._write_spec(tenant), self._mark_flag(tenant, target), *counts, *args),
            )
        yield from self._register(tenant, target, result)
        return None

    @operation
    def prune(
        self, tenant: str, thread_ids: Sequence[str], strategy: str
    ) -> Generator[Any, Any, None]:
        """Prune threads: ``keep_latest`` or ``delete`` everything.

        ``keep_latest`` keeps ``keep_set(..., 1)``: each namespace's latest
        checkpoint with what it needs (the parent holding a format-1..3
        checkpoint's sends; the ancestors a DeltaChannel value is rebuilt
        from), and the blobs those read, delta bases included. Each thread is
        trimmed by one script (a thread written between the read and the trim
        is read again).
        """
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(
                f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'"
            )
        threads = [str(t) for t in thread_ids]
        if strategy == "delete":
            yield from self._delete_threads(tenant, threads)
            return None
        from ._prune import trim_threads

        tenant = _ident(tenant, "tenant id")
        threads = [_ident(t, "thread_id") for t in threads]
        yield from trim_threads(self.keys, tenant, threads, 1)
        return None

    @operation
    def prune_expired(
        self, request: PruneRequest, policy: Callable[[str], Retention | None] | None
    ) -> Generator[Any, Any, None]:
        """Delete or trim the threads retention says have expired; sweep the indexes.

        Emits a ``PruneProgress`` after each batch, then one ``PruneReport``
        (see ``_prune``). ``policy`` None: threads expire natively and the
        run only removes the index entries of threads that are gone.
        """
        from ._prune import prune_expired

        yield from prune_expired(self.keys, request, policy, self._forget_deleted)
        return None

    def _forget_deleted(self, tenant: str, thread: str) -> None:
        """Forget what this process remembers of a thread it deleted."""
        self._pending_marks.pop((tenant, thread), None)
        self.codec.forget_thread(tenant, thread)

    @operation
    def retention_get(self) -> Generator[Any, Any, str | None]:
        """The retention policy ``setup()`` stored (JSON), or None."""
        raw = yield Command(("GET", self.keys.retention()))
        return None if raw is None else _text(raw)

    @operation
    def retention_set(self, text: str | None) -> Generator[Any, Any, None]:
        """Store a retention policy (JSON of ``Retention.to_json``); None deletes it.

        Raises:
            ConfigurationError: ``text`` is not a stored policy.
        """
        key = self.keys.retention()
        if text is None:
            yield Command(("DEL", key))
            return None
        policy = Retention.from_json(text)  # refuses what could not be read back
        yield Command(("SET", key, policy.to_json()))
        return None

    # ---- effect journal --------------------------------------------------------

    def _effect_keys(self, tenant: str, thread: str, effect_id: str) -> tuple[str, tuple[str, ...]]:
        """The checked effect id and the keys the claim and complete scripts take:
        the thread's six, E, the entry."""
        tenant = _ident(tenant, "tenant id")
        thread = _ident(thread, "thread_id")
        effect_id = _effect_id(effect_id)
        keys = (
            *self.keys.thread(tenant, thread),
            self.keys.effects(tenant, thread),
            self.keys.effect(tenant, thread, effect_id),
        )
        return effect_id, keys

    @operation
    def effect_claim(
        self,
        tenant: str,
        thread: str,
        effect_id: str,
        request: Sealed,
        lease_until: float,
        now: float,
        takeover: bool,
    ) -> Generator[Any, Any, StoredEffect]:
        """Claim an effect: a fresh entry, a takeover of an expired claim, or the stored entry.

        One script, one round trip. A claim (fresh or takeover) is a write: it
        restarts the thread's TTL, entries included.
        """
        effect_id, keys = self._effect_keys(tenant, thread, effect_id)
        write_spec, read_spec = self._specs(_ident(tenant, "tenant id"))
        reply = yield Script(
            EFFECT_CLAIM,
            keys,
            (
                write_spec,
                read_spec,
                effect_id,
                _time(lease_until, "lease_until"),
                _time(now, "now"),
                "1" if takeover else "0",
                _ident(request.type, "request type"),
                bytes(request.data),
                _call_id(),
            ),
        )
        return _decode_effect(effect_id, reply[1:], bool(int(reply[0])))

    @operation
    def effect_complete(
        self,
        tenant: str,
        thread: str,
        effect_id: str,
        token: int,
        outcome: str,
        result: Sealed,
        now: float,
    ) -> Generator[Any, Any, bool]:
        """Record an effect's result if ``token`` still holds its claim; one round trip."""
        effect_id, keys = self._effect_keys(tenant, thread, effect_id)
        done = yield Script(
            EFFECT_COMPLETE,
            keys,
            (
                self._write_spec(_ident(tenant, "tenant id")),
                str(int(token)),
                _ident(outcome, "effect outcome"),
                _ident(result.type, "result type"),
                bytes(result.data),
                _time(now, "now"),
                _call_id(),
            ),
        )
        return bool(int(done))

    @operation
    def effect_delete(
        self, tenant: str, thread: str, effect_id: str, token: int | None
    ) -> Generator[Any, Any, bool]:
        """Delete an entry (any, or only a claim ``token`` holds); whether one was deleted.

        One round trip. Sent again after a lost reply, it reports False for the
        entry it deleted the first time.
        """
        effect_id, keys = self._effect_keys(tenant, thread, effect_id)
        gone = yield Script(
            EFFECT_DELETE, keys[6:], (effect_id, "" if token is None else str(int(token)))
        )
        return bool(int(gone))

    @operation
    def effect_get(
        self, tenant: str, thread: str, effect_id: str
    ) -> Generator[Any, Any, StoredEffect | None]:
        """One entry, or None: one HMGET."""
        tenant = _ident(tenant, "tenant id")
        thread = _ident(thread, "thread_id")
        effect_id = _effect_id(effect_id)
        key = self.keys.effect(tenant, thread, effect_id)
        values = yield Command(("HMGET", key, *EFFECT_FIELDS))
        if not values or values[0] is None:
            return None
        return _decode_effect(effect_id, values, False)

    @operation
    def effect_list(
        self, tenant: str, thread: str
    ) -> Generator[Any, Any, builtins.list[StoredEffect]]:
        """Every journal entry of a thread (any order), a page per round trip."""
        tenant = _ident(tenant, "tenant id")
        thread = _ident(thread, "thread_id")
        keys = (*self.keys.thread(tenant, thread), self.keys.effects(tenant, thread))
        found: dict[str, StoredEffect] = {}
        cursor: Any = "0"
        read_spec = self._read_spec(tenant)
        while True:
            cursor, rows = yield Script(EFFECT_PAGE, keys, (read_spec, cursor, EFFECT_PAGE_SIZE))
            for raw_id, values in rows:
                effect_id = _text(raw_id)
                found[effect_id] = _decode_effect(effect_id, values, False)
            if _text(cursor) == "0":
                return builtins.list(found.values())

    @operation
    def effect_restore(
        self, tenant: str, thread: str, effect: StoredEffect
    ) -> Generator[Any, Any, None]:
        """Write an entry exactly as given (insert or overwrite); one round trip."""
        tenant = _ident(tenant, "tenant id")
        thread = _ident(thread, "thread_id")
        keys = (*self.keys.thread(tenant, thread), self.keys.effects(tenant, thread))
        args = _effect_args(effect)
        yield Script(EFFECT_WRITE, keys, (self._write_spec(tenant), "1", *args))
        return None

    def _copy_effects(
        self, tenant: str, target: str, entries: Sequence[Any]
    ) -> Generator[Any, Any, None]:
        """Write the entries READ_ALL read to ``target``, keeping those it has."""
        if not entries:
            return None
        keys = (*self.keys.thread(tenant, target), self.keys.effects(tenant, target))
        args: builtins.list[Any] = []
        size = 0
        spec = self._write_spec(tenant)
        for raw_id, values in entries:
            item = _effect_fields(_text(raw_id), values)
            item_size = sum(len(part) for part in item)
            if args and size + item_size > COPY_CHUNK_BYTES:
                yield Script(EFFECT_WRITE, keys, (spec, "0", *args))
                args, size = [], 0
            args.extend(item)
            size += item_size
        yield Script(EFFECT_WRITE, keys, (spec, "0", *args))
        return None

    # ---- data keys (envelope encryption) --------------------------------------

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


# ---- effect journal helpers


def _effect_id(effect_id: Any) -> str:
    text = _ident(effect_id, "effect id")
    if not text:
        raise InvalidInputError("effect id must not be empty")
    return text


def _time(value: Any, what: str) -> str:
    """A time (Unix seconds) as the scripts store and compare it: Python's float repr."""
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} must be a number of seconds, got {value!r}") from exc
    if math.isnan(number):
        raise InvalidInputError(f"{what} must not be NaN")
    return repr(number)


def _call_id() -> str:
    """A fresh id naming one claim or completion call (see the scripts' ``call`` field)."""
    return secrets.token_hex(12)


def _decode_effect(effect_id: str, values: Sequence[Any], won: bool) -> StoredEffect:
    """A journal entry from its fields in ``EFFECT_FIELDS`` order (None where missing).

    Raises:
        CorruptRecordError: The entry is not one the saver wrote.
    """
    try:
        state, token, attempt, lease, r_type, r_data, outcome, res_type, res_data, created, _ = (
            values
        )
        if state is None or r_type is None or r_data is None:
            raise ValueError("state or request missing")
        result = None
        if res_type is not None:
            result = Sealed(_text(res_type), bytes(res_data or b""))
        return StoredEffect(
            effect_id=effect_id,
            state=_text(state),
            token=int(token),
            attempt=int(attempt),
            lease_until=float(lease),
            request=Sealed(_text(r_type), bytes(r_data)),
            outcome=None if outcome is None else _text(outcome),
            result=result,
            won=won,
            created=float(created) if created is not None else 0.0,
        )
    except (ValueError, TypeError) as exc:
        raise CorruptRecordError(
            f"stored effect-journal entry {effect_id!r} cannot be read: {exc}"
        ) from exc


def _effect_fields(effect_id: str, values: Sequence[Any]) -> list[Any]:
    """EFFECT_WRITE's arguments for one entry: id, field count, the present fields."""
    pairs: list[Any] = []
    for name, value in zip(EFFECT_FIELDS, values, strict=True):
        if value is not None:
            pairs.extend((name.encode(), bytes(value)))
    return [effect_id.encode(), str(len(pairs) // 2).encode(), *pairs]


def _effect_args(effect: StoredEffect) -> list[Any]:
    """EFFECT_WRITE's arguments for an entry as given (a done one completed when created)."""
    created = _time(effect.created, "created")
    values: list[Any] = [
        _ident(effect.state, "effect state"),
        str(int(effect.token)),
        str(int(effect.attempt)),
        _time(effect.lease_until, "lease_until"),
        _ident(effect.request.type, "request type"),
        bytes(effect.request.data),
        None if effect.outcome is None else _ident(effect.outcome, "effect outcome"),
        None if effect.result is None else _ident(effect.result.type, "result type"),
        None if effect.result is None else bytes(effect.result.data),
        created,
        created if effect.state == DONE else None,
    ]
    encoded = [v.encode() if isinstance(v, str) else v for v in values]
    return _effect_fields(_effect_id(effect.effect_id), encoded)


def _ranges(ns: str | None, cid: str | None, before: str | None) -> tuple[str, str, str]:
    """(sorted set, max, min) of ZREVRANGEBYLEX for a listing's conditions."""
    if ns is not None:
        base = ns + SEP
        if cid is not None:
            return "i", "[" + base + cid, "[" + base + cid
        hi = "(" + base + before if before is not None else "(" + ns + "\x01"
        return "i", hi, "[" + base
    if cid is not None:
        return "n", "(" + cid + "\x01", "[" + cid + SEP
    return "n", ("(" + before + SEP) if before is not None else "+", "-"


def _pairs(flat: Sequence[Any]) -> Iterator[tuple[bytes, bytes]]:
    for j in range(0, len(flat) - 1, 2):
        yield bytes(flat[j]), bytes(flat[j + 1])


def _copy_chunks(
    blobs: Sequence[tuple[bytes, bytes]],
    task_fields: Sequence[tuple[bytes, bytes]],
    task_lists: Sequence[tuple[bytes, bytes]],
    records: Sequence[tuple[bytes, bytes, bytes]],
) -> Iterator[tuple[tuple[int, int, int], list[bytes]]]:
    """MERGE calls of at most ``COPY_CHUNK_BYTES`` each, sections in order."""
    sections: list[list[tuple[bytes, ...]]] = [
        list(blobs),
        list(task_fields),
        list(task_lists),
        list(records),
    ]
    counts = [0, 0, 0]
    args: list[bytes] = []
    size = 0
    for number, section in enumerate(sections):
        for item in section:
            item_size = sum(len(part) for part in item)
            if args and size + item_size > COPY_CHUNK_BYTES:
                yield (counts[0], counts[1], counts[2]), args
                counts, args, size = [0, 0, 0], [], 0
            if number < 3:
                counts[number] += 1
            args.extend(item)
            size += item_size
    yield (counts[0], counts[1], counts[2]), args


# ---------------------------------------------------------------- setup helpers


def _info_dict(info: Any) -> dict[str, Any]:
    if isinstance(info, dict):
        return info
    text = _text(info)
    out: dict[str, Any] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            out[name.strip()] = value.strip()
    return out


def _server_version(info: Any) -> str:
    """The Redis-compatible version a server reports (Valkey reports one too)."""
    data = _info_dict(info)
    version = data.get("redis_version") or data.get("valkey_version")
    if version is None:
        raise StorageError("the server's INFO reports no redis_version: is this Redis?")
    return str(version)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _config_dict(config: Any) -> dict[str, str]:
    if isinstance(config, dict):
        return {_text(k): _text(v) for k, v in config.items()}
    items = list(config or [])
    return {_text(items[j]): _text(items[j + 1]) for j in range(0, len(items) - 1, 2)}


def _eviction_warning(config: dict[str, str], ttl_set: bool) -> str | None:
    """A warning when the server may drop checkpoints on its own, else None."""
    policy = config.get("maxmemory-policy", "")
    if policy not in EVICTING_POLICIES:
        return None
    if policy.startswith("volatile-") and not ttl_set:
        return None  # only keys with a TTL are evicted, and this saver sets none
    persistent = bool(config.get("save", "").strip()) or config.get("appendonly") == "yes"
    fix = (
        "set maxmemory-policy to noeviction (writes then fail loudly when memory is full) "
        "or give the server enough memory"
    )
    if persistent:
        return (
            f"Redis maxmemory-policy is {policy}: checkpoints can be evicted under memory "
            f"pressure; {fix}"
        )
    return (
        f"Redis maxmemory-policy is {policy} and persistence is off (no RDB save points, "
        "appendonly no): checkpoints can silently vanish under memory pressure or on a "
        f"restart; {fix}, and enable appendonly yes"
    )
