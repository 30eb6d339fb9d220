#include "http/head_scan.hpp"

namespace sluice::http {

HeadScan scan_request_head(std::string_view data, std::size_t& scanned) {
    HeadScan result;
    // Empty lines before the request line are tolerated (RFC 9112 2.2).
    std::size_t start = 0;
    while (start + 1 < data.size() && data[start] == '\r' && data[start + 1] == '\n') start += 2;
    result.leading_crlf = start;
    if (scanned < start) scanned = start;

    for (std::size_t i = scanned; i < data.size(); ++i) {
        const char c = data[i];
        if (c == '\n') {
            if (i == 0 || data[i - 1] != '\r') {
                result.state = HeadScan::State::malformed;
                result.problem = "bare LF in request head";
                return result;
            }
            if (i >= start + 3 && data[i - 2] == '\n' && data[i - 3] == '\r') {
                result.state = HeadScan::State::complete;
                result.head_size = i + 1 - start;
                scanned = i + 1;
                return result;
            }
        } else if (c == '\0') {
            result.state = HeadScan::State::malformed;
            result.problem = "NUL in request head";
            return result;
        }
    }
    // Keep the last three bytes unscanned: they may be the start of the terminator.
    scanned = data.size() > start + 3 ? data.size() - 3 : start;
    return result;
}

std::string_view check_request_head(std::string_view head) {
    bool line_start = true;
    bool first_line = true;
    bool in_name = false;
    for (std::size_t i = 0; i < head.size(); ++i) {
        const auto c = static_cast<unsigned char>(head[i]);
        if (c == '\r') {
            if (i + 1 >= head.size() || head[i + 1] != '\n') return "bare CR in request head";
            continue;
        }
        if (c == '\n') {
            line_start = true;
            first_line = false;
            continue;
        }
        if (line_start) {
            line_start = false;
            if (!first_line && (c == ' ' || c == '\t')) return "obs-fold (line folding) in header field";
            in_name = !first_line;
        }
        if (c == 0 || (c < 0x20 && c != '\t') || c == 0x7f) return "control character in request head";
        if (in_name) {
            if (c == ':') {
                if (i > 0 && (head[i - 1] == ' ' || head[i - 1] == '\t'))
                    return "whitespace between header field name and colon";
                in_name = false;
            } else if (c == ' ' || c == '\t') {
                // whitespace inside a field name: only legal directly before the colon, which is refused above
                std::size_t j = i;
                while (j < head.size() && (head[j] == ' ' || head[j] == '\t')) ++j;
                if (j < head.size() && head[j] == ':') return "whitespace between header field name and colon";
                return "whitespace in header field name";
            }
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
    for (char c : head) lines += c == '\n';
    return lines >= 2 ? lines - 2 : 0;
}

}  // namespace sluice::http
