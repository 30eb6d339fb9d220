#include "http/route_match.hpp"

#include <algorithm>
#include <string>

namespace sluice::http {

std::string normalize_host(std::string_view host) {
    if (!host.empty() && host.front() == '[') {
        auto close = host.find(']');
        if (close != std::string_view::npos) host = host.substr(0, close + 1);
    } else if (auto colon = host.rfind(':'); colon != std::string_view::npos) {
        host = host.substr(0, colon);
    }
    std::string out(host);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

bool host_matches(std::string_view pattern, std::string_view host) {
    if (pattern.starts_with("*.")) {
        auto suffix = pattern.substr(1);  // ".example.com"
        return host.size() > suffix.size() && host.ends_with(suffix);
    }
    return pattern == host;
}

const config::RouteConfig* match_route(const std::vector<config::RouteConfig>& routes, std::string_view method,
                                       std::string_view path, std::string_view host) {
    std::string normalized;
    bool normalized_done = false;
    for (const auto& route : routes) {
        const auto& m = route.match;
        if (m.path && path != *m.path) continue;
        if (m.path_prefix && !path.starts_with(*m.path_prefix)) continue;
        if (!m.methods.empty() && std::find(m.methods.begin(), m.methods.end(), method) == m.methods.end()) continue;
        if (m.host) {
            if (!normalized_done) {
                normalized = normalize_host(host);
                normalized_done = true;
            }
            if (!host_matches(*m.host, normalized)) continue;
        }
        return &route;
    }
    return nullptr;
}

}  // namespace sluice::http
