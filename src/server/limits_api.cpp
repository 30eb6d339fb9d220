#include "server/limits_api.hpp"

#include <algorithm>
#include <cctype>

#include "config/value_syntax.hpp"
#include "http/request_target.hpp"
#include "limit/describe.hpp"
#include "limit/limit_params.hpp"
#include "net/cidr.hpp"
#include "observe/json_text.hpp"

namespace sluice::server {
namespace {

std::string lower(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
    return text;
}

bool uses(const config::LimitConfig& limit, config::KeyPart::Kind kind) {
    // client_ip/N reads the client as client_ip does, path_segment:N the path.
    auto same = [kind](config::KeyPart::Kind k) {
        using K = config::KeyPart::Kind;
        if (k == K::client_net) k = K::client_ip;
        if (k == K::path_segment) k = K::path;
        return k == kind;
    };
    return std::any_of(limit.key.begin(), limit.key.end(), [&](const auto& part) { return same(part.kind); });
}

// "a=b; c=d" or "a=b&c=d" from name/value pairs (the values percent-encoded).
std::string joined(const std::vector<std::pair<std::string, std::string>>& pairs, bool query) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    for (const auto& [name, value] : pairs) {
        if (!out.empty()) out += query ? "&" : "; ";
        out += name;
        out += '=';
        for (const char c : value) {  // percent-encoded: a request's values are read decoded
            const auto byte = static_cast<unsigned char>(c);
            if (std::isalnum(byte) || c == '-' || c == '_' || c == '.' || c == '~') {
                out += c;
            } else {
                out += '%';
                out += hex[byte >> 4];
                out += hex[byte & 0xf];
            }
        }
    }
    return out;
}

std::span<const config::LimitConfig> set_limits(const config::RouteConfig& route, std::size_t set) {
    if (!route.plans) return route.limits;
    return route.plans->sets[set].limits;
}

// query.set for a route with plans: as choose_limit_set (http/exchange.cpp) finds a request's,
// with `plan` standing for a trusted hop's plan_header.
bool choose_set(const config::RouteConfig& route, const std::optional<std::string>& plan, LimitsQuery& out,
                LimitsProblem& problem) {
    const auto& plans = *route.plans;
    const auto identity = limit::key_value(plans.identity, out.values.view());
    if (!identity || identity->empty()) {
        problem = {400, "route '" + route.name + "' limits by plan: give the client's identity (" +
                            config::key_part_text(plans.identity) + ")"};
        return false;
    }
    const auto mapped = plans.by_identity.find(*identity);
    if (plan) {
        const auto named = plans.by_plan.find(*plan);
        if (named == plans.by_plan.end()) {
            problem = {404, "no plan named '" + *plan + "'"};
            return false;
        }
        out.set = mapped != plans.by_identity.end() && plans.sets[mapped->second].plan == *plan ? mapped->second
                                                                                                : named->second;
        return true;
    }
    if (mapped != plans.by_identity.end()) {
        out.set = mapped->second;
    } else if (plans.default_set) {
        out.set = *plans.default_set;
    } else {
        problem = {404, "route '" + route.name + "': this client has no plan (the map does not name it and there is "
                                                 "no default_plan)"};
        return false;
    }
    return true;
}

bool selected(const LimitsQuery& query, std::size_t index) { return !query.limit || *query.limit == index; }

void append_key(std::string& out, const config::RouteConfig& route, std::span<const config::LimitConfig> limits,
                const LimitsQuery& query) {
    bool any = false;
    auto field = [&](std::string_view name, std::string_view value) {
        out += any ? "," : "";
        observe::append_json_string(out, name);
        out += ':';
        observe::append_json_string(out, value);
        any = true;
    };
    out += "{";
    bool client = route.plans && route.plans->identity.kind == config::KeyPart::Kind::client_ip;
    bool method = false, path = false;
    for (const auto& limit : limits) {
        client |= uses(limit, config::KeyPart::Kind::client_ip);
        method |= uses(limit, config::KeyPart::Kind::method);
        path |= uses(limit, config::KeyPart::Kind::path);
    }
    if (client) field("client", query.values.client_ip);
    if (method) field("method", query.values.method);
    if (path) field("path", query.values.path);
    for (const auto& [name, value] : query.values.headers) field("header." + name, value);
    for (const auto& [name, value] : query.query_params) field("query." + name, value);
    for (const auto& [name, value] : query.cookie_values) field("cookie." + name, value);
    for (const auto& [name, value] : query.values.claims) field("jwt." + name, value);
    out += "}";
}

}  // namespace

std::optional<LimitsQuery> read_limits_query(const config::Config& config, const std::vector<observe::QueryParam>& query,
                                             LimitsProblem& problem) {
    LimitsQuery out;
    std::optional<std::string> route_name, client, method, path, limit_name, plan;
    auto once = [&](std::optional<std::string>& slot, const observe::QueryParam& p) {
        if (slot) {
            problem = {400, "'" + p.name + "' is given twice"};
            return false;
        }
        slot = p.value;
        return true;
    };
    for (const auto& p : query) {
        bool ok = true;
        if (p.name == "route") ok = once(route_name, p);
        else if (p.name == "client") ok = once(client, p);
        else if (p.name == "method") ok = once(method, p);
        else if (p.name == "path") ok = once(path, p);
        else if (p.name == "limit") ok = once(limit_name, p);
        else if (p.name == "plan") ok = once(plan, p);
        else if ((p.name.rfind("query.", 0) == 0 && p.name.size() > 6) ||
                 (p.name.rfind("cookie.", 0) == 0 && p.name.size() > 7) ||
                 (p.name.rfind("jwt.", 0) == 0 && p.name.size() > 4)) {
            const bool is_query = p.name[0] == 'q', is_jwt = p.name[0] == 'j';
            auto& pairs = is_query ? out.query_params : is_jwt ? out.values.claims : out.cookie_values;
            const std::string name = p.name.substr(is_query ? 6 : is_jwt ? 4 : 7);
            for (const auto& [n, v] : pairs)
                if (n == name) {
                    problem = {400, "'" + p.name + "' is given twice"};
                    return std::nullopt;
                }
            pairs.emplace_back(name, p.value);
        } else if (p.name.rfind("header.", 0) == 0 && p.name.size() > 7) {
            const std::string name = lower(p.name.substr(7));
            for (const auto& [n, v] : out.values.headers)
                if (n == name) {
                    problem = {400, "'" + p.name + "' is given twice"};
                    return std::nullopt;
                }
            out.values.headers.emplace_back(name, p.value);
        } else {
            problem = {400, "unknown parameter '" + p.name +
                                "' (route, client, method, path, header.NAME, query.NAME, cookie.NAME, jwt.CLAIM, limit, plan)"};
            return std::nullopt;
        }
        if (!ok) return std::nullopt;
    }
    if (!route_name) {
        problem = {400, "'route' is needed"};
        return std::nullopt;
    }
    const auto route = std::find_if(config.routes.begin(), config.routes.end(),
                                    [&](const auto& r) { return r.name == *route_name; });
    if (route == config.routes.end()) {
        problem = {404, "no route named '" + *route_name + "'"};
        return std::nullopt;
    }
    out.route = static_cast<std::size_t>(route - config.routes.begin());
    if (plan && (!route->plans || route->plans->header.empty())) {
        problem = {400, "route '" + *route_name + "' takes no plan from a header ('plan' is for a route with "
                                                  "plan_header)"};
        return std::nullopt;
    }
    if (client) {
        // The address as sluice writes it in keys: one client is one key however written.
        const auto ip = net::IpAddress::parse(*client);
        if (!ip) {
            problem = {400, "'client' is not an IP address"};
            return std::nullopt;
        }
        out.values.client_ip = ip->unmapped().str();
    }
    if (method) out.values.method = *method;
    if (path) {
        // As requests' paths are read (one key however the path is spelled).
        std::string_view path_problem;
        out.values.path = http::normalize_path(*path, path_problem);
        if (!path_problem.empty()) {
            problem = {400, "'path': " + std::string(path_problem)};
            return std::nullopt;
        }
    }
    out.values.query = joined(out.query_params, true);
    out.values.cookies = joined(out.cookie_values, false);
    if (route->plans && !choose_set(*route, plan, out, problem)) return std::nullopt;
    const auto limits = set_limits(*route, out.set);
    if (limit_name) {
        const auto limit = std::find_if(limits.begin(), limits.end(),
                                        [&](const auto& l) { return l.name == *limit_name; });
        if (limit == limits.end()) {
            problem = {404, (route->plans ? "plan '" + std::string(route->plans->sets[out.set].plan) : "route '" + *route_name) +
                               "' has no limit named '" + *limit_name + "'"};
            return std::nullopt;
        }
        out.limit = static_cast<std::size_t>(limit - limits.begin());
    }
    for (std::size_t i = 0; i < limits.size(); ++i) {
        if (!selected(out, i)) continue;
        const auto& limit = limits[i];
        if (uses(limit, config::KeyPart::Kind::client_ip) && !client) {
            problem = {400, "'client' is needed: limit '" + limit.name + "' is keyed on client_ip"};
            return std::nullopt;
        }
        if (uses(limit, config::KeyPart::Kind::method) && !method) {
            problem = {400, "'method' is needed: limit '" + limit.name + "' is keyed on method"};
            return std::nullopt;
        }
        if (uses(limit, config::KeyPart::Kind::path) && !path) {
            problem = {400, "'path' is needed: limit '" + limit.name + "' is keyed on path"};
            return std::nullopt;
        }
    }
    return out;
}

std::span<const config::LimitConfig> limits_of(const config::Config& config, const LimitsQuery& query) {
    return set_limits(config.routes[query.route], query.set);
}

std::string limits_error_json(const std::string& message) {
    std::string out = "{\"error\":";
    observe::append_json_string(out, message);
    return out + "}\n";
}

std::string limits_state_json(const config::Config& config, const LimitsQuery& query, const limit::Decision& inspected) {
    const auto& route = config.routes[query.route];
    const auto limits = limits_of(config, query);
    std::string out = "{\"route\":";
    observe::append_json_string(out, route.name);
    if (route.plans) {
        out += ",\"plan\":";
        observe::append_json_string(out, route.plans->sets[query.set].plan);
    }
    out += ",\"key\":";
    append_key(out, route, limits, query);
    out += ",\"limits\":[";
    bool first = true;
    for (std::size_t i = 0; i < limits.size(); ++i) {
        if (!selected(query, i)) continue;
        const auto& limit = limits[i];
        out += first ? "{" : ",{";
        first = false;
        out += "\"name\":";
        observe::append_json_string(out, limit.name);
        out += ",\"algorithm\":\"";
        out += config::algorithm_name(limit.algorithm);
        out += "\",\"shadow\":";
        out += limit.shadow ? "true" : "false";
        const auto capacity = limit::capacity_of(limit);
        out += ",\"capacity\":" + std::to_string(capacity);
        const limit::LimitResult* result = i < inspected.limits.size() ? &inspected.limits[i] : nullptr;
        if (!result || !result->applies) {
            out += ",\"applies\":false}";
            continue;
        }
        out += ",\"applies\":true,\"remaining\":" + std::to_string(result->remaining);
        if (limit.ban) out += result->banned ? ",\"banned\":true" : ",\"banned\":false";
        if (limit.algorithm == config::Algorithm::concurrency)
            out += ",\"in_flight\":" + std::to_string(capacity > result->remaining ? capacity - result->remaining : 0);
        out += ",\"reset_ms\":" + std::to_string(result->reset.count()) + "}";
    }
    return out + "]}\n";
}

std::string limits_reset_json(const config::Config& config, const LimitsQuery& query,
                              const std::vector<std::size_t>& reset, std::int64_t existed) {
    const auto& route = config.routes[query.route];
    const auto limits = limits_of(config, query);
    std::string out = "{\"route\":";
    observe::append_json_string(out, route.name);
    if (route.plans) {
        out += ",\"plan\":";
        observe::append_json_string(out, route.plans->sets[query.set].plan);
    }
    out += ",\"key\":";
    append_key(out, route, limits, query);
    out += ",\"reset\":[";
    for (std::size_t i = 0; i < reset.size(); ++i) {
        if (i > 0) out += ",";
        observe::append_json_string(out, limits[reset[i]].name);
    }
    return out + "],\"keys_deleted\":" + std::to_string(existed) + "}\n";
}

}  // namespace sluice::server
