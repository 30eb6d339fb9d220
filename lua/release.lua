-- release: a request's concurrency slots given back, or their leases renewed.
--
-- Its own script (not part of the decide script), sent when a request's response has been
-- sent or its client went away (release: the releases of a worker's turn in one call), or
-- while it still runs, every third of its shortest lease (renew: one call per request).
--
-- KEYS: the request's concurrency keys (all in one hash slot).
-- ARGV: "release" | "renew", the request's owner token, then per key its lease_us.
-- Or, the releases of several requests in one call: KEYS every request's keys, one request
-- after the other; ARGV: "releases", then per request its owner token and how many of the
-- keys are its own. On a cluster master (the script then carries the flag
-- allow-cross-slot-keys) the keys, of several hash slots, travel in ARGV instead and KEYS is
-- empty: ARGV "releases", K, the K keys, then the tokens and counts; a key this master does
-- not serve (its slot moved) is skipped, and its slot's lease takes it back.
-- Only the member named by the token is touched: a slot that is not ours (ours ended and
-- was reclaimed, and another request holds the place now) is never released or renewed.
-- Reply: the number of keys whose slot was found.
if redis.replicate_commands then redis.replicate_commands() end
local op, token = ARGV[1], ARGV[2]
if op == 'releases' then
  -- Every request checked before any slot goes: a malformed call releases nothing.
  local keys, first, nargs = KEYS, 2, #ARGV
  if #KEYS == 0 then
    local nkeys = tonumber(ARGV[2])
    if not nkeys or nkeys < 1 or nkeys % 1 ~= 0 or nkeys + 2 > nargs then
      return redis.error_reply('ERR release: argument 2 is not a number of keys')
    end
    keys = {}
    for i = 1, nkeys do keys[i] = ARGV[2 + i] end
    first = nkeys + 3
  end
  if nargs < first + 1 or (nargs - first) % 2 ~= 1 then
    return redis.error_reply('ERR release: expected releases, then a token and a key count per request')
  end
  local k = 0
  for i = first, nargs, 2 do
    local n = tonumber(ARGV[i + 1])
    if ARGV[i] == '' or not n or n < 1 or n % 1 ~= 0 then
      return redis.error_reply('ERR release: request ' .. ((i - first) / 2 + 1) .. ' needs a token and a whole number of keys')
    end
    k = k + n
  end
  if k ~= #keys then
    return redis.error_reply('ERR release: the requests name ' .. k .. ' keys, there are ' .. #keys)
  end
  local found, zrem = 0, redis.pcall
  k = 0
  for i = first, nargs, 2 do
    local owner = ARGV[i]
    for j = k + 1, k + tonumber(ARGV[i + 1]) do
      if zrem('ZREM', keys[j], owner) == 1 then found = found + 1 end
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
