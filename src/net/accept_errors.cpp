#include "net/accept_errors.hpp"

#include <sys/resource.h>

#include <atomic>
#include <cerrno>

#include <spdlog/spdlog.h>

namespace sluice::net {

bool accept_exhausted(const boost::system::error_code& ec) {
    if (ec.category() != boost::system::system_category()) return false;
    switch (ec.value()) {
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
        return true;
    default:
        return false;
    }
}

void warn_accept_failed(std::string_view where, const boost::system::error_code& ec) {
    static std::atomic<long> last_second{-1};
    static std::atomic<unsigned long> quiet{0};
    const long now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
    long last = last_second.load(std::memory_order_relaxed);
    if (last == now || !last_second.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
        quiet.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    const unsigned long unlogged = quiet.exchange(0, std::memory_order_relaxed);
    if (unlogged == 0)
        spdlog::warn("{}: accept failed: {}", where, ec.message());
    else
        spdlog::warn("{}: accept failed: {} ({} more failures since the last such line)", where, ec.message(),
                     unlogged);
}

unsigned long raise_descriptor_limit(std::size_t connections) {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
    if (limit.rlim_cur != RLIM_INFINITY && (limit.rlim_max == RLIM_INFINITY || limit.rlim_cur < limit.rlim_max)) {
        rlimit raised = limit;
        raised.rlim_cur = limit.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
    }
    if (limit.rlim_cur == RLIM_INFINITY) return 0;
    // The client connections, and some for Redis, the admin port, logs and listeners (a
    // connection being forwarded holds an upstream connection too: these run out first).
    const unsigned long wanted = static_cast<unsigned long>(connections) + 64;
    if (limit.rlim_cur < wanted)
        spdlog::warn("open files are limited to {} (ulimit -n), below server.max_connections ({}): past the limit new "
                     "connections wait in the listen queue until others close",
                     static_cast<unsigned long>(limit.rlim_cur), connections);
    return static_cast<unsigned long>(limit.rlim_cur);
}

}  // namespace sluice::net
