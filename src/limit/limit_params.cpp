#include "limit/limit_params.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::limit {

TokenBucketParams token_bucket_params(const config::LimitConfig& limit) {
    const double per_us = static_cast<double>(limit.per.count()) * 1000.0;
    const double rate = limit.rate > 0 ? limit.rate : 1.0;
    const auto interval = static_cast<std::int64_t>(std::llround(per_us / rate));
    return {std::max<std::int64_t>(interval, 1), static_cast<std::int64_t>(limit.burst)};
}

SlidingWindowParams sliding_window_params(const config::LimitConfig& limit) {
    return {static_cast<std::int64_t>(limit.limit),
            std::max<std::int64_t>(static_cast<std::int64_t>(limit.window.count()) * 1000, 1)};
}

}  // namespace sluice::limit
