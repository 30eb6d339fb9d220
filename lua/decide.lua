-- decide: all limits of one route in one atomic call.
--
-- The script Redis runs is token_bucket.lua .. sliding_window.lua .. decide.lua, joined by
-- the C++ side (limit/decide_script.cpp); this file uses the two tables they define.
--
-- KEYS[i]: the key of limit i (all in one cluster slot: they share one hash tag).
-- ARGV: four per limit, in KEYS order:
--   algorithm   "token_bucket" | "sliding_window"
--   shadow      "1" = report only, "0" = enforced
--   token_bucket:   interval_us (time to refill one token), burst
--   sliding_window: limit, window_us
-- Time is Redis TIME, always; there is no way to pass a time in. Needs Redis >= 6.2 (PXAT).
--
-- Every limit is checked first, without writing. The request is admitted when every
-- enforced limit allows it; then every enforced limit consumes, and every shadow limit that
-- allows it consumes too (a shadow limit that would reject consumes nothing, as if it were
-- enforced alone). When the request is rejected, nothing is written at all.
--
-- Reply: flat array of integers: now_us, then four per limit:
--   allowed (1: this limit alone admits the request, 0: it would reject),
--   remaining (after this request; a rejected request took nothing),
--   retry_after_ms (0 when allowed; else ms until this limit admits, rounded up),
--   reset_ms (ms until this limit is back to its full quota, rounded up).
if redis.replicate_commands then redis.replicate_commands() end

local algorithms = { token_bucket = token_bucket, sliding_window = sliding_window }
local limits = #KEYS
if #ARGV ~= 4 * limits then
  return redis.error_reply('ERR decide: expected 4 arguments per key')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

local checks = {}
local admit = true
for i = 1, limits do
  local algorithm = algorithms[ARGV[4 * i - 3]]
  if not algorithm then
    return redis.error_reply('ERR decide: unknown algorithm ' .. tostring(ARGV[4 * i - 3]))
  end
  local a, b = tonumber(ARGV[4 * i - 1]), tonumber(ARGV[4 * i])
  if not a or not b then
    return redis.error_reply('ERR decide: parameters of limit ' .. i .. ' are not numbers')
  end
  local c = algorithm.check(KEYS[i], now, a, b)
  c.algorithm = algorithm
  c.shadow = ARGV[4 * i - 2] == '1'
  if not c.allowed and not c.shadow then admit = false end
  checks[i] = c
end

local reply = { now }
for i = 1, limits do
  local c = checks[i]
  local consumed = admit and c.allowed
  if consumed then c.algorithm.commit(c) end
  local remaining, retry_us, reset_us = c.algorithm.report(c, consumed)
  reply[#reply + 1] = c.allowed and 1 or 0
  reply[#reply + 1] = remaining
  reply[#reply + 1] = math.ceil(retry_us / 1000)
  reply[#reply + 1] = math.ceil(reset_us / 1000)
end
return reply
