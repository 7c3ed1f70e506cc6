#!lua flags=allow-oom
-- uses: thread, collect, expire
-- One checkpoint of a namespace, as collect() returns it, or {}.
-- KEYS: the thread's six.
-- ARGV: ns, id ('' for the latest), expiry spec ('' to leave it).
local ns, id = ARGV[1], ARGV[2]
if id == '' then
  local m = redis.call('ZREVRANGEBYLEX', I, '(' .. ns .. '\1', '[' .. ns .. SEP, 'LIMIT', 0, 1)
  if #m == 0 then return {} end
  id = string.sub(m[1], #ns + 2)
end
local e = collect(ns, id, {})
if not e then return {} end
expire_all(ARGV[3])
return e
