#include "http/head_scan.hpp"

#include "http/field_text.hpp"

#include <array>
#include <cstring>

namespace sluice::http {

HeadScan scan_request_head(std::string_view data, std::size_t& scanned) {
    HeadScan result;
    // Empty lines before the request line are tolerated (RFC 9112 2.2).
    std::size_t start = 0;
    while (start + 1 < data.size() && data[start] == '\r' && data[start + 1] == '\n') start += 2;
    result.leading_crlf = start;
    if (scanned < start) scanned = start;

    // A line at a time: memchr finds its LF (with vector instructions; this runs over every
    // head, request and response). A bare LF or the blank line stops the reading; a NUL
    // before that point (one memchr over all the lines read, not one per line) decides
    // first, as in a reading byte by byte.
    const char* const base = data.data();
    enum class Stop { none, bare_lf, blank_line } stop = Stop::none;
    std::size_t stop_at = data.size();  // the LF that stopped the reading, else the end
    for (std::size_t i = scanned; i < data.size();) {
        const auto* lf = static_cast<const char*>(std::memchr(base + i, '\n', data.size() - i));
        if (!lf) break;
        const auto end = static_cast<std::size_t>(lf - base);
        if (end == 0 || data[end - 1] != '\r') {
            stop = Stop::bare_lf;
            stop_at = end;
            break;
        }
        if (end >= start + 3 && data[end - 2] == '\n' && data[end - 3] == '\r') {
            stop = Stop::blank_line;
            stop_at = end;
            break;
        }
        i = end + 1;
    }
    if (scanned < stop_at && std::memchr(base + scanned, '\0', stop_at - scanned) != nullptr) {
        result.state = HeadScan::State::malformed;
        result.problem = "NUL in request head";
        return result;
    }
    if (stop == Stop::bare_lf) {
        result.state = HeadScan::State::malformed;
        result.problem = "bare LF in request head";
        return result;
    }
    if (stop == Stop::blank_line) {
        result.state = HeadScan::State::complete;
        result.head_size = stop_at + 1 - start;
        scanned = stop_at + 1;
        return result;
    }
    // Keep the last three bytes unscanned: they may be the start of the terminator.
    scanned = data.size() > start + 3 ? data.size() - 3 : start;
    return result;
}

namespace {

// Bytes that need no look inside a request line or a field value: visible ASCII, space and
// obs-text (0x80-0xff); not the control bytes (tab, CR and LF among them) nor DEL.
constexpr std::array<bool, 256> plain_bytes = [] {
    std::array<bool, 256> t{};
    for (int c = 0x20; c < 256; ++c) t[static_cast<std::size_t>(c)] = c != 0x7f;
    return t;
}();
// ... inside a field name: the same less the colon that ends it and the space that may not
// stand in it.
constexpr std::array<bool, 256> name_bytes = [] {
    auto t = plain_bytes;
    t[':'] = false;
    t[' '] = false;
    return t;
}();

}  // namespace

// A line at a time: the field name up to its colon, then the rest of the line, each in a
// loop that only looks the bytes up in a table until one needs a closer look (this runs
// over every head twice, request and response: it was the busiest function of sluice's own).
std::string_view check_request_head(std::string_view head) {
    const auto* p = reinterpret_cast<const unsigned char*>(head.data());
    const std::size_t n = head.size();
    std::size_t i = 0;
    bool first_line = true;
    while (i < n) {
        // p[i] starts a line.
        if (!first_line) {
            if (p[i] == ' ' || p[i] == '\t') return "obs-fold (line folding) in header field";
            while (i < n && name_bytes[p[i]]) ++i;
            if (i < n && p[i] == ':') {
                ++i;  // (whitespace before it stopped the loop: refused below)
            } else if (i < n && (p[i] == ' ' || p[i] == '\t')) {
                std::size_t j = i;
                while (j < n && (p[j] == ' ' || p[j] == '\t')) ++j;
                if (j < n && p[j] == ':') return "whitespace between header field name and colon";
                return "whitespace in header field name";
            }
            // else CR, LF or another control byte: as in a value, below
        }
        first_line = false;
        for (;;) {  // the rest of the line
            while (i + 8 <= n && plain_word(head.data() + i)) i += 8;
            while (i < n && plain_bytes[p[i]]) ++i;
            if (i >= n) return {};
            const auto c = p[i];
            if (c == '\t') {
                ++i;
                continue;
            }
            if (c == '\r') {
                if (i + 1 >= n || p[i + 1] != '\n') return "bare CR in request head";
                i += 2;
                break;
            }
            if (c == '\n') {
                ++i;
                break;
            }
            return "control character in request head";
        }
    }
    return {};
}

std::size_t request_version_offset(std::string_view head) {
    const auto end = head.find("\r\n");
    if (end == std::string_view::npos || end < 8) return std::string_view::npos;
    const auto v = head.substr(end - 8, 8);
    auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (!v.starts_with("HTTP/") || !digit(v[5]) || v[6] != '.' || !digit(v[7])) return std::string_view::npos;
    if (end <= 8 || head[end - 9] != ' ') return std::string_view::npos;
    return end - 3;
}

std::string_view check_request_line(std::string_view data) {
    const auto end = data.find("\r\n");
    if (end == std::string_view::npos) return {};
    if (request_version_offset(data.substr(0, end + 2)) != std::string_view::npos) return {};
    return "request line without an HTTP version (HTTP/0.9 is not served)";
}

std::size_t count_field_lines(std::string_view head) {
    std::size_t lines = 0;
    for (const char* p = head.data(); (p = static_cast<const char*>(
                                           std::memchr(p, '\n', static_cast<std::size_t>(head.data() + head.size() - p))));
         ++p)
        ++lines;
    return lines >= 2 ? lines - 2 : 0;
}

}  // namespace sluice::http
