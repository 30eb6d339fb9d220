// The time every access and summary line starts with: RFC 3339 with milliseconds, in UTC
// ("2026-11-25T19:40:01.123Z") or local time with its offset ("2026-11-25T20:40:01.123+01:00").
#pragma once

#include <chrono>
#include <string>

namespace sluice::observe {

void append_log_time(std::string& out, std::chrono::system_clock::time_point at, bool local);

std::string log_time(std::chrono::system_clock::time_point at, bool local);

}  // namespace sluice::observe
