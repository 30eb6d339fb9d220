// Calendar windows across DST changes, month lengths, weeks and odd offsets.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "time/calendar.hpp"
#include "../support/time_zones.hpp"
#include "time/civil.hpp"

using namespace sluice::time;
using sluice::test::at;
using sluice::test::zone_named;

namespace {



constexpr std::int64_t hour = 3600;

}  // namespace

TEST_CASE("day windows: midnight to midnight on the zone's clock, 23 and 25 hours on DST days", "[time]") {
    const TimeZone berlin = zone_named("Europe/Berlin");
    // An ordinary winter day: local midnight is 23:00 UTC the day before.
    auto w = calendar_window(berlin, CalendarUnit::day, at(2026, 1, 15, 12));
    CHECK(w.start == at(2026, 1, 14, 23));
    CHECK(w.end == at(2026, 1, 15, 23));
    // 2026-03-29: 23 hours (local midnight CET to local midnight CEST).
    w = calendar_window(berlin, CalendarUnit::day, at(2026, 3, 29, 12));
    CHECK(w.start == at(2026, 3, 28, 23));
    CHECK(w.end == at(2026, 3, 29, 22));
    CHECK(w.end - w.start == 23 * hour);
    // 2026-10-25: 25 hours.
    w = calendar_window(berlin, CalendarUnit::day, at(2026, 10, 25, 1, 30));
    CHECK(w.start == at(2026, 10, 24, 22));
    CHECK(w.end == at(2026, 10, 25, 23));
    CHECK(w.end - w.start == 25 * hour);
    // The last second of a day and the first of the next.
    CHECK(calendar_window(berlin, CalendarUnit::day, at(2026, 10, 25, 22, 59, 59)).start == at(2026, 10, 24, 22));
    CHECK(calendar_window(berlin, CalendarUnit::day, at(2026, 10, 25, 23)).start == at(2026, 10, 25, 23));

    // New York: 2026-03-08 (spring) and 2026-11-01 (fall), at 2:00 local.
    const TimeZone new_york = zone_named("America/New_York");
    w = calendar_window(new_york, CalendarUnit::day, at(2026, 3, 8, 15));
    CHECK(w.start == at(2026, 3, 8, 5));
    CHECK(w.end - w.start == 23 * hour);
    w = calendar_window(new_york, CalendarUnit::day, at(2026, 11, 1, 15));
    CHECK(w.start == at(2026, 11, 1, 4));
    CHECK(w.end - w.start == 25 * hour);
}

TEST_CASE("day windows where the clock skips or repeats midnight (Chile)", "[time]") {
    const TimeZone santiago = zone_named("America/Santiago");
    // 2026-04-04 at "24:00" -03 (04-05 03:00 UTC) the clock goes from 23:59:59 back to 23:00
    // -04: Saturday's last hour shows twice and Saturday is 25 hours long; Sunday starts when
    // the clock first shows 00:00 (04:00 UTC).
    auto w = calendar_window(santiago, CalendarUnit::day, at(2026, 4, 5, 3, 30));  // local Sat 23:30 again
    CHECK(w.start == at(2026, 4, 4, 3));
    CHECK(w.end == at(2026, 4, 5, 4));
    CHECK(w.end - w.start == 25 * hour);
    CHECK(calendar_window(santiago, CalendarUnit::day, at(2026, 4, 5, 2, 30)).start == w.start);  // the first 23:30
    // 2026-09-05 at "24:00" -04 the clock jumps to 01:00 -03: midnight never shows; Sunday
    // starts at the jump (09-06 04:00 UTC) and is 23 hours long.
    w = calendar_window(santiago, CalendarUnit::day, at(2026, 9, 6, 12));
    CHECK(w.start == at(2026, 9, 6, 4));
    CHECK(w.end == at(2026, 9, 7, 3));
}

TEST_CASE("month windows: calendar months of 28 to 31 days", "[time]") {
    const TimeZone utc;
    struct Case {
        std::int64_t instant;
        std::int64_t start, end;
    };
    for (const Case& c : std::vector<Case>{
             {at(2026, 2, 14), at(2026, 2, 1), at(2026, 3, 1)},   // 28
             {at(2028, 2, 29, 23, 59, 59), at(2028, 2, 1), at(2028, 3, 1)},  // 29
             {at(2026, 4, 30, 12), at(2026, 4, 1), at(2026, 5, 1)},  // 30
             {at(2026, 12, 31, 23, 59, 59), at(2026, 12, 1), at(2027, 1, 1)},  // 31, over the year
             {at(2027, 1, 1), at(2027, 1, 1), at(2027, 2, 1)},
         }) {
        const auto w = calendar_window(utc, CalendarUnit::month, c.instant);
        CHECK(w.start == c.start);
        CHECK(w.end == c.end);
    }
    // In Berlin March 2026 is 31 days less the hour the clocks skip.
    const TimeZone berlin = zone_named("Europe/Berlin");
    const auto march = calendar_window(berlin, CalendarUnit::month, at(2026, 3, 15));
    CHECK(march.start == at(2026, 2, 28, 23));
    CHECK(march.end == at(2026, 3, 31, 22));
    CHECK(march.end - march.start == 31 * 24 * hour - hour);
}

TEST_CASE("week, hour and minute windows", "[time]") {
    const TimeZone utc;
    // Weeks start on Monday: 2026-11-25 is a Wednesday.
    auto w = calendar_window(utc, CalendarUnit::week, at(2026, 11, 25, 10));
    CHECK(w.start == at(2026, 11, 23));
    CHECK(w.end == at(2026, 11, 30));
    CHECK(calendar_window(utc, CalendarUnit::week, at(2026, 11, 29, 23, 59, 59)).end == at(2026, 11, 30));
    CHECK(calendar_window(utc, CalendarUnit::week, at(2026, 11, 30)).start == at(2026, 11, 30));
    // Weeks before the epoch too.
    CHECK(calendar_window(utc, CalendarUnit::week, at(1969, 12, 31)).start == at(1969, 12, 29));

    // Kolkata is +05:30: its hours start at half past UTC hours.
    const TimeZone kolkata = zone_named("Asia/Kolkata");
    w = calendar_window(kolkata, CalendarUnit::hour, at(2026, 6, 1, 10, 10));
    CHECK(w.start == at(2026, 6, 1, 9, 30));
    CHECK(w.end == at(2026, 6, 1, 10, 30));
    // Kathmandu +05:45, Chatham +12:45 in winter: minute windows are UTC minutes.
    const TimeZone chatham = zone_named("Pacific/Chatham");
    w = calendar_window(chatham, CalendarUnit::minute, at(2026, 6, 1, 10, 10, 31));
    CHECK(w.start == at(2026, 6, 1, 10, 10));
    CHECK(w.end == at(2026, 6, 1, 10, 11));

    // Berlin's fall-back hour: local 02:00..03:00 shows twice, one window of two hours.
    const TimeZone berlin = zone_named("Europe/Berlin");
    w = calendar_window(berlin, CalendarUnit::hour, at(2026, 10, 25, 0, 30));
    CHECK(w.start == at(2026, 10, 25, 0));
    CHECK(w.end == at(2026, 10, 25, 2));
    CHECK(calendar_window(berlin, CalendarUnit::hour, at(2026, 10, 25, 1, 30)).start == w.start);
    // Spring: local 01:00 CET (00:00 UTC) to 03:00 CEST (01:00 UTC) is one hour; then 03:00 on.
    w = calendar_window(berlin, CalendarUnit::hour, at(2026, 3, 29, 0, 30));
    CHECK(w.start == at(2026, 3, 29, 0));
    CHECK(w.end == at(2026, 3, 29, 1));
    CHECK(calendar_window(berlin, CalendarUnit::hour, at(2026, 3, 29, 1)).end == at(2026, 3, 29, 2));
}

TEST_CASE("calendar windows tile time: contiguous, non-empty, holding their instant", "[time]") {
    std::mt19937_64 random(99);
    for (const std::string name : {"Europe/Berlin", "America/Santiago", "Australia/Lord_Howe", "Asia/Kolkata",
                                   "America/St_Johns", "UTC"}) {
        const TimeZone zone = zone_named(name);
        for (const auto unit : {CalendarUnit::minute, CalendarUnit::hour, CalendarUnit::day, CalendarUnit::week,
                                CalendarUnit::month}) {
            for (int i = 0; i < 400; ++i) {
                const std::int64_t t = at(1995, 1, 1) + static_cast<std::int64_t>(random() % (50ull * 365 * 86400));
                const auto w = calendar_window(zone, unit, t);
                INFO(name << " unit " << static_cast<int>(unit) << " at " << t);
                REQUIRE(w.start <= t);
                REQUIRE(t < w.end);
                // The neighbours meet it exactly.
                REQUIRE(calendar_window(zone, unit, w.start - 1).end == w.start);
                REQUIRE(calendar_window(zone, unit, w.end).start == w.end);
                REQUIRE(calendar_window(zone, unit, w.end - 1).start == w.start);
            }
        }
    }
}
