-- decide: a batch of requests, each against all limits of its route, in one atomic call.
--
-- The script Redis runs is token_bucket.lua .. sliding_window.lua .. decide.lua, joined by
-- the C++ side (limit/decide_script.cpp); this file uses the two tables they define.
--
-- A worker sends every decision that became due in one turn of its event loop as one call
-- (a batch of one when it is not busy). The requests are decided one after the other, in
-- order, exactly as if each had been its own call at the same Redis TIME: a later request
-- sees what an earlier one consumed. Batching only saves the per-call cost in Redis (command
-- parsing, script setup, TIME) and in the proxy.
--
-- KEYS: the key of every limit of every request, request after request (the keys of one
--   request share one hash tag; a batch may hold several tags, so this needs one Redis,
--   not a cluster).
-- ARGV: per request, in KEYS order: its number of limits n >= 1, then four per limit:
--   algorithm   "token_bucket" | "sliding_window"
--   shadow      "1" = report only, "0" = enforced
--   token_bucket:   interval_us (time to refill one token), burst
--   sliding_window: limit, window_us
-- Time is Redis TIME, always; there is no way to pass a time in. Needs Redis >= 6.2 (PXAT).
-- The whole batch is checked for shape before anything runs: a malformed one is an error
-- reply and writes nothing.
--
-- Per request, every limit is checked first, without writing. The request is admitted when
-- every enforced limit allows it; then every enforced limit consumes, and every shadow limit
-- that allows it consumes too (a shadow limit that would reject consumes nothing, as if it
-- were enforced alone). When the request is rejected, nothing is written for it at all.
--
-- Reply: ONE string of decimal integers separated by spaces (one reply object to build and
-- to parse, rather than an array of 4 per key): now_us, then four per limit, in KEYS order:
--   allowed (1: this limit alone admits the request, 0: it would reject),
--   remaining (after this request; a rejected request took nothing),
--   retry_after_ms (0 when allowed; else ms until this limit admits, rounded up),
--   reset_ms (ms until this limit is back to its full quota, rounded up).
if redis.replicate_commands then redis.replicate_commands() end

local algorithms = { token_bucket = token_bucket, sliding_window = sliding_window }
local nargs = #ARGV
local ceil = math.ceil

local function whole(x)
  return x and x >= 0 and x % 1 == 0
end

-- Shape first: counts, algorithms and numbers of the whole batch. The numbers are kept
-- (num[i] is ARGV[i] as a number, for the counts and parameters) so each is parsed once.
local num = {}
local a, keys = 1, 0
while a <= nargs do
  local n = tonumber(ARGV[a])
  if not whole(n) or n < 1 then
    return redis.error_reply('ERR decide: argument ' .. a .. ' is not a limit count')
  end
  if a + 4 * n > nargs then
    return redis.error_reply('ERR decide: expected a limit count, then 4 arguments per key')
  end
  num[a] = n
  for i = a + 1, a + 4 * n, 4 do
    if not algorithms[ARGV[i]] then
      return redis.error_reply('ERR decide: unknown algorithm ' .. tostring(ARGV[i]))
    end
    local x, y = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
    if not whole(x) or not whole(y) then
      return redis.error_reply('ERR decide: parameters of key ' .. (keys + (i - a + 3) / 4) ..
                               ' are not whole numbers')
    end
    num[i + 2], num[i + 3] = x, y
  end
  a = a + 1 + 4 * n
  keys = keys + n
end
if keys ~= #KEYS then
  return redis.error_reply('ERR decide: ' .. #KEYS .. ' keys for ' .. keys .. ' limits')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

local format = string.format
local reply = { format('%d', now) }
local k = 0  -- keys used by the requests before this one
a = 1
local checks, used = {}, {}  -- per limit of the request: its check, its algorithm
-- Four figures of one limit (whole numbers, %d: Lua's own number printing is slower and
-- switches to an exponent from 1e14).
local function put(allowed, remaining, retry_us, reset_us)
  reply[#reply + 1] = format('%d %d %d %d', allowed and 1 or 0, remaining, ceil(retry_us / 1000), ceil(reset_us / 1000))
end

while a <= nargs do
  local n = num[a]
  local only = algorithms[ARGV[a + 1]]
  if n == 1 and only.alone then
    -- One limit: it alone decides (a shadow limit too: consumed exactly when it allows).
    put(only.alone(KEYS[k + 1], now, num[a + 3], num[a + 4]))
  else
    local admit = true
    for i = 1, n do
      local base = a + 4 * i - 3
      local algorithm = algorithms[ARGV[base]]
      local c = algorithm.check(KEYS[k + i], now, num[base + 2], num[base + 3])
      if not c.allowed and ARGV[base + 1] ~= '1' then admit = false end
      checks[i], used[i] = c, algorithm
    end
    for i = 1, n do
      local c, algorithm = checks[i], used[i]
      local consumed = admit and c.allowed
      if consumed then algorithm.commit(c) end
      put(c.allowed, algorithm.report(c, consumed))
    end
  end
  a = a + 1 + 4 * n
  k = k + n
end
return table.concat(reply, ' ')
