-- uses: thread

-- Stored bytes of every value of a hash.
local function hash_bytes(key)
  local n = 0
  for _, f in ipairs(redis.call('HKEYS', key)) do n = n + redis.call('HSTRLEN', key, f) end
  return n
end

-- Stored bytes of the whole thread: every value of its hashes and journal entries.
local function thread_bytes()
  local n = hash_bytes(H) + hash_bytes(C) + hash_bytes(B) + hash_bytes(W)
  for _, id in ipairs(redis.call('SMEMBERS', E)) do n = n + hash_bytes(E .. ':' .. id) end
  return n
end

-- Stored bytes of one checkpoint: header, payload, its task list and writes.
local function checkpoint_bytes(f)
  local n = redis.call('HSTRLEN', H, f) + redis.call('HSTRLEN', C, f) +
    redis.call('HSTRLEN', W, f)
  for _, task in ipairs(tasks_of(f)) do n = n + redis.call('HSTRLEN', W, f .. SEP .. task) end
  return n
end

-- Whether the thread is as the pruner read it: its header hash has as many
-- fields, and (unless touched is '*') its last write is the one it read.
local function unchanged(hlen, touched)
  if redis.call('HLEN', H) ~= tonumber(hlen) then return false end
  return touched == '*' or (redis.call('HGET', H, TOUCHED) or '') == touched
end
