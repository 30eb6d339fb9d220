// What a route's limits make of one request, from the limiter's answer. The model is Envoy's
// rate-limit filter: ask the limiter, then interpret its answer in one place. Pure: the
// session asks the limiter (I/O), counts and logs the decision, then acts on this verdict;
// a table-driven unit test covers every outcome.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "config/config.hpp"
#include "http/problem.hpp"
#include "limit/decision.hpp"
#include "limit/rate_limit_headers.hpp"
#include "observe/access_log.hpp"

namespace sluice::http {

struct LimitVerdict {
    observe::AccessDecision decision = observe::AccessDecision::allowed;
    // Refused (a limit is exhausted, or the store failed under on_error: deny): this answer,
    // and nothing is forwarded. It carries its own headers (Retry-After, rate-limit headers).
    std::optional<LocalReply> refusal;
    // Admitted: the rate-limit headers its response carries (forwarded, or a check route's 200).
    limit::HeaderList headers;
    // Admitted by a leaky bucket that holds it back this long first (decision: delayed).
    std::chrono::microseconds wait{0};
    // For the access line: the limit it names and what that limit has left (empty / nullopt:
    // none). Points into `route`.
    std::string_view limit;
    std::optional<std::uint64_t> remaining;
};

// `route` is the route the request matched (a route of `cfg`); `decision` is the limiter's
// answer for its limits (Decision::limits in the order of route.limits).
// `limits` are the limits that decided (route.limits, or on a route with plans the client's
// plan's).
// `policies`: each limit's RateLimit-Policy value, made beforehand (limit::rate_limit_headers).
// `may_wait`: the request holds a waiting place (server.max_waiting), so a leaky bucket may
// hold it back.
LimitVerdict limit_verdict(const config::Config& cfg, const config::RouteConfig& route,
                           std::span<const config::LimitConfig> limits, const limit::Decision& decision,
                           std::span<const limit::HeaderValue> policies = {}, bool may_wait = true);
inline LimitVerdict limit_verdict(const config::Config& cfg, const config::RouteConfig& route,
                                  const limit::Decision& decision) {
    return limit_verdict(cfg, route, route.limits, decision);
}

}  // namespace sluice::http
