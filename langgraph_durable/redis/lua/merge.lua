#!lua
-- uses: thread, check, expire, register
-- Writes part of a copied thread (see copy_thread).
-- KEYS: the thread's six.
-- ARGV: expiry spec, mark, #blobs, #task fields, #task lists, then blob pairs, task-field
-- pairs, task-list pairs, and (field, header, payload) triples of records.
-- Existing entries of the target win; records (the visible part) are written last.
-- Returns registration().
local err = check_types()
if err then return err end
local existed = redis.call('EXISTS', I) == 1
local nb, nt, nl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local j = 6
for _ = 1, nb do redis.call('HSETNX', B, ARGV[j], ARGV[j + 1]); j = j + 2 end
for _ = 1, nt do redis.call('HSETNX', W, ARGV[j], ARGV[j + 1]); j = j + 2 end
for _ = 1, nl do
  local f = ARGV[j]
  local tasks, have, changed = tasks_of(f), {}, false
  for _, t in ipairs(tasks) do have[t] = true end
  for _, t in ipairs(cmsgpack.unpack(ARGV[j + 1])) do
    if not have[t] then
      tasks[#tasks + 1] = t
      changed = true
    end
  end
  if changed then redis.call('HSET', W, f, cmsgpack.pack(tasks)) end
  j = j + 2
end
while j <= #ARGV do
  local f = ARGV[j]
  if redis.call('HEXISTS', H, f) == 0 then
    local ns, id = split(f)
    redis.call('HSET', C, f, ARGV[j + 2])
    redis.call('HSET', H, f, ARGV[j + 1])
    redis.call('ZADD', I, 0, f)
    redis.call('ZADD', N, 0, id .. SEP .. ns)
  end
  j = j + 3
end
expire_all(ARGV[1])
return registration(ARGV[2], existed)
