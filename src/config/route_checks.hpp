// Checks between routes, limits and upstreams, once every route has been read.
#pragma once

#include <vector>

#include "config/config.hpp"
#include "config/diagnostic.hpp"

namespace sluice::config {

// Where a route's pieces are in the file; the positions the checks below point at.
struct RouteSite {
    Position at;                         // the route entry
    Position name_at;
    Position upstream_at;
    std::vector<Position> limit_name_at;  // one per RouteConfig::limits entry
    bool match_valid = false;             // only routes with a valid match are judged for shadowing
};

// Fills RouteConfig::upstream_index. Errors: a duplicate route name, a duplicate limit name
// within a route, an upstream that is not defined. Warning: a route that an earlier route
// shadows (route_shadows). Empty names (already reported as missing) are skipped.
void check_routes(std::vector<RouteConfig>& routes, const std::vector<RouteSite>& sites,
                  const std::vector<UpstreamConfig>& upstreams, DiagnosticList& diagnostics);

}  // namespace sluice::config
