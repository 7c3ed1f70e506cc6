#!lua flags=allow-oom
-- uses: thread, collect, expire
-- Named checkpoints of a thread.
-- KEYS: the thread's six.
-- ARGV: expiry spec, then "<ns>\0<id>" fields. Returns the entries found.
local out, sent = {}, {}
for j = 2, #ARGV do
  local ns, id = split(ARGV[j])
  local e = collect(ns, id, sent)
  if e then out[#out + 1] = e end
end
if #out > 0 then expire_all(ARGV[1]) end
return out
