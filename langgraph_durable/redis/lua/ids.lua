#!lua flags=no-writes
-- uses: thread
-- A page of a thread's "<id>\0<ns>" members, newest first (cross-thread listings).
-- KEYS: the thread's six.
-- ARGV: max, min, count over the by-id set. Returns {thread exists, more, members}.
local count = tonumber(ARGV[3])
local m = redis.call('ZREVRANGEBYLEX', N, ARGV[1], ARGV[2], 'LIMIT', 0, count + 1)
local more = 0
if #m > count then
  more = 1
  m[#m] = nil
end
return {redis.call('EXISTS', I), more, m}
