#include "config/value_syntax.hpp"

#include <algorithm>
#include <cctype>

#include "config/endpoint.hpp"
#include "config/message_text.hpp"
#include "net/cidr.hpp"

namespace sluice::config {
namespace {

constexpr std::size_t max_name_length = 64;
constexpr std::string_view header_key_prefix = "header:";
constexpr std::string_view unix_address_prefix = "unix:";

bool is_name_character(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

bool is_token_character(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

}  // namespace

bool is_valid_name(std::string_view name) {
    return !name.empty() && name.size() <= max_name_length && std::all_of(name.begin(), name.end(), is_name_character);
}

bool is_http_token(std::string_view text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), is_token_character);
}

std::string to_upper(std::string_view text) {
    std::string result(text);
    for (char& c : result) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return result;
}

std::string to_lower(std::string_view text) {
    std::string result(text);
    for (char& c : result) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return result;
}

namespace {

// A whole number within [min, max] written in plain digits, or nullopt.
std::optional<unsigned> small_number(std::string_view text, unsigned min, unsigned max) {
    if (text.empty() || text.size() > 3 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    unsigned n = 0;
    for (char c : text) n = n * 10 + static_cast<unsigned>(c - '0');
    if (n < min || n > max) return std::nullopt;
    return n;
}

// Query parameter and cookie names: printable, no separators of their own syntax.
bool is_query_or_cookie_name(std::string_view name) {
    return !name.empty() && name.size() <= 128 && std::all_of(name.begin(), name.end(), [](char c) {
        const auto byte = static_cast<unsigned char>(c);
        return byte > 0x20 && byte < 0x7f && c != '&' && c != '=' && c != ';' && c != ',' && c != '"' && c != '%' &&
               c != '+' && c != '#';
    });
}

}  // namespace

KeyPartParse parse_key_part(std::string_view text) {
    using Kind = KeyPart::Kind;
    if (text == "client_ip") return {KeyPart{Kind::client_ip, {}}, {}};
    if (text == "method") return {KeyPart{Kind::method, {}}, {}};
    if (text == "path") return {KeyPart{Kind::path, {}}, {}};
    if (text.starts_with("client_ip/")) {
        // client_ip/N: N bits of either family (at most its width); client_ip/V4/V6.
        const std::string_view lengths = text.substr(10);
        const auto slash = lengths.find('/');
        KeyPart part{Kind::client_net, {}};
        if (slash == std::string_view::npos) {
            const auto n = small_number(lengths, 1, 128);
            if (!n)
                return {std::nullopt, "invalid prefix length in key part " + quoted(text) +
                                          " (client_ip/N with N 1..128, or client_ip/V4/V6 such as client_ip/24/64)"};
            part.v4_prefix = std::min(*n, 32u);
            part.v6_prefix = *n;
        } else {
            const auto v4 = small_number(lengths.substr(0, slash), 1, 32);
            const auto v6 = small_number(lengths.substr(slash + 1), 1, 128);
            if (!v4 || !v6)
                return {std::nullopt, "invalid prefix lengths in key part " + quoted(text) +
                                          " (client_ip/V4/V6: V4 1..32 for IPv4 clients, V6 1..128 for IPv6 ones)"};
            part.v4_prefix = *v4;
            part.v6_prefix = *v6;
        }
        if (part.v4_prefix == 32 && part.v6_prefix == 128) part.kind = Kind::client_ip;  // the whole address
        return {part, {}};
    }
    if (text.starts_with(header_key_prefix)) {
        const std::string_view header = text.substr(header_key_prefix.size());
        if (!is_http_token(header))
            return {std::nullopt, "invalid header name " + quoted(header) + " in key part " + quoted(text)};
        return {KeyPart{Kind::header, to_lower(header)}, {}};
    }
    for (const auto& [prefix, kind] : {std::pair<std::string_view, Kind>{"query:", Kind::query}, {"cookie:", Kind::cookie},
                                       {"jwt:", Kind::jwt}}) {
        if (!text.starts_with(prefix)) continue;
        const std::string_view name = text.substr(prefix.size());
        if (!is_query_or_cookie_name(name))
            return {std::nullopt, "invalid name " + quoted(name) + " in key part " + quoted(text) +
                                      " (printable, without spaces, & = ; , \" % + #)"};
        return {KeyPart{kind, std::string(name)}, {}};
    }
    if (text.starts_with("path_segment:")) {
        const auto n = small_number(text.substr(13), 1, 64);
        if (!n) return {std::nullopt, "invalid segment in key part " + quoted(text) + " (path_segment:N, N 1..64)"};
        KeyPart part{Kind::path_segment, {}};
        part.segment = *n;
        return {part, {}};
    }
    return {std::nullopt, "unknown key part " + quoted(text) +
                              " (allowed: client_ip, client_ip/N, method, path, path_segment:N, header:NAME, "
                              "query:NAME, cookie:NAME, jwt:CLAIM)"};
}

std::string key_part_text(const KeyPart& part) {
    using Kind = KeyPart::Kind;
    switch (part.kind) {
    case Kind::client_ip: return "client_ip";
    case Kind::header: return "header:" + part.header_name;
    case Kind::method: return "method";
    case Kind::path: return "path";
    case Kind::client_net:
        // client_ip/N stands for V4 = min(N, 32), V6 = N.
        if (part.v4_prefix == std::min(part.v6_prefix, 32u)) return "client_ip/" + std::to_string(part.v6_prefix);
        return "client_ip/" + std::to_string(part.v4_prefix) + "/" + std::to_string(part.v6_prefix);
    case Kind::query: return "query:" + part.header_name;
    case Kind::cookie: return "cookie:" + part.header_name;
    case Kind::path_segment: return "path_segment:" + std::to_string(part.segment);
    case Kind::jwt: return "jwt:" + part.header_name;
    }
    return "?";
}

std::optional<std::string> normalized_route_host(std::string_view text) {
    const std::string_view name = text.starts_with("*.") ? text.substr(2) : text;
    if (!is_valid_host_name(name)) return std::nullopt;
    return to_lower(text);
}

std::string route_path_error(std::string_view key, std::string_view path) {
    if (!path.starts_with('/')) return quoted(key) + " must start with '/', got " + quoted(path);
    const bool clean = std::none_of(path.begin(), path.end(), [](char c) {
        return std::isspace(static_cast<unsigned char>(c)) || std::iscntrl(static_cast<unsigned char>(c));
    });
    if (!clean) return quoted(key) + " must not contain spaces or control characters";
    return {};
}

std::string cidr_error(std::string_view text) {
    const auto slash = text.find('/');
    const auto address = net::IpAddress::parse(text.substr(0, slash));
    if (!address) return "invalid CIDR " + quoted(text) + " (expected an address or address/prefix, e.g. 10.0.0.0/8)";
    const char* range = address->v4 ? "0..32 for IPv4" : "0..128 for IPv6";
    return "invalid CIDR " + quoted(text) + " (the prefix length must be " + range + ")";
}

std::string apply_redis_address(std::string_view text, RedisConfig& redis) {
    if (text.starts_with(unix_address_prefix)) {
        const std::string_view path = text.substr(unix_address_prefix.size());
        if (!path.starts_with('/')) return "the unix socket path must be absolute, got " + quoted(text);
        redis.tcp.reset();
        redis.unix_path = std::string(path);
        return {};
    }
    EndpointParse parsed = parse_endpoint(text);
    if (!parsed.endpoint) return parsed.error + " (or unix:/path/to/socket)";
    redis.tcp = *parsed.endpoint;
    redis.unix_path.clear();
    return {};
}

}  // namespace sluice::config
