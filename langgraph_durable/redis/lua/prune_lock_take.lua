#!lua flags=allow-oom
-- KEYS: the lock. ARGV: this pruner, lease (ms), a holder to take over ('' for
-- none). Takes (or renews) the lock when it is free, held by this pruner or by
-- that holder. Returns {1} or {0, the holder}.
local cur = redis.call('GET', KEYS[1])
if not cur or cur == ARGV[1] or (ARGV[3] ~= '' and cur == ARGV[3]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1}
end
return {0, cur}
