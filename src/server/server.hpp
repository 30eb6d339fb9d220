// The main thread's part: workers, listeners, signals and graceful stop.
#pragma once

#include <memory>
#include <string>

#include "config/config.hpp"

namespace sluice::server {

// Runs until SIGTERM/SIGINT; returns the process exit code (0, or 2 on a start-up error).
int run_server(std::shared_ptr<const config::Config> config);

}  // namespace sluice::server
