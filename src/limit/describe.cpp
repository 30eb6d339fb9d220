#include "limit/describe.hpp"

#include <fmt/format.h>

#include "config/duration.hpp"
#include "config/value_syntax.hpp"

namespace sluice::limit {

namespace {

std::string_view calendar_name(time::CalendarUnit unit) {
    switch (unit) {
    case time::CalendarUnit::minute: return "minute";
    case time::CalendarUnit::hour: return "hour";
    case time::CalendarUnit::day: return "day";
    case time::CalendarUnit::week: return "week";
    case time::CalendarUnit::month: return "month";
    }
    return "?";
}

std::string key_text(const config::LimitConfig& limit) {
    if (limit.key.empty()) return "one counter for all";
    std::string out = "per ";
    for (std::size_t i = 0; i < limit.key.size(); ++i) {
        if (i > 0) out += '+';
        out += config::key_part_text(limit.key[i]);
    }
    return out;
}

}  // namespace

std::string describe_limit(const config::LimitConfig& limit) {
    std::string out;
    switch (limit.algorithm) {
    case config::Algorithm::token_bucket:
        out = fmt::format("{:g} per {}, burst {}", limit.rate, config::format_duration(limit.per), limit.burst);
        break;
    case config::Algorithm::leaky_bucket:
        out = fmt::format("{:g} per {}, burst {}", limit.rate, config::format_duration(limit.per), limit.burst);
        if (limit.nodelay) out += ", nodelay";
        else if (limit.delay > 0) out += fmt::format(", delay {}", limit.delay);
        break;
    case config::Algorithm::sliding_window:
        out = fmt::format("{} per {} (sliding)", limit.limit, config::format_duration(limit.window));
        break;
    case config::Algorithm::fixed_window:
        if (limit.calendar)
            out = fmt::format("{} per {} ({})", limit.limit, calendar_name(*limit.calendar),
                              limit.time_zone ? limit.time_zone->name() : "UTC");
        else
            out = fmt::format("{} per {}", limit.limit, config::format_duration(limit.window));
        break;
    case config::Algorithm::concurrency: out = fmt::format("{} in flight", limit.limit); break;
    }
    out += ", " + key_text(limit);
    if (limit.reports_cost())
        out += fmt::format(", cost from the response {} {}, reserve {}",
                           limit.response_cost_trailer ? "trailer" : "header", limit.response_cost_field, limit.cost);
    else if (!limit.cost_header.empty())
        out += ", cost header:" + limit.cost_header;
    else if (limit.cost != 1)
        out += fmt::format(", cost {}", limit.cost);
    if (limit.counted()) {
        out += ", counts statuses ";
        for (std::size_t i = 0; i < limit.count_statuses.size(); ++i) {
            const auto& range = limit.count_statuses[i];
            if (i > 0) out += ",";
            if (range.first == range.last) out += std::to_string(range.first);
            else out += fmt::format("{}xx", range.first / 100);
        }
    }
    if (limit.ban) out += ", ban " + config::format_duration(*limit.ban);
    if (limit.shadow) out += ", shadow";
    return out;
}

}  // namespace sluice::limit
