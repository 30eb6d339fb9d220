-- wrk script for the clients100k scenario: every request carries an X-Forwarded-For address
-- taken in turn from a pool of CLIENTS (default 100000) distinct addresses 10.a.b.c. The
-- proxies see the TCP peer 127.0.0.1, which sluice's config trusts, so sluice keys each
-- request on the forwarded address: 100000 distinct rate-limit keys, as many clients behind
-- a load balancer would give. Each wrk thread starts at its own place in the pool.
local pool = tonumber(os.getenv("CLIENTS") or "100000")
local threads_made = 0

function setup(thread)
  thread:set("thread_index", threads_made)
  threads_made = threads_made + 1
end

local next_client = 0
local headers = {}

function init(args)
  -- thread_index is set by setup() before init() runs in the thread
  next_client = ((thread_index or 0) * 7919) % pool
end

function request()
  local n = next_client
  next_client = (next_client + 1) % pool
  headers["X-Forwarded-For"] = string.format("10.%d.%d.%d",
    math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
  return wrk.format(nil, nil, headers)
end
