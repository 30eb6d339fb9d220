// Rate-limit keys: which counter a request counts against, per limit of its route.
// Pure: no sockets, no store.
//
// Key format:  <prefix>:{<route>[:<shared values>]}:<limit>[:<other values>]
//   e.g.       sluice:{login:203.0.113.7}:burst
//              sluice:{login:203.0.113.7}:minute
//              sluice:{api}:per_ip:203.0.113.7          (limits with no key part in common)
//              sluice:{api}:per_token:abc123
// The part in braces is the Redis Cluster hash tag. All keys of one request must sit in
// one slot (one EVALSHA decides them all), so the tag is the same for every limit of the
// route: the route name plus the values of the key parts that EVERY limit of the route has.
// Key parts are taken in a canonical order (client_ip, headers by name, method, path), so
// `[method, client_ip]` and `[client_ip, method]` name the same counter.
// Each name and value is escaped (% : { } space, control bytes as %XX), so keys are
// unambiguous and only the route's tag is a tag; the prefix keeps its colons ("app:rl").
// Keys depend only on the prefix, the route and limit names, the key parts of the route's
// limits and the request's values: changing rates, bursts or windows, or other routes, keeps
// every counter. Changing a limit's key parts can change the tag of its route's other limits.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "config/config.hpp"
#include "limit/key_values.hpp"

namespace sluice::limit {

// What the keys of a route's limits are made of, worked out once per configuration (it
// depends only on the route), so a request only fills in its values.
struct KeyPlan {
    struct Limit {
        std::string name;                   // escaped limit name
        std::vector<config::KeyPart> own;   // key parts not in the hash tag, canonical order
        std::vector<std::string> args;      // its arguments to the decide script
        // Never the same for two plans made in this process (a batch tells its plans apart by
        // it: DecideArgs::limit).
        std::uint64_t id = 0;
    };
    std::string route;                      // escaped route name
    std::vector<config::KeyPart> shared;    // key parts in the hash tag, canonical order
    std::vector<Limit> limits;
    std::size_t longest_name = 0;           // of limits[i].name
};

// The limits of one route, as configured (a view: the config outlives the call).
// `plan`, when set, is make_key_plan of the same route (it saves working it out per request).
struct RouteLimits {
    std::string_view route;
    std::span<const config::LimitConfig> limits;
    const KeyPlan* plan = nullptr;
};

KeyPlan make_key_plan(std::string_view route, std::span<const config::LimitConfig> limits);
// The same, with the hash tag made of the key parts every one of `tag_from` has (a route with
// plans: every limit of every plan), not only `limits`.
KeyPlan make_key_plan(std::string_view route, std::span<const config::LimitConfig> limits,
                      std::span<const config::LimitConfig> tag_from);

// The request values key parts can name.
struct RequestKeyValues {
    std::string_view client_ip;
    std::string_view method;
    std::string_view path;
    // The value of a header by lower-case name, nullopt when absent. A lambda capturing one
    // reference fits std::function's small buffer, so this does not allocate.
    std::function<std::optional<std::string_view>(std::string_view)> header;
    // false: this instance already holds server.max_waiting requests back, so a leaky bucket
    // limits a request it would hold back (taking nothing) instead of admitting it to wait.
    bool may_wait = true;
    std::string_view query;    // the target's query, as it came (without '?')
    std::string_view cookies;  // every Cookie field's value, joined with "; "
    // A claim of the request's verified bearer token (nullopt: no token, or no such claim).
    std::function<std::optional<std::string_view>(std::string_view)> claim;
};

// The same values, owned (a request made up by the admin port's /limits).
struct OwnedKeyValues {
    std::string client_ip;
    std::string method;
    std::string path;
    std::string query;
    std::string cookies;
    std::vector<std::pair<std::string, std::string>> headers;  // lower-case names
    std::vector<std::pair<std::string, std::string>> claims;   // jwt:CLAIM values
    RequestKeyValues view() const {
        return {client_ip, method, path, [this](std::string_view name) -> std::optional<std::string_view> {
                    for (const auto& [n, v] : headers)
                        if (n == name) return std::string_view(v);
                    return std::nullopt;
                },
                true, query, cookies, [this](std::string_view name) -> std::optional<std::string_view> {
                    for (const auto& [n, v] : claims)
                        if (n == name) return std::string_view(v);
                    return std::nullopt;
                }};
    }
};

// Why the request's values cannot key the route's limits (a query parameter or cookie they
// name given twice with different values), or nullopt.
std::optional<std::string> ambiguous_key_value(std::span<const config::LimitConfig> limits,
                                               const RequestKeyValues& request);
// Whether the request has what `part` reads (a header, parameter, cookie, segment, or a
// client address): a limit whose key part is missing does not apply.
bool has_key_value(const config::KeyPart& part, const RequestKeyValues& request);
// The value `part` reads of the request, unescaped (nullopt: the request lacks it).
std::optional<std::string> key_value(const config::KeyPart& part, const RequestKeyValues& request);

// Where a limit's ban (`ban`) on `key` is kept, in the key's hash slot (lua/decide.lua
// writes the same name).
inline std::string ban_key(std::string_view key) { return std::string(key) + ":ban"; }

// One key per limit of the route, in order; nullopt for a limit that does not apply
// because a header (or other value) its key names is absent. (Up to four kept inline: a
// route has a few limits, and every limited request makes these.)
using LimitKeys = boost::container::small_vector<std::optional<std::string>, 4>;
LimitKeys build_limit_keys(std::string_view key_prefix, const RouteLimits& route, const RequestKeyValues& request);

// A store's key prefix as every key begins with it (escaped as a key part is, its colons
// kept): a limiter makes it once rather than per request.
struct KeyPrefix {
    explicit KeyPrefix(std::string_view key_prefix);
    std::string escaped;
};
LimitKeys build_limit_keys(const KeyPrefix& prefix, const RouteLimits& route, const RequestKeyValues& request);

}  // namespace sluice::limit
