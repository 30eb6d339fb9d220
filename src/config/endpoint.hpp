// host:port endpoints as written in the configuration ("127.0.0.1:8080", "[::]:8080", "redis:6379").
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace sluice::config {

// Either an endpoint or the reason the text is not one.
struct EndpointParse {
    std::optional<Endpoint> endpoint;
    std::string error;  // set when endpoint is empty, e.g. "missing port in 'redis' (expected host:port)"
};

// "host:port" or "[ipv6]:port". The host is a name, an IPv4 address or (in brackets) an IPv6
// address; it is kept as written, without the brackets. The port is 1..65535, or also 0 when
// allow_port_zero (for listeners: the system picks a free port).
EndpointParse parse_endpoint(std::string_view text, bool allow_port_zero = false);

// A host name as DNS allows it: dot-separated labels of letters, digits, '-' and '_',
// no label empty or longer than 63 or starting/ending with '-'; 253 characters at most.
bool is_valid_host_name(std::string_view name);

}  // namespace sluice::config
