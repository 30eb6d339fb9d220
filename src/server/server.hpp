// The main thread's part: workers, listeners, signals and graceful stop.
#pragma once

#include <memory>
#include <string>

#include "config/config.hpp"

namespace sluice::server {

// Runs until SIGTERM/SIGINT; returns the process exit code (0, or 2 on a start-up error).
int run_server(std::shared_ptr<const config::Config> config);

// From the start of main until the server takes its signals over: SIGHUP and SIGUSR1, whose
// default action ends the process, are noted instead (a reload sent right after a start,
// while a large configuration loads), and run_server acts on them once it has started: a
// reload (the file read again) and the access log reopened.
void note_early_signals();

}  // namespace sluice::server
