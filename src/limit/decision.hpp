// The outcome of rate limiting one request: per limit, and for the route as a whole.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::limit {

// One limit of the route, for one request.
struct LimitResult {
    bool applies = false;  // false: a header its key names is absent; nothing else is meaningful
    bool shadow = false;   // copied from the limit's config
    bool allowed = true;   // this limit alone admits the request (shadow limits too)
    std::uint64_t remaining = 0;                // after this request (a rejected one takes nothing)
    std::chrono::milliseconds retry_after{0};  // !allowed: until this limit admits, rounded up
    std::chrono::milliseconds reset{0};        // until this limit is back to its full quota, rounded up
    std::chrono::microseconds wait{0};         // allowed by a leaky bucket: hold the request this long
    // Refused by a ban (`ban`) on its key, this request's refusal having started it or not:
    // retry_after is when the ban ends (or the limit has room, if later).
    bool banned = false;
};

// The concurrency slots a request holds while it runs: given back (Store::release) when its
// response has been sent or its client went away, renewed (Store::renew) while it runs
// longer than a third of the shortest lease.
struct Slots {
    std::string token;  // the request's owner token: the member its slots are
    std::vector<std::pair<std::string, std::int64_t>> keys;  // key, lease in microseconds
    bool empty() const { return keys.empty(); }
};

struct Decision {
    enum class Outcome {
        allowed,     // forward: every enforced limit that applies admits it
        limited,     // reject: `limited_by` names the first enforced limit that rejected
        store_error  // the store could not decide in time (down, timeout, error reply)
    };
    Outcome outcome = Outcome::allowed;
    std::optional<std::size_t> limited_by;  // index into the route's limits
    std::vector<LimitResult> limits;         // one per limit of the route, in order; empty on store_error
    // When it was decided, on the store's clock (Redis TIME, or the memory limiter's clock),
    // in microseconds; 0 when nothing was asked (no limit applied, or store_error).
    std::int64_t time_us = 0;
    std::string error;         // store_error: what went wrong
    // The slots the request took (allowed), or may have taken (store_error: the call may
    // have run after its deadline; giving back a slot that is not there does nothing).
    Slots slots;

    // Some shadow limit would have rejected the request.
    bool shadow_limited() const;
    // An allowed request waits this long before it is forwarded: the longest wait of its
    // enforced leaky buckets (shadow limits never hold a request back).
    std::chrono::microseconds wait() const;

    // Builds the route-level decision from per-limit results. A banned limit decides alone:
    // the others were not asked (their results no longer apply), but in an inspection
    // (`inspected`: the admin's look-up, which costs nothing), where they were.
    static Decision from_results(std::vector<LimitResult> limits, std::int64_t time_us, bool inspected = false);
    static Decision store_failure(std::string error);
};

// Rounds a non-negative duration in microseconds up to whole milliseconds.
constexpr std::chrono::milliseconds ceil_to_ms(std::int64_t microseconds) {
    return std::chrono::milliseconds(microseconds <= 0 ? 0 : (microseconds + 999) / 1000);
}

}  // namespace sluice::limit
