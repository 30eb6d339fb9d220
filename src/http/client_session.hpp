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
};

void start_client_session(server::Worker& worker, boost::asio::ip::tcp::socket socket);

}  // namespace sluice::http
