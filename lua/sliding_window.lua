-- sliding_window: at most `limit` requests in any rolling `window`, exactly.
--
-- Part of the decide script: the build sends token_bucket.lua, sliding_window.lua and
-- decide.lua to Redis as ONE script, so this file only defines a local function that builds
-- the algorithm's table (when a call first uses the algorithm, see decide.lua).
--
-- State: a sorted set with one member per admitted request, scored by its Redis TIME in
-- microseconds. A request at `t` counts while now - t < window, i.e. it leaves the window
-- at exactly t + window. Members are "<t>-<n>" where n is the number of members the set
-- held (after trimming) when the call first counted it, plus the members the call added since:
-- within a call n only grows (a give-back, below, lowers the count but not n), so requests in
-- the same microsecond are each counted.
-- Expired members are trimmed only when a request is admitted (a rejected request writes
-- nothing); the set never holds more than `limit` members after a write. The key expires
-- when its newest member leaves the window. A key of another type (the limit's algorithm
-- changed on reload) reads as empty and is replaced when written.
-- Weighted members (`weighted`: a limit whose requests may cost more than one unit, a cost
-- from a header, a response's or a fixed cost above 1, and every limit of a route with plans,
-- whose plans share its key; the plan says so): a request of cost
-- w >= 2 is ONE member "<t>-<n>*<w>" (n to n + w - 1 are its), not w members, so what a
-- request costs Redis does not grow with the cost a client names (10,000 members were a ZADD
-- of 10 ms: a client sending the largest cost the limit allows held Redis 2,000 times as
-- long as a request of one). The set then also holds the member MARK, scored minus the sum
-- of w - 1 over its weighted members: ZCOUNT over the window (times, positive) does not see
-- it, and the units in the window are the members counted plus that sum once the members
-- that left the window are gone, so a weighted key with a mark is trimmed (and its mark
-- lowered) when a call first counts it, refused or not. A limit's requests of cost 1, and
-- every request of a limit that is not weighted, stay one member each as above. (A key
-- written by a weighted limit and then by one that is not, a reload dropping the cost
-- header, counts each weighted member as one, and its mark goes at the next trim.)
-- `read_failed(error)`: as for token_bucket_algorithm.
-- A set's members counted once per call, for sliding_window and concurrency (concurrency.lua
-- comes later in the same script): those scored above `above` (a ZCOUNT bound), and whether
-- the key is not a set (`foreign`: nothing counted) or not there at all (`missing`: nothing
-- to trim or delete before it is written). `seen` (a lone limit's, kept with its plan:
-- decide.lua): seen.found, how often of late a key of this limit existed when first counted
-- in a call (a moving average, 0 to 1). Where keys are mostly gone (a client's slots all
-- given back, a client back after its window: its set expired), a key is first asked
-- whether it exists (ZCARD): one that is not there is then written with ZADD and its expiry
-- alone, three commands instead of four (no DEL); one that is is counted as any other (a
-- command more). Where keys mostly exist, and while nothing is known yet (a plan's first
-- calls; every call of the script, whose plans are new each call: see decide.lua), they are
-- counted at once. Both ways count the same and leave the same set. Returns count, foreign,
-- missing. (`pcall`: redis.pcall, which the algorithms keep as an upvalue.)
local type_of  -- `type`, kept on first use (a global is looked up by name on every use)
local function counted_set(key, above, seen, read_failed, pcall)
  if not type_of then type_of = type end
  local found = seen and (seen.found or 1)
  if found and found < 0.5 then
    local held = pcall('ZCARD', key)
    found = found * 0.96
    if held == 0 then
      seen.found = found
      return 0, false, true
    end
    seen.found = found + 0.04
    found = nil
  end
  local count = pcall('ZCOUNT', key, above, '+inf')
  if type_of(count) == 'table' then read_failed(count) end
  local foreign = type_of(count) ~= 'number'
  if foreign then count = 0 end
  if found then
    found = found * 0.96
    if count > 0 then found = found + 0.04 end
    seen.found = found
  end
  return count, foreign, false
end

local function sliding_window_algorithm(read_failed)
  local sliding_window = {}

  local format, match = string.format, string.match
  -- Globals used per request, as upvalues (see token_bucket.lua).
  local ceil, tonumber, unpack = math.ceil, tonumber, unpack
  local MARK = 'w'  -- a weighted set's sum of w - 1 (above)
  local redis_call, redis_pcall = redis.call, redis.pcall

  -- What this call knows of its keys. A call decides every request at one `now` and nothing
  -- else runs in Redis meanwhile, so a set counted once stays as this call leaves it, and its
  -- writes can wait for the end: a client with several requests in one batch costs one count,
  -- one trim, one ZADD of all its new members and one expiry, not four calls per request.
  -- sets[key] = {
  --   now, window   the call's time and the window the set was counted with,
  --   count         members in the window, as this call left it,
  --   held          members the set holds in Redis (after this call's trim, if it wrote),
  --   foreign       the key holds something else than a set (nothing counted),
  --   missing       the key was not there (counted_set): nothing to take away before a write,
  --   adds          members admitted and not yet written (all scored `now`),
  --   written       whether this call has trimmed the set already,
  --   weighted      whether the limit counting it is weighted (above),
  --   extra, mark   the units beyond one of the weighted members in the window, as this call
  --                 left them and as the MARK in Redis holds them,
  --   refused, refusal   the limit of the last refusal and its figures, while nothing changed }
  local sets = {}
  function sliding_window.begin() sets = {} end

  -- The texts a call writes for every key of a window: the call's time (the members' score),
  -- where the window starts (trimmed up to it, counted above it) and the expiry of a set
  -- written now. Made once per call and window rather than per key (string.format is about
  -- 1,800 instructions of Redis's a number); kept for one window at a time (routes have
  -- mostly one).
  local texts_now, texts_window, score_text, trim_text, above_text, expire_text
  local member_prefix  -- score_text .. '-': members are "<now>-<n>"
  local function place(now, window)  -- (called where now or window is not the one placed)
    if now ~= texts_now then
      texts_now, score_text = now, format('%d', now)
      member_prefix = score_text .. '-'
    end
    texts_window, trim_text = window, format('%d', now - window)
    above_text, expire_text = '(' .. trim_text, format('%d', ceil((now + window) / 1000))
  end

  -- A weighted set's units beyond one per member, in the window (the set counted some):
  -- its mark's, less those of the weighted members that left, which go now (a few hundred a
  -- command). Returns extra, the mark's (what Redis holds: written again at the end of the
  -- call when the trim lowered it) and whether the set is trimmed. (`trim_text` placed.)
  local function weighted_extra(key)
    local mark = redis_call('ZSCORE', key, MARK)
    if not mark then return 0, 0, false end
    mark = -(tonumber(mark) or 0)
    local extra = mark
    while true do
      -- (the mark, scored below every time, is rank 0; those that left come next)
      local gone = redis_call('ZRANGEBYSCORE', key, '0', trim_text, 'LIMIT', 0, 500)
      if #gone == 0 then break end
      for i = 1, #gone do
        local w = match(gone[i], '%*(%d+)$')
        if w then extra = extra - tonumber(w) + 1 end
      end
      redis_call('ZREMRANGEBYRANK', key, 1, #gone)
    end
    if not (extra > 0) then extra = 0 end  -- (not a mark of ours)
    return extra, mark, true
  end

  -- The set of `key` as this call knows it, counted with `window` (`seen`: counted_set).
  local write
  local function entry(key, now, window, seen, weighted)
    local e = sets[key]
    local next_before = 0
    if e then
      if e.window == window and e.weighted == weighted then return e end
      write(key, e)  -- the window (or the cost) changed on reload within this call: count afresh
      seen = nil  -- (what the key holds is known: this call wrote it)
      next_before = e.next  -- (members of this instant up to it are taken: named on from there)
    end
    if now ~= texts_now or window ~= texts_window then place(now, window) end
    local count, foreign, missing = counted_set(key, above_text, seen, read_failed, redis_pcall)
    local extra, mark, trimmed = 0, 0, false
    if weighted and count > 0 then
      extra, mark, trimmed = weighted_extra(key)
      count = count + extra
    end
    local next = count
    if next < next_before then next = next_before end
    e = { now = now, window = window, count = count, held = count, foreign = foreign, missing = missing, adds = {},
          next = next, weighted = weighted, extra = extra, mark = mark, written = trimmed }
    sets[key] = e
    return e
  end

  -- A weighted set's mark, as `e` has its extra now.
  local function write_mark(key, e)
    if e.extra == e.mark then return end
    if e.extra > 0 then
      redis_call('ZADD', key, format('%d', -e.extra), MARK)
    else
      redis_call('ZREM', key, MARK)
    end
    e.mark = e.extra
  end

  -- Writes the members `e` admitted: first what no longer counts goes (the whole key when
  -- nothing in it counted or it is not a set), then the new members, then the expiry: when
  -- the newest member leaves the window (absolute, rounded up to the ms).
  write = function(key, e)
    local n = #e.adds
    if n == 0 then
      if e.extra ~= e.mark then write_mark(key, e) end  -- (a give-back's)
      return
    end
    if e.now ~= texts_now or e.window ~= texts_window then place(e.now, e.window) end
    if not e.written then
      if e.missing then
        e.missing = false  -- (nothing to take away from a key that is not there)
      elseif e.foreign or e.held == 0 then
        redis_call('DEL', key)
        e.mark = 0
      else
        -- (a set with a mark and a weighted limit was trimmed when counted: entry)
        redis_call('ZREMRANGEBYSCORE', key, '-inf', trim_text)
        e.mark = 0
      end
      e.written, e.foreign = true, false
    end
    -- In commands of at most 1000 members: Lua unpacks a few thousand values at most.
    local score = score_text
    for first = 1, n, 1000 do
      local last, args = first + 999, {}
      if last > n then last = n end
      for i = first, last do
        args[2 * (i - first) + 1], args[2 * (i - first) + 2] = score, e.adds[i]
      end
      redis_call('ZADD', key, unpack(args))
    end
    write_mark(key, e)
    redis_call('PEXPIREAT', key, expire_text)
    e.held, e.adds = e.count, {}
  end

  -- The texts of small counts ("0", "1", ...), made once each and kept from call to call.
  -- Only below 256: every string a library keeps is work for Lua's collector on every call
  -- of every function (with texts up to 4096 kept, a window on one key cost Redis 6 % more,
  -- and a function that only GETs and SETs 4 % more).
  local count_texts, kept_counts = {}, 256

  -- Admits one request of `cost` units: a member per unit, each "<now>-<members held
  -- before it>" (with small counts, the call's time and the count are not formatted per
  -- member); for a weighted limit, one member "<now>-<n>*<cost>".
  local function admit(e, cost)
    local adds, n = e.adds, e.next
    local last = n + cost - 1
    if e.weighted and cost > 1 then
      adds[#adds + 1] = format('%d-%d*%d', e.now, n, cost)
      e.extra = e.extra + cost - 1
      e.count, e.next, e.refused = e.count + cost, last + 1, nil
      return
    end
    if last < kept_counts then
      if e.now ~= texts_now then place(e.now, e.window) end
      for i = n, last do
        local text = count_texts[i]
        if not text then
          text = format('%d', i)
          count_texts[i] = text
        end
        adds[#adds + 1] = member_prefix .. text
      end
    else
      for i = n, last do adds[#adds + 1] = format('%d-%d', e.now, i) end
    end
    e.count, e.next, e.refused = e.count + cost, last + 1, nil
  end

  -- When `need` of the `count` units of a weighted set (written, trimmed) have left the
  -- window: read from the oldest member on (16 members, then 32: the mark and 47), then back
  -- from the newest (16: the units after the one wanted are at most count - need), names only
  -- (a member's score is asked once found); nil past them. (A refusal of a cost from a header
  -- is asked of Redis every time: its work is bounded, about twice an unweighted refusal's.)
  local pages = { { 0, 15 }, { 16, 47 } }
  local find, sub = string.find, string.sub
  local function units_of(name)  -- (a member's; "*" only ever in a weighted one's name)
    local star = find(name, '*', 1, true)
    if star then return tonumber(sub(name, star + 1)) or 1 end
    return 1
  end
  local function leaving_weighted(key, need, count)
    local units = 0
    for p = 1, 2 do
      local names = redis_call('ZRANGE', key, pages[p][1], pages[p][2])
      for i = 1, #names do
        local name = names[i]
        if name ~= MARK then
          units = units + units_of(name)
          if units >= need then return tonumber(redis_call('ZSCORE', key, name)) end
        end
      end
      if #names < pages[p][2] - pages[p][1] + 1 then return nil end  -- (all read)
    end
    local after = 0
    local names = redis_call('ZRANGE', key, -16, -1)
    for i = #names, 1, -1 do
      local name = names[i]
      if name == MARK then return nil end
      after = after + units_of(name)
      if after > count - need then return tonumber(redis_call('ZSCORE', key, name)) end
    end
    return nil
  end

  -- Retry and reset of a request of `cost` units that does not fit `limit`.
  -- Returns remaining, retry_after_us, reset_us.
  local function refusal(key, e, limit, cost)
    if e.refused == limit and e.refused_cost == cost then return unpack(e.refusal) end
    write(key, e)  -- what this call admitted is part of the answer: Redis must hold it
    local now, window, count = e.now, e.window, e.count
    local remaining = limit - count
    if remaining < 0 then remaining = 0 end
    local retry_us, reset_us = window, 0  -- nothing counted, and still no room: say "a window"
    if count > 0 then
      -- The request fits once count + cost - limit of the counted members have left (the
      -- proxy refuses a cost above the limit before asking).
      if now ~= texts_now or window ~= texts_window then place(now, window) end
      local need = count + cost - limit
      local left_at = e.extra > 0 and leaving_weighted(key, need, count)
      if not left_at then
        -- (every member one unit: the need-th; else, past what leaving_weighted reads, the
        -- need-th member, by which at least `need` units have left: never early)
        local leaving = redis_call('ZRANGEBYSCORE', key, above_text, '+inf', 'WITHSCORES', 'LIMIT', need - 1, 1)
        left_at = leaving[2] and tonumber(leaving[2])
      end
      local newest = redis_call('ZRANGE', key, -1, -1, 'WITHSCORES')
      reset_us = tonumber(newest[2]) + window - now
      if left_at then
        retry_us = left_at + window - now
      elseif e.extra > 0 then
        retry_us = reset_us  -- (fewer members than `need`: when the newest has left)
      end
    end
    e.refused, e.refused_cost, e.refusal = limit, cost, { remaining, retry_us, reset_us }
    return remaining, retry_us, reset_us
  end

  -- Reads the state and works out whether one more request fits. Writes nothing (but the
  -- trim of a weighted set with a mark, a refusal's or a look-up's too: entry; what left
  -- the window goes, which changes no count, and later counts do not read it again).
  function sliding_window.check(key, now, limit, window, cost, _, weighted)
    local e = entry(key, now, window, nil, weighted)
    local count = e.count
    local c = {
      e = e, limit = limit, window = window, count = count, cost = cost,
      allowed = count + cost <= limit, remaining = 0, retry_us = 0, reset_us = 0,
    }
    if c.allowed and count > 0 then
      -- Reported as it stands when another limit rejects the request.
      local newest = now  -- a member this call admitted
      if not e.adds[1] then
        newest = tonumber(redis_call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
      end
      c.reset_us = newest + window - now
    elseif not c.allowed then
      c.remaining, c.retry_us, c.reset_us = refusal(key, e, limit, cost)
    end
    return c
  end

  -- Records the request (written at the end of the call, or before the set is read again).
  function sliding_window.commit(c)
    admit(c.e, c.cost)
  end

  -- A reservation's give-back (decide.lua, flags 5): `cost` of the units the reservation
  -- added at `at` (microseconds of TIME) go, as far as they are still in the window. Units
  -- of one instant are alike (each leaves the window at at + window): any of them will do. A
  -- weighted member giving back part of its units stays, with fewer.
  function sliding_window.give_back(key, now, limit, window, cost, at, weighted)
    if at <= now - window then return end  -- they have left already
    local e = entry(key, now, window, nil, weighted)
    if e.foreign then return end
    write(key, e)  -- what this call admitted is in Redis first
    local stamp, gone = format('%d', at), 0
    while gone < cost do  -- (at most 1000 members per command, as in write)
      local take = cost - gone
      if take > 1000 then take = 1000 end
      local members = redis_call('ZRANGEBYSCORE', key, stamp, stamp, 'LIMIT', 0, take)
      if #members == 0 then break end
      if weighted then
        -- (a member keeping units is the last one read: the give-back ends with it)
        for i = 1, #members do
          local member = members[i]
          local name, w = match(member, '^(.-)%*(%d+)$')
          local units = w and tonumber(w) or 1
          local taken = cost - gone
          if taken > units then taken = units end
          redis_call('ZREM', key, member)
          local left = units - taken
          if left > 1 then
            redis_call('ZADD', key, stamp, name .. '*' .. format('%d', left))
          elseif left == 1 then
            redis_call('ZADD', key, stamp, name)
          end
          if units > 1 then e.extra = e.extra - (units - 1) + (left > 1 and left - 1 or 0) end
          gone = gone + taken
          if gone >= cost then break end
        end
      else
        redis_call('ZREM', key, unpack(members))
        gone = gone + #members
      end
    end
    if gone == 0 then return end
    if e.extra < 0 then e.extra = 0 end  -- (a set written without a mark: a reload)
    write_mark(key, e)
    e.count, e.held, e.refused = e.count - gone, e.held - gone, nil
  end

  -- remaining, retry_after_us, reset_us after this request (consumed or not).
  function sliding_window.report(c, consumed)
    if consumed then
      -- (A charge after the response may be past the limit: then when it has room again.)
      if not c.allowed then return c.limit - c.count - c.cost, c.retry_us, c.window end
      return c.limit - c.count - c.cost, 0, c.window
    end
    if c.allowed then return c.limit - c.count, 0, c.reset_us end
    return c.remaining, c.retry_us, c.reset_us
  end

  -- The whole decision when this is the request's only limit (most routes): count, admit if
  -- it fits, report, without the check table. Returns allowed, remaining, retry_after_us, reset_us.
  function sliding_window.alone(key, now, limit, window, cost, _, seen, weighted)
    local e = entry(key, now, window, seen, weighted)
    local count = e.count
    if count + cost > limit then
      return false, refusal(key, e, limit, cost)
    end
    admit(e, cost)
    return true, limit - count - cost, 0, window
  end

  -- Writes what this call admitted: per key, at its end.
  function sliding_window.flush()
    for key, e in pairs(sets) do write(key, e) end
  end

  -- Before a token bucket uses `key` in this call (its limit changed algorithm on reload and the
  -- batch holds requests of both configurations): what this call admitted goes to Redis first,
  -- and the key is counted again on its next use.
  function sliding_window.release(key)
    local e = sets[key]
    if e then
      write(key, e)
      sets[key] = nil
    end
  end
  return sliding_window
end
