// Durations as written in the configuration: an integer and a unit ("250ms", "10s", "5m", "1h", "1d").
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace sluice::config {

// "250ms", "10s", "5m", "1h", "1d"; "0" alone also means zero. Nothing else: no sign, no
// fraction, no spaces, no upper-case units. nullopt when the text is not such a duration.
std::optional<Duration> parse_duration(std::string_view text);

// The shortest exact form: 60000ms -> "1m", 1500ms -> "1500ms", 0 -> "0s".
std::string format_duration(Duration duration);

}  // namespace sluice::config
