-- release: a request's concurrency slots given back, or their leases renewed.
--
-- Its own script (not part of the decide script): one call per request, sent when its
-- response has been sent or its client went away (release), or while it still runs, every
-- third of its shortest lease (renew).
--
-- KEYS: the request's concurrency keys (all in one hash slot).
-- ARGV: "release" | "renew", the request's owner token, then per key its lease_us.
-- Or, the releases of several requests in one call (one Redis, not a cluster: their keys
-- are in different hash slots): KEYS every request's keys, one request after the other;
-- ARGV: "releases", then per request its owner token and how many of KEYS are its own.
-- Only the member named by the token is touched: a slot that is not ours (ours ended and
-- was reclaimed, and another request holds the place now) is never released or renewed.
-- Reply: the number of keys whose slot was found.
if redis.replicate_commands then redis.replicate_commands() end
local op, token = ARGV[1], ARGV[2]
if op == 'releases' then
  -- Every request checked before any slot goes: a malformed call releases nothing.
  local k, nargs = 0, #ARGV
  if nargs < 3 or nargs % 2 ~= 1 then
    return redis.error_reply('ERR release: expected releases, then a token and a key count per request')
  end
  for i = 2, nargs, 2 do
    local n = tonumber(ARGV[i + 1])
    if ARGV[i] == '' or not n or n < 1 or n % 1 ~= 0 then
      return redis.error_reply('ERR release: request ' .. (i / 2) .. ' needs a token and a whole number of keys')
    end
    k = k + n
  end
  if k ~= #KEYS then
    return redis.error_reply('ERR release: the requests name ' .. k .. ' keys, KEYS holds ' .. #KEYS)
  end
  local found, zrem = 0, redis.pcall
  k = 0
  for i = 2, nargs, 2 do
    local owner = ARGV[i]
    for j = k + 1, k + tonumber(ARGV[i + 1]) do
      if zrem('ZREM', KEYS[j], owner) == 1 then found = found + 1 end
    end
    k = k + tonumber(ARGV[i + 1])
  end
  return found
end
if (op ~= 'release' and op ~= 'renew') or not token or token == '' or #ARGV ~= 2 + #KEYS then
  return redis.error_reply('ERR release: expected release|renew, a token and a lease per key')
end
local found = 0
if op == 'release' then
  for i = 1, #KEYS do
    local ok, removed = pcall(redis.call, 'ZREM', KEYS[i], token)
    if ok and removed == 1 then found = found + 1 end
  end
  return found
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local format = string.format
for i = 1, #KEYS do
  local lease = tonumber(ARGV[2 + i])
  if not lease or lease < 1 or lease % 1 ~= 0 then
    return redis.error_reply('ERR release: lease ' .. i .. ' is not a whole number')
  end
  local key = KEYS[i]
  local ok, score = pcall(redis.call, 'ZSCORE', key, token)
  -- A slot whose lease ended is no longer ours, even if nobody trimmed it yet.
  if ok and score and tonumber(score) > now then
    redis.call('ZADD', key, 'XX', format('%d', now + lease), token)
    local newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
    redis.call('PEXPIREAT', key, format('%d', math.ceil(newest / 1000)))
    found = found + 1
  end
end
return found
