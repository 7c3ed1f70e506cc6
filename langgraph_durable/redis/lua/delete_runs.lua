#!lua flags=allow-oom
-- uses: thread, drop, gc
-- Deletes the checkpoints (and their writes) of the given runs, then the blobs
-- no remaining checkpoint reads.
-- KEYS: the thread's six.
-- ARGV: run ids. Returns {checkpoints deleted, thread still has checkpoints}.
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
