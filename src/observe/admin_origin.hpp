// Which browser requests the admin port refuses. The admin port trusts its network position
// (loopback, or admin.token), and a browser on that machine is there too: a page from any
// site could post a form to http://127.0.0.1:9901/limits/reset (cross-site request forgery),
// or, through a name it makes resolve to 127.0.0.1 (DNS rebinding), read /limits and
// /stats.json as its own. So a request that a browser marks as coming from another site
// (Sec-Fetch-Site, or an Origin other than the admin port's own) is refused, and a browser
// must name the admin port by an IP address or `localhost`. Clients that are not browsers
// (curl, Prometheus) send neither field and are not affected by either rule.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sluice::observe {

// Why the request is refused (403), or nothing. `host`: its Host field; `origin`: its Origin
// field; `fetch_site`: its Sec-Fetch-Site field (each empty when absent).
std::optional<std::string> admin_browser_refusal(std::string_view host, std::string_view origin,
                                                 std::string_view fetch_site);

}  // namespace sluice::observe
