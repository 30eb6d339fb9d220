// What workers read for every request: the immutable config plus what was derived
// from it once (resolved upstream addresses). Published as shared_ptr<const Snapshot>.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "config/config.hpp"
#include "limit/header_list.hpp"
#include "limit/limit_key.hpp"
#include "observe/metrics.hpp"

namespace sluice::auth {
class JwtVerifier;
}

namespace sluice::tls {
class ServerContext;
class ClientContext;
}  // namespace sluice::tls

namespace sluice::server {

struct UpstreamServer {
    std::string key;  // "host:port" as configured: names the keep-alive pool
    std::string host;  // as configured: the name a TLS server's certificate must carry
    boost::asio::ip::tcp::endpoint endpoint;
};

// One set of limits a request of a route can be decided by: the route's own, or for a route
// with plans one plan's (or one client's overrides of it).
// The charge after the response of some of a set's counted limits (`count: {statuses}`):
// copies of them that charge (config::LimitConfig::charges), with the keys of the originals.
struct ChargeSet {
    std::vector<config::LimitConfig> limits;
    std::vector<std::size_t> index;  // each one's place in its LimitSet
    limit::KeyPlan key_plan;
    limit::RouteLimits route_limits(std::string_view route) const { return {route, limits, &key_plan}; }
};

struct LimitSet {
    std::string_view plan;  // "" for a route without plans
    std::span<const config::LimitConfig> limits;
    limit::KeyPlan key_plan;
    // Per limit; held (Metrics::prune lets go of the counters no configuration's set holds).
    std::vector<std::shared_ptr<observe::LimitMetrics>> metrics;
    // Where some limits count statuses: one charge set per group of them that a status
    // charges together, and which one a response of each status (100 to 599) charges.
    std::vector<ChargeSet> charges;
    std::vector<std::uint16_t> charge_of_status;  // status - 100 -> index in charges + 1; 0: none
    // Where some limits take their cost from the response (`cost: {response_header |
    // response_trailer}`): copies of them that charge, with the keys of the originals. A
    // request's settle is a copy of these with its own costs (http::Exchange).
    ChargeSet settles;
    // Per limit: its RateLimit-Policy value (limit::rate_limit_policy), made once.
    std::vector<limit::HeaderValue> policies;
    limit::RouteLimits route_limits(std::string_view route) const { return {route, limits, &key_plan}; }
    bool counted() const { return !charges.empty(); }
    bool settled() const { return !settles.limits.empty(); }
    // The limits a response of `status` charges, or nullptr.
    const ChargeSet* charge_for(unsigned status) const {
        if (status < 100 || status > 599 || charge_of_status.empty()) return nullptr;
        const auto which = charge_of_status[status - 100];
        return which == 0 ? nullptr : &charges[which - 1];
    }
};
// Fills in set.charges for the counted limits of `set`, and set.settles for those whose
// response reports their cost; their keys are those of the set (`tag_from`: what the set's
// key plan was made with).
void add_charge_sets(LimitSet& set, std::string_view route, std::span<const config::LimitConfig> tag_from);

// The kinds of key part (bit k: config::KeyPart::Kind k) a limit of `route` reads: on a
// route with plans its identity, and the limits of every plan (a client's overrides do not
// change what is read).
std::uint32_t route_key_kinds(const config::RouteConfig& route);

struct Snapshot {
    std::shared_ptr<const config::Config> config;
    std::vector<std::vector<UpstreamServer>> servers;  // per upstream, in config order
    observe::Metrics* metrics = nullptr;
    std::vector<std::shared_ptr<observe::RouteMetrics>> route_metrics;  // per route (held: Metrics::prune)
    // Per route: one set for a route without plans (its limits, perhaps none), else one per
    // RoutePlans::sets entry, in that order.
    std::vector<std::vector<LimitSet>> limit_sets;
    // Per route: bit k set when a limit of the route reads a key part of kind k
    // (config::KeyPart::Kind; route_key_kinds), worked out once rather than per request.
    std::vector<std::uint32_t> key_kinds_read;
    // Built from the certificates the config names (read again on every reload).
    std::vector<std::shared_ptr<tls::ServerContext>> listener_tls;  // per server.listen entry; null: plain
    std::vector<std::shared_ptr<tls::ClientContext>> upstream_tls;  // per upstream; null: plain
    std::shared_ptr<const auth::JwtVerifier> jwt;  // jwt.keys, parsed; null without them
};

// Resolves every upstream server (blocking; call off the data path) and builds the TLS
// contexts. Throws std::runtime_error naming the server that does not resolve or the
// certificate OpenSSL refused.
// Also finds or creates the metrics of every route and limit.
std::shared_ptr<const Snapshot> make_snapshot(std::shared_ptr<const config::Config> config, observe::Metrics& metrics);

// Resolves "host:port" to one endpoint (numeric or by name). Throws std::runtime_error.
boost::asio::ip::tcp::endpoint resolve_endpoint(const config::Endpoint& ep);
// Every upstream server that does not resolve, at its FILE:LINE:COL (--check, and a reload
// before it would be refused for it); `consequence` ends each message's parenthesis.
std::vector<config::Diagnostic> unresolved_upstreams(const config::Config& config, std::string_view consequence);

}  // namespace sluice::server
