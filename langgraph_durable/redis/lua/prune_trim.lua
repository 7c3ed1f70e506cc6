#!lua flags=allow-oom
-- uses: thread, prune, drop, gc
-- Trims a thread to the checkpoints keep_set keeps, unless it changed since read.
-- KEYS: the thread's six.
-- ARGV: header-hash fields and last-write time as read ('*': any), dry run
-- ('1'/'0'), the number of payload rewrites, that many (field, SHA-1 hex of
-- the payload as read, new payload) triples (chain tombstones, see
-- _tombstones.py), then the fields of the checkpoints to delete. Rewrites the
-- payloads (only if each is still the one read, else nothing changes and the
-- status is -1), deletes the checkpoints with their writes, then every blob no
-- remaining checkpoint reads (a delta's bases included). Returns {status,
-- checkpoints, bytes} as prune_drop.lua.
if redis.call('EXISTS', I) == 0 then return {0, 0, 0} end
if not unchanged(ARGV[1], ARGV[2]) then return {-1, 0, 0} end
local dry = ARGV[3] == '1'
local last = 4 + 3 * tonumber(ARGV[4])
for j = 5, last, 3 do
  if redis.sha1hex(redis.call('HGET', C, ARGV[j]) or '') ~= ARGV[j + 1] then return {-1, 0, 0} end
end
local gone, n, bytes = {}, 0, 0
for j = last + 1, #ARGV do
  local f = ARGV[j]
  if not gone[f] and not is_meta(f) and redis.call('HEXISTS', H, f) == 1 then
    gone[f] = true
    n = n + 1
    bytes = bytes + checkpoint_bytes(f)
  end
end
local refs = {}
local all = redis.call('HGETALL', H)
for j = 1, #all, 2 do
  local f = all[j]
  if not is_meta(f) and not gone[f] then mark_refs(f, cmsgpack.unpack(all[j + 1]), refs) end
end
for _, bf in ipairs(redis.call('HKEYS', B)) do
  if not refs[bf] then
    bytes = bytes + redis.call('HSTRLEN', B, bf)
    if not dry then redis.call('HDEL', B, bf) end
  end
end
if not dry then
  -- the tombstones first (harmless beside a parent still there), then the trim
  for j = 5, last, 3 do redis.call('HSET', C, ARGV[j], ARGV[j + 2]) end
  for f in pairs(gone) do drop(f) end
end
return {1, n, bytes}
