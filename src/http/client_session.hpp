// One client connection, from accept to close, on one worker.
#pragma once

#include <boost/asio/ip/tcp.hpp>

namespace sluice::server {
class Worker;
}

namespace sluice::http {

class ClientSession {
public:
    virtual ~ClientSession() = default;
    // Graceful stop: close now if waiting for a request, else after the current response.
    virtual void stop_if_idle() = 0;
    // shutdown_timeout passed: the requests under way are logged now (abandon, exchange.hpp);
    // the worker's loop stops next, and nothing more of this connection runs.
    virtual void abandon() = 0;
};

// `listener`: the index of the server.listen entry the connection came in on; a TLS
// listener's connection starts with the TLS handshake.
void start_client_session(server::Worker& worker, boost::asio::ip::tcp::socket socket, std::size_t listener);

}  // namespace sluice::http
