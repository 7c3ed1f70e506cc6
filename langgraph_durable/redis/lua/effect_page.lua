#!lua flags=allow-oom
-- uses: thread, effects, expire
-- KEYS: the thread's six, E. ARGV: read spec, SSCAN cursor, count.
-- Returns {next cursor, {{id, fields in EFFECT_FIELDS order}, ...}}.
local r = redis.call('SSCAN', E, ARGV[2], 'COUNT', ARGV[3])
local out = {}
for _, id in ipairs(r[2]) do
  local v = read_effect(id)
  if v[1] then out[#out + 1] = {id, v} end
end
if #out > 0 then expire_all(ARGV[1]) end
return {r[1], out}
