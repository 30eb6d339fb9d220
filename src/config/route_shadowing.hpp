// Whether an earlier route takes every request a later route would get (so the later one is dead).
#pragma once

#include "config/config.hpp"

namespace sluice::config {

// True when every request matching `later` also matches `earlier`, judged conservatively:
// earlier's path_prefix is a prefix of later's path or path_prefix (or both are the same exact
// path), earlier's methods are empty or include all of later's (later must list some), and
// earlier has no host or the same host.
bool route_shadows(const RouteMatch& earlier, const RouteMatch& later);

}  // namespace sluice::config
