#include "config/duration.hpp"

#include <array>
#include <cstdint>
#include <limits>

namespace sluice::config {
namespace {

struct Unit {
    std::string_view suffix;
    std::int64_t milliseconds;
};

// Largest first, so formatting picks the largest unit that divides exactly.
constexpr std::array<Unit, 5> units{{
    {"d", 86'400'000},
    {"h", 3'600'000},
    {"m", 60'000},
    {"s", 1'000},
    {"ms", 1},
}};

std::optional<std::int64_t> parse_digits(std::string_view digits) {
    if (digits.empty()) return std::nullopt;
    std::int64_t value = 0;
    for (char c : digits) {
        if (c < '0' || c > '9') return std::nullopt;
        const int digit = c - '0';
        if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) return std::nullopt;
        value = value * 10 + digit;
    }
    return value;
}

std::optional<std::int64_t> unit_milliseconds(std::string_view suffix) {
    for (const Unit& unit : units)
        if (unit.suffix == suffix) return unit.milliseconds;
    return std::nullopt;
}

}  // namespace

std::optional<Duration> parse_duration(std::string_view text) {
    if (text == "0") return Duration{0};
    const auto unit_start = text.find_first_not_of("0123456789");
    if (unit_start == std::string_view::npos) return std::nullopt;  // a number without a unit
    const auto value = parse_digits(text.substr(0, unit_start));
    const auto scale = unit_milliseconds(text.substr(unit_start));
    if (!value || !scale) return std::nullopt;
    if (*value > std::numeric_limits<std::int64_t>::max() / *scale) return std::nullopt;
    return Duration{*value * *scale};
}

std::string format_duration(Duration duration) {
    const std::int64_t ms = duration.count();
    if (ms == 0) return "0s";
    if (ms < 0) return std::string(1, '-').append(format_duration(-duration));
    for (const Unit& unit : units)
        if (ms % unit.milliseconds == 0) return std::to_string(ms / unit.milliseconds) + std::string(unit.suffix);
    return std::to_string(ms) + "ms";
}

}  // namespace sluice::config
