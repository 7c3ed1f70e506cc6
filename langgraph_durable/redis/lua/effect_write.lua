#!lua
-- uses: thread, expire
-- KEYS: the thread's six, E. ARGV: expiry spec, overwrite ('1': replace entries the thread
-- has, '0': keep them), then per entry: id, number of fields n, n field/value pairs.
-- Returns the number of entries written.
local t = redis.call('TYPE', E)['ok']
if t ~= 'none' and t ~= 'set' then
  return redis.error_reply('LGD_WRONGTYPE key ' .. E .. ' holds a ' .. t ..
    ', expected a set: something other than the saver wrote it')
end
local j, written = 3, 0
while j <= #ARGV do
  local id, n = ARGV[j], tonumber(ARGV[j + 1])
  local x = E .. ':' .. id
  if ARGV[2] == '1' or redis.call('EXISTS', x) == 0 then
    redis.call('DEL', x)
    for k = j + 2, j + 2 * n, 2 do redis.call('HSET', x, ARGV[k], ARGV[k + 1]) end
    redis.call('SADD', E, id)
    written = written + 1
  end
  j = j + 2 + 2 * n
end
expire_all(ARGV[1])
return written
