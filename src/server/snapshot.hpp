// What workers read for every request: the immutable config plus what was derived
// from it once (resolved upstream addresses). Published as shared_ptr<const Snapshot>.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "config/config.hpp"
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
struct LimitSet {
    std::string_view plan;  // "" for a route without plans
    std::span<const config::LimitConfig> limits;
    limit::KeyPlan key_plan;
    std::vector<observe::LimitMetrics*> metrics;  // per limit
    limit::RouteLimits route_limits(std::string_view route) const { return {route, limits, &key_plan}; }
};

struct Snapshot {
    std::shared_ptr<const config::Config> config;
    std::vector<std::vector<UpstreamServer>> servers;  // per upstream, in config order
    observe::Metrics* metrics = nullptr;
    std::vector<observe::RouteMetrics*> route_metrics;               // per route
    // Per route: one set for a route without plans (its limits, perhaps none), else one per
    // RoutePlans::sets entry, in that order.
    std::vector<std::vector<LimitSet>> limit_sets;
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

}  // namespace sluice::server
