// Logging set-up. The process log (spdlog) goes to stderr, the access log (and the summary
// lines) to stdout, a file or nowhere. Both are asynchronous with a bounded queue: a worker
// never waits for a log write; when the queue is full the oldest lines are dropped and
// counted. The access log has a writer thread of its own, which takes every line queued at
// once and writes them with one system call; a worker hands over the lines of one turn of
// its event loop together (write_access_line, flush_access_lines).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "observe/access_log.hpp"

namespace spdlog {
class logger;
}

namespace sluice::observe {

// Throws std::runtime_error when the access log file cannot be opened.
void setup_logging(const config::LoggingConfig& logging);
// The process log's times in UTC or, `local_time`, in local time with its offset (at start,
// and on a reload that changes logging.time_zone).
void set_process_log_time(spdlog::logger& log, bool local_time);

// Whether access lines go anywhere (access_log is not off).
bool access_log_enabled();
// The request's access line, timed now, in the configured form (no-op when access_log is off).
void log_access(const AccessRecord& r, const config::LoggingConfig& logging);
// One access line (without its newline). On a thread that set a poster it waits with the
// thread's other lines until the posted flush (the end of the event loop's turn) or until they
// are 64 KB; elsewhere it is handed to the writer at once.
void write_access_line(std::string_view line);
// This thread's event loop: `post` runs a function there later (a worker's io_context).
void set_access_line_poster(std::function<void(std::function<void()>)> post);
// Hands this thread's waiting access lines to the writer (the posted flush; a worker's thread
// calls it once more as it ends).
void flush_access_lines();

// Reopens the access log file (SIGUSR1, after logrotate moved it). No-op for stdout/off.
void reopen_access_log();

// Lines dropped because a queue was full (or the access log could not be written), since start.
std::uint64_t dropped_log_lines();

// A summary line goes where the access log goes; to the process log when that is off.
void log_summary_line(const std::string& line);

// Flushes and stops the logging thread (at exit).
void stop_logging();

}  // namespace sluice::observe
