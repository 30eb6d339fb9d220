// IANA time zones, read from the system's TZif files (RFC 8536), for calendar quotas.
//
// libstdc++ 12 (bookworm) has no std::chrono::tzdb, and POSIX localtime_r works on one
// process-wide TZ, so sluice reads the files itself: the transitions the file lists, then
// the POSIX TZ rule of its footer (e.g. "CET-1CEST,M3.5.0,M10.5.0/3") expanded into
// transitions up to the end of 2200. After that the last offset holds.
//
// Everything here is in whole seconds of POSIX time (no leap seconds: "right/" zones are
// refused). A file is hostile input: every count is checked against the bytes there are,
// offsets are bounded to +-26 h, and a malformed file is an error, never a guess.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::time {

class TimeZone {
public:
    // UTC: no transitions, offset 0.
    TimeZone() = default;

    // The zone `name` ("Europe/Berlin", "UTC") from $TZDIR or /usr/share/zoneinfo. "UTC" and
    // "Etc/UTC" need no file. nullopt with `error` set: a name that is not a zone name, no
    // such file, or a file that is not valid TZif.
    static std::optional<TimeZone> load(std::string_view name, std::string& error);
    // A zone from the bytes of a TZif file (`name` only names it in errors and name()).
    static std::optional<TimeZone> from_tzif(std::string_view bytes, std::string_view name, std::string& error);
    // A zone from a POSIX TZ rule alone ("EST5EDT,M3.2.0,M11.1.0", "<+0530>-5:30").
    static std::optional<TimeZone> from_posix_rule(std::string_view rule, std::string& error);

    const std::string& name() const { return name_; }

    // Seconds east of UTC in effect at `utc` (local = utc + offset).
    std::int32_t offset_at(std::int64_t utc) const;

    // The earliest instant at which the local clock shows `local` or later (the clock can
    // jump forward over it, or show it twice when it goes back: the first time counts).
    std::int64_t first_reaching(std::int64_t local) const;

    // The transitions, for tests: instant, and the offset from then on.
    struct Transition {
        std::int64_t at;
        std::int32_t offset;
    };
    const std::vector<Transition>& transitions() const { return transitions_; }
    std::int32_t initial_offset() const { return initial_; }

    // The range of offsets real zones have: a file outside it is refused.
    static constexpr std::int32_t max_offset = 26 * 3600;

private:
    std::string name_ = "UTC";
    std::int32_t initial_ = 0;              // before the first transition
    std::vector<Transition> transitions_;   // ascending `at`, each changing the offset
};

// Whether `name` has the shape of an IANA zone name: [A-Za-z0-9_+-] components separated by
// '/', none empty, "." or "..", at most 255 bytes. (Only then is it looked up as a file.)
bool is_zone_name(std::string_view name);

}  // namespace sluice::time
