#!lua
-- uses: store_items
-- Delete up to a number of items expired at a time (the sweep).
-- KEYS: K, N, C, X of the tenant. ARGV: BASE, now (Unix seconds), most items.
-- Returns the number deleted (fewer than asked: none expired is left).
local done = 0
for _, member in ipairs(redis.call('ZRANGEBYSCORE', X, '-inf', ARGV[2], 'LIMIT', 0, ARGV[3])) do
  store_drop(member)
  done = done + 1
end
return done
