// Picks the route for a request: the first in file order whose path or path_prefix,
// methods and host all match. Pure.
#pragma once

#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace sluice::http {

// `path` is the request target without the query; `host` the Host header as received.
const config::RouteConfig* match_route(const std::vector<config::RouteConfig>& routes, std::string_view method,
                                       std::string_view path, std::string_view host);

// Host header without port, lower-cased ("Example.COM:8080" -> "example.com", "[::1]:80" -> "[::1]").
std::string normalize_host(std::string_view host);

// True when `host` (normalized) matches the route's host pattern ("example.com" or "*.example.com").
bool host_matches(std::string_view pattern, std::string_view host);

}  // namespace sluice::http
