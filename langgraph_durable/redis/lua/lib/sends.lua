-- uses: thread

-- Whether the writes of checkpoint field f hold a send (a write to TASKS).
local function has_sends(f)
  for _, s in ipairs(task_writes(f)) do
    local pos, n = 1, #s
    while pos <= n do
      local _, hlen = struct.unpack('>iI', s, pos)
      local hdr = cmsgpack.unpack(string.sub(s, pos + 8, pos + 7 + hlen))
      if hdr[3] == TASKS then return true end
      local dlen = struct.unpack('>I', s, pos + 8 + hlen)
      pos = pos + 12 + hlen + dlen
    end
  end
  return false
end
