-- token_bucket: capacity `burst`, refilled continuously, kept GCRA-style.
--
-- Part of the decide script: the build sends token_bucket.lua, sliding_window.lua and
-- decide.lua to Redis as ONE script, so this file only defines a local function that builds
-- the algorithm's table. decide.lua builds it when a call first uses the algorithm: a call
-- without token buckets does not pay for creating their functions.
--
-- State: one string key holding the "theoretical arrival time" (TAT) in microseconds of
-- Redis TIME: the instant at which the bucket is full again. Tokens available at `now` are
-- (now + tolerance - tat) / interval, where interval is the time one token takes to refill
-- (per / rate, in whole microseconds) and tolerance = burst * interval (an empty bucket
-- refilling to full). A request costs `cost` intervals (1 unless the limit says otherwise;
-- decide.lua never asks about a cost of 0 with `alone`). A missing key is a full bucket.
-- The key expires when the bucket would be full, so an expired key and a full bucket are
-- the same state. A key of another type (the limit's algorithm changed on reload) reads as
-- a full bucket and is replaced when written.
--
-- The value is the tat, written plainly ("1795738700922926": Redis keeps it as an integer,
-- in the key's own object), except for a limit that keeps what was used (`kept`: the limits
-- of a route with plans, decide.lua), whose key one client can be read under another interval
-- (the client moved to another plan, or has overrides). Its value is "TAT.0INTERVAL": the
-- tat, then the interval it is counted in. Read under another interval, what was used is
-- kept: (tat - now) / old interval tokens, counted again in the new one. (Not for every limit:
-- a value that is not a whole number costs Redis about a sixth more CPU per decision and 32
-- more bytes per key.) A plain value is read in the current interval: the time until the
-- bucket is full is kept, as when a reload changes a route's rate. Either way a bucket is
-- never more than empty: a tat beyond now + tolerance (a smaller burst now) reads as an empty
-- bucket. The interval is written as a fraction below 0.1 on purpose: a reader that takes the
-- value as one number (tonumber, as versions of this file before it did, during a rolling
-- upgrade) reads the tat exactly, since a tat of Redis TIME (above 2^50 µs) is a double
-- whose spacing is 0.25.
-- `read_failed(error)` is called when reading a key answers an error (decide.lua: it raises
-- when the key lives on another cluster node).
--
-- leaky_bucket (`leaky` true) is the same bucket turned around, as nginx's limit_req: it holds
-- up to `burst` requests and lets one out per interval. The tat is when the bucket is empty
-- again; a request fits when, with it, the bucket holds at most `burst` (the token bucket's
-- test), and it leaves when what is ahead of it has drained, less `delay_us` (nginx's delay:
-- that much of a burst goes at once): wait = max(0, tat - now - delay_us). A wait above
-- `max_wait_us` limits the request instead. Its parameter y is { burst, delay_us, max_wait_us }
-- (decide.lua parses "burst,delay_us,max_wait_us"); an admitted request reports its wait
-- where a rejected one reports its retry time.
local function token_bucket_algorithm(read_failed, leaky)
  local token_bucket = {}
  local byte, sub = string.byte, string.sub

  -- The library and the globals it uses, as upvalues: a global is looked up by name on every
  -- use (in a function library through the sandbox's metatable), an upvalue is not.
  local floor, ceil, format, find, tonumber, type, next = math.floor, math.ceil, string.format, string.find, tonumber, type, next
  local redis_call, redis_pcall = redis.call, redis.pcall

  -- What this call knows of its keys. A call decides every request at one `now` and nothing
  -- else runs in Redis meanwhile, so a key read once stays as this call leaves it, and only its
  -- last value needs writing: a client with several requests in one batch costs one GET and
  -- one SET, not one of each per request. known[key] is the key's tat as this call left it
  -- (false: none, a full bucket), negated while it still has to be written (flush, at the end).
  -- counted_in[key]: the interval known[key] is counted in (nil: the current one). Only set
  -- where there is one (in Lua 5.1 even `t[k] = nil` adds the key k to t), and only looked
  -- at once there is one (`counting`): the limits of routes without plans pay nothing for it.
  local known, counted_in, counting = {}, {}, false
  local function count_in(key, interval)
    counted_in[key], counting = interval, true
  end
  -- A call starts with nothing known (the algorithm outlives calls: decide.lua).
  function token_bucket.begin()
    if next(known) ~= nil then known = {} end  -- (an earlier call failed before its flush)
    if counting then counted_in, counting = {}, false end  -- (left empty by a call that did not count)
  end

  -- What a GET of `key` answered, as known[key] holds it: its tat, or false (a full bucket).
  local function learn(key, value)
    if type(value) == 'table' then
      read_failed(value)
      value = nil  -- another type: a full bucket
    end
    local tat, interval
    if value then
      -- A plain tat has 16 digits (until the year 2286); "TAT.0INTERVAL" is longer.
      local dot = #value > 16 and find(value, '.', 1, true)
      if not dot then
        tat = tonumber(value)
      elseif byte(value, dot + 1) == 48 then  -- "TAT.0INTERVAL"
        tat, interval = tonumber(sub(value, 1, dot - 1)), tonumber(sub(value, dot + 2))
        -- (`x ~= x`: not a number; tonumber reads "nan" and "inf" too)
        if not interval or interval < 1 or interval >= 2^53 or interval ~= interval then tat = nil end
      end
    end
    -- Negative, not a number, infinite or past the year 2255: not ours, a full bucket. (The
    -- sign is taken for "still to be written".)
    if not tat or tat < 0 or tat >= 2^53 or tat ~= tat then tat, interval = false, nil end
    known[key] = tat
    if interval then count_in(key, interval) end  -- (read only when nothing was known)
    return tat
  end

  -- The bucket at `now`: tolerance, tat, the tat after one more request of `cost` tokens,
  -- and when that request is allowed (it fits when allow_at <= now). `uncapped`: a limit
  -- counted after the response (decide.lua), charged whatever it holds, keeps a tat beyond
  -- an empty bucket (a debt the next requests wait out) instead of reading it as empty.
  -- A tat read beyond an empty bucket (a reload made the bucket smaller or faster), or counted
  -- in another interval, is written as read, whether or not the request then fits: refused
  -- requests take nothing, but the bucket must refill from its new empty state at its new
  -- rate (left as it was, every read would cap it to empty again, and a client refused at a
  -- rate raised from 1/s to 50/s waited out the old bucket: 5 s instead of 20 ms). Not for a
  -- request of cost 0 (an inspection, a free route): it writes nothing.
  -- `kept`: the limit keeps what was used (the interval is written with the tat).
  local function write(key, next_tat, interval, kept)
    known[key] = -next_tat
    if kept then
      count_in(key, interval)
    elseif counting and counted_in[key] then
      counted_in[key] = nil
    end
  end
  local function read(key, now, interval, burst, cost, uncapped, kept)
    local tat = known[key]
    if tat == nil then tat = learn(key, redis_pcall('GET', key)) end
    if not tat then
      tat = now
    elseif tat < 0 then
      tat = -tat
      if tat < now then tat = now end
    elseif tat < now then
      tat = now
    end
    local tolerance = interval * burst
    if tat > now then
      local moved = false
      if counting then
        local was = counted_in[key]
        -- What was used, counted in this interval (the same sum the memory store does).
        if was and was ~= interval then
          tat = now + ceil((tat - now) * interval / was)
          moved = true
        end
      end
      if tat > now + tolerance then
        if not uncapped then
          tat = now + tolerance
          moved = true
        elseif tat > now + tolerance + 562949953421312 then  -- 2^49 µs (limit/cost.hpp max_debt_us)
          tat = now + tolerance + 562949953421312
          moved = true
        end
      end
      if moved and cost > 0 then write(key, tat, interval, kept) end
    end
    local next_tat = tat + interval * cost
    return tolerance, tat, next_tat, next_tat - tolerance
  end


  -- Stores a tat; the key expires when the bucket is full again (absolute time, rounded up to
  -- the millisecond: a relative PX would count from Redis's millisecond clock and could expire
  -- the key up to 1 ms early). Numbers are written with %d (whole numbers below 2^63): %.0f
  -- goes through the slow floating-point printer.
  local function value_of(tat, interval)
    if interval then return format('%d.0%d', tat, interval) end
    return format('%d', tat)
  end
  local function store(key, tat, interval)
    redis_call('SET', key, value_of(tat, interval), 'PXAT', format('%d', ceil(tat / 1000)))
  end

  -- Writes what this call changed: once per key, at its end.
  -- The table is emptied as it goes and kept for the next call (a new one per call, grown
  -- key by key, cost more), unless this call made it large.
  function token_bucket.flush()
    local n = 0
    for key, tat in pairs(known) do
      if tat and tat < 0 then
        tat = -tat
        local interval = counting and counted_in[key]
        if interval then
          store(key, tat, interval)
        else
          redis_call('SET', key, format('%d', tat), 'PXAT', format('%d', ceil(tat / 1000)))  -- store(), written out
        end
      end
      known[key] = nil
      n = n + 1
    end
    if n > 64 then known = {} end
  end

  -- Before a sliding window uses `key` in this call (its limit changed algorithm on reload and
  -- the batch holds requests of both configurations): what this call wrote goes to Redis
  -- first, and the key is read again on its next use.
  function token_bucket.release(key)
    local tat = known[key]
    if tat == nil then return end
    if tat and tat < 0 then store(key, -tat, counting and counted_in[key]) end
    known[key] = nil
    if counting and counted_in[key] then counted_in[key] = nil end
  end

  -- Whole tokens left at `now` when the bucket's tat is `tat`.
  local function tokens(now, tolerance, tat, interval)
    local remaining = floor((now + tolerance - tat) / interval)
    if remaining < 0 then return 0 end
    return remaining
  end

  -- Reads the state and works out whether one more request fits. Writes nothing.
  function token_bucket.check(key, now, interval, y, cost, _, kept, uncapped)
    local burst = y
    if leaky then burst = y.burst end
    local tolerance, tat, next_tat, allow_at = read(key, now, interval, burst, cost, uncapped, kept)
    local allowed, retry_us, wait = allow_at <= now, allow_at - now, 0
    if leaky and cost > 0 then
      wait = tat - now - y.delay_us
      if wait < 0 then wait = 0 end
      local over = wait - y.max_wait_us
      if over > 0 then
        allowed = false
        if over > retry_us then retry_us = over end
      end
    end
    return {
      key = key, now = now, interval = interval, tolerance = tolerance,
      tat = tat, next_tat = next_tat,
      allowed = allowed,
      retry_us = retry_us,
      wait = wait,
      kept = kept,
    }
  end

  -- Consumes one token: only here is the key changed (written by flush).
  function token_bucket.commit(c)
    write(c.key, c.next_tat, c.interval, c.kept)
  end

  -- A reservation's give-back (decide.lua, flags 5): `cost` tokens back, as if the request had
  -- taken that much less; the bucket is never more than full (a tat before now). The debt a
  -- charge left past empty is kept while it is read (uncapped).
  function token_bucket.give_back(key, now, interval, y, cost, _, kept)
    local burst = y
    if leaky then burst = y.burst end
    local _, tat = read(key, now, interval, burst, 0, true)
    local back = tat - interval * cost
    if back < now then back = now end
    if back ~= tat then write(key, back, interval, kept) end
  end

  -- remaining, retry_after_us (a leaky bucket's admitted request: its wait), reset_us after
  -- this request (consumed or not).
  function token_bucket.report(c, consumed)
    local tat = c.tat
    if consumed then tat = c.next_tat end
    local retry_us = 0
    if not c.allowed then retry_us = c.retry_us elseif consumed then retry_us = c.wait end
    return tokens(c.now, c.tolerance, tat, c.interval), retry_us, tat - c.now
  end

  -- The whole decision when this is the request's only limit (most routes): check, consume if
  -- it fits, report, without building the check table that several limits need to wait for
  -- each other. Returns allowed, remaining, retry_after_us, reset_us. (A leaky bucket alone
  -- goes through check, commit and report.)
  if leaky then return token_bucket end
  --
  -- `seen` is a table kept with the limit's plan across calls (decide.lua): seen.found, how
  -- often of late a key of this limit existed when first read in a call (a moving average, 0
  -- to 1). Where keys are mostly missing (a bucket full again has no key: the clients of a
  -- per-client limit mostly send less than its rate), a key not read yet in this call is
  -- written at once as a full bucket becomes, only if it does not exist (SET NX), and what it
  -- held is returned where it does (GET): one command instead of a GET and a SET. Where keys
  -- mostly exist, that command would be wasted before the GET's answer and the SET: a GET
  -- first. Both ways decide the same; only the cost differs.
  local function noted(seen, found)
    local f = (seen.found or 0) * 0.96
    if found then f = f + 0.04 end
    seen.found = f
  end
  -- Redis 6.2 refuses NX with GET (a syntax error): from then on this library reads first.
  local nx_get = true
  function token_bucket.alone(key, now, interval, burst, cost, _, seen, kept)
    local tat = known[key]
    if tat == nil then
      local found = seen.found or 0
      -- cost <= burst: a full bucket admits the request (a cost above it is never written).
      if nx_get and found < 0.5 and cost <= burst then
        local next_tat = now + interval * cost
        local value = redis_pcall('SET', key, value_of(next_tat, kept and interval), 'PXAT', format('%d', ceil(next_tat / 1000)),
                                  'NX', 'GET')
        if type(value) == 'table' then
          -- Refused: nothing was written. GET says what the key holds (another type, a key
          -- on another cluster node: learn() below, as for any read).
          if find(value.err or '', 'syntax', 1, true) then nx_get = false end
          value = redis_pcall('GET', key)
        end
        noted(seen, value ~= false)
        if value == false then
          known[key] = next_tat  -- written: nothing left for flush
          if kept then count_in(key, interval) end
          return true, burst - cost, 0, next_tat - now
        end
        tat = learn(key, value)
      else
        local value = redis_pcall('GET', key)
        -- noted(seen, value ~= false), and learn() where the key holds a plain tat (at most
        -- 16 digits), written out: most decisions take this way.
        found = found * 0.96
        if value then found = found + 0.04 end
        seen.found = found
        if type(value) == 'string' and #value <= 16 then
          tat = tonumber(value)
          if not tat or tat < 0 or tat >= 2^53 or tat ~= tat then tat = false end
          known[key] = tat
        else
          tat = learn(key, value)
        end
      end
    end
    local tolerance, next_tat, allow_at
    if counting then
      tolerance, tat, next_tat, allow_at = read(key, now, interval, burst, cost, false, kept)
    else
      -- read(), written out for a limit not counted in another interval (tat is known[key]):
      -- calling it cost 2 % of Redis's instructions per decision over 100,000 keys, 6 % on
      -- one key (loadtest/decide_instructions.sh)
      if not tat then
        tat = now
      elseif tat < 0 then
        tat = -tat
        if tat < now then tat = now end
      elseif tat < now then
        tat = now
      end
      tolerance = interval * burst
      if tat > now + tolerance then
        tat = now + tolerance
        write(key, tat, interval, kept)  -- (as read() does: cost > 0 here)
      end
      next_tat = tat + interval * cost
      allow_at = next_tat - tolerance
    end
    if allow_at > now then
      return false, tokens(now, tolerance, tat, interval), allow_at - now, tat - now
    end
    known[key] = -next_tat  -- write(), which has more to do only on a route with plans
    if kept or counting then write(key, next_tat, interval, kept) end
    -- tokens(now, tolerance, next_tat, interval), never below 0 here (allow_at <= now)
    return true, floor((now + tolerance - next_tat) / interval), 0, next_tat - now
  end
  return token_bucket
end
