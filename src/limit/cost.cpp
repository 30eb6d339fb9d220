#include "limit/cost.hpp"

#include <algorithm>
#include <limits>

#include "limit/limit_params.hpp"

namespace sluice::limit {

std::uint64_t request_cost(const config::LimitConfig& limit, const RequestKeyValues& request) {
    if (limit.cost_header.empty()) return limit.cost;
    const auto value = request.header ? request.header(limit.cost_header) : std::nullopt;
    if (!value || value->empty()) return limit.default_cost;
    if (value->size() > 18) {
        const bool digits = std::all_of(value->begin(), value->end(), [](char c) { return c >= '0' && c <= '9'; });
        return digits ? std::numeric_limits<std::uint64_t>::max() : limit.default_cost;
    }
    std::uint64_t units = 0;
    for (const char c : *value) {
        if (c < '0' || c > '9') return limit.default_cost;
        units = units * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return units;
}

std::optional<std::size_t> cost_over_capacity(std::span<const config::LimitConfig> limits,
                                              const RequestKeyValues& request) {
    for (std::size_t i = 0; i < limits.size(); ++i) {
        if (limits[i].cost_header.empty()) continue;  // a fixed cost was checked with the config
        if (request_cost(limits[i], request) > capacity_of(limits[i])) return i;
    }
    return std::nullopt;
}

std::uint64_t bounded_cost(const config::LimitConfig& limit, const RequestKeyValues& request) {
    // A settle after the response was bounded when it was worked out (settled_units).
    if (limit.charges && limit.reports_cost()) return limit.cost;
    return std::min(request_cost(limit, request), capacity_of(limit) + 1);
}

std::uint64_t settled_units(const config::LimitConfig& limit, std::uint64_t reported) {
    if (limit.algorithm != config::Algorithm::token_bucket) return std::min(reported, capacity_of(limit));
    const auto interval = static_cast<std::uint64_t>(token_bucket_params(limit).interval_us);
    return std::min({reported, capacity_of(limit) * max_settled_capacities, max_debt_us / interval});
}

}  // namespace sluice::limit
