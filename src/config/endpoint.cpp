#include "config/endpoint.hpp"

#include "config/message_text.hpp"
#include "net/cidr.hpp"

namespace sluice::config {
namespace {

struct HostAndPort {
    std::string_view host;
    std::string_view port;
    bool bracketed = false;
};

EndpointParse failure(std::string message) { return EndpointParse{std::nullopt, std::move(message)}; }

bool is_label_character(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

bool is_valid_label(std::string_view label) {
    if (label.empty() || label.size() > 63) return false;
    if (label.front() == '-' || label.back() == '-') return false;
    for (char c : label)
        if (!is_label_character(c)) return false;
    return true;
}

bool looks_like_ipv4(std::string_view host) { return host.find_first_not_of("0123456789.") == std::string_view::npos; }

// Splits "host:port" / "[v6]:port"; the error is set when the shape is wrong.
std::optional<HostAndPort> split_host_port(std::string_view text, std::string& error) {
    if (text.find("://") != std::string_view::npos) {
        error = "expected host:port, not a URL: " + quoted(text);
        return std::nullopt;
    }
    if (text.front() == '[') {
        const auto close = text.find(']');
        if (close == std::string_view::npos) {
            error = "missing ']' in " + quoted(text);
            return std::nullopt;
        }
        if (close + 1 >= text.size() || text[close + 1] != ':') {
            error = "missing port in " + quoted(text) + " (expected [address]:port)";
            return std::nullopt;
        }
        return HostAndPort{text.substr(1, close - 1), text.substr(close + 2), true};
    }
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
        error = "missing port in " + quoted(text) + " (expected host:port)";
        return std::nullopt;
    }
    if (text.find(':') != colon) {
        error = "an IPv6 address needs brackets, as in [::1]:8080, got " + quoted(text);
        return std::nullopt;
    }
    return HostAndPort{text.substr(0, colon), text.substr(colon + 1), false};
}

std::optional<std::uint16_t> parse_port(std::string_view text, bool allow_port_zero) {
    if (text.empty() || text.size() > 5) return std::nullopt;
    unsigned value = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return std::nullopt;
        value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value > 65535 || (value == 0 && !allow_port_zero)) return std::nullopt;
    return static_cast<std::uint16_t>(value);
}

// Empty when the host is fine.
std::string host_error(const HostAndPort& parts, std::string_view text) {
    const std::string where = " in " + quoted(text);
    if (parts.host.empty()) return "missing host" + where + " (use 0.0.0.0 or [::] for every interface)";
    if (parts.bracketed) {
        const auto address = net::IpAddress::parse(parts.host);
        if (!address || address->v4) return quoted(parts.host) + " is not an IPv6 address" + where;
        return {};
    }
    if (looks_like_ipv4(parts.host)) {
        if (!net::IpAddress::parse(parts.host)) return "invalid IPv4 address " + quoted(parts.host) + where;
        return {};
    }
    if (!is_valid_host_name(parts.host)) return "invalid host name " + quoted(parts.host) + where;
    return {};
}

}  // namespace

bool is_valid_host_name(std::string_view name) {
    if (name.empty() || name.size() > 253) return false;
    std::size_t start = 0;
    while (true) {
        const auto dot = name.find('.', start);
        if (!is_valid_label(name.substr(start, dot - start))) return false;
        if (dot == std::string_view::npos) return true;
        start = dot + 1;
    }
}

EndpointParse parse_endpoint(std::string_view text, bool allow_port_zero) {
    if (text.empty()) return failure("empty address (expected host:port)");
    std::string error;
    const auto parts = split_host_port(text, error);
    if (!parts) return failure(error);
    if (auto problem = host_error(*parts, text); !problem.empty()) return failure(problem);
    if (parts->port.empty()) return failure("missing port in " + quoted(text) + " (expected host:port)");
    const auto port = parse_port(parts->port, allow_port_zero);
    if (!port) {
        const char* range = allow_port_zero ? "0..65535" : "1..65535";
        return failure("invalid port " + quoted(parts->port) + " in " + quoted(text) + " (expected " + range + ")");
    }
    return EndpointParse{Endpoint{std::string(parts->host), *port}, {}};
}

std::string Endpoint::str() const {
    const std::string port_text = std::to_string(port);
    if (host.find(':') != std::string::npos) return "[" + host + "]:" + port_text;
    return host + ":" + port_text;
}

}  // namespace sluice::config
