// spdlog set-up. The process log goes to stderr, the access log (and the summary lines) to
// stdout, a file or nowhere. Both are asynchronous with a bounded queue: a worker never
// waits for a log write; when the queue is full the oldest line is dropped and counted.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.hpp"

namespace sluice::observe {

// Throws spdlog::spdlog_ex when the access log file cannot be opened.
void setup_logging(const config::LoggingConfig& logging);

// Reopens the access log file (SIGUSR1, after logrotate moved it). No-op for stdout/off.
void reopen_access_log();

// Lines dropped because the queue was full, since start.
std::uint64_t dropped_log_lines();

// A summary line goes where the access log goes; to the process log when that is off.
void log_summary_line(const std::string& line);

// Flushes and stops the logging thread (at exit).
void stop_logging();

}  // namespace sluice::observe
