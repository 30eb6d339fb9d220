#include "observe/logging.hpp"

#include <mutex>

#include <spdlog/async.h>
#include <spdlog/details/file_helper.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace sluice::observe {

namespace {

constexpr std::size_t queue_lines = 16384;

// A file sink that can reopen its file by name (for logrotate's move-then-signal).
class ReopenableFileSink final : public spdlog::sinks::base_sink<std::mutex> {
public:
    explicit ReopenableFileSink(const std::string& path) { file_.open(path, false); }
    void reopen() {
        std::lock_guard lock(mutex_);
        file_.reopen(false);
    }

protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        spdlog::memory_buf_t formatted;
        formatter_->format(msg, formatted);
        file_.write(formatted);
    }
    void flush_() override { file_.flush(); }

private:
    spdlog::details::file_helper file_;
};

std::shared_ptr<ReopenableFileSink> access_file;
bool access_enabled = true;

}  // namespace

void setup_logging(const config::LoggingConfig& logging) {
    spdlog::init_thread_pool(queue_lines, 1);
    auto pool = spdlog::thread_pool();
    const auto policy = spdlog::async_overflow_policy::overrun_oldest;

    auto process_log = std::make_shared<spdlog::async_logger>(
        "sluice", std::make_shared<spdlog::sinks::stderr_sink_mt>(), pool, policy);
    process_log->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    process_log->set_level(spdlog::level::from_str(logging.level));
    process_log->flush_on(spdlog::level::trace);
    spdlog::set_default_logger(process_log);

    spdlog::sink_ptr sink;
    access_enabled = logging.access_log != "off";
    if (!access_enabled) {
        sink = std::make_shared<spdlog::sinks::null_sink_mt>();
    } else if (logging.access_log == "stdout") {
        sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
    } else {
        access_file = std::make_shared<ReopenableFileSink>(logging.access_log);
        sink = access_file;
    }
    auto access = std::make_shared<spdlog::async_logger>("access", sink, pool, policy);
    access->set_pattern("%v");
    access->set_level(access_enabled ? spdlog::level::info : spdlog::level::off);
    access->flush_on(spdlog::level::info);
    spdlog::register_logger(access);
}

void reopen_access_log() {
    if (access_file) access_file->reopen();
}

std::uint64_t dropped_log_lines() {
    auto pool = spdlog::thread_pool();
    return pool ? pool->overrun_counter() : 0;
}

void log_summary_line(const std::string& line) {
    if (access_enabled) {
        if (auto access = spdlog::get("access")) access->info(line);
    } else {
        spdlog::info(line);
    }
}

void stop_logging() { spdlog::shutdown(); }

}  // namespace sluice::observe
