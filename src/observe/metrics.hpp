// Counters and histograms for /metrics, /stats and the summary lines. Workers update them
// with relaxed atomic adds (no locks on the request path); the admin thread reads them.
// Entries for routes and limits are created once, when a config is loaded, and never
// removed, so counts survive reloads and references stay valid.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::observe {

using Counter = std::atomic<std::uint64_t>;

inline void add(Counter& c, std::uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
inline std::uint64_t read(const Counter& c) { return c.load(std::memory_order_relaxed); }

class Histogram {
public:
    explicit Histogram(std::vector<double> upper_bounds);  // seconds, ascending
    void observe(double seconds);

    struct Reading {
        std::vector<double> upper_bounds;
        std::vector<std::uint64_t> cumulative;  // one per bound, then +Inf
        std::uint64_t count = 0;
        double sum = 0;
    };
    Reading reading() const;

private:
    std::vector<double> bounds_;
    std::unique_ptr<Counter[]> buckets_;  // bounds_.size() + 1
    Counter count_{0};
    Counter sum_ns_{0};
};

// The label values of sluice_ratelimit_decisions_total.
// `delayed`: admitted by a leaky bucket that held the request back first.
enum class DecisionKind : std::size_t { allowed, limited, shadow_limited, store_error_allowed, store_error_denied,
                                        delayed };
inline constexpr std::array<const char*, 6> decision_names = {"allowed", "limited", "shadow_limited",
                                                               "store_error_allowed", "store_error_denied", "delayed"};

// Why a client's TLS handshake failed (sluice_tls_handshake_failures_total{reason}).
enum class TlsFailure : std::size_t { protocol_version, no_shared_cipher, certificate_rejected, plain_http, closed,
                                      timeout, other };
inline constexpr std::array<const char*, 7> tls_failure_names = {
    "protocol_version", "no_shared_cipher", "certificate_rejected", "plain_http", "closed", "timeout", "other"};

struct LimitMetrics {
    explicit LimitMetrics(std::string n) : name(std::move(n)) {}
    std::string name;
    std::array<Counter, decision_names.size()> decisions{};
    Counter resets{0};  // keys reset through the admin port's /limits
};

struct RouteMetrics {
    explicit RouteMetrics(std::string n) : name(std::move(n)) {}
    std::string name;  // "-" holds requests that matched no route
    std::array<Counter, 600> by_status{};  // requests by response status (100..599)
    Counter requests{0};
    Counter forwarded{0};  // reached an upstream
    Counter limited{0};
    Counter shadow_limited{0};
    Counter store_errors{0};
    Counter delayed{0};  // held back by a leaky bucket before being forwarded
    std::deque<LimitMetrics> limits;  // guarded by Metrics::mutex_ for insertion
    // The limits the route has in the running configuration, as /stats shows them (set with
    // Metrics::describe, under Metrics::mutex_).
    struct LimitShown {
        std::string name;
        std::string algorithm;
        std::string setting;
        const LimitMetrics* metrics = nullptr;
    };
    std::vector<LimitShown> shown;

    void count_status(unsigned status) {
        add(requests);
        if (status < by_status.size()) add(by_status[status]);
    }
};

class Metrics {
public:
    Metrics();

    // Find or create (thread-safe; call when loading a config, not per request).
    RouteMetrics& route(const std::string& name);
    LimitMetrics& limit(RouteMetrics& route, const std::string& name);
    RouteMetrics& no_route() { return *no_route_; }
    // The route's limits in the configuration now running (each also made with limit()).
    void describe(RouteMetrics& route, std::vector<RouteMetrics::LimitShown> limits);
    // Forgets every route's limits (a reload first, then describe() for the routes it has).
    void forget_limits();

    // Calls f for every route, in creation order, under the registry lock.
    void for_each_route(const std::function<void(const RouteMetrics&)>& f) const;

    Counter store_errors{0};
    std::atomic<std::int64_t> tunnels_active{0};  // WebSocket tunnels open now
    std::atomic<std::int64_t> requests_waiting{0};  // held back by a leaky bucket now
    // Requests waiting now, plus those being decided that may be told to wait: the count
    // server.max_waiting caps (see Session).
    std::atomic<std::int64_t> waiting_places{0};
    Histogram wait_time;  // how long leaky buckets held requests back
    Counter tls_handshakes{0};                      // client TLS handshakes completed
    std::array<Counter, tls_failure_names.size()> tls_handshake_failures{};
    Counter reloads_ok{0};
    Counter reloads_failed{0};
    Histogram store_latency;
    Histogram upstream_latency;
    std::function<std::uint64_t()> connections_active = [] { return std::uint64_t{0}; };
    std::function<std::uint64_t()> log_dropped = [] { return std::uint64_t{0}; };
    std::function<bool()> store_ready = [] { return true; };
    // The store's servers (Redis nodes, sentinels); `up` when every worker talks to it.
    struct StoreNode {
        std::string address;
        std::string role;
        bool up = false;
    };
    std::function<std::vector<StoreNode>()> store_nodes = [] { return std::vector<StoreNode>{}; };
    // False once a worker thread has stopped while the server was not stopping: its
    // connections are no longer served (/readyz then answers 503).
    std::function<bool()> workers_alive = [] { return true; };

private:
    mutable std::mutex mutex_;
    std::deque<RouteMetrics> routes_;
    RouteMetrics* no_route_;
};

// The Prometheus text exposition format (version 0.0.4).
std::string prometheus_text(const Metrics& metrics);

// What /stats.json serves: cumulative per-route counters; the page derives rates.
// `top_limited`: per route, the clients limited most in the last minute (RecentLimited).
std::string stats_json(const Metrics& metrics, double uptime_seconds,
                       const std::unordered_map<std::string, std::vector<std::pair<std::string, std::uint64_t>>>&
                           top_limited = {});

}  // namespace sluice::observe
