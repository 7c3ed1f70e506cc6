#!lua flags=no-writes
-- uses: thread, effects
-- A consistent snapshot of a thread's hashes (the sorted sets follow from them)
-- and of its effect journal ({id, fields in EFFECT_FIELDS order} per entry).
-- KEYS: the thread's six.
-- Returns {h, c, b, w (HGETALL each), entries}.
local fx = {}
for _, id in ipairs(redis.call('SMEMBERS', E)) do
  local v = read_effect(id)
  if v[1] then fx[#fx + 1] = {id, v} end
end
return {redis.call('HGETALL', H), redis.call('HGETALL', C), redis.call('HGETALL', B),
        redis.call('HGETALL', W), fx}
