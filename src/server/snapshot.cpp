#include "server/snapshot.hpp"

#include "auth/jwt.hpp"

#include <algorithm>
#include <stdexcept>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "limit/describe.hpp"
#include "limit/rate_limit_headers.hpp"
#include "tls/context.hpp"

namespace sluice::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

tcp::endpoint resolve_endpoint(const config::Endpoint& ep) {
    boost::system::error_code ec;
    auto address = net::ip::make_address(ep.host, ec);
    if (!ec) return {address, ep.port};
    net::io_context io;
    tcp::resolver resolver(io);
    auto results = resolver.resolve(ep.host, std::to_string(ep.port), ec);
    if (ec || results.empty())
        throw std::runtime_error("cannot resolve " + ep.str() + ": " + (ec ? ec.message() : "no address"));
    return results.begin()->endpoint();
}

void add_charge_sets(LimitSet& set, std::string_view route, std::span<const config::LimitConfig> tag_from) {
    set.charges.clear();
    set.charge_of_status.clear();
    set.settles = {};
    for (std::size_t i = 0; i < set.limits.size(); ++i) {
        if (!set.limits[i].reports_cost()) continue;
        set.settles.limits.push_back(set.limits[i]);
        set.settles.limits.back().charges = true;
        set.settles.index.push_back(i);
    }
    if (!set.settles.limits.empty())
        set.settles.key_plan = limit::make_key_plan(route, set.settles.limits, tag_from);
    if (std::none_of(set.limits.begin(), set.limits.end(), [](const config::LimitConfig& l) { return l.counted(); }))
        return;
    // The counted limits each status charges; one charge set per distinct group of them.
    set.charge_of_status.assign(500, 0);
    std::vector<std::vector<std::size_t>> groups;  // in the order first met
    for (unsigned status = 100; status <= 599; ++status) {
        std::vector<std::size_t> group;
        for (std::size_t i = 0; i < set.limits.size(); ++i)
            if (set.limits[i].counts_status(status)) group.push_back(i);
        if (group.empty()) continue;
        auto found = std::find(groups.begin(), groups.end(), group);
        if (found == groups.end()) found = groups.insert(groups.end(), std::move(group));
        set.charge_of_status[status - 100] = static_cast<std::uint16_t>(found - groups.begin() + 1);
    }
    for (auto& group : groups) {
        ChargeSet charge;
        for (const std::size_t i : group) {
            charge.limits.push_back(set.limits[i]);
            charge.limits.back().charges = true;
        }
        charge.index = std::move(group);
        charge.key_plan = limit::make_key_plan(route, charge.limits, tag_from);
        set.charges.push_back(std::move(charge));
    }
}

static_assert(static_cast<unsigned>(config::KeyPart::Kind::jwt) < 32, "one bit per kind of key part");

std::uint32_t route_key_kinds(const config::RouteConfig& route) {
    std::uint32_t kinds = 0;
    auto add = [&kinds](const std::vector<config::LimitConfig>& limits) {
        for (const auto& limit : limits)
            for (const auto& part : limit.key) kinds |= std::uint32_t{1} << static_cast<unsigned>(part.kind);
    };
    if (!route.plans) {
        add(route.limits);
        return kinds;
    }
    kinds |= std::uint32_t{1} << static_cast<unsigned>(route.plans->identity.kind);
    for (std::size_t i = 0; i < route.plans->by_plan.size(); ++i) add(route.plans->sets[i].limits);
    return kinds;
}

std::vector<config::Diagnostic> unresolved_upstreams(const config::Config& config, std::string_view consequence) {
    std::vector<config::Diagnostic> problems;
    for (const auto& upstream : config.upstreams) {
        for (std::size_t i = 0; i < upstream.servers.size(); ++i) {
            const auto& server = upstream.servers[i];
            try {
                (void)resolve_endpoint(server);  // what making the snapshot does
                continue;
            } catch (const std::exception& e) {
                const auto at = i < upstream.server_at.size() ? upstream.server_at[i] : config::Position{};
                problems.push_back({config.source_path, at.line, at.column,
                                    "upstream '" + upstream.name + "' server '" + server.str() + "' does not resolve (" +
                                        e.what() + "; " + std::string(consequence) + ")",
                                    false});
            }
        }
    }
    return problems;
}

std::shared_ptr<const Snapshot> make_snapshot(std::shared_ptr<const config::Config> config, observe::Metrics& metrics) {
    auto snap = std::make_shared<Snapshot>();
    snap->metrics = &metrics;
    for (const auto& route : config->routes) {
        auto held = metrics.route_held(route.name);
        auto& rm = *held;
        snap->route_metrics.push_back(std::move(held));
        snap->key_kinds_read.push_back(route_key_kinds(route));
        auto& sets = snap->limit_sets.emplace_back();
        if (!route.plans) {
            LimitSet set{"", route.limits, limit::make_key_plan(route.name, route.limits), {}, {}, {}, {}, {}};
            for (const auto& limit : route.limits) {
                set.metrics.push_back(metrics.limit_held(rm, limit.name));
                set.policies.push_back(limit::rate_limit_policy(limit));
            }
            add_charge_sets(set, route.name, route.limits);
            sets.push_back(std::move(set));
            continue;
        }
        // The hash tag holds the key parts every limit of every plan has: a client moved to
        // another plan keeps its keys (and one request's keys share a slot on a Cluster).
        std::vector<config::LimitConfig> every;
        for (const auto& set : route.plans->sets)
            if (set.identity.empty()) every.insert(every.end(), set.limits.begin(), set.limits.end());
        for (const auto& plan_set : route.plans->sets) {
            LimitSet set{plan_set.plan, plan_set.limits, limit::make_key_plan(route.name, plan_set.limits, every), {}, {}, {}, {}, {}};
            // Counted per plan: "PLAN/LIMIT" (a client's overrides count with its plan).
            for (const auto& limit : plan_set.limits) {
                set.metrics.push_back(metrics.limit_held(rm, plan_set.plan + "/" + limit.name));
                set.policies.push_back(limit::rate_limit_policy(limit));
            }
            add_charge_sets(set, route.name, every);
            sets.push_back(std::move(set));
        }
    }
    for (const auto& upstream : config->upstreams) {
        auto& servers = snap->servers.emplace_back();
        for (const auto& ep : upstream.servers) {
            try {
                servers.push_back({ep.str(), ep.host, resolve_endpoint(ep)});
            } catch (const std::exception& e) {
                throw std::runtime_error("upstream " + upstream.name + ": " + e.what());
            }
        }
    }
    if (!config->jwt.keys.empty()) {
        std::string error;
        snap->jwt = auth::JwtVerifier::build(config->jwt, error);
        if (!snap->jwt) throw std::runtime_error(error);
    }
    auto contexts = tls::make_contexts(*config);
    snap->listener_tls = std::move(contexts.listeners);
    snap->upstream_tls = std::move(contexts.upstreams);
    // What /stats shows of each route's limits, once nothing can refuse this configuration
    // (a route the reload removed shows none).
    metrics.forget_limits();
    for (std::size_t r = 0; r < config->routes.size(); ++r) {
        const auto& route = config->routes[r];
        std::vector<observe::RouteMetrics::LimitShown> shown;
        // A route's own limits, or each plan's (a client's overrides, after them, count with its plan).
        const std::size_t shown_sets = route.plans ? route.plans->by_plan.size() : 1;
        for (std::size_t k = 0; k < shown_sets; ++k) {
            const auto& set = snap->limit_sets[r][k];
            for (std::size_t i = 0; i < set.limits.size(); ++i)
                shown.push_back({set.plan.empty() ? set.limits[i].name : std::string(set.plan) + "/" + set.limits[i].name,
                                 std::string(config::algorithm_name(set.limits[i].algorithm)),
                                 limit::describe_limit(set.limits[i]), set.metrics[i]});
        }
        metrics.describe(*snap->route_metrics[r], std::move(shown));
    }
    snap->config = std::move(config);
    return snap;
}

}  // namespace sluice::server
