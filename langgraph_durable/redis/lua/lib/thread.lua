-- The keys of one thread and the shapes of their fields (see _keys.py and _records.py).
-- KEYS[1..6] are the thread's h, c, b, w, i and n keys, in that order.
local H, C, B, W, I, N = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- The effect journal's set (its entries are E .. ':' .. id), in the thread's slot.
local E = string.sub(H, 1, -2) .. 'e'
local SEP = '\0'
local MARK = '\0'
-- Header-hash fields that are not checkpoints start with two NULs (a checkpoint's
-- field "<ns>\0<id>" has one): the thread's creation and last-write server times.
local CREATED = '\0\0created'
local TOUCHED = '\0\0touched'
-- The loader fills these in: LangGraph's TASKS channel, and _keys.EFFECT_FIELDS.
local TASKS = '__TASKS__'
local EFFECT_FIELDS = {__EFFECT_FIELDS__}

-- Whether a header-hash field is not a checkpoint (MARK, the times).
local function is_meta(f)
  return f == MARK or string.sub(f, 1, 2) == '\0\0'
end

local function split(s)
  local p = string.find(s, SEP, 1, true)
  return string.sub(s, 1, p - 1), string.sub(s, p + 1)
end

local function tasks_of(f)
  local list = redis.call('HGET', W, f)
  if list then return cmsgpack.unpack(list) end
  return {}
end

local function task_writes(f)
  local out = {}
  for _, task in ipairs(tasks_of(f)) do
    local v = redis.call('HGET', W, f .. SEP .. task)
    if v then out[#out + 1] = v end
  end
  return out
end

-- The version a delta blob extends (nil for a full value).
local function base_of(v)
  if string.byte(v, 1) ~= 68 then return nil end
  local n = struct.unpack('>I', v, 2)
  return cmsgpack.unpack(string.sub(v, 6, 5 + n))[1]
end
