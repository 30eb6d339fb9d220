#include "config/route_checks.hpp"

#include <map>
#include <string>

#include "config/message_text.hpp"
#include "config/route_shadowing.hpp"
#include "config/spelling_suggestion.hpp"

namespace sluice::config {
namespace {

std::string line_of(Position at) { return "line " + std::to_string(at.line); }

void check_route_names(const std::vector<RouteConfig>& routes, const std::vector<RouteSite>& sites,
                       DiagnosticList& diagnostics) {
    std::map<std::string, Position, std::less<>> first_seen;
    for (std::size_t i = 0; i < routes.size(); ++i) {
        if (routes[i].name.empty()) continue;
        const auto [it, inserted] = first_seen.try_emplace(routes[i].name, sites[i].name_at);
        if (!inserted)
            diagnostics.error(sites[i].name_at, "duplicate route name " + quoted(routes[i].name) +
                                                    " (first used at " + line_of(it->second) + ")");
    }
}

void check_limit_names(const RouteConfig& route, const RouteSite& site, DiagnosticList& diagnostics) {
    std::map<std::string, Position, std::less<>> first_seen;
    for (std::size_t i = 0; i < route.limits.size(); ++i) {
        const std::string& name = route.limits[i].name;
        if (name.empty()) continue;
        const auto [it, inserted] = first_seen.try_emplace(name, site.limit_name_at[i]);
        if (!inserted)
            diagnostics.error(site.limit_name_at[i], "duplicate limit name " + quoted(name) + " in " +
                                                         named("route", route.name) + " (first used at " +
                                                         line_of(it->second) + ")");
    }
}

std::string unknown_upstream_message(const RouteConfig& route, const std::vector<UpstreamConfig>& upstreams) {
    std::string message = named("route", route.name) + " names upstream " + quoted(route.upstream) +
                          ", which is not defined";
    std::vector<std::string_view> names;
    for (const UpstreamConfig& upstream : upstreams) names.push_back(upstream.name);
    if (auto suggestion = closest_spelling(route.upstream, names)) return message + " (did you mean " + quoted(*suggestion) + "?)";
    if (names.empty()) return message + " (the upstreams section defines none)";
    return message;
}

void resolve_upstream(RouteConfig& route, const RouteSite& site, const std::vector<UpstreamConfig>& upstreams,
                      DiagnosticList& diagnostics) {
    if (route.upstream.empty()) return;
    for (std::size_t i = 0; i < upstreams.size(); ++i) {
        if (upstreams[i].name == route.upstream) {
            route.upstream_index = i;
            return;
        }
    }
    diagnostics.error(site.upstream_at, unknown_upstream_message(route, upstreams));
}

void warn_shadowed_route(const std::vector<RouteConfig>& routes, const std::vector<RouteSite>& sites,
                         std::size_t later, DiagnosticList& diagnostics) {
    for (std::size_t earlier = 0; earlier < later; ++earlier) {
        if (!sites[earlier].match_valid || !route_shadows(routes[earlier].match, routes[later].match)) continue;
        diagnostics.warning(sites[later].at, named("route", routes[later].name) +
                                                 " is unreachable: earlier route " + quoted(routes[earlier].name) +
                                                 " (" + line_of(sites[earlier].at) +
                                                 ") matches every request it would match");
        return;
    }
}

}  // namespace

void check_routes(std::vector<RouteConfig>& routes, const std::vector<RouteSite>& sites,
                  const std::vector<UpstreamConfig>& upstreams, DiagnosticList& diagnostics) {
    check_route_names(routes, sites, diagnostics);
    for (std::size_t i = 0; i < routes.size(); ++i) {
        check_limit_names(routes[i], sites[i], diagnostics);
        resolve_upstream(routes[i], sites[i], upstreams, diagnostics);
        if (sites[i].match_valid) warn_shadowed_route(routes, sites, i, diagnostics);
    }
}

}  // namespace sluice::config
