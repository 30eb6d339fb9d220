-- concurrency: at most `limit` requests of a key in flight at once, across every instance.
--
-- Part of the decide script (see token_bucket.lua): this file only defines a local function
-- that builds the algorithm's table.
--
-- State: a sorted set of slots, one member per request in flight, named by the request's
-- owner token (unique per request, made by the proxy) and scored by when its lease ends, in
-- microseconds of Redis TIME. A slot counts while its lease has not ended; the proxy gives
-- it back when the response is sent or the client goes away (lua/release.lua, which removes
-- only its own token), and renews the lease of a request that runs longer. A slot whose
-- instance died is reclaimed when its lease ends: ended slots are trimmed whenever the set
-- is written. The key expires when the last lease ends. A key of another type (the limit's
-- algorithm changed on reload) reads as empty and is replaced when written.
-- `read_failed(error)`: as for token_bucket_algorithm.
local function concurrency_algorithm(read_failed)
  local concurrency = {}

  local format = string.format
  -- Globals used per request, as upvalues (see token_bucket.lua).
  local ceil, tonumber, unpack = math.ceil, tonumber, unpack
  local redis_call, redis_pcall = redis.call, redis.pcall

  -- What this call knows of its keys. A call decides every request at one `now` and nothing
  -- else runs in Redis meanwhile, so a set counted once stays as this call leaves it, and its
  -- writes can wait for the end: a key with several requests in one batch costs one count,
  -- one trim, one ZADD of all its new slots and one expiry, not a write per request.
  -- sets[key] = {
  --   now       the call's time,
  --   count     live slots, with those this call took,
  --   before    live slots the set held when this call counted it,
  --   foreign   the key holds something else than a set (nothing counted),
  --   missing   the key was not there (counted_set): nothing to take away before a write,
  --   adds      the slots taken in this call and not yet written: token, lease end, token,
  --             lease end, ... (flat: a table per slot cost Redis a thousand instructions),
  --   newest, earliest   the latest and the earliest lease end of the slots this call took
  --             (0 while none),
  --   held_newest, held_earliest   those of the `before` slots, read when first needed }
  local sets = {}
  function concurrency.begin() sets = {} end

  -- Numbers a call writes again and again, as texts made once (string.format is about 1,800
  -- instructions of Redis's): the call's time (ended slots are trimmed up to it, live ones
  -- counted above it), and the last lease end and expiry written (the same for every slot
  -- of a limit taken in the call).
  local texts_now, now_text, above_text
  local function place(now) texts_now, now_text = now, format('%d', now); above_text = '(' .. now_text end
  local end_value, end_text, expiry_value, expiry_text

  -- The set of `key` as this call knows it (`seen`: counted_set, sliding_window.lua).
  local function entry(key, now, seen)
    local e = sets[key]
    if e then return e end
    if now ~= texts_now then place(now) end
    local count, foreign, missing = counted_set(key, above_text, seen, read_failed, redis_pcall)
    e = { now = now, count = count, before = count, foreign = foreign, missing = missing, adds = {}, newest = 0,
          earliest = 0 }
    sets[key] = e
    return e
  end

  -- The latest lease end of the live slots (those held before this call, and its own).
  local function newest(key, e)
    if e.before == 0 then return e.newest end
    if not e.held_newest then
      e.held_newest = tonumber(redis_call('ZRANGE', key, -1, -1, 'WITHSCORES')[2] or e.now)
    end
    if e.held_newest > e.newest then return e.held_newest end
    return e.newest
  end

  -- Writes the slots `e` took: first the ended ones go (the whole key when none was live or
  -- it is not a set), then the new slots, then the expiry: when the last lease ends
  -- (absolute, rounded up to the ms). Every slot is written with now + lease and renewed the
  -- same way, so the newest end is the set's last one, unless a longer lease was configured
  -- before a reload: the later one is kept.
  local function write(key, e)
    local adds = e.adds
    local n = #adds
    if n == 0 then return end
    local last = newest(key, e)  -- (read before the set changes)
    if e.missing then
      e.missing = false  -- (nothing to take away from a key that is not there)
    elseif e.foreign or e.before == 0 then
      redis_call('DEL', key)
      e.foreign = false
    else
      if e.now ~= texts_now then place(e.now) end
      redis_call('ZREMRANGEBYSCORE', key, '-inf', now_text)
    end
    local args = {}
    for i = 1, n, 2 do
      local ends = adds[i + 1]
      if ends ~= end_value then end_value, end_text = ends, format('%d', ends) end
      args[i], args[i + 1] = end_text, adds[i]
    end
    redis_call('ZADD', key, unpack(args))
    if last ~= expiry_value then expiry_value, expiry_text = last, format('%d', ceil(last / 1000)) end
    redis_call('PEXPIREAT', key, expiry_text)
    -- What is written now counts as held before the rest of the call (a key used by a token
    -- bucket after a reload within the call is counted afresh, see release).
    e.adds, e.before, e.held_newest, e.held_earliest = {}, e.count, last, nil
    e.newest, e.earliest = 0, 0
  end

  -- remaining, retry_after_us, reset_us of a key: a refused request may retry when a slot
  -- could come back (requests end at any time: in a second, or when the earliest lease ends
  -- if that is sooner); every slot is free when the latest lease ends, at the latest.
  local function figures(key, e, limit, allowed)
    local remaining = limit - e.count
    if remaining < 0 then remaining = 0 end
    if e.count == 0 then return remaining, 0, 0 end
    local now = e.now
    local retry_us = 0
    if not allowed then
      local earliest = e.earliest
      if e.before > 0 then
        if not e.held_earliest then
          if now ~= texts_now then place(now) end
          local first = redis_call('ZRANGEBYSCORE', key, above_text, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
          e.held_earliest = tonumber(first[2] or now)
        end
        if earliest == 0 or e.held_earliest < earliest then earliest = e.held_earliest end
      end
      retry_us = earliest - now
      if retry_us > 1000000 then retry_us = 1000000 end
      if retry_us < 1 then retry_us = 1 end
    end
    local reset_us = newest(key, e) - now
    if reset_us < 0 then reset_us = 0 end
    return remaining, retry_us, reset_us
  end

  -- Takes a slot for `token` until `ends`.
  local function take(e, token, ends)
    local adds = e.adds
    local n = #adds
    adds[n + 1], adds[n + 2] = token, ends
    e.count = e.count + 1
    if ends > e.newest then e.newest = ends end
    if e.earliest == 0 or ends < e.earliest then e.earliest = ends end
  end

  function concurrency.check(key, now, limit, lease, cost, token)
    local e = entry(key, now)
    return { key = key, e = e, limit = limit, lease = lease, token = token, allowed = e.count + 1 <= limit }
  end

  function concurrency.commit(c)
    take(c.e, c.token, c.e.now + c.lease)
  end

  function concurrency.report(c, consumed)
    return figures(c.key, c.e, c.limit, c.allowed)
  end

  -- check, commit and report without the check table (most routes have one limit).
  function concurrency.alone(key, now, limit, lease, cost, token, seen)
    local e = entry(key, now, seen)
    local allowed = e.count + 1 <= limit
    if allowed then take(e, token, now + lease) end
    return allowed, figures(key, e, limit, allowed)
  end

  function concurrency.flush()
    for key, e in pairs(sets) do write(key, e) end
  end

  function concurrency.release(key)
    local e = sets[key]
    if e then
      write(key, e)
      sets[key] = nil
    end
  end
  return concurrency
end
