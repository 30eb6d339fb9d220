// Idle keep-alive connections to upstream servers, owned by one worker (no locks).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/steady_timer.hpp>

namespace sluice::http {

struct UpstreamConnection;  // http/upstream_connection.hpp

class UpstreamPool {
public:
    static constexpr std::chrono::milliseconds default_surplus_idle_time{1000};

    // Closing surplus connections (see put) is timed on `ex`, the owning worker's executor.
    explicit UpstreamPool(const boost::asio::any_io_executor& ex,
                          std::chrono::milliseconds surplus_idle_time = default_surplus_idle_time);
    ~UpstreamPool();

    // An idle connection to `key` that still looks usable (not idle too long, not closed by
    // the peer, and nothing unsolicited on it), or nullptr. Every connection is looked at
    // (one system call): bytes a server sent past its last response, say the body of a
    // response to HEAD that came in a later packet, would otherwise be read as the answer
    // to the next client's request.
    std::unique_ptr<UpstreamConnection> take(const std::string& key);

    // Takes back `conn` after a complete response it framed itself (the server keeps the
    // connection open). Bytes read past that response mean the server is out of step: the
    // connection is closed. Otherwise it is kept for reuse. Up to `max_idle` connections to
    // its server stay as long as they are usable; more are surplus, and a surplus connection
    // idle for the surplus idle time (a second) is closed, oldest first. A burst of
    // concurrent requests then finds the connections the previous burst opened, rather than
    // one opened and closed per request beyond max_idle (HAProxy purges idle connections
    // gradually for the same reason).
    void put(std::unique_ptr<UpstreamConnection> conn, std::size_t max_idle);

    // Closes every idle connection (reload: the servers may have changed).
    void clear();
    // clear(), and from now on put() closes what it is given (the worker is stopping).
    void shut();
    std::size_t idle_count() const;

private:
    struct Idle {
        std::vector<std::unique_ptr<UpstreamConnection>> list;  // oldest first
        std::size_t max_idle = 0;
    };
    void trim_surplus();
    void arm_trim(std::chrono::steady_clock::time_point at);

    std::chrono::milliseconds surplus_idle_time_;
    std::unordered_map<std::string, Idle> idle_;
    boost::asio::steady_timer trim_timer_;
    std::chrono::steady_clock::time_point trim_at_{};  // when armed; epoch when not
    bool shut_ = false;
};

}  // namespace sluice::http
