#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "config/duration.hpp"

using sluice::config::Duration;
using sluice::config::format_duration;
using sluice::config::parse_duration;

namespace {

struct ParseCase {
    std::string input;
    long long milliseconds;
};

struct FormatCase {
    long long milliseconds;
    std::string expected;
};

}  // namespace

TEST_CASE("duration: valid durations parse to milliseconds", "[config][duration]") {
    const std::vector<ParseCase> cases{
        {"250ms", 250},       {"10s", 10'000},     {"5m", 300'000},  {"1h", 3'600'000},
        {"1d", 86'400'000},   {"0", 0},            {"0s", 0},        {"0ms", 0},
        {"1500ms", 1500},     {"007s", 7000},      {"90m", 5'400'000},
        {"106751991167d", 106751991167LL * 86'400'000},  // the largest whole number of days
    };
    for (const auto& c : cases) {
        CAPTURE(c.input);
        const auto parsed = parse_duration(c.input);
        REQUIRE(parsed);
        CHECK(parsed->count() == c.milliseconds);
    }
}

TEST_CASE("duration: anything else is refused", "[config][duration]") {
    const std::vector<std::string> cases{
        "",    "10",   "s",     "ms",    "1.5s", "-1s",   "+1s",   " 1s",  "1s ",  "1 s",
        "1S",  "1MS",  "1sec",  "1m30s", "1y",   "1w",    "0x10s", "1us",  "00",   "s1",
        "106751991168d",  // overflows 64-bit milliseconds
        "99999999999999999999ms",
    };
    for (const auto& input : cases) {
        CAPTURE(input);
        CHECK_FALSE(parse_duration(input));
    }
}

TEST_CASE("duration: formatting picks the largest exact unit", "[config][duration]") {
    const std::vector<FormatCase> cases{
        {0, "0s"},          {1, "1ms"},        {250, "250ms"},     {1000, "1s"},
        {1500, "1500ms"},   {60'000, "1m"},    {90'000, "90s"},    {3'600'000, "1h"},
        {5'400'000, "90m"}, {86'400'000, "1d"}, {172'800'000, "2d"}, {-2000, "-2s"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.milliseconds);
        CHECK(format_duration(Duration{c.milliseconds}) == c.expected);
    }
}

TEST_CASE("duration: formatting round-trips through parsing", "[config][duration]") {
    for (long long ms : {0LL, 1LL, 999LL, 1000LL, 61'000LL, 3'600'000LL, 86'400'001LL, 7 * 86'400'000LL}) {
        CAPTURE(ms);
        const auto parsed = parse_duration(format_duration(Duration{ms}));
        REQUIRE(parsed);
        CHECK(parsed->count() == ms);
    }
}
