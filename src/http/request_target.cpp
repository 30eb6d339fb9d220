#include "http/request_target.hpp"

#include <arpa/inet.h>

#include <array>
#include <string_view>
#include <vector>

namespace sluice::http {

namespace {

bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
// RFC 3986 unreserved: ALPHA / DIGIT / "-" / "." / "_" / "~" (a table: every Host byte is
// looked up).
constexpr std::array<bool, 256> unreserved_bytes = [] {
    std::array<bool, 256> t{};
    for (int c = 0; c < 256; ++c)
        t[static_cast<std::size_t>(c)] = ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= '0' && c <= '9') ||
                                         c == '-' || c == '.' || c == '_' || c == '~';
    return t;
}();
bool is_unreserved(unsigned char c) { return unreserved_bytes[c]; }

int hex_value(unsigned char c) {
    if (is_digit(c)) return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

// Bytes refused anywhere in a target: they cannot be sent unescaped and would be read
// differently by different servers.
bool is_forbidden(unsigned char c) { return c <= 0x20 || c == 0x7f || c == '#' || c == '\\'; }

// Bytes a path may not hold as they are (RFC 3986 pchar: not ASCII, or `"<>^`{|}` and
// `[]`) that servers take anyway: the normalised path holds them escaped, the one spelling
// `%C3%A9` and a raw UTF-8 `é` (or `\xc3%A9`) share.
constexpr std::array<bool, 256> escaped_in_path = [] {
    std::array<bool, 256> t{};
    for (int c = 0x80; c < 256; ++c) t[static_cast<std::size_t>(c)] = true;
    for (char c : std::string_view("\"<>^`{|}[]")) t[static_cast<unsigned char>(c)] = true;
    return t;
}();
bool is_escaped_in_path(unsigned char c) { return escaped_in_path[c]; }

bool iequals_prefix(std::string_view s, std::string_view prefix) {
    if (s.size() < prefix.size()) return false;
    for (std::size_t i = 0; i < prefix.size(); ++i)
        if ((static_cast<unsigned char>(s[i]) | 0x20) != static_cast<unsigned char>(prefix[i])) return false;
    return true;
}

}  // namespace

std::string canonical_path_bytes(std::string_view raw, std::string_view& problem) {
    problem = {};
    if (raw.empty() || raw.front() != '/') {
        problem = "request target path must start with /";
        return {};
    }
    // Decode escapes of unreserved characters; keep the others, with uppercase hex, and escape
    // what a path may not hold as it is.
    std::string decoded;
    decoded.reserve(raw.size());
    static constexpr char upper_hex[] = "0123456789ABCDEF";
    for (std::size_t i = 0; i < raw.size(); ++i) {
        const auto c = static_cast<unsigned char>(raw[i]);
        if (is_forbidden(c)) {
            problem = "invalid character in request target";
            return {};
        }
        if (c != '%') {
            if (is_escaped_in_path(c)) {
                decoded += '%';
                decoded += upper_hex[c >> 4];
                decoded += upper_hex[c & 0xf];
            } else {
                decoded += static_cast<char>(c);
            }
            continue;
        }
        const int hi = i + 2 < raw.size() ? hex_value(static_cast<unsigned char>(raw[i + 1])) : -1;
        const int lo = hi >= 0 ? hex_value(static_cast<unsigned char>(raw[i + 2])) : -1;
        if (hi < 0 || lo < 0) {
            problem = "invalid percent-encoding in request target";
            return {};
        }
        const auto v = static_cast<unsigned char>(hi * 16 + lo);
        if (is_unreserved(v)) {
            decoded += static_cast<char>(v);
        } else {
            decoded += '%';
            decoded += upper_hex[hi];
            decoded += upper_hex[lo];
        }
        i += 2;
    }
    return decoded;
}

std::string normalize_path(std::string_view raw, std::string_view& problem) {
    std::string decoded = canonical_path_bytes(raw, problem);
    if (!problem.empty()) return {};
    // Segments: empty ones (repeated slashes) and "." go, ".." takes the previous one back.
    std::vector<std::string_view> segments;
    std::string_view rest(decoded);
    rest.remove_prefix(1);
    bool trailing_slash = false;  // the last segment was empty, "." or "..": the path ends in '/'
    while (true) {
        const auto slash = rest.find('/');
        const auto segment = rest.substr(0, slash);
        if (segment == "..") {
            if (segments.empty()) {
                problem = "request target path goes above the root";
                return {};
            }
            segments.pop_back();
            trailing_slash = true;
        } else if (segment == "." || segment.empty()) {
            trailing_slash = true;
        } else {
            segments.push_back(segment);
            trailing_slash = false;
        }
        if (slash == std::string_view::npos) break;
        rest.remove_prefix(slash + 1);
    }
    std::string out = "/";
    for (std::size_t i = 0; i < segments.size(); ++i) {
        if (i) out += '/';
        out.append(segments[i]);
    }
    if (trailing_slash && !segments.empty()) out += '/';
    return out;
}

namespace {

// validate_host's check: the problem (empty when valid), and the host and port parts.
std::string_view check_host(std::string_view value, std::string_view& host, std::string_view& port, bool& has_port) {
    host = value;
    port = {};
    has_port = false;
    if (!host.empty() && host.front() == '[') {
        const auto close = host.find(']');
        if (close == std::string_view::npos) return "invalid Host: unclosed IPv6 literal";
        const auto literal = host.substr(1, close - 1);
        char text[64];
        unsigned char addr[16];
        if (literal.empty() || literal.size() >= sizeof(text)) return "invalid Host: bad IPv6 literal";
        literal.copy(text, literal.size());
        text[literal.size()] = '\0';
        if (::inet_pton(AF_INET6, text, addr) != 1) return "invalid Host: bad IPv6 literal";
        const auto after = host.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':') return "invalid Host: bytes after the IPv6 literal";
            has_port = true;
            port = after.substr(1);
        }
        host = host.substr(0, close + 1);
    } else {
        const auto colon = host.find(':');
        if (colon != std::string_view::npos) {
            has_port = true;
            port = host.substr(colon + 1);
            host = host.substr(0, colon);
        }
        if (host.empty()) return "invalid Host: empty host";
        if (host.size() > 255) return "invalid Host: longer than 255 bytes";
        for (std::size_t i = 0; i < host.size(); ++i) {
            const auto c = static_cast<unsigned char>(host[i]);
            if (!is_unreserved(c)) return "invalid Host: character not allowed in a host name";
            if (c == '.' && i + 1 < host.size() && host[i + 1] == '.') return "invalid Host: empty label";
        }
    }
    if (has_port) {
        if (port.size() > 5) return "invalid Host: bad port";
        unsigned n = 0;
        for (char c : port) {
            if (!is_digit(static_cast<unsigned char>(c))) return "invalid Host: bad port";
            n = n * 10 + static_cast<unsigned>(c - '0');
        }
        if (n > 65535) return "invalid Host: bad port";
    }
    return {};
}

}  // namespace

std::string_view host_problem(std::string_view value) {
    std::string_view host, port;
    bool has_port = false;
    return check_host(value, host, port, has_port);
}

std::string validate_host(std::string_view value, std::string_view& problem) {
    std::string_view host, port;
    bool has_port = false;
    problem = check_host(value, host, port, has_port);
    if (!problem.empty()) return std::string();
    std::string out(host);
    for (auto& c : out) c = static_cast<char>((c >= 'A' && c <= 'Z') ? c | 0x20 : c);
    if (has_port) {
        out += ':';
        out.append(port);
    }
    return out;
}

RequestTarget parse_request_target(std::string_view method, std::string_view target) {
    RequestTarget t;
    // CONNECT in any form of target (authority-form, as RFC 9110 has it, or origin- and
    // absolute-form): sluice opens no tunnels, and an upstream's 2xx to a CONNECT is a
    // tunnel however it is framed (RFC 9112 6.3), never a response to pool the connection
    // after. In any case too: methods are case-sensitive, but an upstream may read
    // "connect" as CONNECT.
    if (method.size() == 7 && iequals_prefix(method, "connect")) {
        t.problem = "CONNECT is not supported";
        return t;
    }
    if (!is_request_method(method)) {
        t.problem = "a method is 1 to 32 upper-case letters, '-' and '_'";
        return t;
    }
    if (target == "*") {
        if (method != "OPTIONS") t.problem = "asterisk-form target is for OPTIONS only";
        t.path = "*";
        return t;
    }
    std::string_view path_and_query = target;
    if (!target.starts_with('/')) {
        std::string_view rest;
        if (iequals_prefix(target, "http://"))
            rest = target.substr(7);
        else if (iequals_prefix(target, "https://"))
            rest = target.substr(8);
        else {
            t.problem = "invalid request target";
            return t;
        }
        const auto end = rest.find_first_of("/?");
        const auto authority = rest.substr(0, end);
        if (authority.find('@') != std::string_view::npos) {
            t.problem = "userinfo in request target";
            return t;
        }
        std::string_view problem;
        t.authority = validate_host(authority, problem);
        if (!problem.empty()) {
            t.problem = "invalid authority in request target";
            return t;
        }
        path_and_query = end == std::string_view::npos ? std::string_view{} : rest.substr(end);
    }
    const auto q = path_and_query.find('?');
    std::string_view raw_path = path_and_query.substr(0, q);
    if (raw_path.empty()) raw_path = "/";
    if (q != std::string_view::npos) {
        const auto query = path_and_query.substr(q + 1);
        for (char c : query)
            if (is_forbidden(static_cast<unsigned char>(c)) && c != '\\') {
                t.problem = "invalid character in request target";
                return t;
            }
        t.has_query = true;
        t.query = std::string(query);
    }
    t.path = normalize_path(raw_path, t.problem);
    return t;
}

}  // namespace sluice::http
