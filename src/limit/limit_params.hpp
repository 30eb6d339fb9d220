// A limit's config turned into the integer parameters both limiters use, in microseconds.
// Rounding happens here, once, so the Redis script and the memory limiter agree exactly.
#pragma once

#include <cstdint>

#include "config/config.hpp"

namespace sluice::limit {

struct TokenBucketParams {
    std::int64_t interval_us = 1;  // time to refill one token: per / rate, to the nearest us, >= 1
    std::int64_t burst = 0;        // capacity
};

struct SlidingWindowParams {
    std::int64_t limit = 0;      // requests per window
    std::int64_t window_us = 1;  // >= 1
};

// A fixed window: [start, end) in microseconds.
struct WindowBounds {
    std::int64_t start_us = 0;
    std::int64_t end_us = 1;
};

// rate <= 0 (rejected by config validation) is treated as 1 token per `per`.
TokenBucketParams token_bucket_params(const config::LimitConfig& limit);
SlidingWindowParams sliding_window_params(const config::LimitConfig& limit);

// A fixed_window limit's window length in microseconds; 0 for calendar windows.
std::int64_t fixed_window_us(const config::LimitConfig& limit);
// The fixed window holding `now_us` (microseconds of POSIX time): aligned to the epoch, or
// the calendar window of the limit's time zone.
WindowBounds fixed_window_at(const config::LimitConfig& limit, std::int64_t now_us);

// A concurrency limit's lease in microseconds.
std::int64_t lease_us(const config::LimitConfig& limit);

// The most a request can take from `limit`: burst, or limit.
std::uint64_t capacity_of(const config::LimitConfig& limit);

}  // namespace sluice::limit
