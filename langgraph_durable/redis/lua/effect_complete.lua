#!lua
-- uses: expire
-- Records an effect's result if the token still holds its claim (the field
-- ``call``: see effect_claim.lua).
-- KEYS: the thread's six, E, the entry. ARGV: expiry spec, token, outcome, result type,
-- result, now, call id. Returns 1 when recorded, 0 when refused (changes nothing).
local X = KEYS[8]
local v = redis.call('HMGET', X, 'state', 'token', 'call')
if v[1] == 'done' and v[3] == ARGV[7] then return 1 end
if v[1] ~= 'claimed' or tonumber(v[2]) ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', X, 'state', 'done', 'outcome', ARGV[3], 'result_type', ARGV[4],
  'result', ARGV[5], 'completed', ARGV[6], 'call', ARGV[7])
expire_all(ARGV[1])
return 1
