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

KeyPartParse parse_key_part(std::string_view text) {
    if (text == "client_ip") return {KeyPart{KeyPart::Kind::client_ip, {}}, {}};
    if (text == "method") return {KeyPart{KeyPart::Kind::method, {}}, {}};
    if (text == "path") return {KeyPart{KeyPart::Kind::path, {}}, {}};
    if (text.starts_with(header_key_prefix)) {
        const std::string_view header = text.substr(header_key_prefix.size());
        if (!is_http_token(header))
            return {std::nullopt, "invalid header name " + quoted(header) + " in key part " + quoted(text)};
        return {KeyPart{KeyPart::Kind::header, to_lower(header)}, {}};
    }
    return {std::nullopt,
            "unknown key part " + quoted(text) + " (allowed: client_ip, method, path, header:NAME)"};
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
