-- uses: thread

-- Marks the blobs a checkpoint reads, with the versions its deltas are built on.
local function mark_refs(f, h, refs)
  local ns = split(f)
  local r = h[4]
  for j = 1, #r, 2 do
    local bf = ns .. SEP .. r[j] .. SEP .. r[j + 1]
    while bf and not refs[bf] do
      refs[bf] = true
      local v = redis.call('HGET', B, bf)
      local b = v and base_of(v)
      bf = b and (ns .. SEP .. r[j] .. SEP .. b)
    end
  end
end

-- Deletes every blob mark_refs did not mark.
local function gc_blobs(refs)
  for _, bf in ipairs(redis.call('HKEYS', B)) do
    if not refs[bf] then redis.call('HDEL', B, bf) end
  end
end
