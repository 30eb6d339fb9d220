// The admin port: /metrics (Prometheus), /healthz, /readyz, /stats (a live HTML page) and
// /stats.json (what the page polls). Runs on the main thread's io_context, never on a worker.
#pragma once

#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "observe/metrics.hpp"

namespace sluice::observe {

class AdminServer {
public:
    AdminServer(boost::asio::io_context& io, const Metrics& metrics);
    ~AdminServer();

    // Binds and listens; throws boost::system::system_error (e.g. address in use).
    boost::asio::ip::tcp::endpoint listen(const boost::asio::ip::tcp::endpoint& endpoint);
    void start();
    void stop();  // closes the listener and every admin connection

private:
    struct State;
    std::shared_ptr<State> state_;
};

}  // namespace sluice::observe
