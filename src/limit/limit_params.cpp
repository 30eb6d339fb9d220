#include "limit/limit_params.hpp"

#include <algorithm>
#include <cmath>

#include "time/civil.hpp"

namespace sluice::limit {

TokenBucketParams token_bucket_params(const config::LimitConfig& limit) {
    const double per_us = static_cast<double>(limit.per.count()) * 1000.0;
    const double rate = limit.rate > 0 ? limit.rate : 1.0;
    const auto interval = static_cast<std::int64_t>(std::llround(per_us / rate));
    return {std::max<std::int64_t>(interval, 1), static_cast<std::int64_t>(limit.burst)};
}

LeakyBucketParams leaky_bucket_params(const config::LimitConfig& limit, bool may_wait) {
    const auto bucket = token_bucket_params(limit);
    LeakyBucketParams params;
    params.interval_us = bucket.interval_us;
    params.burst = bucket.burst;
    const auto delay = limit.nodelay ? std::max<std::int64_t>(bucket.burst - 1, 0) : static_cast<std::int64_t>(limit.delay);
    params.delay_us = delay * bucket.interval_us;
    params.max_wait_us = bucket.interval_us * bucket.burst;
    if (limit.max_wait)
        params.max_wait_us = std::min(params.max_wait_us, static_cast<std::int64_t>(limit.max_wait->count()) * 1000);
    if (!may_wait && holds_back(limit)) params.max_wait_us = 0;
    return params;
}

SlidingWindowParams sliding_window_params(const config::LimitConfig& limit) {
    return {static_cast<std::int64_t>(limit.limit),
            std::max<std::int64_t>(static_cast<std::int64_t>(limit.window.count()) * 1000, 1)};
}

std::int64_t fixed_window_us(const config::LimitConfig& limit) {
    if (limit.calendar) return 0;
    return std::max<std::int64_t>(static_cast<std::int64_t>(limit.window.count()) * 1000, 1);
}

WindowBounds fixed_window_at(const config::LimitConfig& limit, std::int64_t now_us) {
    if (limit.calendar) {
        static const time::TimeZone utc;
        const time::TimeZone& zone = limit.time_zone ? *limit.time_zone : utc;
        const auto window = time::calendar_window(zone, *limit.calendar, time::floor_div(now_us, 1'000'000));
        return {window.start * 1'000'000, window.end * 1'000'000};
    }
    const std::int64_t every = fixed_window_us(limit);
    const std::int64_t start = now_us - (now_us % every + every) % every;
    return {start, start + every};
}

bool holds_back(const config::LimitConfig& limit) {
    if (limit.algorithm != config::Algorithm::leaky_bucket || limit.shadow || limit.nodelay) return false;
    if (limit.delay + 1 >= limit.burst) return false;  // the whole burst passes at once
    return !limit.max_wait || limit.max_wait->count() > 0;
}

std::int64_t lease_us(const config::LimitConfig& limit) {
    return std::max<std::int64_t>(static_cast<std::int64_t>(limit.lease.count()) * 1000, 1);
}

std::uint64_t capacity_of(const config::LimitConfig& limit) {
    const bool bucket =
        limit.algorithm == config::Algorithm::token_bucket || limit.algorithm == config::Algorithm::leaky_bucket;
    return bucket ? limit.burst : limit.limit;
}

}  // namespace sluice::limit
