// The same algorithms as lua/*.lua, in process (store.type: memory): same keys, same
// arithmetic, same all-or-nothing rule, same results. One per process, shared by workers.
//
// The keys are spread over `shard_count` shards by a hash of the key, each with its own
// lock and map; a decision locks the shards of its keys (one, for a route with one limit)
// for the whole decision. Workers deciding for different clients rarely meet on a lock.
// Keys whose state is empty again are swept one shard at a time, the shards in turn, a
// whole round of them every max(1024, keys held) decisions of a worker: amortised O(1) per
// decision, and a sweep holds one shard, a small part of the keys, for a short time.
#pragma once

#include <array>
#include <atomic>
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

    // Keys held; a key whose state is back to empty goes at the next sweep of its shard.
    std::size_t size() const;

    static constexpr std::size_t shard_count = 64;

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

    struct alignas(64) Shard {
        mutable std::mutex mutex;
        std::unordered_map<std::string, State> states;
    };
    Shard& shard_of(const std::string& key);
    // Whether a key's state is back to empty at `now` (as if Redis had expired the key).
    static bool is_empty(const State& state, std::int64_t now);
    // Counts a decision; every so often sweeps the next shard (see above).
    void count_decision(std::int64_t now);

    std::string key_prefix_;
    Clock clock_;
    std::array<Shard, shard_count> shards_;
    std::atomic<std::size_t> keys_{0};  // held, in all shards (as of their last change)
    std::atomic<std::uint64_t> tokens_made_{0};
};

}  // namespace sluice::limit
