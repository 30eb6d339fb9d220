#include "time/calendar.hpp"

#include "time/civil.hpp"

namespace sluice::time {
namespace {

constexpr std::int64_t day = 86400;

// The start of the unit holding local time `local` (seconds on the zone's clock).
std::int64_t unit_start(CalendarUnit unit, std::int64_t local) {
    switch (unit) {
    case CalendarUnit::minute: return floor_div(local, 60) * 60;
    case CalendarUnit::hour: return floor_div(local, 3600) * 3600;
    case CalendarUnit::day: return floor_div(local, day) * day;
    case CalendarUnit::week: {
        const std::int64_t days = floor_div(local, day);
        return (days - (weekday_of(days) + 6) % 7) * day;  // back to Monday
    }
    case CalendarUnit::month: {
        const auto [y, m, d] = civil_from_days(floor_div(local, day));
        (void)d;
        return days_from_civil(y, m, 1) * day;
    }
    }
    return local;
}

// The start of the unit after the one starting at `start` (local seconds).
std::int64_t next_start(CalendarUnit unit, std::int64_t start) {
    switch (unit) {
    case CalendarUnit::minute: return start + 60;
    case CalendarUnit::hour: return start + 3600;
    case CalendarUnit::day: return start + day;
    case CalendarUnit::week: return start + 7 * day;
    case CalendarUnit::month: {
        const auto [y, m, d] = civil_from_days(floor_div(start, day));
        (void)d;
        return (m == 12 ? days_from_civil(y + 1, 1, 1) : days_from_civil(y, m + 1, 1)) * day;
    }
    }
    return start;
}

}  // namespace

Window calendar_window(const TimeZone& zone, CalendarUnit unit, std::int64_t utc) {
    std::int64_t label = unit_start(unit, utc + zone.offset_at(utc));
    // first_reaching(label) <= utc, since the clock shows label or later at utc. A later unit
    // may have started already when the clock went back after reaching it.
    std::int64_t next = next_start(unit, label);
    std::int64_t next_begins = zone.first_reaching(next);
    while (next_begins <= utc) {
        label = next;
        next = next_start(unit, label);
        next_begins = zone.first_reaching(next);
    }
    return {zone.first_reaching(label), next_begins};
}

}  // namespace sluice::time
