#include "config/access_format.hpp"

#include <array>

namespace sluice::config {

namespace {

constexpr std::array<std::string_view, 24> names{
    "client",    "peer",        "request",  "method",     "uri",      "protocol",   "status",      "bytes",
    "route",     "limit",       "decision", "remaining",  "upstream_ms", "total_ms", "wait_ms",   "request_id",
    "host",      "upstream",    "user_agent", "tunnel_up", "tunnel_down", "tunnel_ms", "skipped",
    "plan",
};
static_assert(names.size() == static_cast<std::size_t>(AccessField::plan) + 1);

bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

std::span<const std::string_view> access_field_names() { return names; }

std::string_view access_field_name(AccessField field) { return names[static_cast<std::size_t>(field)]; }

std::optional<AccessField> access_field_named(std::string_view name) {
    for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == name) return static_cast<AccessField>(i);
    return std::nullopt;
}

std::variant<AccessFormat, AccessPatternError> parse_access_pattern(std::string_view pattern) {
    AccessFormat format;
    format.kind = AccessFormat::Kind::pattern;
    std::string literal;
    std::size_t i = 0;
    while (i < pattern.size()) {
        const char c = pattern[i];
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            return AccessPatternError{i, "control character (a line break, a tab) in the pattern: one line each"};
        if (c != '$') {
            literal += c;
            ++i;
            continue;
        }
        if (i + 1 < pattern.size() && pattern[i + 1] == '$') {
            literal += '$';
            i += 2;
            continue;
        }
        const std::size_t at = i;
        std::size_t start = i + 1, stop = start;
        const bool braced = start < pattern.size() && pattern[start] == '{';
        if (braced) {
            start = stop = start + 1;
            while (stop < pattern.size() && pattern[stop] != '}') ++stop;
            if (stop == pattern.size()) return AccessPatternError{at, "'${' without its '}'"};
        } else {
            while (stop < pattern.size() && name_char(pattern[stop])) ++stop;
        }
        const std::string_view name = pattern.substr(start, stop - start);
        if (name.empty()) return AccessPatternError{at, "'$' without a field name (write '$$' for a '$')"};
        const auto field = access_field_named(name);
        if (!field) return AccessPatternError{at, "unknown field $" + std::string(name), std::string(name)};
        format.pieces.push_back({std::move(literal), field});
        format.fields.push_back(*field);
        literal.clear();
        i = braced ? stop + 1 : stop;
    }
    if (!literal.empty()) format.pieces.push_back({std::move(literal), std::nullopt});
    if (format.fields.empty()) return AccessPatternError{0, "names no field ($client, $status, ...)"};
    return format;
}

}  // namespace sluice::config
