#!lua
-- uses: thread, expire
-- Takes over an expired claim the saver has read and checked, only while it still
-- holds the token read (the field ``call``: see effect_claim.lua); the new claim's
-- sealed state record replaces the old one.
-- KEYS: the thread's six, E, the entry. ARGV: write spec, effect id, token,
-- lease_until, now, state type, state, call id.
-- Returns the fields in EFFECT_FIELDS order, or nil when the entry changed.
local X, call = KEYS[8], ARGV[8]
local v = redis.call('HMGET', X, 'state', 'token', 'lease_until', 'call')
if v[1] ~= 'claimed' then return false end
if v[4] ~= call then
  local lease = tonumber(v[3])
  if tonumber(v[2]) ~= tonumber(ARGV[3]) or not lease or lease > tonumber(ARGV[5]) then
    return false
  end
  redis.call('HINCRBY', X, 'token', 1)
  redis.call('HINCRBY', X, 'attempt', 1)
  redis.call('HSET', X, 'lease_until', ARGV[4], 'result_type', ARGV[6], 'result', ARGV[7],
    'call', call)
  redis.call('SADD', E, ARGV[2])
  expire_all(ARGV[1])
end
return redis.call('HMGET', X, unpack(EFFECT_FIELDS))
