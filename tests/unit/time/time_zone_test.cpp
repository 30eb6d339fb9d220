// TimeZone against the system's tzdata, with glibc's localtime_r as the oracle; the TZif and
// POSIX-rule readers against hand-made and hostile inputs.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <ctime>
#include <random>
#include <string>

#include "../support/time_zones.hpp"
#include "time/civil.hpp"
#include "time/time_zone.hpp"

using sluice::time::TimeZone;
using namespace sluice::time;
using sluice::test::at;
using sluice::test::zone_named;

namespace {


// glibc's answer for `utc` in zone `name` (changes TZ for the process: tests are single-threaded).
long glibc_offset(const std::string& name, std::int64_t utc) {
    setenv("TZ", (":" + name).c_str(), 1);
    tzset();
    const std::time_t t = static_cast<std::time_t>(utc);
    std::tm tm{};
    localtime_r(&t, &tm);
    return tm.tm_gmtoff;
}


// A version 2 TZif file: `transitions` (time, type) over `offsets`, then `footer`.
std::string tzif(const std::vector<std::pair<std::int64_t, unsigned char>>& transitions,
                 const std::vector<std::int32_t>& offsets, const std::string& footer, std::uint32_t leaps = 0) {
    auto u32 = [](std::string& s, std::uint32_t v) {
        for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    };
    auto i64 = [](std::string& s, std::int64_t v) {
        for (int i = 7; i >= 0; --i) s.push_back(static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff));
    };
    auto header = [&](std::string& s, std::uint32_t timecnt) {
        s += "TZif2";
        s.append(15, '\0');
        u32(s, 0);
        u32(s, 0);
        u32(s, leaps);
        u32(s, timecnt);
        u32(s, static_cast<std::uint32_t>(offsets.size()));
        u32(s, 4);
    };
    // The local time types and abbreviations, the same in both blocks.
    auto types = [&](std::string& s) {
        for (std::size_t i = 0; i < offsets.size(); ++i) {
            u32(s, static_cast<std::uint32_t>(offsets[i]));
            s += std::string(2, '\0');  // isdst, abbreviation index
        }
        s += std::string("UTC\0", 4);
    };
    std::string s;
    header(s, 0);  // an empty 32-bit block (as zic -b slim writes)
    types(s);
    for (std::uint32_t l = 0; l < leaps; ++l) u32(s, 0), u32(s, 0);
    header(s, static_cast<std::uint32_t>(transitions.size()));
    for (const auto& t : transitions) i64(s, t.first);
    for (const auto& t : transitions) s.push_back(static_cast<char>(t.second));
    types(s);
    for (std::uint32_t l = 0; l < leaps; ++l) i64(s, 0), u32(s, 0);
    s += "\n" + footer + "\n";
    return s;
}

}  // namespace

TEST_CASE("civil calendar arithmetic", "[time]") {
    CHECK(days_from_civil(1970, 1, 1) == 0);
    CHECK(days_from_civil(2000, 3, 1) == 11017);
    CHECK(days_from_civil(1969, 12, 31) == -1);
    for (std::int64_t d = -800000; d < 800000; d += 997) {
        const auto [y, m, dd] = civil_from_days(d);
        REQUIRE(days_from_civil(y, m, dd) == d);
    }
    CHECK(weekday_of(0) == 4);                           // Thursday
    CHECK(weekday_of(days_from_civil(2026, 11, 23)) == 1);  // a Monday
    CHECK(weekday_of(-1) == 3);
    CHECK(days_in_month(2024, 2) == 29);
    CHECK(days_in_month(2100, 2) == 28);
    CHECK(days_in_month(2000, 2) == 29);
    CHECK(floor_div(-1, 60) == -1);
    CHECK(floor_div(-60, 60) == -1);
    CHECK(floor_div(59, 60) == 0);
}

TEST_CASE("time zones agree with glibc from 1900 to 2200", "[time]") {
    const char* saved = std::getenv("TZ");
    const std::string saved_tz = saved ? saved : "";
    std::mt19937_64 random(20261125);
    for (const std::string name : {"Europe/Berlin", "America/New_York", "Australia/Sydney", "Asia/Kolkata",
                                   "America/Santiago", "Australia/Lord_Howe", "Asia/Kathmandu", "Europe/Dublin",
                                   "Africa/Casablanca", "Pacific/Chatham", "America/St_Johns", "UTC"}) {
        INFO(name);
        const TimeZone zone = zone_named(name);
        CHECK(zone.name() == name);
        // Random instants, and each side of every transition the zone lists.
        for (int i = 0; i < 3000; ++i) {
            const std::int64_t t = at(1901, 1, 1) + static_cast<std::int64_t>(random() % static_cast<std::uint64_t>(at(2199, 1, 1) - at(1901, 1, 1)));
            INFO("at " << t);
            REQUIRE(zone.offset_at(t) == glibc_offset(name, t));
        }
        for (const auto& tr : zone.transitions()) {
            if (tr.at < at(1901, 1, 1) || tr.at > at(2199, 1, 1)) continue;
            INFO("transition at " << tr.at);
            REQUIRE(zone.offset_at(tr.at) == glibc_offset(name, tr.at));
            REQUIRE(zone.offset_at(tr.at - 1) == glibc_offset(name, tr.at - 1));
        }
    }
    if (saved) setenv("TZ", saved_tz.c_str(), 1);
    else unsetenv("TZ");
    tzset();
}

TEST_CASE("first_reaching: the first instant the clock shows a local time", "[time]") {
    const TimeZone berlin = zone_named("Europe/Berlin");
    // Ordinary time: local 12:00 CET is 11:00 UTC.
    CHECK(berlin.first_reaching(at(2026, 1, 15, 12)) == at(2026, 1, 15, 11));
    // Spring forward 2026-03-29 at 01:00 UTC: local 02:00..03:00 never shows; 02:30 is first
    // reached when the clock jumps to 03:00.
    CHECK(berlin.first_reaching(at(2026, 3, 29, 2, 30)) == at(2026, 3, 29, 1));
    CHECK(berlin.first_reaching(at(2026, 3, 29, 3)) == at(2026, 3, 29, 1));
    CHECK(berlin.first_reaching(at(2026, 3, 29, 1, 59, 59)) == at(2026, 3, 29, 0, 59, 59));
    // Fall back 2026-10-25 at 01:00 UTC (03:00 CEST -> 02:00 CET): 02:30 shows twice; the first counts.
    CHECK(berlin.first_reaching(at(2026, 10, 25, 2, 30)) == at(2026, 10, 25, 0, 30));
    CHECK(berlin.first_reaching(at(2026, 10, 25, 3)) == at(2026, 10, 25, 2));

    // Every answer: the clock shows at least the time then, and never did a second before.
    std::mt19937_64 random(7);
    for (const std::string name : {"Europe/Berlin", "America/Santiago", "Australia/Lord_Howe"}) {
        const TimeZone zone = zone_named(name);
        for (int i = 0; i < 20000; ++i) {
            const std::int64_t local = at(1990, 1, 1) + static_cast<std::int64_t>(random() % (60ull * 365 * 86400));
            const std::int64_t t = zone.first_reaching(local);
            INFO(name << " local " << local << " -> " << t);
            REQUIRE(t + zone.offset_at(t) >= local);
            // No earlier instant within a day reaches it (offsets change by at most hours).
            for (std::int64_t back = 1; back <= 86400; back *= 3) REQUIRE(t - back + zone.offset_at(t - back) < local);
        }
    }
}

TEST_CASE("zone names are checked before any file is opened", "[time]") {
    for (const std::string& bad : std::vector<std::string>{"", "../etc/passwd", "/etc/passwd", "Europe//Berlin", "Europe/./Berlin",
                                  "Europe/Berlin/", "Europe/Ber lin", "Europe/Berlin\n", std::string(300, 'a')}) {
        INFO("'" << bad << "'");
        CHECK_FALSE(is_zone_name(bad));
        std::string error;
        CHECK_FALSE(TimeZone::load(bad, error));
        CHECK(error.find("is not a time zone name") != std::string::npos);
    }
    for (const std::string good : {"UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5", "EST5EDT"})
        CHECK(is_zone_name(good));
    std::string error;
    CHECK_FALSE(TimeZone::load("Mars/Olympus_Mons", error));
    CHECK(error.find("unknown time zone Mars/Olympus_Mons") != std::string::npos);
    CHECK_FALSE(TimeZone::load("leapseconds", error));  // a file in the directory, not TZif
    CHECK(error.find("not a TZif file") != std::string::npos);
    CHECK_FALSE(TimeZone::load("Europe", error));  // a directory
    CHECK(error.find("unknown time zone Europe") != std::string::npos);
    // UTC needs no file at all.
    setenv("TZDIR", "/nonexistent", 1);
    auto utc = TimeZone::load("UTC", error);
    unsetenv("TZDIR");
    REQUIRE(utc);
    CHECK(utc->offset_at(at(2026, 6, 1)) == 0);
    CHECK(utc->transitions().empty());
}

TEST_CASE("TZif files: well-formed ones read exactly", "[time]") {
    std::string error;
    // A fixed zone with no transitions: the footer says +05:30.
    auto fixed = TimeZone::from_tzif(tzif({}, {19800}, "<+0530>-5:30"), "test", error);
    INFO(error);
    REQUIRE(fixed);
    CHECK(fixed->offset_at(0) == 19800);
    CHECK(fixed->transitions().empty());
    // Two listed transitions, then the footer's rule takes over after the last one.
    auto ruled = TimeZone::from_tzif(tzif({{at(2000, 3, 26, 1), 1}, {at(2000, 10, 29, 1), 0}}, {3600, 7200},
                                          "CET-1CEST,M3.5.0,M10.5.0/3"),
                                     "test", error);
    REQUIRE(ruled);
    CHECK(ruled->offset_at(at(2000, 1, 1)) == 3600);
    CHECK(ruled->offset_at(at(2000, 7, 1)) == 7200);
    CHECK(ruled->offset_at(at(2150, 7, 1)) == 7200);
    CHECK(ruled->offset_at(at(2150, 3, 28, 0, 59, 59)) == 3600);  // last Sunday of March 2150 is the 29th
    CHECK(ruled->offset_at(at(2150, 3, 29, 0, 59, 59)) == 3600);
    CHECK(ruled->offset_at(at(2150, 3, 29, 1)) == 7200);
    // After 2200 the last offset holds.
    CHECK(ruled->offset_at(at(2300, 7, 1)) == ruled->offset_at(at(2300, 1, 1)));
}

TEST_CASE("TZif files: hostile ones are refused with a reason", "[time]") {
    const std::string good = tzif({{at(2000, 3, 26, 1), 1}}, {3600, 7200}, "CET-1CEST,M3.5.0,M10.5.0/3");
    struct Case {
        std::string bytes;
        std::string error;
    };
    std::string wrong_type = good;
    // The 64-bit block's only type index: before 2 local time types (6 bytes each), the
    // 4 bytes of abbreviations and the footer with its two newlines.
    const std::string footer = "CET-1CEST,M3.5.0,M10.5.0/3";
    wrong_type[wrong_type.size() - (footer.size() + 2) - 4 - 12 - 1] = 9;
    std::string huge_count = good;
    huge_count[36] = '\x7f';  // 32-bit block typecnt: 2^30 and more types
    const std::vector<Case> cases{
        {"", "not a TZif file"},
        {"TZif", "not a TZif file"},
        {"GIF89a" + std::string(100, '\0'), "not a TZif file"},
        {good.substr(0, 50), "truncated"},
        {good.substr(0, good.size() - 10), "footer"},
        {good.substr(0, good.size() - 1), "footer missing"},
        {tzif({{at(2001, 1, 1), 0}, {at(2000, 1, 1), 1}}, {0, 3600}, ""), "not ascending"},
        {tzif({{at(2001, 1, 1), 0}, {at(2001, 1, 1), 1}}, {0, 3600}, ""), "not ascending"},
        {tzif({}, {27 * 3600}, ""), "out of range"},
        {tzif({}, {0}, "", 1), "leap seconds"},
        {tzif({}, {0}, "CET-1CEST"), "daylight-saving dates"},
        {tzif({}, {0}, "CET-1CEST,M13.5.0,M10.5.0"), "daylight-saving dates"},
        {tzif({}, {0}, "CET-1CEST,M3.5.7,M10.5.0"), "daylight-saving dates"},
        {tzif({}, {0}, "CET-1CEST,J0,J365"), "daylight-saving dates"},
        {tzif({}, {0}, "CE-1"), "zone abbreviation"},
        {tzif({}, {0}, "CET-25"), "UTC offset"},
        {tzif({}, {0}, "CET-1CEST,M3.5.0/168,M10.5.0"), "daylight-saving dates"},
        {tzif({}, {0}, "CET-1CEST,M3.5.0,M10.5.0/3x"), "end of the rule"},
        {tzif({}, {0}, "CET-1 junk"), "daylight-saving abbreviation"},
        {wrong_type, "missing local time type"},
        {huge_count, "truncated"},
    };
    for (const auto& c : cases) {
        INFO("expecting '" << c.error << "'");
        std::string error;
        CHECK_FALSE(TimeZone::from_tzif(c.bytes, "hostile", error));
        CHECK(error.find(c.error) != std::string::npos);
    }
}

TEST_CASE("POSIX TZ rules", "[time]") {
    std::string error;
    // Southern hemisphere: summer spans the new year.
    auto sydney = TimeZone::from_posix_rule("AEST-10AEDT,M10.1.0,M4.1.0/3", error);
    REQUIRE(sydney);
    CHECK(sydney->offset_at(at(2030, 1, 15)) == 11 * 3600);
    CHECK(sydney->offset_at(at(2030, 7, 15)) == 10 * 3600);
    // Julian days (Feb 29 never counted) and zero-based days (counted).
    auto julian = TimeZone::from_posix_rule("AAA0BBB,J60/0,J300/0", error);
    REQUIRE(julian);
    CHECK(julian->offset_at(at(2028, 2, 29, 12)) == 0);     // leap year: J60 is March 1st
    CHECK(julian->offset_at(at(2028, 3, 1, 0, 0, 1)) == 3600);
    auto zero = TimeZone::from_posix_rule("AAA0BBB,59/0,300/0", error);
    REQUIRE(zero);
    CHECK(zero->offset_at(at(2028, 2, 29, 12)) == 3600);    // day 59 is Feb 29 in a leap year
    CHECK(zero->offset_at(at(2027, 2, 28, 12)) == 0);
    CHECK(zero->offset_at(at(2027, 3, 1, 12)) == 3600);
    // Daylight time all year (RFC 8536's example): always the daylight offset.
    auto always = TimeZone::from_posix_rule("EST5EDT,0/0,J365/25", error);
    INFO(error);
    REQUIRE(always);
    for (int y = 1990; y < 2100; y += 7) CHECK(always->offset_at(at(y, 6, 1)) == -4 * 3600);
    for (int y = 1990; y < 2100; y += 7) CHECK(always->offset_at(at(y, 1, 1, 12)) == -4 * 3600);
    // Negative times (Greenland's -01 rule).
    auto nuuk = TimeZone::from_posix_rule("<-02>2<-01>,M3.5.0/-1,M10.5.0/0", error);
    REQUIRE(nuuk);
    CHECK(nuuk->offset_at(at(2030, 7, 1)) == -3600);
    CHECK(nuuk->offset_at(at(2030, 12, 1)) == -7200);
}
