// What a request takes from a limit: a fixed number of units, or the value of a header
// (`cost: header:NAME`). Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "config/config.hpp"
#include "limit/limit_key.hpp"

namespace sluice::limit {

// The units `request` takes from `limit`. A cost header's value counts when it is a whole
// number written in digits only (no sign, no spaces, at most 18 digits; more digits read as
// more than any capacity); absent or anything else: the limit's default_cost.
std::uint64_t request_cost(const config::LimitConfig& limit, const RequestKeyValues& request);

// The first limit whose cost header asks for more than the limit can ever hold (a 400: such
// a request could never pass). nullopt when every cost fits.
std::optional<std::size_t> cost_over_capacity(std::span<const config::LimitConfig> limits,
                                              const RequestKeyValues& request);

// The cost the limiters compute with: request_cost, at most capacity + 1 (which never fits),
// so that no figure derived from it can overflow. A settle after the response (a copy with
// `charges` of a limit whose response reports its cost): its `cost`, bounded already.
std::uint64_t bounded_cost(const config::LimitConfig& limit, const RequestKeyValues& request);

// What a response reports as a request's cost counts, for a token bucket, up to a thousand
// full buckets, and never more than a debt of max_debt_us; for a window up to its limit (a
// window past its limit refuses until the charge leaves it, whatever the excess). A larger
// report counts as that much, so no figure derived from it can overflow.
inline constexpr std::uint64_t max_settled_capacities = 1000;
// The most a token bucket owes past empty, in microseconds (about 17.8 years; lua/token_bucket.lua
// and the memory store read a larger debt as this much): tats stay far below 2^53.
inline constexpr std::uint64_t max_debt_us = std::uint64_t{1} << 49;
// A reported cost, bounded so.
std::uint64_t settled_units(const config::LimitConfig& limit, std::uint64_t reported);

}  // namespace sluice::limit
