// Reads and validates the YAML configuration. Every problem is collected with its position,
// so `sluice --check` can list them all at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "config/diagnostic.hpp"

namespace sluice::config {

struct LoadResult {
    std::shared_ptr<const Config> config;  // null when there is any error (warnings do not count)
    std::vector<Diagnostic> diagnostics;   // errors and warnings, in file order
    bool io_error = false;                 // the file could not be read
    bool ok() const { return config != nullptr; }
};

LoadResult load_file(const std::string& path);

// Every key the loader knows, by where it sits: "" is the top level, then "server",
// "server.listen[]", "upstreams.NAME", "routes[].limits[]" and so on (docs/configuration.md
// names each one as section.key, and a test holds the two together).
std::vector<std::pair<std::string, std::vector<std::string_view>>> known_keys();
// `name` stands for the file in diagnostics and in Config::source_path.
LoadResult load_string(std::string_view yaml, const std::string& name);

// A plan map (routes[].plan_map, named `name` in its diagnostics; CSV when the name ends in
// .csv, else YAML): its clients into `plans` (by_identity, and a set of limits for each client
// with overrides), whose sets already hold the top-level `top` plans. Errors leave the entry out.
std::vector<Diagnostic> read_plan_map_file(std::string_view text, const std::string& name,
                                           const std::vector<PlanConfig>& top, RoutePlans& plans);
// A running route's plans with its map file read again, the rest as they are (the top-level
// `top` plans of the running configuration): set in `out` when the map has no errors.
std::vector<Diagnostic> reread_plan_map(const std::vector<PlanConfig>& top, const RoutePlans& running,
                                        std::shared_ptr<const RoutePlans>& out);

}  // namespace sluice::config
