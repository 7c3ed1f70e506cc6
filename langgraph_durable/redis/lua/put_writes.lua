#!lua
-- uses: thread, check, expire
-- Stores a task's pending writes (frames, see _records.py) of one checkpoint.
-- KEYS: the thread's six.
-- ARGV: expiry spec, "<ns>\0<id>", task id, replace ('1'/'0'), then idx/frame pairs.
-- Returns 1 when something changed, else 0.
local err = check_types()
if err then return err end
local f, task = ARGV[2], ARGV[3]
local tf = f .. SEP .. task
local cur = redis.call('HGET', W, tf)
local frames, order = {}, {}
if cur then
  local pos, n = 1, #cur
  while pos <= n do
    local idx, hlen = struct.unpack('>iI', cur, pos)
    local dlen = struct.unpack('>I', cur, pos + 8 + hlen)
    local stop = pos + 12 + hlen + dlen
    if frames[idx] == nil then order[#order + 1] = idx end
    frames[idx] = string.sub(cur, pos, stop - 1)
    pos = stop
  end
end
local changed = false
for j = 5, #ARGV, 2 do
  local idx = tonumber(ARGV[j])
  if frames[idx] == nil then
    order[#order + 1] = idx
    frames[idx] = ARGV[j + 1]
    changed = true
  elseif ARGV[4] == '1' then
    frames[idx] = ARGV[j + 1]
    changed = true
  end
end
if changed then
  local parts = {}
  for k, idx in ipairs(order) do parts[k] = frames[idx] end
  redis.call('HSET', W, tf, table.concat(parts))
  if not cur then
    local tasks = tasks_of(f)
    tasks[#tasks + 1] = task
    redis.call('HSET', W, f, cmsgpack.pack(tasks))
  end
end
expire_all(ARGV[1])
return changed and 1 or 0
