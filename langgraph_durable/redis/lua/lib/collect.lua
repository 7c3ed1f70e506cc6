-- uses: thread

-- Appends a blob to out; a blob already in this reply is sent once, later as
-- '\1' (and its chain is not followed again). Python walks the same order.
local function add_blob(out, ns, ch, ver, sent)
  local bf = ns .. SEP .. ch .. SEP .. ver
  if sent[bf] then
    out[#out + 1] = '\1'
    return nil
  end
  sent[bf] = true
  local v = redis.call('HGET', B, bf) or ''
  out[#out + 1] = v
  return v
end

-- One checkpoint as the read scripts return it (see _records._Entry), or nil:
-- {ns, id, header, payload, blobs, its writes, its parent's writes (format < 4)}.
local function collect(ns, id, sent)
  local f = ns .. SEP .. id
  local hdr = redis.call('HGET', H, f)
  if not hdr then return nil end
  local h = cmsgpack.unpack(hdr)
  local refs, blobs = h[4], {}
  for j = 1, #refs, 2 do
    local v = add_blob(blobs, ns, refs[j], refs[j + 1], sent)
    local b = v and base_of(v)
    while b do
      v = add_blob(blobs, ns, refs[j], b, sent)
      b = v and base_of(v)
    end
  end
  local sends = {}
  if h[1] < 4 and h[2] then sends = task_writes(ns .. SEP .. h[2]) end
  return {ns, id, hdr, redis.call('HGET', C, f) or '', blobs, task_writes(f), sends}
end
