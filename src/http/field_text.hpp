// The few text rules of header fields that every head reader and writer needs: optional
// whitespace trimmed, names compared ASCII case-insensitively (std::tolower is a call into
// the C library and its locale per character; names and tokens are ASCII), control bytes
// found a word at a time, and field lines written into room made once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace sluice::http {

// Without the optional whitespace (SP, HTAB) around it (RFC 9110 5.6.3).
// (Indices, not remove_prefix per byte: every response field's value is trimmed.)
inline std::string_view trim_ows(std::string_view s) {
    std::size_t first = 0, last = s.size();
    while (first < last && (s[first] == ' ' || s[first] == '\t')) ++first;
    while (last > first && (s[last - 1] == ' ' || s[last - 1] == '\t')) --last;
    return std::string_view(s.data() + first, last - first);
}

constexpr char fold_ascii(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c; }

inline bool iequals_ascii(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (fold_ascii(a[i]) != fold_ascii(b[i])) return false;
    return true;
}

// Whether none of the 8 bytes at p is a control byte (below 0x20) or DEL: most words of a
// head, whose lines then need no look byte by byte. Exact for the word as a whole: in
// x - 0x2020...20 the lowest byte below 0x20 always gets its top bit set (a byte above it
// may seem to only when one below does, through the borrow), and & ~x leaves out bytes of
// 0x80 and more; DEL is a zero byte of x ^ 0x7f7f...7f, found the same way.
inline bool plain_word(const char* p) {
    constexpr std::uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    std::uint64_t x;
    std::memcpy(&x, p, 8);
    const std::uint64_t below_space = (x - ones * 0x20) & ~x & highs;
    const std::uint64_t del = x ^ (ones * 0x7f);
    const std::uint64_t has_del = (del - ones) & ~del & highs;
    return (below_space | has_del) == 0;
}

// Writes a head's lines into room made once at the end of `out` (one growth and one fill of
// the string, not a capacity check and a copy per piece), then gives back the room not used.
// The caller's `room` bounds what it writes; a bound that did not hold ends the process
// rather than send what was written past it (a test that writes more fails loudly).
class HeadWriter {
public:
    HeadWriter(std::string& out, std::size_t room) : out_(out) {
        const std::size_t start = out.size();
        out.resize(start + room);
        p_ = out.data() + start;
    }
    HeadWriter(const HeadWriter&) = delete;
    HeadWriter& operator=(const HeadWriter&) = delete;
    ~HeadWriter() {
        const auto used = static_cast<std::size_t>(p_ - out_.data());
        if (used > out_.size()) std::abort();
        out_.resize(used);
    }

    void put(std::string_view s) {
        std::memcpy(p_, s.data(), s.size());
        p_ += s.size();
    }
    // "name: value" and CRLF.
    void field(std::string_view name, std::string_view value) {
        put(name);
        *p_++ = ':';
        *p_++ = ' ';
        put(value);
        *p_++ = '\r';
        *p_++ = '\n';
    }

private:
    std::string& out_;
    char* p_;
};

// The room a list's fields take as lines ("name: value" and CRLF each).
template <class L>
std::size_t lines_size(const L& fields) {
    std::size_t size = 0;
    for (const auto& f : fields) size += f.name_string().size() + f.value().size() + 4;
    return size;
}

}  // namespace sluice::http
