// Calendar windows (minute, hour, day, week, month) as a time zone's clock shows them.
//
// A window starts at the first instant the zone's clock shows its start (TimeZone::
// first_reaching) and ends where the next one starts. So a day is 23 or 25 hours long on the
// days the clocks change, a month is a calendar month, a week starts on Monday (ISO 8601),
// a day whose midnight the clock skips starts when the clock jumps past it, and an hour the
// clock shows twice is one window of two hours (as is the day whose last hour Chile's clock
// shows twice, going from 23:59:59 back to 23:00). Were a clock ever to go back over a
// window's start, the window would not start twice: the time shown again belongs to the new
// window. Windows are contiguous and never overlap.
#pragma once

#include <cstdint>

#include "time/time_zone.hpp"

namespace sluice::time {

enum class CalendarUnit { minute, hour, day, week, month };

// [start, end) in seconds of POSIX time.
struct Window {
    std::int64_t start = 0;
    std::int64_t end = 0;
};

// The window holding the instant `utc` (seconds).
Window calendar_window(const TimeZone& zone, CalendarUnit unit, std::int64_t utc);

}  // namespace sluice::time
