-- sliding_window: at most `limit` requests in any rolling `window`, exactly.
--
-- Part of the decide script: the build sends token_bucket.lua, sliding_window.lua and
-- decide.lua to Redis as ONE script, so this file only defines a local table.
--
-- State: a sorted set with one member per admitted request, scored by its Redis TIME in
-- microseconds. A request at `t` counts while now - t < window, i.e. it leaves the window
-- at exactly t + window. Members are "<t>-<n>" where n is the number of members already at
-- score t, so requests in the same microsecond are each counted. Expired members are trimmed
-- only when a request is admitted (a rejected request writes nothing); the set never holds
-- more than `limit` members after a write. The key expires when its newest member leaves
-- the window. A key of another type (the limit's algorithm changed on reload) reads as
-- empty and is replaced when written.
local sliding_window = {}

local function integer_string(x)
  return string.format('%d', x)
end

-- Reads the state and works out whether one more request fits. Writes nothing.
function sliding_window.check(key, now, limit, window)
  local oldest_counted = '(' .. integer_string(now - window)
  local count = redis.pcall('ZCOUNT', key, oldest_counted, '+inf')
  local foreign = type(count) ~= 'number'
  if foreign then count = 0 end
  local c = {
    key = key, now = now, limit = limit, window = window, count = count, foreign = foreign,
    allowed = count < limit, retry_us = 0, newest = nil,
  }
  if count > 0 then
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    c.newest = tonumber(newest[2])
  end
  if not c.allowed then
    -- The request fits once count - limit + 1 of the counted members have left.
    local leaving = {}
    if count > 0 then
      leaving = redis.call('ZRANGEBYSCORE', key, oldest_counted, '+inf',
                           'WITHSCORES', 'LIMIT', count - limit, 1)
    end
    if leaving[2] then
      c.retry_us = tonumber(leaving[2]) + window - now
    else
      c.retry_us = window  -- limit 0: never fits; say "a window"
    end
  end
  return c
end

-- Records the request: the key is written only here.
function sliding_window.commit(c)
  if c.foreign then redis.call('DEL', c.key) end
  redis.call('ZREMRANGEBYSCORE', c.key, '-inf', integer_string(c.now - c.window))
  local same_instant = redis.call('ZCOUNT', c.key, c.now, c.now)
  redis.call('ZADD', c.key, c.now, integer_string(c.now) .. '-' .. same_instant)
  -- Expires when this newest member leaves the window (absolute, rounded up to the ms).
  redis.call('PEXPIREAT', c.key, integer_string(math.ceil((c.now + c.window) / 1000)))
end

-- remaining, retry_after_us, reset_us after this request (consumed or not).
function sliding_window.report(c, consumed)
  if consumed then
    return c.limit - c.count - 1, 0, c.window
  end
  local remaining = c.limit - c.count
  if remaining < 0 then remaining = 0 end
  local reset_us = 0
  if c.newest then reset_us = c.newest + c.window - c.now end
  return remaining, c.retry_us, reset_us
end
