// One connection to an upstream server, plain or TLS, as the pool keeps it.
#pragma once

#include <chrono>
#include <string>

#include <boost/beast/core/flat_buffer.hpp>

#include "http/stream.hpp"

namespace sluice::http {

struct UpstreamConnection {
    explicit UpstreamConnection(const boost::asio::any_io_executor& ex) : stream(ex) {}
    Stream stream;
    boost::beast::flat_buffer buffer;  // bytes read past a response (must stay empty between uses)
    std::string key;                   // server "host:port"
    std::chrono::steady_clock::time_point idle_since;
    unsigned uses = 0;                 // responses completed on it (counted by UpstreamPool::put)
};

}  // namespace sluice::http
