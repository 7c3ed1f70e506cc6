-- uses: thread

-- Deletes one checkpoint (field "<ns>\0<id>") and its writes; its blobs stay.
local function drop(f)
  local ns, id = split(f)
  redis.call('ZREM', I, f)
  redis.call('ZREM', N, id .. SEP .. ns)
  redis.call('HDEL', H, f)
  redis.call('HDEL', C, f)
  for _, task in ipairs(tasks_of(f)) do redis.call('HDEL', W, f .. SEP .. task) end
  redis.call('HDEL', W, f)
end

-- Deletes every key of the thread, its effect journal included.
local function drop_thread()
  for _, id in ipairs(redis.call('SMEMBERS', E)) do redis.call('UNLINK', E .. ':' .. id) end
  return redis.call('UNLINK', H, C, B, W, I, N, E)
end
