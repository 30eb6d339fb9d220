-- decide: a batch of requests, each against all limits of its route, in one atomic call.
--
-- The code Redis runs is token_bucket.lua .. sliding_window.lua .. fixed_window.lua ..
-- concurrency.lua .. decide.lua .. (standalone|cluster)_keys.lua, joined by the C++ side
-- (limit/decide_script.cpp), loaded as a Redis 7 function library (FUNCTION LOAD; called
-- with FCALL) or, where FUNCTION is not available or not allowed, as a script (EVALSHA).
-- This file defines `decide(KEYS, ARGV, cluster)`; the *_keys.lua file registers it (or
-- calls it, as a script).
--
-- A library is loaded once and its functions keep their upvalues from call to call: the
-- algorithms' tables are built on a call's first use of the algorithm and kept, and so is
-- every plan parsed (below), so a call pays only for its requests. (Redis runs a library's
-- top level with no standard library at hand: nothing here touches `string`, `math` or
-- another global before the first call.) As a script, everything is built anew per call.
--
-- A worker sends every decision that became due in one turn of its event loop as one call
-- (a batch of one when it is not busy), with the batches other workers of the process handed
-- over meanwhile (limit/shared_batches.hpp). The requests are decided one after the other, in
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
--   parameters are sent once per plan rather than once per request, and a plan's text is
--   parsed once and kept (by its text, a few hundred at most) while the library lives:
--   ARGV[1]      P, the number of plans
--   ARGV[2..P+1] each plan as one text: its limits separated by ";", each limit five
--                fields separated by single spaces:
--                  algorithm   "token_bucket" | "sliding_window" | "fixed_window" |
--                              "concurrency" | "leaky_bucket"
--                  flags       "0" = enforced, "1" = shadow (report only), "2" = enforced,
--                              checked only: it can refuse the request but takes nothing
--                              (it is charged after the response, `count`), "3" = shadow
--                              and checked only, "4" = the charge after the response: the
--                              request's cost is taken whatever the limit holds (a limit
--                              counted past its capacity refuses until it is back within
--                              it), and it never refuses; "5" = a give-back after the
--                              response (a cost the response reports: less than the
--                              reservation the request took): `cost` units of the
--                              reservation go back, as far as the limit still holds them
--                              (the algorithms' give_back), and it never refuses;
--                              "0" or "1" may be followed by "d" (token_bucket: the
--                              bucket keeps a debt past empty, as "2" to "5" do: a limit
--                              whose response cost is charged after the response);
--                              "0" or "2" may be followed by
--                              "b" and a duration in microseconds (`ban`, token_bucket,
--                              sliding_window, fixed_window): a request this limit refuses
--                              bans the key for that long, or until the limit's retry time
--                              when later (below); "B": for that long only (a limit whose
--                              response reports its cost: room comes back as reservations
--                              settle); "5" must be followed
--                              by "t" and the reservation's Redis TIME in microseconds
--                              (token_bucket, sliding_window, fixed_window)
--                  cost        units the request takes (0 takes nothing and always fits)
--                  token_bucket:   interval_us (time to refill one token), burst, or
--                                  "burst,kept": the bucket keeps what was used when its
--                                  key is read under another interval (a route with plans:
--                                  token_bucket.lua)
--                  sliding_window: limit, window_us, or "window_us,w" (weighted): a request of
--                                  cost 2 or more is one member of that weight, where the
--                                  limit's requests may cost more than one unit
--                                  (sliding_window.lua)
--                  fixed_window:   limit, then either window_us (windows aligned to the
--                                  epoch) or "b0,b1,b2,b3": ascending boundaries of three
--                                  consecutive calendar windows, in microseconds, which the
--                                  proxy works out from its own clock and time zone data
--                                  (Redis has neither). TIME picks the window it falls in;
--                                  when it falls in none (the clocks differ by more than a
--                                  window) the call is an error and writes nothing.
--                  concurrency:    limit (requests in flight), lease_us
--                  leaky_bucket:   interval_us (time for one request to leave the bucket),
--                                  then "burst,delay_us,max_wait_us" (token_bucket.lua),
--                                  or "burst,delay_us,max_wait_us,kept" (as above)
--   then, per request in order, its plan's number: "1" to P, written plainly, followed,
--   when the plan has a concurrency limit, by the request's owner token (the member its
--   slots get); its keys are the next n KEYS. A request whose cost comes from a header has
--   a plan of its own when its cost differs: plans are few per batch either way.
--   Where every request has plan 1 and it has no concurrency limit (P is 1), the numbers
--   may be left out: ARGV ends with the plan, and the requests are as many as KEYS holds n
--   keys (an argument less per request for Redis to read and hand to Lua: about 2,000
--   instructions of Redis's per decision).
-- Time is Redis TIME, always; there is no way to pass a time in. Needs Redis >= 6.2 (PXAT).
-- The whole batch is checked for shape before anything runs: a malformed one is an error
-- reply and writes nothing.
--
-- Per request, every limit is checked first, without writing. The request is admitted when
-- every enforced limit allows it; then every enforced limit consumes, and every shadow limit
-- that allows it consumes too (a shadow limit that would reject consumes nothing, as if it
-- were enforced alone). When the request is rejected, nothing is taken for it (a token bucket
-- read beyond empty, after a reload, is written as read: token_bucket.lua's read; a weighted
-- sliding window's members that left the window go when it is counted: sliding_window.lua). A
-- limit checked only (flags 2, 3) can refuse the request like any other but never consumes:
-- the proxy charges it after the response when its status is counted, with a request of its
-- own whose limits all have flags 4 (always consumes, never refuses).
--
-- A limit with a ban: a request it refuses bans the key (SET KEY:ban END PXAT END, the ban's
-- end in microseconds of TIME, in the key's slot). While the ban lasts every request with
-- that key is refused at once: nothing else is checked or written for it, and only the
-- banning limit's result means anything (the others read 1, 0, 0, 0). A request that costs
-- nothing in any limit (a look-up: the admin's GET /limits, or a free route) writes nothing
-- either way (but a weighted sliding window's trim of what left it, sliding_window.lua): it
-- is decided as usual, every limit reported as it stands, and each limit whose key is banned
-- then reads as refused by its ban.
--
-- Reply: one string of little-endian signed 64-bit integers (struct.pack '<i8': neither Lua
-- nor Redis formats a number, and the proxy reads one bulk string rather than an array of
-- replies): now_us, then four per limit, in KEYS order:
--   allowed (1: this limit alone admits the request, 0: it would reject, 3: it rejects, and
--     the key is banned (retry_after: until the ban's end, or the limit's own retry when that
--     is later), 2: not decided, a key of the request lives on another cluster node: see
--     cluster_keys.lua),
--   remaining (after this request; a rejected request took nothing),
--   retry_after (when allowed: how long a leaky bucket holds the request back, in
--     microseconds, else 0; when not: ms until this limit admits, rounded up),
--   reset_ms (ms until this limit is back to its full quota, rounded up).
local NOT_HERE = {}
local cluster = false  -- this call's: set by decide()
-- The globals used per request, as upvalues (set on the first call: see above).
local find, match, ceil, tostr, protected, format  -- string.find, string.match, math.ceil, tostring, pcall, string.format
local pack, unpack_, rep, concat  -- struct.pack, unpack, string.rep, table.concat
local function read_failed(reply)
  if not cluster then return end
  local message = reply.err or ''
  if find(message, 'non local key', 1, true) or find(message, 'cluster is down', 1, true) then
    error(NOT_HERE)
  end
end

-- The algorithms by name, each built when a call first names it and kept.
local makers = {
  token_bucket = token_bucket_algorithm,
  sliding_window = sliding_window_algorithm,
  fixed_window = fixed_window_algorithm,
  concurrency = concurrency_algorithm,
  leaky_bucket = function(failed) return token_bucket_algorithm(failed, true) end,
}
local algorithms, built = {}, {}
-- The key of a limit whose algorithm changed on reload can come with two algorithms in one
-- batch: before one algorithm uses a key, the others hand it over (release: writes what it
-- holds for the key and forgets it). others[algorithm] lists them once two are built.
local others = {}
local function algorithm_named(name)
  local algorithm = algorithms[name]
  if algorithm == nil then
    local make = makers[name]
    if make == nil then return nil end
    algorithm = make(read_failed)
    algorithm.begin()
    algorithms[name] = algorithm
    built[#built + 1] = algorithm
    if #built > 1 then
      for i = 1, #built do
        local list = {}
        for j = 1, #built do
          if j ~= i then list[#list + 1] = built[j] end
        end
        others[built[i]] = list
      end
    end
  end
  return algorithm
end

local function whole(x)
  return x and x >= 0 and x % 1 == 0
end

-- A fixed window's second parameter: window_us, or four ascending calendar boundaries.
-- Placed at each call's TIME (start, stop) before anything is decided.
local function fixed_window_spec(text)
  local w = tonumber(text)
  if w then
    if whole(w) and w >= 1 then return { every = w } end
    return nil
  end
  local b0, b1, b2, b3 = match(text or '', '^(%d+),(%d+),(%d+),(%d+)$')
  if not b0 then return nil end
  local b = { tonumber(b0), tonumber(b1), tonumber(b2), tonumber(b3) }
  if not (b[1] < b[2] and b[2] < b[3] and b[3] < b[4]) then return nil end
  return { bounds = b }
end

-- A leaky bucket's second parameter: "burst,delay_us,max_wait_us".
local function leaky_bucket_spec(text)
  local burst, delay, max_wait = match(text or '', '^(%d+),(%d+),(%d+)$')
  if not burst then return nil end
  return { burst = tonumber(burst), delay_us = tonumber(delay), max_wait_us = tonumber(max_wait) }
end

-- A plan's text, parsed: { n, [i] = { algorithm, shadow, cost, x, y, kept }, windows,
-- tokened, alone... }, or nil and what is wrong with it.
local function parse_plan(text)
  local plan, windows, n, at = {}, {}, 0, 1
  while true do
    local stop = find(text, ';', at, true)
    local limit = text
    if stop then limit = text:sub(at, stop - 1) elseif at > 1 then limit = text:sub(at) end
    n = n + 1
    local name, flags, more, cost, x, y = match(limit, '^(%S+) ([0-5])(%S*) (%d+) (%d+) (%S+)$')
    if not name then return nil, 'limit ' .. n .. ' is not "algorithm flags cost x y"' end
    local ban, exact_ban, since, debt
    if more ~= '' then
      local counted = name == 'token_bucket' or name == 'sliding_window' or name == 'fixed_window'
      local d, letter, number = match(more, '^(d?)([bBt]?)(%d*)$')
      if letter == 'b' or letter == 'B' then
        ban, exact_ban = tonumber(number), letter == 'B'
      elseif letter == 't' then
        since = tonumber(number)
      end
      debt = d == 'd'
      if not d or (letter == '') ~= (number == '') or (debt and (name ~= 'token_bucket' or (flags ~= '0' and flags ~= '1'))) or
         (ban and (ban < 1 or (flags ~= '0' and flags ~= '2') or not counted)) or (since and (flags ~= '5' or not counted)) then
        return nil, 'limit ' .. n .. ': flags ' .. flags .. more .. ' are not valid'
      end
    end
    if flags == '5' and not since then return nil, 'limit ' .. n .. ': flags 5 need the reservation\'s time ("5t<us>")' end
    local algorithm = algorithm_named(name)
    if not algorithm then return nil, 'unknown algorithm ' .. name end
    cost, x = tonumber(cost), tonumber(x)
    -- (The proxy bounds every cost far below this: a larger one would not count exactly.)
    if cost >= 2^53 or x >= 2^53 then return nil, 'parameters of limit ' .. n .. ' are not valid' end
    local kept = false  -- (the algorithm's variant: a bucket's `kept`, a window's `weighted`)
    if (name == 'token_bucket' or name == 'leaky_bucket') and y:sub(-5) == ',kept' then
      kept, y = true, y:sub(1, -6)
    elseif name == 'sliding_window' and y:sub(-2) == ',w' then
      kept, y = true, y:sub(1, -3)
    end
    if name == 'fixed_window' then
      y = fixed_window_spec(y)
      windows[#windows + 1] = y
    elseif name == 'leaky_bucket' then
      y = leaky_bucket_spec(y)
    else
      y = tonumber(y)
      if not whole(y) then y = nil end
    end
    if not y then return nil, 'parameters of limit ' .. n .. ' are not valid' end
    local checked, charge, give_back = flags == '2' or flags == '3', flags == '4', flags == '5'
    plan[n] = { algorithm = algorithm, shadow = flags == '1' or flags == '3', cost = cost, x = x, y = y, kept = kept,
                checked = checked, charge = charge, give_back = give_back, since = since, ban = ban,
                exact_ban = exact_ban, debt = debt or checked or charge or give_back }
    if ban then plan.banning = true end
    if cost ~= 0 then plan.costly = true end
    -- A give-back (a reservation's time) or a charge after the response (a settle's cost)
    -- comes once: such a plan is not kept, so it never pushes the routes' plans out.
    if give_back or charge then plan.once = true end
    if (flags == '2' or flags == '3' or flags == '4') and (name == 'concurrency' or name == 'leaky_bucket') then
      return nil, 'limit ' .. n .. ': ' .. name .. ' is not counted after the response'
    end
    if name == 'concurrency' then plan.tokened = true end
    if not stop then break end
    at = stop + 1
  end
  plan.n, plan.windows = n, windows
  if n == 1 and plan[1].cost > 0 and not plan[1].debt and not plan[1].ban then
    -- One limit: it alone decides (a shadow limit too: consumed exactly when it allows).
    local only = plan[1]
    plan.alone, plan.cost, plan.x, plan.y, plan.kept = only.algorithm.alone, only.cost, only.x, only.y, only.kept
    plan.seen = {}  -- the algorithm's own notes on this limit's keys, kept with the plan
  end
  return plan
end
local parsed, parsed_count = {}, 0  -- plan texts already parsed, kept across calls
-- This call's plans: by number as ARGV writes it ("1", "2", ...) and by number; the
-- numbers' texts, made once (tostring formats with sprintf: 1,500 instructions each), and
-- back (tonumber: 1,000).
local plans, plan_list, plan_count, number_names, number_values = {}, {}, 0, {}, {}

-- struct.pack formats by the number of integers they write, made once.
local formats = {}
local function packed_format(n)
  local f = formats[n]
  if not f then
    f = '<' .. rep('i8', n)
    formats[n] = f
  end
  return f
end

-- The reply's first `count` values as the reply string, 256 at a time (unpack puts each on
-- Lua's stack, which is bounded).
local function packed(values, count)
  if count <= 256 then return pack(packed_format(count), unpack_(values, 1, count)) end
  local parts = {}
  for i = 1, count, 256 do
    local n = count - i + 1
    if n > 256 then n = 256 end
    parts[#parts + 1] = pack(packed_format(n), unpack_(values, i, i + n - 1))
  end
  return concat(parts)
end

local function refuse(message)
  return redis.error_reply('ERR decide: ' .. message)
end

-- The state of the call under way (decide() sets it), shared with the functions below, which
-- are made once rather than per call.
local call_keys, now, reply, m, k
local reply_kept = {}
local seconds_text, seconds_value  -- the last TIME's seconds, read (in microseconds)
local checks = {}  -- per limit of the request: its check

-- Appends one limit's result to the reply.
local function put(allowed, remaining, retry_us, reset_us)
  if remaining < 0 then remaining = 0 end  -- (a limit charged past its capacity)
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

-- Bans: the end (microseconds of TIME) of each ban key this call read or wrote, false where
-- there is none.
local bans, bans_used = {}, false  -- (a call starts with a new table only after one that used it)
local function ban_of(key)
  local ban_key = key .. ':ban'
  local ends = bans[ban_key]
  if ends == nil then
    bans_used = true
    local value = redis.pcall('GET', ban_key)
    if type(value) == 'table' then
      read_failed(value)
      value = nil
    end
    ends = value and tonumber(value) or false
    if ends and (ends ~= ends or ends >= 2^53) then ends = false end  -- (not ours)
    bans[ban_key] = ends
  end
  return ends, ban_key
end

-- The request's first limit whose key is banned now: its result (the ban's end, as a
-- refusal), four zeros' worth for the others; true. Nothing is written. Else false.
local function refused_by_ban(plan, n)
  for i = 1, n do
    if plan[i].ban then
      local ends = ban_of(call_keys[k + i])
      if ends and ends > now then
        for j = 1, n do
          if j == i then
            local left = ceil((ends - now) / 1000)
            reply[m + 1], reply[m + 2], reply[m + 3], reply[m + 4] = 3, 0, left, left
          else
            reply[m + 1], reply[m + 2], reply[m + 3], reply[m + 4] = 1, 0, 0, 0
          end
          m = m + 4
        end
        return true
      end
    end
  end
  return false
end

-- A refused request's limit with a ban: the ban starts, until the later of `ban` from now and
-- the limit's own retry time (`retry_us`: a client that waits as told is not banned again on
-- its return); its result says so (allowed 3).
local function start_ban(limit, key, retry_us)
  local length = limit.ban
  if retry_us > length and not limit.exact_ban then length = retry_us end
  local ends = now + length
  local _, ban_key = ban_of(key)
  redis.call('SET', ban_key, format('%d', ends), 'PXAT', format('%d', ceil(ends / 1000)))
  bans[ban_key], bans_used = ends, true
  reply[m - 3] = 3
  local left = ceil(length / 1000)
  reply[m - 1] = left
  if reply[m] < left then reply[m] = left end
end

local function hand_over(algorithm, key)
  local list = others[algorithm]
  if list then
    for j = 1, #list do list[j].release(key) end
  end
end

-- Decides one request of `plan` whose keys follow the k used by the requests before it.
local function decide_request(plan, n, token)
  if plan.alone then
    local key = call_keys[k + 1]
    if #built > 1 then hand_over(plan[1].algorithm, key) end
    put(plan.alone(key, now, plan.x, plan.y, plan.cost, token, plan.seen, plan.kept))
  else
    if plan.banning and plan.costly and refused_by_ban(plan, n) then return end
    local admit = true
    for i = 1, n do
      local limit = plan[i]
      local key = call_keys[k + i]
      hand_over(limit.algorithm, key)
      -- (A limit counted after the response may be charged below empty: its debt is kept.)
      local c
      if limit.give_back then
        -- What is given back goes first; the limit is then reported as it stands.
        limit.algorithm.give_back(key, now, limit.x, limit.y, limit.cost, limit.since, limit.kept)
        c = limit.algorithm.check(key, now, limit.x, limit.y, 0, token, limit.kept, true)
      else
        c = limit.algorithm.check(key, now, limit.x, limit.y, limit.cost, token, limit.kept, limit.debt)
      end
      if not c.allowed and not limit.shadow and not limit.charge and not limit.give_back then admit = false end
      checks[i] = c
    end
    for i = 1, n do
      local c, limit = checks[i], plan[i]
      -- A request of cost 0 takes nothing: reported as it stands. A limit checked only takes
      -- nothing now; its charge after the response takes the cost whatever it holds.
      local consumed
      if limit.charge then
        consumed = limit.cost > 0
      elseif limit.give_back then
        consumed = false  -- (given back above)
      else
        consumed = admit and c.allowed and limit.cost > 0 and not limit.checked
      end
      if consumed then limit.algorithm.commit(c) end
      local remaining, retry_us, reset_us = limit.algorithm.report(c, consumed)
      put(c.allowed, remaining, retry_us, reset_us)
      if limit.ban and not plan.costly then
        -- (a look-up: the ban, if any, over what the limit holds)
        local ends = ban_of(call_keys[k + i])
        if ends and ends > now then
          local left = ceil((ends - now) / 1000)
          reply[m - 3], reply[m - 2], reply[m - 1] = 3, 0, left
          if reply[m] < left then reply[m] = left end
        end
      end
      -- (Not from a look-up, which asks at cost 0 and must write nothing.)
      if limit.ban and not c.allowed and not admit and limit.cost > 0 then
        start_ban(limit, call_keys[k + i], retry_us)
      end
    end
  end
end

local function decide(KEYS, ARGV, in_cluster)
  if not find then
    find, match, ceil, tostr, protected, format = string.find, string.match, math.ceil, tostring, pcall, string.format
    pack, unpack_, rep, concat = struct.pack, unpack, string.rep, table.concat
  end
  cluster = in_cluster
  -- Every algorithm starts the call knowing nothing (an earlier call may have failed midway).
  for i = 1, #built do built[i].begin() end
  if bans_used then bans, bans_used = {}, false end
  local nargs = #ARGV

  -- Shape first: the plans, then the requests' plan numbers, then the number of keys.
  local count = number_values[ARGV[1]] or tonumber(ARGV[1])
  if not whole(count) or count < 1 or count + 1 > nargs then return refuse('argument 1 is not a number of plans') end
  -- (plans and plan_list are kept from call to call: the last call's entries past this
  -- call's count go first, so that no number names a plan of another call)
  for p = count + 1, plan_count do
    plans[number_names[p] or tostr(p)], plan_list[p] = nil, nil
  end
  plan_count = count  -- (entries past it are nil: a call refused midway leaves 1..count)
  for p = 1, count do
    local text = ARGV[p + 1]
    local plan = parsed[text]
    if plan == nil then
      local message
      plan, message = parse_plan(text)
      if not plan then return refuse('plan ' .. p .. ': ' .. message) end
      if not plan.once then
        if parsed_count >= 256 then parsed, parsed_count = {}, 0 end
        parsed[text], parsed_count = plan, parsed_count + 1
      end
    end
    local name = number_names[p]
    if not name then
      name = tostr(p)
      if p <= 64 then number_names[p], number_values[name] = name, p end
    end
    plans[name], plan_list[p] = plan, plan
  end
  local first, nkeys = count + 2, 0
  local each  -- the plan of every request, where ARGV names none
  if first > nargs and #KEYS > 0 then
    each = plan_list[1]
    if count ~= 1 or each.tokened then
      return refuse('requests without plan numbers need one plan, without a concurrency limit')
    end
    nkeys = #KEYS - #KEYS % each.n
  else
    local r = first
    while r <= nargs do
      local plan = plans[ARGV[r]]
      if not plan then return refuse('argument ' .. r .. ' is not a plan number') end
      if plan.tokened then
        if r + 1 > nargs or ARGV[r + 1] == '' then return refuse('argument ' .. r + 1 .. ' is not an owner token') end
        r = r + 1
      end
      nkeys = nkeys + plan.n
      r = r + 1
    end
  end
  if nkeys ~= #KEYS then return refuse(#KEYS .. ' keys for ' .. nkeys .. ' limits') end

  local time = redis.call('TIME')
  local seconds = time[1]
  if seconds ~= seconds_text then seconds_text, seconds_value = seconds, tonumber(seconds) * 1000000 end
  now = seconds_value + tonumber(time[2])

  -- Each fixed window's current window, before anything is written.
  for p = 1, count do
    local windows = plan_list[p].windows
    for w = 1, #windows do
      local spec = windows[w]
      if spec.every then
        spec.start = now - now % spec.every
        spec.stop = spec.start + spec.every
      else
        local b = spec.bounds
        spec.start = nil
        for j = 1, 3 do
          if b[j] <= now and now < b[j + 1] then spec.start, spec.stop = b[j], b[j + 1] end
        end
        if not spec.start then
          return refuse('Redis TIME ' .. now .. ' is outside the calendar windows ' .. b[1] .. '..' .. b[4] ..
                        ' (the proxy\'s clock and Redis\'s differ by more than a window)')
        end
      end
    end
  end

  -- (the reply's table is kept from call to call, unless a call made it large: only its
  -- first m entries are this call's)
  call_keys, reply, m, k = KEYS, reply_kept, 1, 0
  reply[1] = now
  local several = #built > 1  -- (algorithms are only built while plans are parsed, above)
  local r = first
  while true do
    local plan, token
    if each then
      if k >= nkeys then break end
      plan = each
    else
      if r > nargs then break end
      plan = plans[ARGV[r]]
      if plan.tokened then
        r = r + 1
        token = ARGV[r]
      end
      r = r + 1
    end
    local n = plan.n
    if cluster then
      -- A request with a key this node cannot serve is not decided here: four zeros per limit,
      -- the first one 2 ("elsewhere"); nothing was written for it.
      local before = m
      local ok, err = protected(decide_request, plan, n, token)
      if not ok then
        if err ~= NOT_HERE then error(err, 0) end
        m = before
        for _ = 1, n do
          reply[m + 1], reply[m + 2], reply[m + 3], reply[m + 4] = 2, 0, 0, 0
          m = m + 4
        end
      end
    elseif plan.alone then
      -- (decide_request's first case, written out: most requests have one limit)
      local key = call_keys[k + 1]
      if several then hand_over(plan[1].algorithm, key) end
      put(plan.alone(key, now, plan.x, plan.y, plan.cost, token, plan.seen, plan.kept))
    else
      decide_request(plan, n, token)
    end
    k = k + n
  end
  for i = 1, #built do built[i].flush() end
  local out = packed(reply, m)
  if m > 4096 then reply_kept = {} end
  call_keys, reply = nil, nil  -- nothing else of the call is kept
  return out
end
