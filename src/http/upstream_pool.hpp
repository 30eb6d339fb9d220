// Idle keep-alive connections to upstream servers, owned by one worker (no locks).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

namespace sluice::http {

struct UpstreamConnection {
    explicit UpstreamConnection(const boost::asio::any_io_executor& ex) : stream(ex) {}
    boost::beast::tcp_stream stream;
    boost::beast::flat_buffer buffer;  // bytes read past a response (must stay empty between uses)
    std::string key;                   // server "host:port"
    std::chrono::steady_clock::time_point idle_since;
    unsigned uses = 0;
};

class UpstreamPool {
public:
    // An idle connection to `key` that still looks usable (not idle too long, and not closed
    // by the peer), or nullptr. Looking at the peer costs a system call; with `retryable`
    // (the caller resends a request without a body once on a fresh connection when a pooled
    // one turns out closed) it is skipped for connections idle under a second: a server
    // closes those only when it stops, and never sends unsolicited bytes on them (a 408 on
    // an idle timeout comes after seconds).
    std::unique_ptr<UpstreamConnection> take(const std::string& key, bool retryable = false);

    // Keeps `conn` for reuse unless `max_idle` connections to its server are kept already.
    void put(std::unique_ptr<UpstreamConnection> conn, std::size_t max_idle);

    void clear() { idle_.clear(); }
    std::size_t idle_count() const;

private:
    std::unordered_map<std::string, std::vector<std::unique_ptr<UpstreamConnection>>> idle_;
};

}  // namespace sluice::http
