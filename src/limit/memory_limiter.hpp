// The same algorithms as lua/*.lua, in process (store.type: memory): same keys, same
// arithmetic, same all-or-nothing rule, same results. One per process, shared by workers.
//
// The keys are spread over `shard_count` shards by a hash of the key, each with its own
// lock and map; a decision locks the shards of its keys (one, for a route with one limit)
// for the whole decision. Workers deciding for different clients rarely meet on a lock.
// Keys whose state is empty again are swept a few at a time: every 64 decisions of a worker
// (16 while fewer than 4096 keys are held) it looks at up to 64 keys of one shard, going on
// where it stopped, and at the next shard once that one is done. O(1) per decision, and no
// decision waits for more than those 64 keys (a whole shard swept at once did: about 1,500
// keys at 100,000 held, some 150 µs, during which the sweeping worker's other requests and
// any other worker needing that shard waited).
//
// Bounded: each shard holds at most max_keys / shard_count keys (store.memory.max_keys), and
// the store at most bytes_per_key * max_keys bytes of keys and state (what an entry costs is
// counted as it is written: the key's text, the state's own memory, and a fixed part for the
// map's node and the recency links): keys are as long as clients make them (a header's value
// of 8 KB) and a sliding window holds a log. A shard past its share of keys, or any shard a
// decision locks while the store is past its bytes, evicts its least recently used keys (a
// decision that reads or writes a key makes it the most recent; the bytes are the whole
// store's, not a shard's share: one large key, a site-wide window's log, does not empty its
// shard), as nginx's limit_req zone does when full: an evicted key starts again from empty, so a full store trades exactness
// for bounded memory, and the keys it gives up first are those of clients idle the longest.
// Evictions are counted (evictions()) and logged, at most once every 10 s.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "limit/decision.hpp"
#include "limit/keyed_hash.hpp"
#include "limit/limit_key.hpp"

namespace sluice::limit {

class MemoryLimiter {
public:
    // Microseconds of POSIX time, like Redis TIME (fixed windows are aligned to the epoch and
    // the calendar). A clock set back makes the algorithms wait for it, as Redis's would.
    using Clock = std::function<std::int64_t()>;
    static std::int64_t wall_microseconds();

    static constexpr std::uint64_t default_max_keys = 400'000;
    // What max_keys allows per key in bytes, on average: 400,000 keys are about 100 MB.
    static constexpr std::size_t bytes_per_key = 256;
    explicit MemoryLimiter(std::string key_prefix, Clock clock = &wall_microseconds,
                           std::uint64_t max_keys = default_max_keys);
    // A reload may change the bound: a store over it evicts as keys are added.
    void set_max_keys(std::uint64_t max_keys);
    // Keys evicted (not expired) to stay within max_keys since start.
    std::uint64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }

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
    // Their bytes, as counted against the bound (keys, state, a fixed part per key).
    std::size_t bytes() const;

    static constexpr std::size_t shard_count = 64;

private:
    struct TokenBucket {
        // When the bucket is full again, and for a limit that keeps what was used
        // (LimitConfig::keeps_used) the interval (time for one token) it is counted in (else
        // 0: whatever interval reads it). Read under another interval (the client's plan
        // changed), what was used is kept (lua/token_bucket.lua). No initialisers here:
        // State, which holds this type first, must be default-constructible inside this class
        // already (Entry); a variant value-initialises it, so both start at 0.
        std::int64_t tat;
        std::int64_t interval;
    };
    struct SlidingWindow {
        // The admitted requests, ascending: log[first..], one entry per request. A vector whose
        // oldest entries are dropped by moving `first` (compacted once they are half of it): a
        // deque took a block of 512 bytes for a window of one request (1,400 bytes a key in
        // all), and erasing at a vector's front moved every entry of a large window.
        // A request of more than one unit is one entry too (a cost a client names must not make
        // it allocate or walk that many): `sums` then numbers the units, sums[i] being those of
        // log[0..i] together; empty while every entry is one unit (most limits: no more memory).
        std::vector<std::int64_t> log;
        std::vector<std::int64_t> sums;
        std::size_t first = 0;
        std::int64_t window_us = 1;

        std::span<const std::int64_t> times() const { return {log.data() + first, log.size() - first}; }
        // The units of times()[0..i).
        std::int64_t units_before(std::size_t i) const {
            if (sums.empty()) return static_cast<std::int64_t>(i);
            const std::int64_t start = first == 0 ? 0 : sums[first - 1];
            return (first + i == 0 ? 0 : sums[first + i - 1]) - start;
        }
        // The index in times() of the entry with which the units from index `from` on reach
        // `need` (>= 1); times().size() when they never do.
        std::size_t reaching(std::size_t from, std::int64_t need) const;
        void drop_oldest(std::size_t n);
        // At `index` of times(): a request of `units` at `time`.
        void insert(std::size_t index, std::int64_t units, std::int64_t time);
        // Up to `units` of the requests at `time` go; returns how many went.
        std::int64_t take_back(std::int64_t time, std::int64_t units);
        std::size_t bytes() const { return (log.capacity() + sums.capacity()) * sizeof(std::int64_t); }
    };
    struct FixedWindow {
        std::int64_t start = 0;  // the window this count belongs to
        std::int64_t end = 0;
        std::int64_t count = 0;
    };
    struct Concurrency {
        std::vector<std::pair<std::string, std::int64_t>> slots;  // owner token, lease end
    };
    // A limit's key banned (`ban`) until then; kept under the limit's key + ":ban", as in Redis.
    struct Ban {
        std::int64_t until = 0;
    };
    using State = std::variant<TokenBucket, SlidingWindow, FixedWindow, Concurrency, Ban>;
    // A key's state and its place in the shard's recency list (elements of an unordered_map
    // stay where they are, so the links are plain pointers).
    struct Entry {
        State state;
        Entry* newer = nullptr;
        Entry* older = nullptr;
        const std::string* key = nullptr;
        std::size_t bytes = 0;  // counted in its shard's bytes (account)
    };
    // A key with its hash worked out once: a decision picks the shard and finds the key in its
    // map with the same hash (the map looks it up by this, without hashing the text again).
    struct HashedKey {
        std::string_view text;
        std::size_t hash;
    };
    struct MapHash {
        using is_transparent = void;
        std::size_t operator()(std::string_view text) const { return KeyedHash{}(text); }
        std::size_t operator()(const HashedKey& key) const { return key.hash; }
    };
    struct MapEqual {
        using is_transparent = void;
        bool operator()(std::string_view a, std::string_view b) const { return a == b; }
        bool operator()(const HashedKey& a, std::string_view b) const { return a.text == b; }
        bool operator()(std::string_view a, const HashedKey& b) const { return a == b.text; }
    };
    using Map = std::unordered_map<std::string, Entry, MapHash, MapEqual>;  // keys hold what clients send

    struct alignas(64) Shard {
        mutable std::mutex mutex;
        Map states;
        Entry* newest = nullptr;
        Entry* oldest = nullptr;
        Entry* sweep_next = nullptr;  // the key the sweep looks at next (none: the oldest)
        std::size_t bytes = 0;        // the entries' bytes, as last counted
    };
    Shard& shard_of(const std::string& key) { return shard_of_hash(KeyedHash{}(key)); }
    Shard& shard_of_hash(std::size_t hash) { return shards_[hash % shard_count]; }
    // With the shard locked: the recency list kept with the map.
    static void link_newest(Shard& shard, Entry& entry);
    static void unlink(Shard& shard, Entry& entry);
    static void touch(Shard& shard, Entry& entry);
    static void erase(Shard& shard, Map::iterator it);
    static Entry& insert(Shard& shard, const std::string& key);
    // Counts the entry's bytes again (after its state was written).
    static void account(Shard& shard, Entry& entry);
    // Evicts the shard's least recently used keys past its share, and while `over` (the store's
    // bytes past its bound, lowered by what goes) is above 0, all but the `keep` most recent;
    // returns how many held state.
    std::uint64_t evict(Shard& shard, std::int64_t now, std::size_t keep, std::int64_t& over);
    // Whether a key's state is back to empty at `now` (as if Redis had expired the key).
    static bool is_empty(const State& state, std::int64_t now);
    static void give_back(State& state, const config::LimitConfig& limit, std::int64_t units, std::int64_t at,
                          std::int64_t now);
    // Counts a decision; every so often sweeps a few keys (see above).
    void count_decision(std::int64_t now);

    KeyPrefix key_prefix_;
    Clock clock_;
    std::array<Shard, shard_count> shards_;
    std::atomic<std::size_t> keys_{0};  // held, in all shards (as of their last change)
    std::atomic<std::uint64_t> tokens_made_{0};
    std::atomic<std::size_t> per_shard_;  // max_keys / shard_count, at least min_per_shard
    std::atomic<std::int64_t> max_bytes_;       // max_keys * bytes_per_key
    std::atomic<std::int64_t> bytes_{0};         // in all shards (as of their last change)
    std::atomic<std::uint64_t> max_keys_;
    std::atomic<std::uint64_t> evictions_{0};
    std::atomic<std::int64_t> evictions_logged_at_{0};  // wall µs of the last eviction log line
    // A decision touches at most a few keys of one shard (one per limit of a route), which
    // are then the shard's most recent: a share of at least this many never evicts them.
    static constexpr std::size_t min_per_shard = 64;
    static constexpr std::size_t sweep_batch = 64;  // keys a worker's sweep looks at in one go
};

}  // namespace sluice::limit
