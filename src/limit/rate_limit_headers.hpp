// The rate-limit response headers and Retry-After, from a decision. Pure.
#pragma once

#include <span>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "limit/decision.hpp"
#include "limit/header_list.hpp"

namespace sluice::limit {


// The enforced limit the headers speak of: the one that rejected the request, else the
// applicable non-shadow limit with the least remaining (ties: the longer reset).
// nullopt when no enforced limit applied.
std::optional<std::size_t> advertised_limit(const Decision& decision);

// Quota and window (seconds, at least 1) of a limit: burst and the time to refill it from
// empty for a token bucket; limit and window for a sliding window.
std::pair<std::uint64_t, std::uint64_t> quota_and_window(const config::LimitConfig& limit);

// RateLimit-Policy / RateLimit (ietf), X-RateLimit-* (legacy), both or none.
// `limits`: the limits `decision` answers for, in its order. `policies`, when given: each
// limit's rate_limit_policy, made beforehand (it depends on the limit alone).
HeaderList rate_limit_headers(std::span<const config::LimitConfig> limits, const Decision& decision,
                              config::HeaderStyle style, std::span<const HeaderValue> policies = {});

// A limit's RateLimit-Policy value: "\"<name>\";q=<quota>;w=<window>".
HeaderValue rate_limit_policy(const config::LimitConfig& limit);

// Whole seconds a limited client should wait: rounded up, never 0.
std::uint64_t retry_after_seconds(std::chrono::milliseconds wait);

}  // namespace sluice::limit
