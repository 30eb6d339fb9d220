-- fixed_window: at most `limit` units per window; a window is [start, stop) in microseconds
-- of Redis TIME, worked out by decide.lua before any request is decided (aligned to the
-- epoch, or one of the calendar windows the proxy sent, see decide.lua).
--
-- Part of the decide script (see token_bucket.lua): this file only defines a local function
-- that builds the algorithm's table.
--
-- State: one string key "<start>:<count>", the window's start and the units it admitted. A
-- value of another window (or another type: the limit's algorithm changed on reload) reads as
-- an empty window and is replaced when written. The key expires when its window ends (PXAT,
-- rounded up to the ms); the start in the value, not the expiry, decides which window it
-- counts, so a key Redis has not expired yet at the very edge never counts twice.
-- `read_failed(error)`: as for token_bucket_algorithm.
local function fixed_window_algorithm(read_failed)
  local fixed_window = {}

  local format, match = string.format, string.match
  -- Globals used per request, as upvalues (see token_bucket.lua).
  local ceil, tonumber, type, unpack = math.ceil, tonumber, type, unpack
  local redis_call, redis_pcall = redis.call, redis.pcall

  -- What this call knows of its keys: known[key] = { start, stop, count, dirty }. A key is
  -- read once and written once, at the end (flush), however many requests of the batch use it.
  local known = {}
  function fixed_window.begin() known = {} end

  -- The expiry written with the keys of a window: the same for all of them (its end), so made
  -- once per window rather than per key (string.format is about 1,800 instructions of Redis's).
  local expiry_stop, expiry_text
  local function store(key, e)
    if e.stop ~= expiry_stop then expiry_stop, expiry_text = e.stop, format('%d', ceil(e.stop / 1000)) end
    redis_call('SET', key, format('%d:%d', e.start, e.count), 'PXAT', expiry_text)
    e.dirty = false
  end

  -- The window of `key` starting at `start` as this call knows it.
  local function entry(key, start, stop)
    local e = known[key]
    if e then
      if e.start == start then return e end
      -- Another window for the same key in one call (a reload changed the window and the
      -- batch holds requests of both configurations): what was admitted is written first.
      if e.dirty then store(key, e) end
    end
    local value = redis_pcall('GET', key)
    if type(value) == 'table' then
      read_failed(value)
      value = nil
    end
    local count = 0
    if type(value) == 'string' then
      local s, c = match(value, '^(%d+):(%d+)$')
      if s and tonumber(s) == start then count = tonumber(c) end
    end
    e = { start = start, stop = stop, count = count, dirty = false }
    known[key] = e
    return e
  end

  -- `window` is { start, stop } at `now`. Reads, writes nothing.
  function fixed_window.check(key, now, limit, window, cost)
    local e = entry(key, window.start, window.stop)
    return { e = e, now = now, limit = limit, count = e.count, cost = cost, allowed = e.count + cost <= limit }
  end

  function fixed_window.commit(c)
    c.e.count = c.e.count + c.cost
    c.e.dirty = true
  end

  -- A reservation's give-back (decide.lua, flags 5): `cost` units back to the window the
  -- reservation was taken in (`at`, microseconds of TIME), if that is still the current one;
  -- a window that has ended took its units with it. Never below 0.
  function fixed_window.give_back(key, now, limit, window, cost, at)
    if at < window.start or at >= window.stop then return end
    local e = entry(key, window.start, window.stop)
    local count = e.count - cost
    if count < 0 then count = 0 end
    if count ~= e.count then
      e.count = count
      e.dirty = true
    end
  end

  -- remaining, retry_after_us, reset_us after this request (consumed or not). Reset is the
  -- window's end; a refused request fits again when the next window starts.
  function fixed_window.report(c, consumed)
    local count = c.count
    if consumed then count = count + c.cost end
    local remaining = c.limit - count
    if remaining < 0 then remaining = 0 end
    local until_end = c.e.stop - c.now
    if c.allowed then return remaining, 0, until_end end
    return remaining, until_end, until_end
  end

  -- The whole decision when this is the request's only limit and it costs something.
  function fixed_window.alone(key, now, limit, window, cost)
    local e = entry(key, window.start, window.stop)
    local until_end = e.stop - now
    if e.count + cost > limit then
      local remaining = limit - e.count
      if remaining < 0 then remaining = 0 end
      return false, remaining, until_end, until_end
    end
    e.count = e.count + cost
    e.dirty = true
    return true, limit - e.count, 0, until_end
  end

  function fixed_window.flush()
    for key, e in pairs(known) do
      if e.dirty then store(key, e) end
    end
  end

  -- Before another algorithm uses `key` in this call: what this call admitted goes to Redis.
  function fixed_window.release(key)
    local e = known[key]
    if e == nil then return end
    if e.dirty then store(key, e) end
    known[key] = nil
  end
  return fixed_window
end
