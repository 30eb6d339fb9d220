#include "limit/memory_limiter.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <span>

#include <boost/container/small_vector.hpp>

#include <spdlog/spdlog.h>

#include "limit/cost.hpp"
#include "limit/limit_params.hpp"

namespace sluice::limit {
namespace {

// Per-limit scratch of one decision: on the stack for routes of up to four limits.
template <class T>
using Small = boost::container::small_vector<T, 4>;

// What checking one limit found, before anything is written (cf. *.check in lua/).
struct Check {
    bool allowed = false;
    std::int64_t retry_us = 0;
    // token bucket
    std::int64_t tat = 0;
    std::int64_t next_tat = 0;
    std::int64_t tolerance = 0;
    std::int64_t interval = 1;
    std::int64_t cost = 1;
    std::int64_t wait_us = 0;  // leaky bucket: how long the request is held back
    // The state was read beyond an empty bucket, or in another interval: written as read
    // even when nothing is taken (lua/token_bucket.lua's read says why).
    bool rewrite = false;
    // sliding window, fixed window
    std::int64_t count = 0;
    std::optional<std::int64_t> newest;
    // fixed window
    std::int64_t start = 0;
    std::int64_t end = 0;
    // concurrency: the earliest and latest lease end of the slots counted
    std::int64_t first_end = 0;
    std::int64_t last_end = 0;
};

std::int64_t floor_div_nonneg(std::int64_t a, std::int64_t b) { return a <= 0 ? 0 : a / b; }

// A bucket's tat at `now`, read in `interval` (lua/token_bucket.lua's read(), the same sums,
// in the same floating-point steps, so that both stores decide alike): a tat counted in
// another interval `was` (0: the current one) keeps what was used, (tat - now) / was tokens;
// a bucket is never more than empty (tat at most now + tolerance).
// `uncapped`: a limit counted after the response keeps a tat beyond an empty bucket (its debt).
std::int64_t bucket_tat(std::int64_t tat, std::int64_t was, std::int64_t now, std::int64_t interval,
                        std::int64_t tolerance, bool uncapped) {
    if (tat <= now) return now;
    if (was != 0 && was != interval) {
        const double used_us = std::ceil(static_cast<double>(tat - now) * static_cast<double>(interval) /
                                         static_cast<double>(was));
        // (Compared as a double first: what was used may be far above any tolerance.)
        const double most = static_cast<double>(tolerance) + (uncapped ? static_cast<double>(max_debt_us) : 0.0);
        if (used_us >= most) return now + static_cast<std::int64_t>(most);
        return now + static_cast<std::int64_t>(used_us);
    }
    return std::min(tat, now + tolerance + (uncapped ? static_cast<std::int64_t>(max_debt_us) : 0));
}

}  // namespace

// A reservation's give-back (the *.give_back of lua/): `units` that a reservation took at
// `at` go back, as far as the state still holds them.
void MemoryLimiter::give_back(State& state, const config::LimitConfig& limit, std::int64_t units, std::int64_t at,
                              std::int64_t now) {
    if (auto* bucket = std::get_if<TokenBucket>(&state)) {
        const auto params = token_bucket_params(limit);
        const std::int64_t interval = params.interval_us;
        const std::int64_t tat = bucket_tat(bucket->tat, bucket->interval, now, interval, interval * params.burst, true);
        const std::int64_t back = std::max(tat - interval * units, now);
        if (back != tat) *bucket = TokenBucket{back, limit.keeps_used ? interval : 0};
    } else if (auto* fixed = std::get_if<FixedWindow>(&state)) {
        const auto window = fixed_window_at(limit, now);
        if (fixed->start != window.start_us || at < window.start_us || at >= window.end_us) return;
        fixed->count = std::max<std::int64_t>(fixed->count - units, 0);
    } else if (auto* sliding = std::get_if<SlidingWindow>(&state)) {
        if (at <= now - sliding_window_params(limit).window_us) return;  // they have left already
        sliding->take_back(at, units);
    }
}

std::size_t MemoryLimiter::SlidingWindow::reaching(std::size_t from, std::int64_t need) const {
    const std::size_t n = log.size() - first;
    if (sums.empty()) return static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(n),
                                                                             static_cast<std::int64_t>(from) + need - 1));
    const std::int64_t base = first == 0 ? 0 : sums[first - 1];
    const auto begin = sums.begin() + static_cast<std::ptrdiff_t>(first);
    const auto it = std::lower_bound(begin + static_cast<std::ptrdiff_t>(from), sums.end(),
                                     base + units_before(from) + need);
    return static_cast<std::size_t>(it - begin);
}

void MemoryLimiter::SlidingWindow::drop_oldest(std::size_t n) {
    first += n;
    if (first == log.size()) {
        log.clear();
        sums.clear();
        first = 0;
    } else if (first >= 32 && 2 * first >= log.size()) {
        const auto gone = static_cast<std::ptrdiff_t>(first);
        log.erase(log.begin(), log.begin() + gone);
        if (!sums.empty()) {
            const std::int64_t base = sums[first - 1];
            sums.erase(sums.begin(), sums.begin() + gone);
            for (auto& sum : sums) sum -= base;
            // Once every request of several units has left, the sums go (8 bytes a request).
            if (sums.back() == static_cast<std::int64_t>(sums.size())) sums = {};
        }
        first = 0;
    }
    if (log.capacity() > 64 && 4 * log.size() < log.capacity()) log.shrink_to_fit();
    if (sums.capacity() > 64 && 4 * sums.size() < sums.capacity()) sums.shrink_to_fit();
}

void MemoryLimiter::SlidingWindow::insert(std::size_t index, std::int64_t units, std::int64_t time) {
    const std::size_t at = first + index;
    const bool numbered = !sums.empty() || units != 1;
    if (numbered && sums.empty()) {
        sums.resize(log.size());
        for (std::size_t i = 0; i < sums.size(); ++i) sums[i] = static_cast<std::int64_t>(i) + 1;
    }
    log.insert(log.begin() + static_cast<std::ptrdiff_t>(at), time);
    if (!numbered) return;
    const std::int64_t before = at == 0 ? 0 : sums[at - 1];
    sums.insert(sums.begin() + static_cast<std::ptrdiff_t>(at), before + units);
    for (std::size_t i = at + 1; i < sums.size(); ++i) sums[i] += units;
}

std::int64_t MemoryLimiter::SlidingWindow::take_back(std::int64_t time, std::int64_t units) {
    const auto held = times();
    const auto [lo, hi] = std::equal_range(held.begin(), held.end(), time);
    const std::size_t a = first + static_cast<std::size_t>(lo - held.begin());
    const std::size_t b = first + static_cast<std::size_t>(hi - held.begin());
    if (sums.empty()) {
        const auto n = static_cast<std::ptrdiff_t>(std::min<std::int64_t>(static_cast<std::int64_t>(b - a), units));
        log.erase(log.begin() + static_cast<std::ptrdiff_t>(a), log.begin() + static_cast<std::ptrdiff_t>(a) + n);
        return n;
    }
    std::int64_t taken = 0;
    for (std::size_t j = b; j > a && taken < units; --j) {  // (requests of one instant are alike)
        const std::size_t i = j - 1;
        const std::int64_t own = sums[i] - (i == 0 ? 0 : sums[i - 1]);
        const std::int64_t take = std::min(own, units - taken);
        for (std::size_t k = i; k < sums.size(); ++k) sums[k] -= take;
        taken += take;
        if (take == own) {
            log.erase(log.begin() + static_cast<std::ptrdiff_t>(i));
            sums.erase(sums.begin() + static_cast<std::ptrdiff_t>(i));
        }
    }
    return taken;
}

std::int64_t MemoryLimiter::wall_microseconds() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

MemoryLimiter::MemoryLimiter(std::string key_prefix, Clock clock, std::uint64_t max_keys)
    : key_prefix_(key_prefix), clock_(std::move(clock)) {
    set_max_keys(max_keys);
}

void MemoryLimiter::set_max_keys(std::uint64_t max_keys) {
    max_keys_ = max_keys;
    per_shard_ = std::max<std::size_t>(static_cast<std::size_t>((max_keys + shard_count - 1) / shard_count), min_per_shard);
    max_bytes_ = static_cast<std::int64_t>(std::max<std::uint64_t>(max_keys, shard_count * min_per_shard) * bytes_per_key);
}

void MemoryLimiter::link_newest(Shard& shard, Entry& entry) {
    entry.newer = nullptr;
    entry.older = shard.newest;
    if (shard.newest) shard.newest->newer = &entry;
    shard.newest = &entry;
    if (!shard.oldest) shard.oldest = &entry;
}

void MemoryLimiter::unlink(Shard& shard, Entry& entry) {
    (entry.newer ? entry.newer->older : shard.newest) = entry.older;
    (entry.older ? entry.older->newer : shard.oldest) = entry.newer;
    entry.newer = entry.older = nullptr;
}

void MemoryLimiter::touch(Shard& shard, Entry& entry) {
    if (shard.newest == &entry) return;
    if (shard.sweep_next == &entry) shard.sweep_next = entry.newer;  // (it is looked at as the newest)
    unlink(shard, entry);
    link_newest(shard, entry);
}

void MemoryLimiter::erase(Shard& shard, Map::iterator it) {
    if (shard.sweep_next == &it->second) shard.sweep_next = it->second.newer;
    unlink(shard, it->second);
    shard.bytes -= it->second.bytes;
    shard.states.erase(it);
}

namespace {

// A string's memory beyond its object (libstdc++ keeps 15 bytes in place).
std::size_t text_bytes(const std::string& text) { return text.capacity() > 15 ? text.capacity() + 1 : 0; }

}  // namespace

void MemoryLimiter::account(Shard& shard, Entry& entry) {
    // The map's node (the key's object, the entry, the hash, the next pointer) and its bucket,
    // with the allocator's overhead: about what a token bucket with a short key measured.
    std::size_t bytes = 160 + text_bytes(*entry.key);
    if (const auto* window = std::get_if<SlidingWindow>(&entry.state)) {
        bytes += window->bytes();
    } else if (const auto* held = std::get_if<Concurrency>(&entry.state)) {
        bytes += held->slots.capacity() * sizeof(held->slots[0]);
        for (const auto& slot : held->slots) bytes += text_bytes(slot.first);
    }
    shard.bytes += bytes - entry.bytes;
    entry.bytes = bytes;
}

MemoryLimiter::Entry& MemoryLimiter::insert(Shard& shard, const std::string& key) {
    auto [it, inserted] = shard.states.try_emplace(key);
    if (inserted) {
        it->second.key = &it->first;
        link_newest(shard, it->second);
        account(shard, it->second);
    } else {
        touch(shard, it->second);
    }
    return it->second;
}

std::uint64_t MemoryLimiter::evict(Shard& shard, std::int64_t now, std::size_t keep, std::int64_t& over) {
    std::uint64_t evicted = 0;
    const std::size_t limit = per_shard_.load(std::memory_order_relaxed);
    // At most this many steps per decision: a reload that lowers the bound a lot is caught up
    // with over the next decisions, not in one long hold of the shard's lock. Over the bytes,
    // the `keep` most recent keys stay: they may be this decision's.
    std::size_t steps = 64;
    while ((shard.states.size() > limit || (over > 0 && shard.states.size() > keep)) && shard.oldest && steps-- > 0) {
        Entry& victim = *shard.oldest;
        // Slots held now are requests under way: forgetting them would let the concurrency
        // limit be exceeded, so such a key goes to the recent end instead.
        if (const auto* held = std::get_if<Concurrency>(&victim.state); held && !is_empty(victim.state, now)) {
            touch(shard, victim);
            continue;
        }
        if (!is_empty(victim.state, now)) ++evicted;  // an empty one was only waiting for the sweep
        over -= static_cast<std::int64_t>(victim.bytes);
        erase(shard, shard.states.find(*victim.key));
    }
    return evicted;
}

std::size_t MemoryLimiter::size() const {
    std::size_t total = 0;
    for (const auto& shard : shards_) {
        std::lock_guard lock(shard.mutex);
        total += shard.states.size();
    }
    return total;
}

std::size_t MemoryLimiter::bytes() const {
    std::size_t total = 0;
    for (const auto& shard : shards_) {
        std::lock_guard lock(shard.mutex);
        total += shard.bytes;
    }
    return total;
}

std::int64_t MemoryLimiter::reset(const std::vector<std::string>& keys) {
    std::int64_t deleted = 0;
    for (const auto& key : keys) {
        auto& shard = shard_of(key);
        std::lock_guard lock(shard.mutex);
        const auto found = shard.states.find(key);
        if (found == shard.states.end()) continue;
        bytes_ -= static_cast<std::int64_t>(found->second.bytes);
        erase(shard, found);
        keys_ -= 1;
        deleted += 1;
    }
    return deleted;
}

void MemoryLimiter::count_decision(std::int64_t now) {
    // Counted per thread: a counter shared by the workers would be a cache line every
    // decision of every worker writes. Each worker sweeps the shards in turn by its own count:
    // every `step` decisions it looks at up to sweep_batch keys of its current shard, from
    // where the last look at that shard stopped (oldest to newest), and goes on to the next
    // shard once the shard's list is done. A look is short (a whole shard of a large store
    // swept at once held its lock, and stalled its worker's other requests, for a long time);
    // one key looked at per decision on a store of 4096 keys or more, as many as four below.
    thread_local std::uint64_t decisions = 0;
    thread_local std::size_t current = 0;
    const std::uint64_t step = keys_.load(std::memory_order_relaxed) >= 4096 ? sweep_batch : sweep_batch / 4;
    if (++decisions % step != 0) return;
    auto& shard = shards_[current % shard_count];
    std::lock_guard lock(shard.mutex);
    std::size_t swept = 0, swept_bytes = 0;
    for (std::size_t looked = 0; looked < sweep_batch; ++looked) {
        Entry* entry = shard.sweep_next ? shard.sweep_next : shard.oldest;
        if (entry == nullptr) break;  // an empty shard
        shard.sweep_next = entry->newer;  // past it before it may be erased
        if (is_empty(entry->state, now)) {
            swept_bytes += entry->bytes;
            erase(shard, shard.states.find(*entry->key));
            ++swept;
        }
        if (shard.sweep_next == nullptr) break;  // the shard's list is done
    }
    if (shard.sweep_next == nullptr) ++current;
    keys_ -= swept;
    if (swept_bytes > 0) bytes_ -= static_cast<std::int64_t>(swept_bytes);
}

Decision MemoryLimiter::decide(const RouteLimits& route, const RequestKeyValues& request, bool inspect) {
    auto keys = build_limit_keys(key_prefix_, route, request);
    const std::size_t n = route.limits.size();
    // A route has a few limits: the per-limit scratch lives on the stack up to four.
    Small<Check> checks(n);
    std::vector<LimitResult> results(n);

    // The shard of each key; every shard involved is locked, in address order (no two
    // decisions can wait for each other), for the whole decision: all or nothing.
    Small<Shard*> shard(n, nullptr);
    // Each key's state where it exists: written through this pointer (an element of an
    // unordered_map stays where it is when the map grows), not looked up a second time.
    Small<State*> existing(n, nullptr);
    Small<Entry*> entries(n, nullptr);  // each key's entry, found or written: counted again after the writes
    auto written = [&](std::size_t i) -> State& {
        if (existing[i]) return *existing[i];
        Entry& entry = insert(*shard[i], *keys[i]);
        entries[i] = &entry;
        existing[i] = &entry.state;
        return entry.state;
    };
    Small<std::size_t> hashes(n, 0);
    Small<Shard*> locked;
    // A limit with a ban (not its charge): the key + ":ban" that holds the ban, and its shard.
    Small<std::string> ban_keys(n);
    Small<std::size_t> ban_hashes(n, 0);
    Small<Shard*> ban_shard(n, nullptr);
    for (std::size_t i = 0; i < n; ++i) {
        if (!keys[i]) continue;
        hashes[i] = KeyedHash{}(*keys[i]);
        shard[i] = &shard_of_hash(hashes[i]);
        if (std::find(locked.begin(), locked.end(), shard[i]) == locked.end()) locked.push_back(shard[i]);
        if (!route.limits[i].ban || route.limits[i].charges) continue;
        ban_keys[i] = ban_key(*keys[i]);
        ban_hashes[i] = KeyedHash{}(ban_keys[i]);
        ban_shard[i] = &shard_of_hash(ban_hashes[i]);
        if (std::find(locked.begin(), locked.end(), ban_shard[i]) == locked.end()) locked.push_back(ban_shard[i]);
    }
    std::sort(locked.begin(), locked.end());
    // Holds the shards' locks until unlock() or the end of the scope.
    class Locks {
    public:
        explicit Locks(std::span<Shard* const> shards) : shards_(shards) {
            for (auto* s : shards_) s->mutex.lock();
        }
        ~Locks() { unlock(); }
        void unlock() {
            for (auto* s : shards_) s->mutex.unlock();
            shards_ = {};
        }

    private:
        std::span<Shard* const> shards_;  // `locked`, which outlives it
    } locks(locked);
    std::size_t held_before = 0;  // (keys_ moves by held_after - held_before, either way)
    std::int64_t bytes_before = 0;  // (and bytes_ so)
    for (auto* s : locked) {
        held_before += s->states.size();
        bytes_before += static_cast<std::int64_t>(s->bytes);
    }
    const std::int64_t now = clock_();

    // A key banned now: refused at once, nothing else asked or written (lua/decide.lua). A
    // request that costs nothing in any limit (a look-up, a free route) is decided as usual,
    // and each limit banned then reads as refused by its ban (`bans_over`).
    for (std::size_t i = 0; i < n; ++i) results[i].shadow = route.limits[i].shadow;
    std::optional<std::size_t> banned;
    Small<std::int64_t> bans_over(n, 0);  // (the ban's end)
    std::optional<bool> costly;  // whether the request costs anything: asked once a ban is found
    auto costs = [&] {
        if (!costly) {
            costly = false;
            for (std::size_t j = 0; j < n && !inspect && !*costly; ++j)
                *costly = keys[j] && (route.limits[j].algorithm == config::Algorithm::concurrency ||
                                      bounded_cost(route.limits[j], request) > 0);
        }
        return *costly;
    };
    for (std::size_t i = 0; i < n && !banned; ++i) {
        if (!ban_shard[i]) continue;
        auto& states = ban_shard[i]->states;
        const auto found = states.find(HashedKey{ban_keys[i], ban_hashes[i]});
        if (found == states.end()) continue;
        const auto* ban = std::get_if<Ban>(&found->second.state);
        if (!ban || ban->until <= now) continue;
        touch(*ban_shard[i], found->second);
        if (!costs()) {
            bans_over[i] = ban->until;
            continue;
        }
        banned = i;
        LimitResult& r = results[i];
        r.applies = true;
        r.allowed = false;
        r.banned = true;
        r.retry_after = ceil_to_ms(ban->until - now);
        r.reset = r.retry_after;
    }

    // Check every limit without writing.
    bool admit = true;
    for (std::size_t i = 0; i < n && !banned; ++i) {
        const auto& limit = route.limits[i];
        results[i].shadow = limit.shadow;
        if (!keys[i]) continue;
        results[i].applies = true;
        Check& c = checks[i];
        c.cost = inspect ? 0 : static_cast<std::int64_t>(bounded_cost(limit, request));
        auto& states = shard[i]->states;
        const auto found_entry = states.find(HashedKey{*keys[i], hashes[i]});
        const State* found = nullptr;
        if (found_entry != states.end()) {
            // Read is use: a client being refused keeps its (exhausted) state longest.
            touch(*shard[i], found_entry->second);
            existing[i] = &found_entry->second.state;
            entries[i] = &found_entry->second;
            found = existing[i];
        }
        if (limit.refund_at_us > 0) {
            // A give-back after the response (lua/decide.lua, flags 5): the units go back
            // first, then the limit is reported as it stands.
            if (existing[i]) give_back(*existing[i], limit, c.cost, limit.refund_at_us, now);
            c.cost = 0;
        }
        if (limit.algorithm == config::Algorithm::token_bucket || limit.algorithm == config::Algorithm::leaky_bucket) {
            // A leaky bucket is the token bucket's tat with a wait (lua/token_bucket.lua).
            const auto params = leaky_bucket_params(limit, request.may_wait);
            c.interval = params.interval_us;
            c.tolerance = params.interval_us * params.burst;
            c.tat = now;
            if (found)
                if (const auto* bucket = std::get_if<TokenBucket>(found)) {
                    c.tat = bucket_tat(bucket->tat, bucket->interval, now, c.interval, c.tolerance, limit.keeps_debt());
                    const bool converted = bucket->interval != 0 && bucket->interval != c.interval;
                    c.rewrite = c.cost > 0 && bucket->tat > now && (converted || c.tat != bucket->tat);
                }
            c.next_tat = c.tat + c.interval * c.cost;
            const std::int64_t allow_at = c.next_tat - c.tolerance;
            c.allowed = allow_at <= now;
            c.retry_us = allow_at - now;
            if (limit.algorithm == config::Algorithm::leaky_bucket && c.cost > 0) {
                c.wait_us = std::max<std::int64_t>(c.tat - now - params.delay_us, 0);
                const std::int64_t over = c.wait_us - params.max_wait_us;
                if (over > 0) {
                    c.allowed = false;
                    c.retry_us = std::max(c.retry_us, over);
                }
            }
        } else if (limit.algorithm == config::Algorithm::concurrency) {
            c.cost = inspect ? 0 : 1;
            if (found)
                if (const auto* held = std::get_if<Concurrency>(found))
                    for (const auto& [token, end] : held->slots) {
                        if (end <= now) continue;
                        if (c.count == 0 || end < c.first_end) c.first_end = end;
                        if (c.count == 0 || end > c.last_end) c.last_end = end;
                        ++c.count;
                    }
            c.allowed = c.count + 1 <= static_cast<std::int64_t>(limit.limit);
            c.retry_us = std::clamp<std::int64_t>(c.first_end - now, 1, 1'000'000);
        } else if (limit.algorithm == config::Algorithm::fixed_window) {
            const auto window = fixed_window_at(limit, now);
            c.start = window.start_us;
            c.end = window.end_us;
            if (found)
                if (const auto* fixed = std::get_if<FixedWindow>(found))
                    if (fixed->start == c.start) c.count = fixed->count;
            c.allowed = c.count + c.cost <= static_cast<std::int64_t>(limit.limit);
            c.retry_us = c.end - now;
        } else {
            const auto params = sliding_window_params(limit);
            const SlidingWindow* window = nullptr;
            if (found) window = std::get_if<SlidingWindow>(found);
            std::size_t first_counted = 0;  // index of the oldest request still in the window
            if (window) {
                const auto times = window->times();
                first_counted = static_cast<std::size_t>(
                    std::upper_bound(times.begin(), times.end(), now - params.window_us) - times.begin());
                c.count = window->units_before(times.size()) - window->units_before(first_counted);
                if (c.count > 0) c.newest = times.back();
            }
            c.allowed = c.count + c.cost <= params.limit;
            if (!c.allowed) {
                // It fits once count + cost - limit of the counted units have left.
                const std::size_t leaving = window ? window->reaching(first_counted, c.count + c.cost - params.limit) : 0;
                c.retry_us = window && leaving < window->times().size()
                                 ? window->times()[leaving] + params.window_us - now
                                 : params.window_us;
            }
        }
        if (!c.allowed && !limit.shadow && !limit.charges) admit = false;
    }

    // Write all or nothing, then report.
    std::string token;
    Slots slots;
    for (std::size_t i = 0; i < n && !banned; ++i) {
        if (!results[i].applies) continue;
        const auto& limit = route.limits[i];
        const Check& c = checks[i];
        // A request of cost 0 takes nothing: reported as it stands. A counted limit is only
        // checked now; its charge after the response takes the cost whatever it holds.
        const bool consumed = limit.charges ? c.cost > 0 : admit && c.allowed && c.cost > 0 && !limit.counted();
        LimitResult& r = results[i];
        r.allowed = c.allowed;
        r.retry_after = ceil_to_ms(c.allowed ? 0 : c.retry_us);
        if (limit.algorithm == config::Algorithm::concurrency) {
            std::int64_t count = c.count;
            std::int64_t last_end = c.last_end;
            if (consumed) {
                State& state = written(i);
                if (!std::holds_alternative<Concurrency>(state)) state = Concurrency{};
                auto& held = std::get<Concurrency>(state).slots;
                std::erase_if(held, [now](const auto& slot) { return slot.second <= now; });
                if (token.empty()) token = "memory-" + std::to_string(++tokens_made_);
                const std::int64_t end = now + lease_us(limit);
                held.emplace_back(token, end);
                slots.keys.emplace_back(*keys[i], lease_us(limit));
                last_end = count == 0 ? end : std::max(last_end, end);
                ++count;
            }
            r.remaining = static_cast<std::uint64_t>(std::max<std::int64_t>(static_cast<std::int64_t>(limit.limit) - count, 0));
            r.reset = ceil_to_ms(count == 0 ? 0 : std::max<std::int64_t>(last_end - now, 0));
        } else if (limit.algorithm == config::Algorithm::fixed_window) {
            const std::int64_t count = consumed ? c.count + c.cost : c.count;
            if (consumed) written(i) = FixedWindow{c.start, c.end, count};
            r.remaining = static_cast<std::uint64_t>(std::max<std::int64_t>(static_cast<std::int64_t>(limit.limit) - count, 0));
            r.reset = ceil_to_ms(c.end - now);
        } else if (limit.algorithm == config::Algorithm::token_bucket ||
                   limit.algorithm == config::Algorithm::leaky_bucket) {
            if (consumed) r.wait = std::chrono::microseconds(c.wait_us);
            const std::int64_t tat = consumed ? c.next_tat : c.tat;
            if (consumed)
                written(i) = TokenBucket{c.next_tat, limit.keeps_used ? c.interval : 0};
            else if (c.rewrite && existing[i])
                *existing[i] = TokenBucket{c.tat, limit.keeps_used ? c.interval : 0};
            r.remaining = static_cast<std::uint64_t>(floor_div_nonneg(now + c.tolerance - tat, c.interval));
            r.reset = ceil_to_ms(tat - now);
        } else {
            const auto params = sliding_window_params(limit);
            if (consumed) {
                State& state = written(i);
                if (!std::holds_alternative<SlidingWindow>(state)) state = SlidingWindow{};
                auto& window = std::get<SlidingWindow>(state);
                window.window_us = params.window_us;
                auto times = window.times();
                window.drop_oldest(static_cast<std::size_t>(
                    std::upper_bound(times.begin(), times.end(), now - params.window_us) - times.begin()));
                times = window.times();
                window.insert(static_cast<std::size_t>(std::upper_bound(times.begin(), times.end(), now) - times.begin()),
                              c.cost, now);
                r.remaining = static_cast<std::uint64_t>(std::max<std::int64_t>(params.limit - c.count - c.cost, 0));
                r.reset = ceil_to_ms(params.window_us);
            } else {
                r.remaining = static_cast<std::uint64_t>(std::max<std::int64_t>(params.limit - c.count, 0));
                r.reset = ceil_to_ms(c.newest ? *c.newest + params.window_us - now : 0);
            }
        }
        // A refusal by a limit with a ban starts it, until the later of the ban and the
        // limit's own retry time (not from a look-up, asked at cost 0: it writes nothing).
        if (!admit && !c.allowed && ban_shard[i] && c.cost > 0) {
            // (A limit whose response reports its cost: the ban alone, as lua/decide.lua's "B".)
            const std::int64_t ban = std::chrono::duration_cast<std::chrono::microseconds>(*limit.ban).count();
            const std::int64_t length = limit.reports_cost() ? ban : std::max<std::int64_t>(ban, c.retry_us);
            insert(*ban_shard[i], ban_keys[i]).state = Ban{now + length};
            r.banned = true;
            r.retry_after = ceil_to_ms(length);
            r.reset = std::max(r.reset, ceil_to_ms(length));
        }
    }

    for (std::size_t i = 0; i < n; ++i) {
        if (bans_over[i] == 0) continue;
        LimitResult& r = results[i];  // (a look-up: the ban over what the limit holds)
        r.allowed = false;
        r.banned = true;
        r.remaining = 0;
        r.retry_after = ceil_to_ms(bans_over[i] - now);
        r.reset = std::max(r.reset, r.retry_after);
    }
    for (std::size_t i = 0; i < n; ++i)
        if (entries[i]) account(*shard[i], *entries[i]);
    std::int64_t written_bytes = 0;
    for (auto* s : locked) written_bytes += static_cast<std::int64_t>(s->bytes);
    std::int64_t over = bytes_.load(std::memory_order_relaxed) + (written_bytes - bytes_before) -
                        max_bytes_.load(std::memory_order_relaxed);
    std::uint64_t evicted = 0;
    for (auto* s : locked) evicted += evict(*s, now, 2 * n, over);  // (a key and its ban key per limit at most)
    std::size_t held_after = 0;
    std::int64_t bytes_after = 0;
    for (auto* s : locked) {
        held_after += s->states.size();
        bytes_after += static_cast<std::int64_t>(s->bytes);
    }
    // (Shared lines: written only when they change.)
    if (held_after != held_before) keys_ += held_after - held_before;
    if (bytes_after != bytes_before) bytes_ += bytes_after - bytes_before;
    locks.unlock();
    if (evicted > 0) {
        const auto total = evictions_.fetch_add(evicted, std::memory_order_relaxed) + evicted;
        const std::int64_t wall = wall_microseconds();
        auto last = evictions_logged_at_.load(std::memory_order_relaxed);
        if (wall - last >= 10'000'000 && evictions_logged_at_.compare_exchange_strong(last, wall))
            spdlog::warn("memory store full (store.memory.max_keys {}, or {} MB of keys and state): evicting the "
                         "least recently used keys, which start again from empty; {} evicted since start",
                         max_keys_.load(std::memory_order_relaxed),
                         max_keys_.load(std::memory_order_relaxed) * bytes_per_key / 1'000'000, total);
    }
    count_decision(now);
    auto decision = Decision::from_results(std::move(results), now, inspect);
    slots.token = std::move(token);
    decision.slots = std::move(slots);
    return decision;
}

void MemoryLimiter::release(const Slots& slots) {
    for (const auto& [key, lease] : slots.keys) {
        auto& shard = shard_of(key);
        std::lock_guard lock(shard.mutex);
        auto found = shard.states.find(key);
        if (found == shard.states.end()) continue;
        if (auto* held = std::get_if<Concurrency>(&found->second.state))
            std::erase_if(held->slots, [&](const auto& slot) { return slot.first == slots.token; });
    }
}

void MemoryLimiter::renew(const Slots& slots) {
    for (const auto& [key, lease] : slots.keys) {
        auto& shard = shard_of(key);
        std::lock_guard lock(shard.mutex);
        const std::int64_t now = clock_();
        auto found = shard.states.find(key);
        if (found == shard.states.end()) continue;
        if (auto* held = std::get_if<Concurrency>(&found->second.state))
            for (auto& slot : held->slots)
                if (slot.first == slots.token && slot.second > now) slot.second = now + lease;
    }
}

bool MemoryLimiter::is_empty(const State& state, std::int64_t now) {
    if (const auto* ban = std::get_if<Ban>(&state)) return ban->until <= now;
    if (const auto* bucket = std::get_if<TokenBucket>(&state)) return bucket->tat <= now;
    if (const auto* fixed = std::get_if<FixedWindow>(&state)) return fixed->end <= now;
    if (const auto* held = std::get_if<Concurrency>(&state))
        return std::all_of(held->slots.begin(), held->slots.end(), [now](const auto& slot) { return slot.second <= now; });
    const auto& window = std::get<SlidingWindow>(state);
    const auto times = window.times();
    return times.empty() || times.back() + window.window_us <= now;
}

}  // namespace sluice::limit
