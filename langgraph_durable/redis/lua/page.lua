#!lua flags=allow-oom
-- uses: thread, collect, expire
-- One page of a thread's checkpoints, newest first.
-- KEYS: the thread's six.
-- ARGV: 'i' or 'n' (which sorted set), max, min, count, expiry spec.
-- Returns {more, last member scanned, entries}.
local by_ns = ARGV[1] == 'i'
local count = tonumber(ARGV[4])
local m = redis.call('ZREVRANGEBYLEX', by_ns and I or N, ARGV[2], ARGV[3], 'LIMIT', 0, count + 1)
local more = 0
if #m > count then
  more = 1
  m[#m] = nil
end
local out, sent = {}, {}
for j = 1, #m do
  local a, b = split(m[j])
  local e
  if by_ns then e = collect(a, b, sent) else e = collect(b, a, sent) end
  if e then out[#out + 1] = e end
end
if #out > 0 then expire_all(ARGV[5]) end
return {more, m[#m] or '', out}
