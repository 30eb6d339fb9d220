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
// so that no figure derived from it can overflow.
std::uint64_t bounded_cost(const config::LimitConfig& limit, const RequestKeyValues& request);

}  // namespace sluice::limit
