#!lua
-- uses: thread, check, expire, register
-- Stores a checkpoint with its new blobs.
-- KEYS: the thread's six, then (not on a cluster) its tenant's index.
-- ARGV: expiry spec (see expire_all), ns, id, header, payload, mark, thread id,
-- number of base fields, the blob fields deltas are built on, then blob
-- field/value pairs. Returns {-1} and writes nothing when a base is missing;
-- {-2} and writes nothing when the checkpoint is stored already with another
-- payload (append-only); else registration() plus a string of '1'/'0' per blob:
-- created by this write or already there (all '0' when the same checkpoint was
-- stored already: an idempotent retry writes nothing). With the index key the
-- script registers the thread itself and reports nothing to do.
local err = check_types()
if err then return err end
local f = ARGV[2] .. SEP .. ARGV[3]
local existed = redis.call('EXISTS', I) == 1
local created = {}
local stored = redis.call('HGET', C, f)
if stored then
  -- checkpoints are append-only: the same payload (body and metadata) is a retry
  if stored ~= ARGV[5] then return {-2} end
  for _ = 9 + tonumber(ARGV[8]), #ARGV, 2 do created[#created + 1] = '0' end
else
  local nb = tonumber(ARGV[8])
  for j = 9, 8 + nb do
    if redis.call('HEXISTS', B, ARGV[j]) == 0 then return {-1} end
  end
  for j = 9 + nb, #ARGV, 2 do
    created[#created + 1] = tostring(redis.call('HSETNX', B, ARGV[j], ARGV[j + 1]))
  end
  redis.call('HSET', C, f, ARGV[5])
  redis.call('HSET', H, f, ARGV[4])
  redis.call('ZADD', I, 0, f)
  redis.call('ZADD', N, 0, ARGV[3] .. SEP .. ARGV[2])
  expire_all(ARGV[1])
end
local out = registration(ARGV[6], existed)
if out[1] == 1 and KEYS[7] then
  redis.call('ZADD', KEYS[7], out[2], ARGV[7])
  redis.call('HSET', H, MARK, '1')
  out = {0, 0}
end
out[3] = table.concat(created)
return out
