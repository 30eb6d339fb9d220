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

// leaky_bucket: the token bucket's arithmetic (a "theoretical arrival time" per key: when the
// bucket is empty again), and how long an admitted request waits before it leaves.
struct LeakyBucketParams {
    std::int64_t interval_us = 1;  // per / rate: one request leaves the bucket per interval
    std::int64_t burst = 0;        // requests the bucket holds, the one leaving now included
    std::int64_t delay_us = 0;     // delay * interval: a request this far back in the bucket leaves at once
    std::int64_t max_wait_us = 0;  // a longer wait limits the request (burst * interval when unset)
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
// `may_wait` false: the instance holds server.max_waiting requests already, so a request that
// would wait is limited instead (max_wait 0; for a limit that holds_back only: a shadow limit
// never holds a request back, so it is asked as usual).
LeakyBucketParams leaky_bucket_params(const config::LimitConfig& limit, bool may_wait = true);

// A fixed_window limit's window length in microseconds; 0 for calendar windows.
std::int64_t fixed_window_us(const config::LimitConfig& limit);
// The fixed window holding `now_us` (microseconds of POSIX time): aligned to the epoch, or
// the calendar window of the limit's time zone.
WindowBounds fixed_window_at(const config::LimitConfig& limit, std::int64_t now_us);

// A leaky_bucket limit, enforced, that can hold a request back (not nodelay, a delay below
// burst - 1, a max_wait above 0).
bool holds_back(const config::LimitConfig& limit);

// A concurrency limit's lease in microseconds.
std::int64_t lease_us(const config::LimitConfig& limit);

// The most a request can take from `limit`: burst (token and leaky buckets), or limit.
std::uint64_t capacity_of(const config::LimitConfig& limit);

}  // namespace sluice::limit
