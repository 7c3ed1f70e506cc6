#!lua
-- uses: store_items
-- One store batch of one tenant: reads first (they see the store before the batch),
-- then the batch's deletes and puts. Filters, ordering, limits and TTL refreshes are
-- decided in Python (langgraph_durable._core.store) after the values are opened.
-- KEYS: K, N, C, X of the tenant (see lib/store_items.lua).
-- ARGV: BASE, now (Unix seconds: every put's u, as sent: its seal binds that text's
-- number), most items a search may read, grace seconds of the native expiry after an
-- item's own, the format of the items written (their f), then
--   gets:      count, then per get: member "<ns>\0<key>", "1" if a get of it refreshes
--              its TTL (Python's choice; done here, on a live item stored with a TTL,
--              as _core.store.refreshed does, so a refreshing get needs no other call);
--   searches:  count, then per search prefix: ranges, then that many (min, max) of K;
--   listings:  ranges, then that many (min, max) of N;
--   deletes:   count, then members;
--   puts:      count, then per put: member, value type, value, vectors type, vectors,
--              ttl minutes ("" none), expires_at ("" none), native expiry ms ("" none).
-- Returns {"ok", gets, searched, namespaces}: gets and searched flat lists of a member
-- and its 9 fields (vt, v, wt, w, c, u, t, x, f) per live item; namespaces the live ones
-- under the listing ranges. Or {"too-many", search index, items}: nothing was written.
local now, at = tonumber(ARGV[2]), 6
local cap, grace, format = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local function arg()
  at = at + 1
  return ARGV[at - 1]
end
local function read(member, out, refresh)
  local key = BASE .. member
  local f = redis.call('HMGET', key, unpack(ITEM_FIELDS))
  if not f[1] or (f[8] and f[8] ~= '' and tonumber(f[8]) <= now) then return end
  out[#out + 1] = member
  for i = 1, #ITEM_FIELDS do out[#out + 1] = f[i] or '' end
  if refresh and f[7] and f[7] ~= '' then
    local x = now + tonumber(f[7]) * 60.0
    local text = string.format('%.17g', x)
    redis.call('HSET', key, 'x', text)
    redis.call('ZADD', X, text, member)
    redis.call('PEXPIRE', key, math.max(1, math.floor((x - now + grace) * 1000 + 0.5)))
  end
end

local wanted = {}
for g = 1, tonumber(arg()) do wanted[g] = {arg(), arg() == '1'} end
-- every search's size is checked before anything is read or written
local searches = {}
for s = 1, tonumber(arg()) do
  local ranges, total = {}, 0
  for r = 1, tonumber(arg()) do
    ranges[r] = {arg(), arg()}
    total = total + redis.call('ZLEXCOUNT', K, ranges[r][1], ranges[r][2])
  end
  if total > cap then return {'too-many', s, total} end
  searches[s] = ranges
end

local gets = {}
for _, get in ipairs(wanted) do read(get[1], gets, get[2]) end
local searched = {}
for _, ranges in ipairs(searches) do
  for _, range in ipairs(ranges) do
    for _, member in ipairs(redis.call('ZRANGEBYLEX', K, range[1], range[2])) do
      read(member, searched)
    end
  end
end

local names = {}
local listings = tonumber(arg())
if listings > 0 then
  local expired = {}
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', X, '-inf', ARGV[2])) do
    local ns = store_ns(member)
    expired[ns] = (expired[ns] or 0) + 1
  end
  for _ = 1, listings do
    for _, ns in ipairs(redis.call('ZRANGEBYLEX', N, arg(), arg())) do
      if tonumber(redis.call('HGET', C, ns) or '0') > (expired[ns] or 0) then
        names[#names + 1] = ns
      end
    end
  end
end

for _ = 1, tonumber(arg()) do store_drop(arg()) end

for _ = 1, tonumber(arg()) do
  local member, vt, v, wt, w, ttl, x, ms = arg(), arg(), arg(), arg(), arg(), arg(), arg(), arg()
  local key = BASE .. member
  local old = redis.call('HMGET', key, 'c', 'x')
  local created = ARGV[2]
  if old[1] and (not old[2] or old[2] == '' or tonumber(old[2]) > now) then created = old[1] end
  if redis.call('ZADD', K, 0, member) == 1 then
    local ns = store_ns(member)
    if redis.call('HINCRBY', C, ns, 1) == 1 then redis.call('ZADD', N, 0, ns) end
  end
  redis.call('DEL', key)
  redis.call('HSET', key, 'vt', vt, 'v', v, 'wt', wt, 'w', w, 'c', created, 'u', ARGV[2],
    't', ttl, 'x', x, 'f', format)
  if x == '' then
    redis.call('ZREM', X, member)
  else
    redis.call('ZADD', X, x, member)
    redis.call('PEXPIRE', key, ms)
  end
end

return {'ok', gets, searched, names}
