// Counters and histograms for /metrics, /stats and the summary lines. Workers update them
// with relaxed atomic adds (no locks on the request path); the admin thread reads them.
// The counters every request touches are striped: each worker adds to a copy of its own, on
// cache lines of its own, and readers add the copies up. One shared counter per route would
// be written by every core at every request, its cache line moving from core to core each
// time (measured on 16 cores: a few percent of sluice's CPU per request).
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

// How many copies a striped counter keeps; workers beyond it share copies (still exact: the
// adds are atomic).
inline constexpr std::size_t stripe_count = 16;
namespace detail {
inline thread_local std::size_t stripe = 0;
}
// The copy this thread adds to: its worker's index modulo stripe_count (set_stripe, when the
// worker's thread starts), 0 in every other thread.
inline std::size_t this_stripe() { return detail::stripe; }
inline void set_stripe(std::size_t worker_index) { detail::stripe = worker_index % stripe_count; }

// stripe_count copies of T, each starting on a cache line of its own.
template <class T>
class Striped {
public:
    Striped() : slots_(new Slot[stripe_count]) {}
    T& mine() { return slots_[this_stripe()].value; }
    // The sum over the copies of what `f` reads from each.
    template <class F>
    std::uint64_t sum(F f) const {
        std::uint64_t total = 0;
        for (std::size_t i = 0; i < stripe_count; ++i) total += f(slots_[i].value);
        return total;
    }

private:
    struct alignas(64) Slot {
        T value;
    };
    std::unique_ptr<Slot[]> slots_;
};

class Histogram {
public:
    static constexpr std::size_t max_bounds = 16;
    explicit Histogram(std::vector<double> upper_bounds);  // seconds, ascending, at most max_bounds
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
    struct Cells {
        std::array<Counter, max_bounds + 1> buckets{};  // bounds_.size() + 1 used
        Counter sum_ns{0};
    };
    Striped<Cells> cells_;
};

// The label values of sluice_ratelimit_decisions_total.
// `delayed`: admitted by a leaky bucket that held the request back first.
enum class DecisionKind : std::size_t { allowed, limited, shadow_limited, store_error_allowed, store_error_denied,
                                        delayed, banned };
inline constexpr std::array<const char*, 7> decision_names = {"allowed", "limited", "shadow_limited",
                                                               "store_error_allowed", "store_error_denied", "delayed",
                                                               "banned"};

// Why a client's TLS handshake failed (sluice_tls_handshake_failures_total{reason}).
enum class TlsFailure : std::size_t { protocol_version, no_shared_cipher, certificate_rejected, plain_http, closed,
                                      timeout, other };
inline constexpr std::array<const char*, 7> tls_failure_names = {
    "protocol_version", "no_shared_cipher", "certificate_rejected", "plain_http", "closed", "timeout", "other"};

// Why sluice ended a client's HTTP/2 connection with GOAWAY ENHANCE_YOUR_CALM
// (sluice_http2_abuse_total{reason}); in the order of http::H2Abuse after `none`.
inline constexpr std::array<const char*, 3> http2_abuse_names = {"rapid_reset", "continuation_flood",
                                                                 "control_flood"};

struct LimitMetrics {
    explicit LimitMetrics(std::string n) : name(std::move(n)) {}
    std::string name;

    void count(DecisionKind kind) { add(counts_.mine().decisions[static_cast<std::size_t>(kind)]); }
    void count_reset() { add(counts_.mine().resets); }
    // A counted limit's charge after the response (`count`): made, or failed (the store
    // could not take it).
    void count_charge(bool made) { add(made ? counts_.mine().charged : counts_.mine().charge_failures); }
    // A settle after the response (`cost: {response_header | response_trailer}`) that gave
    // back part of a reservation (a charge past it counts as charged); the units the
    // responses reported, as counted (limit::settled_units).
    void count_refund() { add(counts_.mine().refunded); }
    void count_reported(std::uint64_t units) { add(counts_.mine().reported_units, units); }
    std::uint64_t charged() const { return counts_.sum([](const Counts& c) { return read(c.charged); }); }
    std::uint64_t refunded() const { return counts_.sum([](const Counts& c) { return read(c.refunded); }); }
    std::uint64_t reported_units() const { return counts_.sum([](const Counts& c) { return read(c.reported_units); }); }
    std::uint64_t charge_failures() const { return counts_.sum([](const Counts& c) { return read(c.charge_failures); }); }
    std::uint64_t decisions(DecisionKind kind) const {
        return counts_.sum([kind](const Counts& c) { return read(c.decisions[static_cast<std::size_t>(kind)]); });
    }
    std::uint64_t resets() const { return counts_.sum([](const Counts& c) { return read(c.resets); }); }

private:
    struct Counts {
        std::array<Counter, decision_names.size()> decisions{};
        Counter resets{0};  // keys reset through the admin port's /limits
        Counter charged{0};
        Counter charge_failures{0};
        Counter refunded{0};
        Counter reported_units{0};
    };
    Striped<Counts> counts_;
};

// A route's counters, as one worker counts them (RouteMetrics keeps a copy per stripe).
struct RouteCounts {
    std::array<Counter, 600> by_status{};  // requests by response status (100..599)
    Counter requests{0};
    Counter forwarded{0};  // reached an upstream
    Counter limited{0};
    Counter shadow_limited{0};
    Counter store_errors{0};
    Counter delayed{0};  // held back by a leaky bucket before being forwarded
    Counter exempt{0};   // skipped every limit (`exempt`)
};

struct RouteMetrics {
    explicit RouteMetrics(std::string n) : name(std::move(n)) {}
    std::string name;  // "-" holds requests that matched no route
    Striped<RouteCounts> counts;
    // This thread's copy, to add to.
    RouteCounts& here() { return counts.mine(); }
    // A counter summed over the copies, e.g. total(&RouteCounts::requests).
    std::uint64_t total(Counter RouteCounts::*field) const {
        return counts.sum([field](const RouteCounts& c) { return read(c.*field); });
    }
    std::uint64_t status_total(unsigned status) const {
        if (status >= 600) return 0;
        return counts.sum([status](const RouteCounts& c) { return read(c.by_status[status]); });
    }
    // Guarded by Metrics::mutex_; each held by the configurations' limit sets that count to it
    // (Metrics::limit_held), and gone once none does (prune).
    std::deque<std::shared_ptr<LimitMetrics>> limits;
    // The limits the route has in the running configuration, as /stats shows them (set with
    // Metrics::describe, under Metrics::mutex_).
    struct LimitShown {
        std::string name;
        std::string algorithm;
        std::string setting;
        std::shared_ptr<const LimitMetrics> metrics;  // (held: a limit shown is not pruned)
    };
    std::vector<LimitShown> shown;

    void count_status(unsigned status) {
        auto& c = here();
        add(c.requests);
        if (status < c.by_status.size()) add(c.by_status[status]);
    }
};

class Metrics {
public:
    Metrics();

    // Find or create (thread-safe; call when loading a config, not per request). A route's
    // metrics live while something holds them (a configuration's snapshot: route_held) or
    // until prune() finds nothing does: a route a reload took away goes with the last request
    // that ran under it (routes named anew by each reload grew the registry for ever, 80 KB each).
    RouteMetrics& route(const std::string& name) { return *route_held(name); }
    std::shared_ptr<RouteMetrics> route_held(const std::string& name);
    // Forgets the routes nothing holds but the registry ("-", requests without a route, stays),
    // when there are more than `spare` of them (a reload: a removed route's last counts are
    // left for the summary, unless reloads take many away faster than it runs); and so the
    // limits of the routes kept (a limit renamed by each reload kept 5.7 KB for ever).
    void prune(std::size_t spare = 0);
    // A route's limit's counters: found or made (as route_held), held while a configuration's
    // limit set counts to them.
    std::shared_ptr<LimitMetrics> limit_held(RouteMetrics& route, const std::string& name);
    LimitMetrics& limit(RouteMetrics& route, const std::string& name) { return *limit_held(route, name); }
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
    std::array<Counter, http2_abuse_names.size()> http2_abuse{};
    Counter reloads_ok{0};
    Counter reloads_failed{0};
    Histogram store_latency;
    Histogram upstream_latency;
    std::function<std::uint64_t()> connections_active = [] { return std::uint64_t{0}; };
    std::function<std::uint64_t()> log_dropped = [] { return std::uint64_t{0}; };
    // store.type memory only (unset: not exported).
    std::function<std::uint64_t()> memory_store_keys;
    std::function<std::uint64_t()> memory_store_evictions;
    // store.redis.shared_batches only (unset: not exported): batches sent in another worker's call.
    std::function<std::uint64_t()> redis_shared_batches;
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
    std::vector<std::shared_ptr<RouteMetrics>> routes_;
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
