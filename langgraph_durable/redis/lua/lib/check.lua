-- uses: thread

-- Refuses (before any write) when a key of the thread holds another type.
local function check_types()
  for k = 1, 6 do
    local want = (k <= 4) and 'hash' or 'zset'
    local t = redis.call('TYPE', KEYS[k])['ok']
    if t ~= 'none' and t ~= want then
      return redis.error_reply('LGD_WRONGTYPE key ' .. KEYS[k] .. ' holds a ' .. t ..
        ', expected a ' .. want .. ': something other than the saver wrote it')
    end
  end
  local t = redis.call('TYPE', E)['ok']
  if t ~= 'none' and t ~= 'set' then
    return redis.error_reply('LGD_WRONGTYPE key ' .. E .. ' holds a ' .. t ..
      ', expected a set: something other than the saver wrote it')
  end
  return nil
end
