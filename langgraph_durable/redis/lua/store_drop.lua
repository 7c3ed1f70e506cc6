#!lua
-- uses: store_items
-- Delete up to a number of items under namespace ranges (delete_namespace).
-- KEYS: K, N, C, X of the tenant. ARGV: BASE, most items to delete, then (min, max)
-- ranges of K. Returns the number deleted (fewer than asked: nothing is left).
local left, done = tonumber(ARGV[2]), 0
for i = 3, #ARGV, 2 do
  if left <= 0 then break end
  local members = redis.call('ZRANGEBYLEX', K, ARGV[i], ARGV[i + 1], 'LIMIT', 0, left)
  for _, member in ipairs(members) do
    done = done + store_drop(member)
  end
  left = left - #members
end
return done
