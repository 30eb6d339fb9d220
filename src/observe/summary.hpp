// The periodic per-route summary line, and the warning when a route's limited share jumps.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "observe/limited_clients.hpp"
#include "observe/metrics.hpp"

namespace sluice::observe {

struct RouteInterval {
    std::string route;
    std::uint64_t requests = 0, forwarded = 0, limited = 0, shadow_limited = 0, store_errors = 0, delayed = 0, exempt = 0;
    std::vector<std::pair<std::string, std::uint64_t>> top_limited;  // client, count
    // Refusals per limit in the interval, most first ("PLAN/LIMIT" on a route with plans).
    std::vector<std::pair<std::string, std::uint64_t>> limited_by;
    double previous_pct = 0;  // the route's limited % in the interval before (0 if it had no traffic)
    double limited_pct() const { return requests ? 100.0 * static_cast<double>(limited) / static_cast<double>(requests) : 0; }
};

std::string format_summary_text(const RouteInterval& r, config::Duration interval, std::string_view time);
std::string format_summary_json(const RouteInterval& r, config::Duration interval, std::string_view time);

// A route whose limited share rose by at least 20 points to at least 25 %, over at least
// 20 requests, is worth a warning: that is what an attack or a broken client looks like.
bool limited_share_jumped(const RouteInterval& now);

class SummaryReporter {
public:
    // The intervals of routes that saw traffic since the previous call.
    std::vector<RouteInterval> take(const Metrics& metrics, const LimitedClients::Counts& limited);

private:
    struct Totals {
        std::uint64_t requests = 0, forwarded = 0, limited = 0, shadow_limited = 0, store_errors = 0, delayed = 0, exempt = 0;
        double last_pct = 0;
    };
    // By route name, and route name, NUL, limit name: a route's metrics go when a reload took
    // the route away (Metrics::prune), and what is not seen in a call is forgotten.
    std::unordered_map<std::string, Totals> last_;
    std::unordered_map<std::string, std::uint64_t> last_limited_;  // refusals counted so far
};

}  // namespace sluice::observe
