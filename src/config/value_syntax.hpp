// The syntax of single configuration values (names, methods, hosts, paths, key parts, the Redis
// address), apart from YAML. An empty error string means the value is fine.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace sluice::config {

// Route, limit and upstream names: 1..64 of letters, digits, '_', '-', '.'. They appear in
// rate-limit keys, log lines and metric labels, so nothing that needs quoting.
bool is_valid_name(std::string_view name);

// An HTTP token (RFC 9110 tchar+): what methods and header names are made of.
bool is_http_token(std::string_view text);

std::string to_upper(std::string_view text);
std::string to_lower(std::string_view text);

struct KeyPartParse {
    std::optional<KeyPart> part;
    std::string error;
};
// "client_ip" | "client_ip/N" | "client_ip/V4/V6" | "method" | "path" | "header:NAME" |
// "query:NAME" | "cookie:NAME" | "path_segment:N"; a header name is stored lower-case.
KeyPartParse parse_key_part(std::string_view text);
// The key part as it is written in the configuration.
std::string key_part_text(const KeyPart& part);

// match.host: "example.com" or "*.example.com" (any case); nullopt when not such a name.
std::optional<std::string> normalized_route_host(std::string_view text);

// match.path / match.path_prefix: starts with '/', no spaces or control characters.
std::string route_path_error(std::string_view key, std::string_view path);

// Why `text` is not a CIDR block (call it when net::Cidr::parse refused it).
std::string cidr_error(std::string_view text);

// store.redis.address: "host:port" (tcp) or "unix:/absolute/path" (unix_path; tcp cleared).
std::string apply_redis_address(std::string_view text, RedisConfig& redis);

}  // namespace sluice::config
