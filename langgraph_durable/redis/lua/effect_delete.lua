#!lua flags=allow-oom
-- KEYS: E, the entry. ARGV: effect id, token ('' for any state and token).
-- Returns whether the entry was deleted.
if ARGV[2] ~= '' then
  local v = redis.call('HMGET', KEYS[2], 'state', 'token')
  if v[1] ~= 'claimed' or tonumber(v[2]) ~= tonumber(ARGV[2]) then return 0 end
end
redis.call('SREM', KEYS[1], ARGV[1])
return redis.call('DEL', KEYS[2])
