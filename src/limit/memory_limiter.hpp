// The same algorithms as lua/*.lua, in process (store.type: memory): same keys, same
// arithmetic, same all-or-nothing rule, same results. One per process, shared by workers.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <variant>
#include <deque>
#include <vector>

#include "limit/decision.hpp"
#include "limit/limit_key.hpp"

namespace sluice::limit {

class MemoryLimiter {
public:
    // Microseconds of POSIX time, like Redis TIME (fixed windows are aligned to the epoch and
    // the calendar). A clock set back makes the algorithms wait for it, as Redis's would.
    using Clock = std::function<std::int64_t()>;
    static std::int64_t wall_microseconds();

    explicit MemoryLimiter(std::string key_prefix, Clock clock = &wall_microseconds);

    // Thread-safe. Decision::time_us is the clock's value. `inspect`: the state for this
    // key, taking nothing (every cost 0, no slot).
    Decision decide(const RouteLimits& route, const RequestKeyValues& request, bool inspect = false);
    // Deletes these keys' state; returns how many there were.
    std::int64_t reset(const std::vector<std::string>& keys);

    // Gives back (renew: renews the leases of) a request's concurrency slots. Thread-safe.
    void release(const Slots& slots);
    void renew(const Slots& slots);

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
    struct FixedWindow {
        std::int64_t start = 0;  // the window this count belongs to
        std::int64_t end = 0;
        std::int64_t count = 0;
    };
    struct Concurrency {
        std::vector<std::pair<std::string, std::int64_t>> slots;  // owner token, lease end
    };
    using State = std::variant<TokenBucket, SlidingWindow, FixedWindow, Concurrency>;

    void sweep(std::int64_t now);

    std::string key_prefix_;
    Clock clock_;
    mutable std::mutex mutex_;
    std::unordered_map<std::string, State> states_;
    std::size_t decisions_since_sweep_ = 0;
    std::uint64_t tokens_made_ = 0;
};

}  // namespace sluice::limit
