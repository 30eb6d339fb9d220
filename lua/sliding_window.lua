-- sliding_window: at most `limit` requests in any rolling `window`, exactly.
--
-- Part of the decide script: the build sends token_bucket.lua, sliding_window.lua and
-- decide.lua to Redis as ONE script, so this file only defines a local table.
--
-- State: a sorted set with one member per admitted request, scored by its Redis TIME in
-- microseconds. A request at `t` counts while now - t < window, i.e. it leaves the window
-- at exactly t + window. Members are "<t>-<n>" where n is the number of members the set
-- held (after trimming) when the request was added: at one instant every admission adds a
-- member and none leaves, so n grows and requests in the same microsecond are each counted.
-- Expired members are trimmed only when a request is admitted (a rejected request writes
-- nothing); the set never holds more than `limit` members after a write. The key expires
-- when its newest member leaves the window. A key of another type (the limit's algorithm
-- changed on reload) reads as empty and is replaced when written.
local sliding_window = {}

local format = string.format

-- Retry and reset of a request that does not fit: `count` members are in the window.
-- Returns remaining, retry_after_us, reset_us.
local function refusal(key, now, limit, window, count, oldest_counted)
  local remaining = limit - count
  if remaining < 0 then remaining = 0 end
  local retry_us, reset_us = window, 0  -- limit 0 and nothing counted: never fits; say "a window"
  if count > 0 then
    -- The request fits once count - limit + 1 of the counted members have left.
    local leaving = redis.call('ZRANGEBYSCORE', key, oldest_counted, '+inf',
                               'WITHSCORES', 'LIMIT', count - limit, 1)
    if leaving[2] then retry_us = tonumber(leaving[2]) + window - now end
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    reset_us = tonumber(newest[2]) + window - now
  end
  return remaining, retry_us, reset_us
end

-- Members in the window at `now`, and whether the key holds something else than a set.
local function counted(key, now, window)
  local oldest_counted = '(' .. format('%d', now - window)
  local count = redis.pcall('ZCOUNT', key, oldest_counted, '+inf')
  if type(count) ~= 'number' then return 0, true, oldest_counted end
  return count, false, oldest_counted
end

-- Adds the request at `now` to a set whose expired members are gone, `held` members left.
local function add(key, now, window, held)
  redis.call('ZADD', key, now, format('%d-%d', now, held))
  -- Expires when this newest member leaves the window (absolute, rounded up to the ms).
  redis.call('PEXPIREAT', key, format('%d', math.ceil((now + window) / 1000)))
end

-- Reads the state and works out whether one more request fits. Writes nothing.
function sliding_window.check(key, now, limit, window)
  local count, foreign, oldest_counted = counted(key, now, window)
  local c = {
    key = key, now = now, limit = limit, window = window, count = count, foreign = foreign,
    allowed = count < limit, remaining = 0, retry_us = 0, reset_us = 0,
  }
  if c.allowed and count > 0 then
    -- Reported as it stands when another limit rejects the request.
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    c.reset_us = tonumber(newest[2]) + window - now
  elseif not c.allowed then
    c.remaining, c.retry_us, c.reset_us = refusal(key, now, limit, window, count, oldest_counted)
  end
  return c
end

-- Records the request: the key is written only here. The set is counted again, as another
-- limit of the same request may have added to the same key since the check.
function sliding_window.commit(c)
  if c.foreign then redis.call('DEL', c.key) end
  redis.call('ZREMRANGEBYSCORE', c.key, '-inf', format('%d', c.now - c.window))
  add(c.key, c.now, c.window, redis.call('ZCARD', c.key))
end

-- remaining, retry_after_us, reset_us after this request (consumed or not).
function sliding_window.report(c, consumed)
  if consumed then
    return c.limit - c.count - 1, 0, c.window
  end
  if c.allowed then return c.limit - c.count, 0, c.reset_us end
  return c.remaining, c.retry_us, c.reset_us
end

-- The whole decision when this is the request's only limit (most routes): count, add if it
-- fits, report; two to four Redis calls less than check/commit/report, no check table.
-- Returns allowed, remaining, retry_after_us, reset_us.
function sliding_window.alone(key, now, limit, window)
  local count, foreign, oldest_counted = counted(key, now, window)
  if count >= limit then
    return false, refusal(key, now, limit, window, count, oldest_counted)
  end
  if foreign or count == 0 then
    redis.call('DEL', key)  -- nothing in it counts: cheaper than trimming member by member
  else
    redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now - window))
  end
  add(key, now, window, count)
  return true, limit - count - 1, 0, window
end
