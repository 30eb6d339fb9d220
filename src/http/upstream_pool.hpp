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
    // An idle connection to `key` that still looks usable (not closed by the peer,
    // not idle too long), or nullptr.
    std::unique_ptr<UpstreamConnection> take(const std::string& key);

    // Keeps `conn` for reuse unless `max_idle` connections to its server are kept already.
    void put(std::unique_ptr<UpstreamConnection> conn, std::size_t max_idle);

    void clear() { idle_.clear(); }
    std::size_t idle_count() const;

private:
    std::unordered_map<std::string, std::vector<std::unique_ptr<UpstreamConnection>>> idle_;
};

}  // namespace sluice::http
