#!lua
-- uses: thread, expire
-- Claims an effect: a fresh entry (with its sealed state record), or the stored entry.
-- An expired claim is taken over by effect_takeover.lua, after the saver checked it.
-- An entry is the hash E .. ':' .. id (see _keys.py); E, the set of the thread's
-- effect ids, lets a thread's deletion, copy and TTL refresh find them. Times are
-- Python float reprs. The field ``call`` holds the id of the last call that claimed
-- or completed the entry, so that call, sent again after its reply was lost, finds
-- its own change instead of refusing it.
-- KEYS: the thread's six, E, the entry. ARGV: write spec, read spec, effect id,
-- lease_until, now, state type ('' for none), state, request type, request, call id.
-- Returns {won (1/0), fields in EFFECT_FIELDS order}.
local X, id, call = KEYS[8], ARGV[3], ARGV[10]
local function reply(won)
  local out = redis.call('HMGET', X, unpack(EFFECT_FIELDS))
  table.insert(out, 1, won)
  return out
end
if redis.call('EXISTS', X) == 0 then
  redis.call('HSET', X, 'state', 'claimed', 'token', '1', 'attempt', '1', 'lease_until', ARGV[4],
    'request_type', ARGV[8], 'request', ARGV[9], 'created', ARGV[5], 'call', call)
  if ARGV[6] ~= '' then
    redis.call('HSET', X, 'result_type', ARGV[6], 'result', ARGV[7])
  end
  redis.call('SADD', E, id)
  expire_all(ARGV[1])
  return reply(1)
end
local v = redis.call('HMGET', X, 'state', 'call')
if v[1] == 'claimed' and v[2] == call then return reply(1) end
expire_all(ARGV[2])
return reply(0)
