-- uses: thread

-- The server's time in milliseconds.
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Records a write (or a read that counts as one) and sets the thread's expiry.
-- spec '': nothing (a read). Otherwise a thread with checkpoints gets its
-- creation time set once and its last-write time now (server times, ms); then
-- '0' leaves every key without an expiry, and '<idle>:<absolute>' (ms, either
-- may be empty) makes every key of the thread (effect journal included) expire
-- together at min(now + idle, creation + absolute).
local function expire_all(spec)
  if spec == '' then return end
  local now = server_ms()
  local created = now
  if redis.call('EXISTS', I) == 1 then
    local stamp = string.format('%.0f', now)
    redis.call('HSETNX', H, CREATED, stamp)
    redis.call('HSET', H, TOUCHED, stamp)
    created = tonumber(redis.call('HGET', H, CREATED)) or now
  end
  local idle, absolute = string.match(spec, '^(%d*):(%d*)$')
  -- without a TTL on the first key, none has one
  if not idle and redis.call('PTTL', H) == -1 then return end
  local at = nil
  if idle and idle ~= '' then at = now + tonumber(idle) end
  if absolute and absolute ~= '' then
    local cut = created + tonumber(absolute)
    if not at or cut < at then at = cut end
  end
  -- a deadline already passed expires the thread right after this script
  if at and at <= now then at = now + 1 end
  local keys = {H, C, B, W, I, N, E}
  for _, id in ipairs(redis.call('SMEMBERS', E)) do keys[#keys + 1] = E .. ':' .. id end
  for _, k in ipairs(keys) do
    if at then
      redis.call('PEXPIREAT', k, string.format('%.0f', at))
    else
      redis.call('PERSIST', k)
    end
  end
end
