-- The store's item helpers (see redis/_store.py for the key layout). Binds the tenant's
-- keys: K (every item: zset "<ns>\0<key>"), N (namespaces: zset), C (items per
-- namespace: hash), X (expiries: zset "<ns>\0<key>" -> expires_at) from KEYS[1..4], and
-- BASE (the start of every item key's name, ARGV[1]).
local K, N, C, X, BASE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
-- An item's fields, in the order the scripts return them (f: its format, last).
local ITEM_FIELDS = {'vt', 'v', 'wt', 'w', 'c', 'u', 't', 'x', 'f'}

local function store_ns(member)
  return string.sub(member, 1, string.find(member, '\0', 1, true) - 1)
end

-- Delete one item and its index entries; 1 if it was indexed, else 0.
local function store_drop(member)
  redis.call('DEL', BASE .. member)
  redis.call('ZREM', X, member)
  if redis.call('ZREM', K, member) == 0 then return 0 end
  local ns = store_ns(member)
  if redis.call('HINCRBY', C, ns, -1) <= 0 then
    redis.call('HDEL', C, ns)
    redis.call('ZREM', N, ns)
  end
  return 1
end
