#!lua flags=no-writes
-- uses: thread, sends
-- What keep_set needs of every checkpoint.
-- KEYS: the thread's six.
-- Returns {exists (I), header-hash fields, last-write time, {field, v, parent
-- ('' for none), DeltaChannel flag, parent's writes hold sends (format < 4 only),
-- ...}}.
local out = {}
local all = redis.call('HGETALL', H)
for j = 1, #all, 2 do
  local f = all[j]
  if not is_meta(f) then
    local h = cmsgpack.unpack(all[j + 1])
    local sends = 0
    if h[1] < 4 and h[2] then
      local ns = split(f)
      if has_sends(ns .. SEP .. h[2]) then sends = 1 end
    end
    out[#out + 1] = f
    out[#out + 1] = h[1]
    out[#out + 1] = h[2] or ''
    out[#out + 1] = h[5] and 1 or 0
    out[#out + 1] = sends
  end
end
return {redis.call('EXISTS', I), redis.call('HLEN', H), redis.call('HGET', H, TOUCHED) or '',
        out}
