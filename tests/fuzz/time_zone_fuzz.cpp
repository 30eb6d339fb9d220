// libFuzzer target: TZif files and POSIX TZ rules, as a configuration's `time_zone` reads them.
// Sources: src/time/time_zone.cpp, src/time/calendar.cpp.
//
// The input is a TZif file (and, from its first line, a POSIX rule). Whatever parses must
// behave: offsets within +-26 h, transitions ascending and changing the offset,
// first_reaching consistent with offset_at, and calendar windows that hold their instant.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "time/calendar.hpp"
#include "time/time_zone.hpp"

using sluice::time::CalendarUnit;
using sluice::time::TimeZone;

namespace {

void check(const TimeZone& zone, const std::uint8_t* data, std::size_t size) {
    std::int32_t previous = zone.initial_offset();
    std::int64_t last = INT64_MIN;
    for (const auto& t : zone.transitions()) {
        if (t.at <= last || t.offset == previous) std::abort();
        if (t.offset < -TimeZone::max_offset || t.offset > TimeZone::max_offset) std::abort();
        last = t.at;
        previous = t.offset;
    }
    // A few instants taken from the input, within +-300 years of the epoch.
    for (std::size_t i = 0; i + 8 <= size && i < 64; i += 8) {
        std::int64_t t = 0;
        for (int b = 0; b < 8; ++b) t = (t << 8) | data[i + b];
        t %= 300LL * 366 * 86400;
        const std::int32_t offset = zone.offset_at(t);
        if (offset < -TimeZone::max_offset || offset > TimeZone::max_offset) std::abort();
        const std::int64_t first = zone.first_reaching(t);
        if (first + zone.offset_at(first) < t) std::abort();
        for (const auto unit : {CalendarUnit::minute, CalendarUnit::hour, CalendarUnit::day, CalendarUnit::week,
                                CalendarUnit::month}) {
            const auto w = sluice::time::calendar_window(zone, unit, t);
            if (!(w.start <= t && t < w.end)) std::abort();
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    std::string error;
    if (auto zone = TimeZone::from_tzif(bytes, "fuzz", error)) {
        check(*zone, data, size);
    } else if (error.empty()) {
        std::abort();  // a refusal always says why
    }
    const std::string_view rule = bytes.substr(0, std::min(bytes.find('\n'), std::size_t{200}));
    error.clear();
    if (auto zone = TimeZone::from_posix_rule(rule, error)) {
        check(*zone, data, size);
    } else if (error.empty()) {
        std::abort();
    }
    return 0;
}
