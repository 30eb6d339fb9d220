#include "http/limit_verdict.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "limit/limit_params.hpp"

namespace sluice::http {

LimitVerdict limit_verdict(const config::Config& cfg, const config::RouteConfig& route,
                           std::span<const config::LimitConfig> limits, const limit::Decision& decision,
                           std::span<const limit::HeaderValue> policies, bool may_wait) {
    using Outcome = limit::Decision::Outcome;
    using observe::AccessDecision;
    LimitVerdict verdict;
    if (decision.outcome == Outcome::store_error) {
        // Nothing is known of the limits: no rate-limit headers either way.
        if (route.on_error.value_or(cfg.store.on_error) == config::OnError::deny) {
            verdict.decision = AccessDecision::store_error_denied;
            verdict.refusal = LocalReply{503, "the rate-limit store is unavailable", LocalReply::Body::problem,
                                         {{"Retry-After", "1"}}};
        } else {
            verdict.decision = AccessDecision::store_error_allowed;
        }
        return verdict;
    }
    // A decision that does not match the route (it cannot, from our own limiters) is read
    // only as far as both go.
    const std::size_t n = std::min(limits.size(), decision.limits.size());
    verdict.headers = limit::rate_limit_headers(limits, decision, cfg.responses.headers, policies);
    if (const auto shown = limit::advertised_limit(decision); shown && *shown < n) {
        verdict.limit = limits[*shown].name;
        verdict.remaining = decision.limits[*shown].remaining;
    }
    if (decision.outcome == Outcome::limited) {
        verdict.decision = AccessDecision::limited;
        const std::size_t index = decision.limited_by.value_or(0);
        const bool banned = index < n && decision.limits[index].banned;
        if (banned) verdict.decision = AccessDecision::banned;
        const auto retry_after = index < n ? decision.limits[index].retry_after : std::chrono::milliseconds(1000);
        verdict.headers.emplace_back("Retry-After", std::to_string(limit::retry_after_seconds(retry_after)));
        const std::string_view name = index < n ? std::string_view(limits[index].name) : std::string_view("-");
        verdict.refusal = LocalReply{route.limited_status.value_or(cfg.responses.limited_status),
                                     banned ? fmt::format("rate limit '{}' of route '{}' exceeded: banned for {} s", name,
                                                          route.name, limit::retry_after_seconds(retry_after))
                                            : fmt::format("rate limit '{}' of route '{}' exceeded", name, route.name),
                                     LocalReply::Body::problem_with_limit, std::move(verdict.headers)};
        verdict.headers.clear();
        return verdict;
    }
    if (decision.shadow_limited()) {
        // Forwarded, and the line names the shadow limit that would have refused it.
        verdict.decision = AccessDecision::shadow_limited;
        for (std::size_t i = 0; i < n; ++i)
            if (decision.limits[i].applies && decision.limits[i].shadow && !decision.limits[i].allowed) {
                verdict.limit = limits[i].name;
                verdict.remaining = 0;
                break;
            }
    }
    // Only a leaky bucket that holds requests back makes one wait, and never longer than its
    // max_wait (none when the request had no waiting place): a store's reply is not trusted
    // further (a Redis answering a token bucket with a wait of hours held the request as long).
    for (std::size_t i = 0; i < n; ++i) {
        const auto& result = decision.limits[i];
        if (!result.applies || result.shadow || !result.allowed || result.wait.count() <= 0) continue;
        if (!limit::holds_back(limits[i])) continue;
        const std::chrono::microseconds most{limit::leaky_bucket_params(limits[i], may_wait).max_wait_us};
        verdict.wait = std::max(verdict.wait, std::min(result.wait, most));
    }
    if (verdict.wait.count() > 0) verdict.decision = AccessDecision::delayed;
    return verdict;
}

}  // namespace sluice::http
