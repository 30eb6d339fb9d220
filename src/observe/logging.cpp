#include "observe/logging.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

#include <spdlog/async.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "observe/access_writer.hpp"
#include "observe/log_time.hpp"

namespace sluice::observe {

namespace {

constexpr std::size_t queue_lines = 16384;
constexpr std::size_t max_thread_batch = 64 * 1024;  // a thread's waiting lines, in bytes

std::unique_ptr<AccessWriter> access_writer;  // null: access_log off
bool access_enabled = true;

// A thread's access lines waiting for its event loop's turn to end.
struct ThreadLines {
    std::string text;
    std::size_t lines = 0;
    bool flush_posted = false;
    std::function<void(std::function<void()>)> post;
};
thread_local ThreadLines thread_lines;

void hand_over(ThreadLines& t) {
    if (t.lines == 0) return;
    if (access_writer) access_writer->submit(std::move(t.text), t.lines);
    t.text = std::string();
    t.lines = 0;
}

}  // namespace

void set_process_log_time(spdlog::logger& log, bool local_time) {
    // Its times as the access and summary lines': RFC 3339 with milliseconds, in UTC ("Z"), or
    // with logging.time_zone: local in local time with its offset.
    if (local_time)
        log.set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v", spdlog::pattern_time_type::local);
    else
        log.set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %^%l%$ %v", spdlog::pattern_time_type::utc);
}

void setup_logging(const config::LoggingConfig& logging) {
    spdlog::init_thread_pool(queue_lines, 1);
    auto pool = spdlog::thread_pool();
    const auto policy = spdlog::async_overflow_policy::overrun_oldest;

    auto process_log = std::make_shared<spdlog::async_logger>(
        "sluice", std::make_shared<spdlog::sinks::stderr_sink_mt>(), pool, policy);
    set_process_log_time(*process_log, logging.local_time);
    process_log->set_level(spdlog::level::from_str(logging.level));
    process_log->flush_on(spdlog::level::trace);
    spdlog::set_default_logger(process_log);

    access_enabled = logging.access_log != "off";
    if (!access_enabled) return;
    if (logging.access_log == "stdout") {
        access_writer = std::make_unique<AccessWriter>(STDOUT_FILENO, std::string(), queue_lines);
        return;
    }
    const int fd = ::open(logging.access_log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) throw std::runtime_error("cannot open " + logging.access_log + " for writing: " + std::strerror(errno));
    access_writer = std::make_unique<AccessWriter>(fd, logging.access_log, queue_lines);
}

bool access_log_enabled() { return access_enabled && access_writer != nullptr; }

void log_access(const AccessRecord& r, const config::LoggingConfig& logging) {
    if (!access_log_enabled()) return;
    const std::string time = log_time(std::chrono::system_clock::now(), logging.local_time);
    write_access_line(logging.format == config::LogFormat::json ? format_access_json(r, logging.access_format, time)
                                                                : format_access_text(r, logging.access_format, time));
}

void write_access_line(std::string_view line) {
    if (!access_log_enabled()) return;
    auto& t = thread_lines;
    t.text.append(line);
    t.text.push_back('\n');
    ++t.lines;
    if (!t.post || t.text.size() >= max_thread_batch) {
        hand_over(t);
        return;
    }
    if (!t.flush_posted) {
        t.flush_posted = true;
        t.post([] { flush_access_lines(); });
    }
}

void set_access_line_poster(std::function<void(std::function<void()>)> post) { thread_lines.post = std::move(post); }

void flush_access_lines() {
    auto& t = thread_lines;
    t.flush_posted = false;
    hand_over(t);
}

void reopen_access_log() {
    if (access_writer) access_writer->reopen();
}

std::uint64_t dropped_log_lines() {
    auto pool = spdlog::thread_pool();
    return (pool ? pool->overrun_counter() : 0) + (access_writer ? access_writer->dropped() : 0);
}

void log_summary_line(const std::string& line) {
    if (access_log_enabled()) {
        write_access_line(line);
    } else {
        spdlog::info(line);
    }
}

void stop_logging() {
    if (access_writer) access_writer->stop();
    spdlog::shutdown();
}

}  // namespace sluice::observe
