#include "limit/rate_limit_headers.hpp"

#include <charconv>
#include <cmath>
#include <cstring>

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
    if (limit.algorithm == config::Algorithm::fixed_window && limit.calendar) {
        // A calendar window's nominal length (a day is 86400 s even when the clocks change;
        // a month is 30 days).
        switch (*limit.calendar) {
        case time::CalendarUnit::minute: return {limit.limit, 60};
        case time::CalendarUnit::hour: return {limit.limit, 3600};
        case time::CalendarUnit::day: return {limit.limit, 86400};
        case time::CalendarUnit::week: return {limit.limit, 7 * 86400};
        case time::CalendarUnit::month: return {limit.limit, 30 * 86400};
        }
    }
    if (limit.algorithm != config::Algorithm::token_bucket && limit.algorithm != config::Algorithm::leaky_bucket) {
        auto seconds = ceil_seconds(limit.window);
        return {limit.limit, seconds == 0 ? 1 : seconds};
    }
    // Time for `burst` tokens at rate/per: burst * per / rate.
    const double seconds = static_cast<double>(limit.burst) * (static_cast<double>(limit.per.count()) / 1000.0) / limit.rate;
    auto whole = static_cast<std::uint64_t>(std::ceil(seconds - 1e-9));
    return {limit.burst, whole == 0 ? 1 : whole};
}

namespace {

// "\"<name>\";<a>=<x>;<b>=<y>", written where it is kept (every response of a limited route
// carries two of these).
HeaderValue structured(std::string_view name, char a, std::uint64_t x, char b, std::uint64_t y) {
    char digits[2][24];
    const auto end_x = std::to_chars(digits[0], digits[0] + 24, x).ptr;
    const auto end_y = std::to_chars(digits[1], digits[1] + 24, y).ptr;
    const auto size_x = static_cast<std::size_t>(end_x - digits[0]);
    const auto size_y = static_cast<std::size_t>(end_y - digits[1]);
    HeaderValue out;
    char* p = out.overwrite(name.size() + 8 + size_x + size_y);
    *p++ = '"';
    std::memcpy(p, name.data(), name.size());
    p += name.size();
    *p++ = '"';
    *p++ = ';';
    *p++ = a;
    *p++ = '=';
    std::memcpy(p, digits[0], size_x);
    p += size_x;
    *p++ = ';';
    *p++ = b;
    *p++ = '=';
    std::memcpy(p, digits[1], size_y);
    return out;
}

// A number as a header value.
HeaderValue number(std::uint64_t n) {
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
    return HeaderValue(std::string_view(digits, static_cast<std::size_t>(end - digits)));
}

}  // namespace

HeaderValue rate_limit_policy(const config::LimitConfig& limit) {
    const auto [quota, window] = quota_and_window(limit);
    return structured(limit.name, 'q', quota, 'w', window);
}

HeaderList rate_limit_headers(std::span<const config::LimitConfig> limits, const Decision& decision,
                              config::HeaderStyle style, std::span<const HeaderValue> policies) {
    HeaderList out;
    if (style == config::HeaderStyle::none) return out;
    auto index = advertised_limit(decision);
    if (!index || *index >= limits.size() || *index >= decision.limits.size()) return out;
    const auto& limit = limits[*index];
    const auto& result = decision.limits[*index];
    const bool ietf = style == config::HeaderStyle::ietf || style == config::HeaderStyle::both;
    const bool legacy = style == config::HeaderStyle::legacy || style == config::HeaderStyle::both;
    const bool made = *index < policies.size();
    // (The window only goes into the policy: not worked out where that was made already.)
    const auto [quota, window] = made && !legacy ? std::pair<std::uint64_t, std::uint64_t>{0, 0} : quota_and_window(limit);
    out.reserve(6);  // room for Retry-After too
    // X-RateLimit-Reset: when the limit is back to its full quota (the contract's "seconds
    // until full quota"), on every response. t: when more quota is there: on a refusal, when
    // the refusing limit admits this request again, the same figure as Retry-After (draft-
    // ietf-httpapi-ratelimit-headers-10: "seconds until additional quota ... is made
    // available"); otherwise the same as X-RateLimit-Reset. On a refusal the full quota is
    // never sooner than Retry-After (a request costing more than the whole quota is refused
    // however full the limit is), and a concurrency limit's is Retry-After's figure: when all
    // its slots are free again waits on requests still running, not on a time.
    const bool refused = decision.limited_by == index;
    const std::uint64_t retry = refused ? retry_after_seconds(result.retry_after) : 0;
    std::uint64_t full = ceil_seconds(result.reset);
    if (refused) full = limit.algorithm == config::Algorithm::concurrency ? retry : std::max(full, retry);
    if (ietf) {
        const auto t = refused ? retry : full;
        out.emplace_back("RateLimit-Policy", made ? policies[*index] : structured(limit.name, 'q', quota, 'w', window));
        out.emplace_back("RateLimit", structured(limit.name, 'r', result.remaining, 't', t));
    }
    if (legacy) {
        out.emplace_back("X-RateLimit-Limit", number(quota));
        out.emplace_back("X-RateLimit-Remaining", number(result.remaining));
        out.emplace_back("X-RateLimit-Reset", number(full));
    }
    return out;
}

std::uint64_t retry_after_seconds(std::chrono::milliseconds wait) {
    auto seconds = ceil_seconds(wait);
    return seconds == 0 ? 1 : seconds;
}

}  // namespace sluice::limit
