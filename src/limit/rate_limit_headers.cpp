#include "limit/rate_limit_headers.hpp"

#include <cmath>

namespace sluice::limit {

namespace {

std::uint64_t ceil_seconds(std::chrono::milliseconds ms) {
    return ms.count() <= 0 ? 0 : static_cast<std::uint64_t>((ms.count() + 999) / 1000);
}

}  // namespace

std::optional<std::size_t> advertised_limit(const Decision& decision) {
    if (decision.limited_by) return decision.limited_by;
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < decision.limits.size(); ++i) {
        const auto& r = decision.limits[i];
        if (!r.applies || r.shadow) continue;
        if (!best) {
            best = i;
            continue;
        }
        const auto& b = decision.limits[*best];
        if (r.remaining < b.remaining || (r.remaining == b.remaining && r.reset > b.reset)) best = i;
    }
    return best;
}

std::pair<std::uint64_t, std::uint64_t> quota_and_window(const config::LimitConfig& limit) {
    if (limit.algorithm == config::Algorithm::sliding_window) {
        auto seconds = ceil_seconds(limit.window);
        return {limit.limit, seconds == 0 ? 1 : seconds};
    }
    // Time for `burst` tokens at rate/per: burst * per / rate.
    const double seconds = static_cast<double>(limit.burst) * (static_cast<double>(limit.per.count()) / 1000.0) / limit.rate;
    auto whole = static_cast<std::uint64_t>(std::ceil(seconds - 1e-9));
    return {limit.burst, whole == 0 ? 1 : whole};
}

HeaderList rate_limit_headers(const config::RouteConfig& route, const Decision& decision, config::HeaderStyle style) {
    HeaderList out;
    if (style == config::HeaderStyle::none) return out;
    auto index = advertised_limit(decision);
    if (!index || *index >= route.limits.size() || *index >= decision.limits.size()) return out;
    const auto& limit = route.limits[*index];
    const auto& result = decision.limits[*index];
    auto [quota, window] = quota_and_window(limit);
    auto reset = ceil_seconds(result.reset);
    if (style == config::HeaderStyle::ietf || style == config::HeaderStyle::both) {
        out.emplace_back("RateLimit-Policy", "\"" + limit.name + "\";q=" + std::to_string(quota) + ";w=" + std::to_string(window));
        out.emplace_back("RateLimit", "\"" + limit.name + "\";r=" + std::to_string(result.remaining) + ";t=" + std::to_string(reset));
    }
    if (style == config::HeaderStyle::legacy || style == config::HeaderStyle::both) {
        out.emplace_back("X-RateLimit-Limit", std::to_string(quota));
        out.emplace_back("X-RateLimit-Remaining", std::to_string(result.remaining));
        out.emplace_back("X-RateLimit-Reset", std::to_string(reset));
    }
    return out;
}

std::uint64_t retry_after_seconds(std::chrono::milliseconds wait) {
    auto seconds = ceil_seconds(wait);
    return seconds == 0 ? 1 : seconds;
}

}  // namespace sluice::limit
