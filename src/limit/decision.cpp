#include "limit/decision.hpp"

#include <utility>

namespace sluice::limit {

bool Decision::shadow_limited() const {
    for (const auto& limit : limits)
        if (limit.applies && limit.shadow && !limit.allowed) return true;
    return false;
}

Decision Decision::from_results(std::vector<LimitResult> limits, std::int64_t time_us) {
    Decision decision;
    decision.time_us = time_us;
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

Decision Decision::store_failure(std::string error) {
    Decision decision;
    decision.outcome = Outcome::store_error;
    decision.error = std::move(error);
    return decision;
}

}  // namespace sluice::limit
