#!lua flags=allow-oom
-- KEYS: a tenant's data-key hash. ARGV: (version, expected value, new value)
-- triples. Replaces each version whose stored value still is the expected one
-- (compare-and-set on the bytes Python packed); returns how many it replaced.
local n = 0
for j = 1, #ARGV, 3 do
  if redis.call('HGET', KEYS[1], ARGV[j]) == ARGV[j + 1] then
    redis.call('HSET', KEYS[1], ARGV[j], ARGV[j + 2])
    n = n + 1
  end
end
return n
