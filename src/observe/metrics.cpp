#include "observe/metrics.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "observe/json_text.hpp"

namespace sluice::observe {

namespace {

// Rate-limit decisions take well under a millisecond on loopback; the deadline is tens of ms.
std::vector<double> store_buckets() { return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25}; }
std::vector<double> wait_buckets() { return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}; }
std::vector<double> upstream_buckets() {
    return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
}

// Label values escape backslash, double quote and newline.
std::string label(std::string_view value) {
    std::string out;
    for (char c : value) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

std::string number(double v) { return fmt::format("{}", v); }

void histogram_text(std::string& out, const char* name, const char* help, const Histogram& h) {
    auto r = h.reading();
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    for (std::size_t i = 0; i < r.upper_bounds.size(); ++i)
        fmt::format_to(std::back_inserter(out), "{}_bucket{{le=\"{}\"}} {}\n", name, number(r.upper_bounds[i]),
                       r.cumulative[i]);
    fmt::format_to(std::back_inserter(out), "{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name,
                   r.cumulative.back(), name, number(r.sum), name, r.count);
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
    if (bounds_.size() > max_bounds) bounds_.resize(max_bounds);
}

void Histogram::observe(double seconds) {
    auto it = std::lower_bound(bounds_.begin(), bounds_.end(), seconds);
    auto& cells = cells_.mine();
    add(cells.buckets[static_cast<std::size_t>(it - bounds_.begin())]);
    add(cells.sum_ns, static_cast<std::uint64_t>(std::max(0.0, seconds) * 1e9));
}

Histogram::Reading Histogram::reading() const {
    Reading r;
    r.upper_bounds = bounds_;
    std::uint64_t running = 0;
    for (std::size_t i = 0; i <= bounds_.size(); ++i) {
        running += cells_.sum([i](const Cells& c) { return read(c.buckets[i]); });
        r.cumulative.push_back(running);
    }
    r.count = running;  // every observation lands in one bucket
    r.sum = static_cast<double>(cells_.sum([](const Cells& c) { return read(c.sum_ns); })) / 1e9;
    return r;
}

Metrics::Metrics()
    : wait_time(wait_buckets()), store_latency(store_buckets()), upstream_latency(upstream_buckets()) {
    no_route_ = routes_.emplace_back(std::make_shared<RouteMetrics>("-")).get();
}

std::shared_ptr<RouteMetrics> Metrics::route_held(const std::string& name) {
    std::lock_guard lock(mutex_);
    for (auto& r : routes_)
        if (r->name == name) return r;
    return routes_.emplace_back(std::make_shared<RouteMetrics>(name));
}

void Metrics::prune(std::size_t spare) {
    std::lock_guard lock(mutex_);
    auto unheld = [this](const std::shared_ptr<RouteMetrics>& r) { return r.get() != no_route_ && r.use_count() == 1; };
    auto unheld_limit = [](const std::shared_ptr<LimitMetrics>& l) { return l.use_count() == 1; };
    std::size_t count = 0;
    for (const auto& r : routes_)
        count += unheld(r) + static_cast<std::size_t>(std::count_if(r->limits.begin(), r->limits.end(), unheld_limit));
    if (count <= spare) return;
    std::erase_if(routes_, unheld);
    for (auto& r : routes_) std::erase_if(r->limits, unheld_limit);
}

std::shared_ptr<LimitMetrics> Metrics::limit_held(RouteMetrics& route, const std::string& name) {
    std::lock_guard lock(mutex_);
    for (auto& l : route.limits)
        if (l->name == name) return l;
    return route.limits.emplace_back(std::make_shared<LimitMetrics>(name));
}

void Metrics::describe(RouteMetrics& route, std::vector<RouteMetrics::LimitShown> limits) {
    std::lock_guard lock(mutex_);
    route.shown = std::move(limits);
}

void Metrics::forget_limits() {
    std::lock_guard lock(mutex_);
    for (auto& r : routes_) r->shown.clear();
}

void Metrics::for_each_route(const std::function<void(const RouteMetrics&)>& f) const {
    std::lock_guard lock(mutex_);
    for (const auto& r : routes_) f(*r);
}

std::string prometheus_text(const Metrics& m) {
    std::string out;
    auto it = std::back_inserter(out);
    fmt::format_to(it, "# HELP sluice_requests_total Requests answered, by route and status code.\n"
                       "# TYPE sluice_requests_total counter\n");
    m.for_each_route([&](const RouteMetrics& r) {
        for (unsigned code = 100; code < 600; ++code)
            if (auto n = r.status_total(code))
                fmt::format_to(it, "sluice_requests_total{{route=\"{}\",code=\"{}\"}} {}\n", label(r.name), code, n);
    });
    fmt::format_to(it, "# HELP sluice_ratelimit_decisions_total Rate-limit outcomes, by route, limit and decision.\n"
                       "# TYPE sluice_ratelimit_decisions_total counter\n");
    m.for_each_route([&](const RouteMetrics& r) {
        for (const auto& l : r.limits)
            for (std::size_t d = 0; d < decision_names.size(); ++d)
                if (auto n = l->decisions(static_cast<DecisionKind>(d)))
                    fmt::format_to(it, "sluice_ratelimit_decisions_total{{route=\"{}\",limit=\"{}\",decision=\"{}\"}} {}\n",
                                   label(r.name), label(l->name), decision_names[d], n);
    });
    fmt::format_to(it, "# HELP sluice_ratelimit_exempt_total Requests that skipped every limit of their route (exempt).\n"
                       "# TYPE sluice_ratelimit_exempt_total counter\n");
    m.for_each_route([&](const RouteMetrics& r) {
        if (auto n = r.total(&RouteCounts::exempt))
            fmt::format_to(it, "sluice_ratelimit_exempt_total{{route=\"{}\"}} {}\n", label(r.name), n);
    });
    fmt::format_to(it,
                   "# HELP sluice_limit_resets_total Limits reset for a key through the admin port (/limits).\n"
                   "# TYPE sluice_limit_resets_total counter\n");
    m.for_each_route([&](const RouteMetrics& r) {
        for (const auto& l : r.limits)
            if (auto n = l->resets())
                fmt::format_to(it, "sluice_limit_resets_total{{route=\"{}\",limit=\"{}\"}} {}\n", label(r.name),
                               label(l->name), n);
    });
    fmt::format_to(it,
                   "# HELP sluice_ratelimit_charges_total Charges after the response to limits that count statuses "
                   "(count) or whose cost the response reports (cost: {{response_header|response_trailer}}), by "
                   "route, limit and result (charged, refunded: part of a reservation given back, failed).\n"
                   "# TYPE sluice_ratelimit_charges_total counter\n");
    m.for_each_route([&](const RouteMetrics& r) {
        for (const auto& l : r.limits) {
            if (auto n = l->charged())
                fmt::format_to(it, "sluice_ratelimit_charges_total{{route=\"{}\",limit=\"{}\",result=\"charged\"}} {}\n",
                               label(r.name), label(l->name), n);
            if (auto n = l->refunded())
                fmt::format_to(it, "sluice_ratelimit_charges_total{{route=\"{}\",limit=\"{}\",result=\"refunded\"}} {}\n",
                               label(r.name), label(l->name), n);
            if (auto n = l->charge_failures())
                fmt::format_to(it, "sluice_ratelimit_charges_total{{route=\"{}\",limit=\"{}\",result=\"failed\"}} {}\n",
                               label(r.name), label(l->name), n);
        }
    });
    fmt::format_to(it,
                   "# HELP sluice_ratelimit_reported_cost_total Units the upstreams' responses reported as their "
                   "requests' cost (cost: {{response_header|response_trailer}}), by route and limit.\n"
                   "# TYPE sluice_ratelimit_reported_cost_total counter\n");
    m.for_each_route([&](const RouteMetrics& r) {
        for (const auto& l : r.limits)
            if (auto n = l->reported_units())
                fmt::format_to(it, "sluice_ratelimit_reported_cost_total{{route=\"{}\",limit=\"{}\"}} {}\n",
                               label(r.name), label(l->name), n);
    });
    fmt::format_to(it,
                   "# HELP sluice_store_errors_total Rate-limit decisions the store could not make in time.\n"
                   "# TYPE sluice_store_errors_total counter\nsluice_store_errors_total {}\n",
                   read(m.store_errors));
    histogram_text(out, "sluice_store_latency_seconds", "Time for one rate-limit decision.", m.store_latency);
    histogram_text(out, "sluice_ratelimit_wait_seconds", "How long a leaky bucket held a request back before forwarding it.",
                   m.wait_time);
    histogram_text(out, "sluice_upstream_latency_seconds", "Time from picking an upstream connection to the response head.",
                   m.upstream_latency);
    fmt::format_to(it,
                   "# HELP sluice_connections_active Client connections open now.\n"
                   "# TYPE sluice_connections_active gauge\nsluice_connections_active {}\n"
                   "# HELP sluice_tunnels_active WebSocket tunnels open now.\n"
                   "# TYPE sluice_tunnels_active gauge\nsluice_tunnels_active {}\n"
                   "# HELP sluice_requests_waiting Requests a leaky bucket holds back now.\n"
                   "# TYPE sluice_requests_waiting gauge\nsluice_requests_waiting {}\n"
                   "# HELP sluice_store_up 1 when the rate-limit store answers.\n"
                   "# TYPE sluice_store_up gauge\nsluice_store_up {}\n"
                   "# HELP sluice_reloads_total Configuration reloads, by result.\n"
                   "# TYPE sluice_reloads_total counter\n"
                   "sluice_reloads_total{{result=\"ok\"}} {}\nsluice_reloads_total{{result=\"failed\"}} {}\n"
                   "# HELP sluice_log_dropped_total Log lines dropped because the log queue was full.\n"
                   "# TYPE sluice_log_dropped_total counter\nsluice_log_dropped_total {}\n",
                   m.connections_active(), m.tunnels_active.load(), m.requests_waiting.load(), m.store_ready() ? 1 : 0,
                   read(m.reloads_ok),
                   read(m.reloads_failed),
                   m.log_dropped());
    fmt::format_to(it,
                   "# HELP sluice_tls_handshakes_total Client TLS handshakes completed.\n"
                   "# TYPE sluice_tls_handshakes_total counter\nsluice_tls_handshakes_total {}\n"
                   "# HELP sluice_tls_handshake_failures_total Client TLS handshakes that failed, by reason.\n"
                   "# TYPE sluice_tls_handshake_failures_total counter\n",
                   read(m.tls_handshakes));
    for (std::size_t i = 0; i < tls_failure_names.size(); ++i)
        fmt::format_to(it, "sluice_tls_handshake_failures_total{{reason=\"{}\"}} {}\n", tls_failure_names[i],
                       read(m.tls_handshake_failures[i]));
    fmt::format_to(it, "# HELP sluice_http2_abuse_total HTTP/2 connections ended with GOAWAY ENHANCE_YOUR_CALM, by "
                       "the defence that ended them.\n# TYPE sluice_http2_abuse_total counter\n");
    for (std::size_t i = 0; i < http2_abuse_names.size(); ++i)
        fmt::format_to(it, "sluice_http2_abuse_total{{reason=\"{}\"}} {}\n", http2_abuse_names[i],
                       read(m.http2_abuse[i]));
    if (m.memory_store_keys && m.memory_store_evictions)
        fmt::format_to(it,
                       "# HELP sluice_memory_store_keys Keys the memory store holds (store.memory.max_keys bounds it).\n"
                       "# TYPE sluice_memory_store_keys gauge\nsluice_memory_store_keys {}\n"
                       "# HELP sluice_memory_store_evictions_total Keys the memory store evicted (least recently used) "
                       "to stay within store.memory.max_keys.\n"
                       "# TYPE sluice_memory_store_evictions_total counter\nsluice_memory_store_evictions_total {}\n",
                       m.memory_store_keys(), m.memory_store_evictions());
    if (m.redis_shared_batches)
        fmt::format_to(it,
                       "# HELP sluice_redis_shared_batches_total Batches of decisions sent in another worker's Redis "
                       "call (store.redis.shared_batches).\n"
                       "# TYPE sluice_redis_shared_batches_total counter\nsluice_redis_shared_batches_total {}\n",
                       m.redis_shared_batches());
    const auto nodes = m.store_nodes();
    if (!nodes.empty()) {
        std::size_t up = 0;
        fmt::format_to(it, "# HELP sluice_store_node_up 1 when every worker talks to this store node (a sentinel: "
                           "its last answer worked; a replica: it is in the cluster's slot map).\n"
                           "# TYPE sluice_store_node_up gauge\n");
        for (const auto& n : nodes) {
            up += n.up ? 1 : 0;
            fmt::format_to(it, "sluice_store_node_up{{address=\"{}\",role=\"{}\"}} {}\n", label(n.address), label(n.role),
                           n.up ? 1 : 0);
        }
        fmt::format_to(it,
                       "# HELP sluice_store_nodes Store nodes (Redis servers and sentinels) by state.\n"
                       "# TYPE sluice_store_nodes gauge\nsluice_store_nodes{{state=\"up\"}} {}\n"
                       "sluice_store_nodes{{state=\"down\"}} {}\n",
                       up, nodes.size() - up);
    }
    return out;
}

std::string stats_json(const Metrics& m, double uptime_seconds,
                       const std::unordered_map<std::string, std::vector<std::pair<std::string, std::uint64_t>>>&
                           top_limited) {
    std::string out = fmt::format(
        "{{\"uptime_seconds\":{:.3f},\"connections_active\":{},\"requests_waiting\":{},\"store_up\":{},\"routes\":[",
        uptime_seconds, m.connections_active(), m.requests_waiting.load(), m.store_ready() ? "true" : "false");
    bool first = true;
    m.for_each_route([&](const RouteMetrics& r) {
        if (!first) out += ',';
        first = false;
        fmt::format_to(std::back_inserter(out),
                       "{{\"route\":{},\"requests\":{},\"forwarded\":{},\"limited\":{},\"shadow_limited\":{},"
                       "\"store_errors\":{},\"delayed\":{},\"exempt\":{},\"top_limited\":[",
                       json_string(r.name), r.total(&RouteCounts::requests), r.total(&RouteCounts::forwarded),
                       r.total(&RouteCounts::limited), r.total(&RouteCounts::shadow_limited),
                       r.total(&RouteCounts::store_errors), r.total(&RouteCounts::delayed),
                       r.total(&RouteCounts::exempt));
        if (auto it = top_limited.find(r.name); it != top_limited.end()) {
            for (std::size_t i = 0; i < it->second.size(); ++i)
                fmt::format_to(std::back_inserter(out), "{}[{},{}]", i == 0 ? "" : ",", json_string(it->second[i].first),
                               it->second[i].second);
        }
        // Each limit of the route with its settings and how often it refused (a request
        // refused by several limits counts for each): which limit does the refusing.
        out += "],\"limits\":[";
        for (std::size_t i = 0; i < r.shown.size(); ++i) {
            const auto& l = r.shown[i];
            const auto& d = *l.metrics;
            fmt::format_to(std::back_inserter(out),
                           "{}{{\"name\":{},\"algorithm\":{},\"setting\":{},\"limited\":{},\"shadow_limited\":{},"
                           "\"delayed\":{},\"banned\":{}}}",
                           i == 0 ? "" : ",", json_string(l.name), json_string(l.algorithm), json_string(l.setting),
                           d.decisions(DecisionKind::limited), d.decisions(DecisionKind::shadow_limited),
                           d.decisions(DecisionKind::delayed), d.decisions(DecisionKind::banned));
        }
        out += "]}";
    });
    out += "]}";
    return out;
}

}  // namespace sluice::observe
