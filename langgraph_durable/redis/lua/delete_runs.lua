#!lua flags=allow-oom
-- uses: thread, drop, gc
-- Deletes the checkpoints (and their writes) of the given runs, then the blobs
-- no remaining checkpoint reads.
-- KEYS: the thread's six.
-- ARGV: run ids. Returns {checkpoints deleted, thread still has checkpoints}.
-- When a checkpoint that stays names one that would go as its parent, nothing
-- is deleted and it returns {-1, 1, header-hash length, last-write time,
-- {fields to delete}, {survivor field, parent field, ...}}: the caller signs
-- the survivors' chain tombstones, then prune_trim.lua deletes (see _admin.py).
if redis.call('EXISTS', I) == 0 then return {0, 0} end
local runs = {}
for j = 1, #ARGV do runs[ARGV[j]] = true end
local all = redis.call('HGETALL', H)
local doomed, order, kept = {}, {}, {}
for j = 1, #all, 2 do
  local f = all[j]
  if not is_meta(f) then
    local h = cmsgpack.unpack(all[j + 1])
    if h[3] and runs[h[3]] then
      doomed[f] = true
      order[#order + 1] = f
    else
      kept[#kept + 1] = {f, h}
    end
  end
end
if #order == 0 then return {0, 1} end
local orphans = {}
for _, e in ipairs(kept) do
  local parent = e[2][2]
  if parent then
    local ns = split(e[1])
    if doomed[ns .. SEP .. parent] then
      orphans[#orphans + 1] = e[1]
      orphans[#orphans + 1] = ns .. SEP .. parent
    end
  end
end
if #orphans > 0 then
  return {-1, 1, redis.call('HLEN', H), redis.call('HGET', H, TOUCHED) or '', order, orphans}
end
local refs = {}
for _, f in ipairs(order) do drop(f) end
for _, e in ipairs(kept) do mark_refs(e[1], e[2], refs) end
gc_blobs(refs)
-- no checkpoint left: nor is the thread (its times and mark go too)
if redis.call('EXISTS', I) == 0 then redis.call('HDEL', H, MARK, CREATED, TOUCHED) end
return {#order, redis.call('EXISTS', I)}
