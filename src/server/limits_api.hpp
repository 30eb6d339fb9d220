// The admin port's /limits: what a query asks for, and the JSON answers. Pure (the server
// runs the store calls, see server.cpp).
//
//   GET    /limits?route=R&client=IP[&header.NAME=V][&method=M][&path=P][&limit=L][&plan=P]
//   DELETE /limits?...            (or POST /limits/reset?...)
//
// The key parts are those the route's limits are keyed on: `client` is needed when one is
// keyed on client_ip, `method`/`path` when one is keyed on them; a limit keyed on a header
// the query does not give does not apply (as for a request without it). `limit` narrows the
// answer, or the reset, to one limit.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "limit/decision.hpp"
#include "limit/limit_key.hpp"
#include "observe/query_string.hpp"

namespace sluice::server {

struct LimitsQuery {
    std::size_t route = 0;                      // index in Config::routes
    // On a route with plans: the client's set of limits (index in RoutePlans::sets), found as
    // a request's would be from its identity, or from `plan=NAME` (as a trusted hop names it).
    std::size_t set = 0;
    std::optional<std::size_t> limit;           // index in those limits; nullopt: all
    limit::OwnedKeyValues values;
    std::vector<std::pair<std::string, std::string>> query_params;   // query.NAME=VALUE, as given
    std::vector<std::pair<std::string, std::string>> cookie_values;  // cookie.NAME=VALUE
};

struct LimitsProblem {
    unsigned status = 400;
    std::string message;
};

// The limits the query's answer is about: the route's, or the client's plan's.
std::span<const config::LimitConfig> limits_of(const config::Config& config, const LimitsQuery& query);

// The query as it names a route of `config` and a key; or what is wrong with it.
std::optional<LimitsQuery> read_limits_query(const config::Config& config, const std::vector<observe::QueryParam>& query,
                                             LimitsProblem& problem);

// {"error": message}
std::string limits_error_json(const std::string& message);

// The state of the route's limits (those the query selects) as `inspected` reports it.
std::string limits_state_json(const config::Config& config, const LimitsQuery& query, const limit::Decision& inspected);

// What a reset deleted: the limits reset and how many keys existed.
std::string limits_reset_json(const config::Config& config, const LimitsQuery& query,
                              const std::vector<std::size_t>& reset, std::int64_t existed);

}  // namespace sluice::server
