// The few text rules of header fields that every head reader and writer needs: optional
// whitespace trimmed, names compared ASCII case-insensitively (std::tolower is a call into
// the C library and its locale per character; names and tokens are ASCII).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
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

// Whether none of the 8 bytes at p is a control byte (below 0x20) or DEL: most words of a
// head, whose lines then need no look byte by byte. Exact for the word as a whole: the
// lowest byte below 0x20 always sets its top bit in x - 0x20... (bytes above it may only
// seem to when one below does, through the borrow), ~x leaves out bytes of 0x80 and more;
// DEL is a zero byte of x ^ 0x7f, found the same way.
inline bool plain_word(const char* p) {
    constexpr std::uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    std::uint64_t x;
    std::memcpy(&x, p, 8);
    const std::uint64_t below_space = (x - ones * 0x20) & ~x & highs;
    const std::uint64_t del = x ^ (ones * 0x7f);
    const std::uint64_t has_del = (del - ones) & ~del & highs;
    return (below_space | has_del) == 0;
}

}  // namespace sluice::http
