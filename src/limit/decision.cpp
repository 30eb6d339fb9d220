#include "limit/decision.hpp"

#include <algorithm>
#include <utility>

namespace sluice::limit {

bool Decision::shadow_limited() const {
    for (const auto& limit : limits)
        if (limit.applies && limit.shadow && !limit.allowed) return true;
    return false;
}

Decision Decision::from_results(std::vector<LimitResult> limits, std::int64_t time_us, bool inspected) {
    Decision decision;
    decision.time_us = time_us;
    for (std::size_t i = 0; i < limits.size(); ++i) {
        if (!limits[i].applies || !limits[i].banned) continue;
        for (std::size_t j = 0; j < limits.size(); ++j)
            if (j != i && !inspected) limits[j] = LimitResult{false, limits[j].shadow};
        limits[i].allowed = false;
        decision.outcome = Outcome::limited;
        decision.limited_by = i;
        decision.limits = std::move(limits);
        return decision;
    }
    for (std::size_t i = 0; i < limits.size(); ++i) {
        if (limits[i].applies && !limits[i].shadow && !limits[i].allowed) {
            decision.outcome = Outcome::limited;
            decision.limited_by = i;
            break;
        }
    }
    decision.limits = std::move(limits);
    return decision;
}

std::chrono::microseconds Decision::wait() const {
    std::chrono::microseconds longest{0};
    if (outcome != Outcome::allowed) return longest;
    for (const auto& r : limits)
        if (r.applies && !r.shadow && r.allowed) longest = std::max(longest, r.wait);
    return longest;
}

Decision Decision::store_failure(std::string error) {
    Decision decision;
    decision.outcome = Outcome::store_error;
    decision.error = std::move(error);
    return decision;
}

}  // namespace sluice::limit
