#include "config/route_shadowing.hpp"

#include <algorithm>

namespace sluice::config {
namespace {

bool paths_covered(const RouteMatch& earlier, const RouteMatch& later) {
    const std::optional<std::string>& later_path = later.path ? later.path : later.path_prefix;
    if (!later_path) return false;
    if (earlier.path_prefix) return later_path->starts_with(*earlier.path_prefix);
    return earlier.path && later.path && *earlier.path == *later.path;
}

bool methods_covered(const RouteMatch& earlier, const RouteMatch& later) {
    if (earlier.methods.empty()) return true;
    if (later.methods.empty()) return false;
    return std::all_of(later.methods.begin(), later.methods.end(), [&](const std::string& method) {
        return std::find(earlier.methods.begin(), earlier.methods.end(), method) != earlier.methods.end();
    });
}

bool host_covered(const RouteMatch& earlier, const RouteMatch& later) {
    return !earlier.host || earlier.host == later.host;
}

}  // namespace

bool route_shadows(const RouteMatch& earlier, const RouteMatch& later) {
    return paths_covered(earlier, later) && methods_covered(earlier, later) && host_covered(earlier, later);
}

}  // namespace sluice::config
