// Test support: zones from the system's tzdata, and instants written as UTC dates.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "time/civil.hpp"
#include "time/time_zone.hpp"

namespace sluice::test {

inline time::TimeZone zone_named(const std::string& name) {
    std::string error;
    auto zone = time::TimeZone::load(name, error);
    INFO(error);
    REQUIRE(zone);
    return *zone;
}

// Seconds of POSIX time at a UTC date and time.
inline std::int64_t at(std::int64_t y, int m, int d, int hh = 0, int mm = 0, int ss = 0) {
    return time::days_from_civil(y, m, d) * 86400 + hh * 3600 + mm * 60 + ss;
}

}  // namespace sluice::test
