#include "observe/summary.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "config/duration.hpp"
#include "observe/json_text.hpp"

namespace sluice::observe {

namespace {

std::string counts_text(const std::vector<std::pair<std::string, std::uint64_t>>& counts) {
    if (counts.empty()) return "-";
    std::string out;
    for (const auto& [client, n] : counts) {
        if (!out.empty()) out += ',';
        out += fmt::format("{}:{}", client, n);
    }
    return out;
}

}  // namespace

std::string format_summary_text(const RouteInterval& r, config::Duration interval, std::string_view time) {
    return fmt::format(
        "{} summary route={} interval={} requests={} forwarded={} limited={} limited_pct={:.1f} shadow_limited={} "
        "store_errors={} delayed={} exempt={} top_limited={} limited_by={}",
        time, r.route, config::format_duration(interval), r.requests, r.forwarded, r.limited, r.limited_pct(),
        r.shadow_limited, r.store_errors, r.delayed, r.exempt, counts_text(r.top_limited), counts_text(r.limited_by));
}

std::string format_summary_json(const RouteInterval& r, config::Duration interval, std::string_view time) {
    std::string top = "[";
    for (const auto& [client, n] : r.top_limited) {
        if (top.size() > 1) top += ',';
        top += fmt::format("{{\"client\":{},\"limited\":{}}}", json_string(client), n);
    }
    top += ']';
    std::string by = "{";
    for (const auto& [limit, n] : r.limited_by) {
        if (by.size() > 1) by += ',';
        by += fmt::format("{}:{}", json_string(limit), n);
    }
    by += '}';
    return fmt::format(
        "{{\"time\":{},\"summary\":true,\"route\":{},\"interval\":{},\"requests\":{},\"forwarded\":{},\"limited\":{},"
        "\"limited_pct\":{:.1f},\"shadow_limited\":{},\"store_errors\":{},\"delayed\":{},\"exempt\":{},"
        "\"top_limited\":{},\"limited_by\":{}}}",
        json_string(time), json_string(r.route), json_string(config::format_duration(interval)), r.requests, r.forwarded, r.limited,
        r.limited_pct(), r.shadow_limited, r.store_errors, r.delayed, r.exempt, top, by);
}

bool limited_share_jumped(const RouteInterval& now) {
    const double pct = now.limited_pct();
    return now.requests >= 20 && pct >= 25.0 && pct - now.previous_pct >= 20.0;
}

std::vector<RouteInterval> SummaryReporter::take(const Metrics& metrics, const LimitedClients::Counts& limited) {
    std::vector<RouteInterval> out;
    std::unordered_map<std::string, Totals> last_seen;
    std::unordered_map<std::string, std::uint64_t> limited_seen;
    metrics.for_each_route([&](const RouteMetrics& m) {
        auto& last = last_seen[m.name];
        if (auto before = last_.find(m.name); before != last_.end()) last = before->second;
        RouteInterval r;
        r.route = m.name;
        auto delta = [](std::uint64_t now, std::uint64_t& before) {
            auto d = now >= before ? now - before : now;
            before = now;
            return d;
        };
        r.requests = delta(m.total(&RouteCounts::requests), last.requests);
        r.forwarded = delta(m.total(&RouteCounts::forwarded), last.forwarded);
        r.limited = delta(m.total(&RouteCounts::limited), last.limited);
        r.shadow_limited = delta(m.total(&RouteCounts::shadow_limited), last.shadow_limited);
        r.store_errors = delta(m.total(&RouteCounts::store_errors), last.store_errors);
        r.delayed = delta(m.total(&RouteCounts::delayed), last.delayed);
        r.exempt = delta(m.total(&RouteCounts::exempt), last.exempt);
        for (const auto& held : m.limits) {
            const LimitMetrics& limit = *held;
            const std::uint64_t refused = limit.decisions(DecisionKind::limited) + limit.decisions(DecisionKind::banned);
            std::string id = m.name + '\0' + limit.name;
            auto& before = limited_seen[id];
            if (auto known = last_limited_.find(id); known != last_limited_.end()) before = known->second;
            if (const auto d = delta(refused, before); d > 0) r.limited_by.emplace_back(limit.name, d);
        }
        std::stable_sort(r.limited_by.begin(), r.limited_by.end(),
                         [](const auto& a, const auto& b) { return a.second > b.second; });
        if (r.requests == 0) {
            last.last_pct = 0;
            return;
        }
        if (auto it = limited.find(m.name); it != limited.end()) r.top_limited = top_clients(it->second, 5);
        r.previous_pct = last.last_pct;
        last.last_pct = r.limited_pct();
        out.push_back(std::move(r));
    });
    last_ = std::move(last_seen);
    last_limited_ = std::move(limited_seen);
    return out;
}

}  // namespace sluice::observe
