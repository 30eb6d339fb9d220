#include "observe/json_text.hpp"

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

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
    out.reserve(out.size() + text.size() + 2);
    out += '"';
    // Runs of bytes that need no escape are appended whole.
    std::size_t run = 0;
    char buf[6];
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto escape = escape_of(static_cast<unsigned char>(text[i]), buf);
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
