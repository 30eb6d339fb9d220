#include "observe/json_text.hpp"

#include <array>

namespace sluice::observe {

namespace {

// The escape of a byte that cannot stand in a JSON string as itself; empty when it can.
std::string_view escape_of(unsigned char c, char (&buf)[6]) {
    switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default:
        if (c >= 0x20 && c != 0x7f) return {};
        static constexpr char hex[] = "0123456789abcdef";
        buf[0] = '\\';
        buf[1] = 'u';
        buf[2] = '0';
        buf[3] = '0';
        buf[4] = hex[c >> 4];
        buf[5] = hex[c & 0xf];
        return {buf, 6};
    }
}

// The length of the well-formed UTF-8 sequence at the start of `s` (2 to 4 bytes), or 0 when
// it is not one: a stray continuation byte, a truncated sequence, an overlong form, a
// surrogate, or a code point above U+10FFFF (RFC 3629).
std::size_t utf8_sequence(std::string_view s) {
    const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const auto c0 = b(0);
    std::size_t n = 0;
    unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
    if (c0 >= 0xc2 && c0 <= 0xdf) n = 2;
    else if (c0 == 0xe0) n = 3, lo = 0xa0;
    else if ((c0 >= 0xe1 && c0 <= 0xec) || c0 == 0xee || c0 == 0xef) n = 3;
    else if (c0 == 0xed) n = 3, hi = 0x9f;
    else if (c0 == 0xf0) n = 4, lo = 0x90;
    else if (c0 >= 0xf1 && c0 <= 0xf3) n = 4;
    else if (c0 == 0xf4) n = 4, hi = 0x8f;
    else return 0;
    if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
    for (std::size_t i = 2; i < n; ++i)
        if (b(i) < 0x80 || b(i) > 0xbf) return 0;
    return n;
}

}  // namespace

namespace {
// The bytes a JSON string holds as they are: printable ASCII but '"' and '\\'.
constexpr std::array<bool, 256> plain_bytes = [] {
    std::array<bool, 256> t{};
    for (std::size_t c = 0x20; c < 0x7f; ++c) t[c] = c != '"' && c != '\\';
    return t;
}();
}  // namespace

void append_json_string(std::string& out, std::string_view text) {
    out.reserve(out.size() + text.size() + 2);
    out += '"';
    // Runs of bytes that need no escape are appended whole. Bytes above 0x7f pass when they
    // form well-formed UTF-8; any other one (a client's Latin-1 User-Agent, a cut sequence)
    // becomes U+FFFD, so that every line stays valid JSON for strict readers.
    std::size_t run = 0;
    char buf[6];
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (plain_bytes[c]) continue;  // (most bytes: one look-up, no call)
        if (c >= 0x80) {
            if (const auto n = utf8_sequence(text.substr(i)); n > 0) {
                i += n - 1;
                continue;
            }
            out.append(text.data() + run, i - run);
            out.append("\\ufffd");
            run = i + 1;
            continue;
        }
        const auto escape = escape_of(c, buf);
        if (escape.empty()) continue;
        out.append(text.data() + run, i - run);
        out.append(escape);
        run = i + 1;
    }
    out.append(text.data() + run, text.size() - run);
    out += '"';
}

std::string json_string(std::string_view text) {
    std::string out;
    append_json_string(out, text);
    return out;
}

}  // namespace sluice::observe
