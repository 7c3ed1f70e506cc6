-- uses: thread

-- An effect-journal entry's fields in EFFECT_FIELDS order (false where missing).
local function read_effect(id)
  return redis.call('HMGET', E .. ':' .. id, unpack(EFFECT_FIELDS))
end
