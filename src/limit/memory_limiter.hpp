// The same two algorithms as lua/*.lua, in process (store.type: memory): same keys, same
// arithmetic, same all-or-nothing rule, same results. One per process, shared by workers.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <variant>
#include <deque>

#include "limit/decision.hpp"
#include "limit/limit_key.hpp"

namespace sluice::limit {

class MemoryLimiter {
public:
    // Microseconds on any fixed origin; must not go backwards.
    using Clock = std::function<std::int64_t()>;
    static std::int64_t steady_microseconds();

    explicit MemoryLimiter(std::string key_prefix, Clock clock = &steady_microseconds);

    // Thread-safe. Decision::time_us is the clock's value.
    Decision decide(const RouteLimits& route, const RequestKeyValues& request);

    // Keys held; a key whose state is back to empty goes at the next sweep.
    std::size_t size() const;

private:
    struct TokenBucket {
        std::int64_t tat = 0;  // when the bucket is full again
    };
    struct SlidingWindow {
        std::deque<std::int64_t> times;  // admitted requests, ascending
        std::int64_t window_us = 1;
    };
    using State = std::variant<TokenBucket, SlidingWindow>;

    void sweep(std::int64_t now);

    std::string key_prefix_;
    Clock clock_;
    mutable std::mutex mutex_;
    std::unordered_map<std::string, State> states_;
    std::size_t decisions_since_sweep_ = 0;
};

}  // namespace sluice::limit
