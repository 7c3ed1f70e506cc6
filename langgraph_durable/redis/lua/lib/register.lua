-- uses: thread, expire

-- Whether the thread must be added to its tenant's index, and the server time.
-- mark = '1': this process added it after an earlier write; set the mark now,
-- unless the thread was deleted since (its index did not exist before this write).
local function registration(mark, existed)
  if redis.call('HEXISTS', H, MARK) == 1 then return {0, 0} end
  if redis.call('EXISTS', I) == 0 then return {0, 0} end
  if mark == '1' and existed then
    redis.call('HSET', H, MARK, '1')
    return {0, 0}
  end
  return {1, server_ms()}
end
