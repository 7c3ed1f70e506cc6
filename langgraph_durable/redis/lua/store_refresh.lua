#!lua
-- uses: store_items
-- Extend the expiry of items a refreshing read returned (chosen in Python).
-- KEYS: K, N, C, X of the tenant. ARGV: BASE, then per item: member, new expires_at,
-- native expiry ms. An item deleted or stored without a TTL since the read is left alone.
-- Returns the number of items extended.
local done = 0
for i = 2, #ARGV, 3 do
  local member = ARGV[i]
  local key = BASE .. member
  local ttl = redis.call('HGET', key, 't')
  if ttl and ttl ~= '' then
    redis.call('HSET', key, 'x', ARGV[i + 1])
    redis.call('ZADD', X, ARGV[i + 1], member)
    redis.call('PEXPIRE', key, ARGV[i + 2])
    done = done + 1
  end
end
return done
