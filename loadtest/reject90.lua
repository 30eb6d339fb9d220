-- wrk script for the reject90 scenario: nine requests in ten go to /deny (a route whose
-- limit is exhausted after its first request, so sluice answers 429 itself), one in ten goes
-- to /pass (a route with a limit that never runs out, so sluice forwards it). Both routes
-- cost one rate-limit decision; the share of rejections does not depend on throughput.
local n = 0

function request()
  n = n + 1
  if n % 10 == 0 then
    return wrk.format(nil, "/pass")
  end
  return wrk.format(nil, "/deny")
end
