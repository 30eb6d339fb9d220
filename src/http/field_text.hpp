// The few text rules of header fields that every head reader and writer needs: optional
// whitespace trimmed, names compared ASCII case-insensitively (std::tolower is a call into
// the C library and its locale per character; names and tokens are ASCII).
#pragma once

#include <cstddef>
#include <string_view>

namespace sluice::http {

// Without the optional whitespace (SP, HTAB) around it (RFC 9110 5.6.3).
inline std::string_view trim_ows(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

constexpr char fold_ascii(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c; }

inline bool iequals_ascii(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (fold_ascii(a[i]) != fold_ascii(b[i])) return false;
    return true;
}

}  // namespace sluice::http
