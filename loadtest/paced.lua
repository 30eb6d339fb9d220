-- wrk script for the paced scenarios (paced, token_bucket_paced): each connection waits
-- PACE_MS milliseconds (default 2) after every response before its next request, so both
-- proxies see about the same request rate (connections / (PACE_MS + latency)), well below
-- what they can take. CPU per request then compares the proxies at one load, as most
-- servers run, instead of each at its own saturation (where on shared cores the one that
-- goes slower also idles, and waking up costs CPU too).
local pace = tonumber(os.getenv("PACE_MS") or "2")

function delay()
  return pace
end
