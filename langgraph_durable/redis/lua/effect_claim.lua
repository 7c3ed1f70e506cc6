#!lua
-- uses: thread, expire
-- Claims an effect: a fresh entry, a takeover of an expired claim, or the stored entry.
-- An entry is the hash E .. ':' .. id (see _keys.py); E, the set of the thread's
-- effect ids, lets a thread's deletion, copy and TTL refresh find them. Times are
-- Python float reprs compared with tonumber. The field ``call`` holds the id of the
-- last call that claimed or completed the entry, so that call, sent again after its
-- reply was lost, finds its own change instead of refusing it.
-- KEYS: the thread's six, E, the entry. ARGV: write spec, read spec, effect id,
-- lease_until, now, takeover ('1'/'0'), request type, request, call id.
-- Returns {won (1/0), fields in EFFECT_FIELDS order}.
local X, id, call = KEYS[8], ARGV[3], ARGV[9]
local function reply(won)
  local out = redis.call('HMGET', X, unpack(EFFECT_FIELDS))
  table.insert(out, 1, won)
  return out
end
if redis.call('EXISTS', X) == 0 then
  redis.call('HSET', X, 'state', 'claimed', 'token', '1', 'attempt', '1', 'lease_until', ARGV[4],
    'request_type', ARGV[7], 'request', ARGV[8], 'created', ARGV[5], 'call', call)
  redis.call('SADD', E, id)
  expire_all(ARGV[1])
  return reply(1)
end
local v = redis.call('HMGET', X, 'state', 'lease_until', 'call')
if v[1] == 'claimed' then
  if v[3] == call then return reply(1) end
  local lease = tonumber(v[2])
  if ARGV[6] == '1' and lease and lease <= tonumber(ARGV[5]) then
    redis.call('HINCRBY', X, 'token', 1)
    redis.call('HINCRBY', X, 'attempt', 1)
    redis.call('HSET', X, 'lease_until', ARGV[4], 'call', call)
    redis.call('SADD', E, id)
    expire_all(ARGV[1])
    return reply(1)
  end
end
expire_all(ARGV[2])
return reply(0)
