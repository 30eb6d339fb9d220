-- decide: a batch of requests, each against all limits of its route, in one atomic call.
--
-- The script Redis runs is token_bucket.lua .. sliding_window.lua .. fixed_window.lua ..
-- (standalone|cluster)_keys.lua .. decide.lua, joined by the C++ side
-- (limit/decide_script.cpp); this file builds the algorithms' tables with the functions
-- they define, each on its first use in a call.
--
-- A worker sends every decision that became due in one turn of its event loop as one call
-- (a batch of one when it is not busy). The requests are decided one after the other, in
-- order, exactly as if each had been its own call at the same Redis TIME: a later request
-- sees what an earlier one consumed. Batching only saves the per-call cost in Redis (command
-- parsing, script setup, TIME, and a key's reads and writes when a client has several
-- requests in the batch) and in the proxy.
--
-- KEYS: the key of every limit of every request, request after request (the keys of one
--   request share one hash tag; a batch may hold several tags). On a cluster the keys of a
--   batch come in ARGV instead (cluster_keys.lua says why and how).
-- ARGV: the batch's plans (the limits of a route, as its requests are decided), then the
--   plan of each request. A batch mostly holds requests of one or two routes, so the
--   parameters are sent, and parsed, once per plan rather than once per request:
--   ARGV[1]      P, the number of plans
--   each plan:   its number of limits n >= 1, then five per limit:
--                  algorithm   "token_bucket" | "sliding_window" | "fixed_window" |
--                              "concurrency"
--                  shadow      "1" = report only, "0" = enforced
--                  cost        units the request takes (0 takes nothing and always fits)
--                  token_bucket:   interval_us (time to refill one token), burst
--                  sliding_window: limit, window_us
--                  fixed_window:   limit, then either window_us (windows aligned to the
--                                  epoch) or "b0,b1,b2,b3": ascending boundaries of three
--                                  consecutive calendar windows, in microseconds, which the
--                                  proxy works out from its own clock and time zone data
--                                  (Redis has neither). TIME picks the window it falls in;
--                                  when it falls in none (the clocks differ by more than a
--                                  window) the call is an error and writes nothing.
--                  concurrency:    limit (requests in flight), lease_us
--                  leaky_bucket:   interval_us (time for one request to leave the bucket),
--                                  then "burst,delay_us,max_wait_us" (token_bucket.lua)
--   then, per request in order, its plan's number: "1" to P, written plainly, followed,
--   when the plan has a concurrency limit, by the request's owner token (the member its
--   slots get); its keys are the next n KEYS. A request whose cost comes from a header has a plan of its own
--   when its cost differs: plans are few per batch either way.
-- Time is Redis TIME, always; there is no way to pass a time in. Needs Redis >= 6.2 (PXAT).
-- The whole batch is checked for shape before anything runs: a malformed one is an error
-- reply and writes nothing.
--
-- Per request, every limit is checked first, without writing. The request is admitted when
-- every enforced limit allows it; then every enforced limit consumes, and every shadow limit
-- that allows it consumes too (a shadow limit that would reject consumes nothing, as if it
-- were enforced alone). When the request is rejected, nothing is written for it at all.
--
-- Reply: an array of integers (Redis writes them without the cost of formatting numbers in
-- Lua): now_us, then four per limit, in KEYS order:
--   allowed (1: this limit alone admits the request, 0: it would reject, 2: not decided, a
--     key of the request lives on another cluster node: see cluster_keys.lua),
--   remaining (after this request; a rejected request took nothing),
--   retry_after (when allowed: how long a leaky bucket holds the request back, in
--     microseconds, else 0; when not: ms until this limit admits, rounded up),
--   reset_ms (ms until this limit is back to its full quota, rounded up).
if redis.replicate_commands then redis.replicate_commands() end

-- The algorithms by name, each built when a call first names it: creating an algorithm's
-- functions is part of every call's cost, and most batches use one algorithm only.
-- On a cluster (cluster_keys.lua sets `cluster`), a key this node does not serve now (its slot
-- moved, or is migrating and the key has left) fails when it is read: redis.pcall answers an
-- error ("... non local key ..." or "... cluster is down ..."). The algorithms read every key
-- of a request before they write anything for it, and hand such an error to `read_failed`,
-- which raises NOT_HERE: the request is then answered "elsewhere" and the proxy sends it
-- again on its own. Any other error (a key of another type) is the algorithm's to handle.
local NOT_HERE = {}
local find = string.find
local function read_failed(reply)
  if not cluster then return end
  local message = reply.err or ''
  if find(message, 'non local key', 1, true) or find(message, 'cluster is down', 1, true) then
    error(NOT_HERE)
  end
end

local makers = {
  token_bucket = token_bucket_algorithm,
  sliding_window = sliding_window_algorithm,
  fixed_window = fixed_window_algorithm,
  concurrency = concurrency_algorithm,
  leaky_bucket = function(failed) return token_bucket_algorithm(failed, true) end,
}
local algorithms = {}
local function algorithm_named(name)
  local algorithm = algorithms[name]
  if algorithm == nil then
    local make = makers[name]
    if make == nil then return nil end
    algorithm = make(read_failed)
    algorithms[name] = algorithm
  end
  return algorithm
end
-- ARGV, KEYS (locals: a global is a table lookup on every use) and `cluster` come from
-- standalone_keys.lua or cluster_keys.lua.
local nargs = #ARGV
local ceil = math.ceil

local function whole(x)
  return x and x >= 0 and x % 1 == 0
end

local function refuse(message)
  return redis.error_reply('ERR decide: ' .. message)
end

-- A fixed window's second parameter: window_us, or four ascending calendar boundaries.
local function fixed_window_spec(text)
  local w = tonumber(text)
  if w then
    if whole(w) and w >= 1 then return { every = w } end
    return nil
  end
  local b0, b1, b2, b3 = string.match(text or '', '^(%d+),(%d+),(%d+),(%d+)$')
  if not b0 then return nil end
  local b = { tonumber(b0), tonumber(b1), tonumber(b2), tonumber(b3) }
  if not (b[1] < b[2] and b[2] < b[3] and b[3] < b[4]) then return nil end
  return { bounds = b }
end

-- A leaky bucket's second parameter: "burst,delay_us,max_wait_us".
local function leaky_bucket_spec(text)
  local burst, delay, max_wait = string.match(text or '', '^(%d+),(%d+),(%d+)$')
  if not burst then return nil end
  return { burst = tonumber(burst), delay_us = tonumber(delay), max_wait_us = tonumber(max_wait) }
end

-- Shape first: the plans, then the requests' plan numbers, then the number of keys.
local plans = {}  -- by plan number as ARGV writes it: "1", "2", ...
local windows = {}  -- the fixed windows' specs, to place at TIME
local count = tonumber(ARGV[1])
if not whole(count) or count < 1 then return refuse('argument 1 is not a number of plans') end
local a = 2
for p = 1, count do
  local n = tonumber(ARGV[a])
  if not whole(n) or n < 1 then return refuse('argument ' .. a .. ' is not a limit count') end
  if a + 5 * n > nargs then return refuse('plan ' .. p .. ' lacks its 5 arguments per limit') end
  local plan = { n = n }
  for i = 1, n do
    local b = a + 5 * i - 4
    local algorithm = algorithm_named(ARGV[b])
    if not algorithm then return refuse('unknown algorithm ' .. tostring(ARGV[b])) end
    local cost, x, y = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), nil
    if algorithm == algorithms.fixed_window then
      y = fixed_window_spec(ARGV[b + 4])
      windows[#windows + 1] = y
    elseif algorithm == algorithms.leaky_bucket then
      y = leaky_bucket_spec(ARGV[b + 4])
    else
      y = tonumber(ARGV[b + 4])
      if not whole(y) then y = nil end
    end
    if not whole(cost) or not whole(x) or not y then
      return refuse('parameters of limit ' .. i .. ' of plan ' .. p .. ' are not valid')
    end
    plan[i] = { algorithm = algorithm, shadow = ARGV[b + 1] == '1', cost = cost, x = x, y = y }
    if algorithm == algorithms.concurrency then plan.tokened = true end
  end
  if n == 1 and plan[1].cost > 0 then
    -- One limit: it alone decides (a shadow limit too: consumed exactly when it allows).
    local only = plan[1]
    plan.alone, plan.cost, plan.x, plan.y = only.algorithm.alone, only.cost, only.x, only.y
  end
  plans[tostring(p)] = plan
  a = a + 1 + 5 * n
end
local first, keys = a, 0
do
  local r = first
  while r <= nargs do
    local plan = plans[ARGV[r]]
    if not plan then return refuse('argument ' .. r .. ' is not a plan number') end
    if plan.tokened then
      if r + 1 > nargs or ARGV[r + 1] == '' then return refuse('argument ' .. r + 1 .. ' is not an owner token') end
      r = r + 1
    end
    keys = keys + plan.n
    r = r + 1
  end
end
if keys ~= #KEYS then return refuse(#KEYS .. ' keys for ' .. keys .. ' limits') end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- Each fixed window's current window, before anything is written.
for _, spec in ipairs(windows) do
  if spec.every then
    spec.start = now - now % spec.every
    spec.stop = spec.start + spec.every
  else
    local b = spec.bounds
    for j = 1, 3 do
      if b[j] <= now and now < b[j + 1] then spec.start, spec.stop = b[j], b[j + 1] end
    end
    if not spec.start then
      return refuse('Redis TIME ' .. now .. ' is outside the calendar windows ' .. b[1] .. '..' .. b[4] ..
                    ' (the proxy\'s clock and Redis\'s differ by more than a window)')
    end
  end
end

local reply, m = { now }, 1
local function put(allowed, remaining, retry_us, reset_us)
  reply[m + 2] = remaining
  if allowed then
    reply[m + 1] = 1
    reply[m + 3] = retry_us  -- a leaky bucket's wait, exact: the proxy's timer has microseconds
  else
    reply[m + 1] = 0
    reply[m + 3] = ceil(retry_us / 1000)
  end
  reply[m + 4] = ceil(reset_us / 1000)
  m = m + 4
end

-- Each algorithm keeps what it read and wrote during this call and writes at the end
-- (flush). The key of a limit whose algorithm changed on reload can come with two
-- algorithms in one batch: before one algorithm uses a key, the others hand it over
-- (release: writes what it holds for the key and forgets it). With one algorithm in the
-- call (nearly always) there is nothing to hand over.
local others = {}
local built = {}
for _, algorithm in pairs(algorithms) do built[#built + 1] = algorithm end
if #built > 1 then
  for _, algorithm in ipairs(built) do
    local list = {}
    for _, o in ipairs(built) do
      if o ~= algorithm then list[#list + 1] = o end
    end
    others[algorithm] = list
  end
end
local function hand_over(algorithm, key)
  local list = others[algorithm]
  if list then
    for j = 1, #list do list[j].release(key) end
  end
end
local k = 0  -- keys used by the requests before this one
local checks = {}  -- per limit of the request: its check
local function decide_request(plan, n, token)
  if plan.alone then
    local key = KEYS[k + 1]
    hand_over(plan[1].algorithm, key)
    put(plan.alone(key, now, plan.x, plan.y, plan.cost, token))
  else
    local admit = true
    for i = 1, n do
      local limit = plan[i]
      local key = KEYS[k + i]
      hand_over(limit.algorithm, key)
      local c = limit.algorithm.check(key, now, limit.x, limit.y, limit.cost, token)
      if not c.allowed and not limit.shadow then admit = false end
      checks[i] = c
    end
    for i = 1, n do
      local c, limit = checks[i], plan[i]
      -- A request of cost 0 takes nothing: reported as it stands.
      local consumed = admit and c.allowed and limit.cost > 0
      if consumed then limit.algorithm.commit(c) end
      put(c.allowed, limit.algorithm.report(c, consumed))
    end
  end
end

local r = first
while r <= nargs do
  local plan = plans[ARGV[r]]
  local n = plan.n
  local token
  if plan.tokened then
    r = r + 1
    token = ARGV[r]
  end
  r = r + 1
  if cluster then
    -- A request with a key this node cannot serve is not decided here: four zeros per limit,
    -- the first one 2 ("elsewhere"); nothing was written for it.
    local before = m
    local ok, err = pcall(decide_request, plan, n, token)
    if not ok then
      if err ~= NOT_HERE then error(err, 0) end
      m = before
      for _ = 1, n do
        reply[m + 1], reply[m + 2], reply[m + 3], reply[m + 4] = 2, 0, 0, 0
        m = m + 4
      end
    end
  else
    decide_request(plan, n, token)
  end
  k = k + n
end
for _, algorithm in pairs(algorithms) do algorithm.flush() end
return reply
