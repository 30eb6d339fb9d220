// The admin port: /metrics (Prometheus), /healthz, /readyz, /stats (a live HTML page),
// /stats.json (what the page polls) and /limits (a key's state, GET; reset, DELETE or
// POST /limits/reset). Runs on the main thread's io_context, never on a worker.
//
// /limits needs `Authorization: Bearer TOKEN` when admin.token is set; without a token its
// resets are served to loopback peers only. The other endpoints are open (monitoring).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "observe/metrics.hpp"
#include "observe/query_string.hpp"
#include "observe/recent_limited.hpp"

namespace sluice::observe {

class AdminServer {
public:
    AdminServer(boost::asio::io_context& io, const Metrics& metrics);
    ~AdminServer();

    // What /limits hands the server, and its answer (JSON).
    struct LimitsCall {
        bool reset = false;
        std::vector<QueryParam> query;
    };
    struct LimitsAnswer {
        unsigned status = 200;
        std::string json;
    };
    // Runs on the admin's io_context; calls `done` exactly once, there.
    using LimitsHandler = std::function<void(LimitsCall, std::function<void(LimitsAnswer)>)>;
    void set_limits_handler(LimitsHandler handler);
    // The clients limited most per route in the last minute, for /stats.json.
    void set_top_limited(std::function<RecentLimited::Top()> provider);
    // admin.token ("" = none); set again on reload.
    void set_token(std::string token);

    // Binds and listens; throws boost::system::system_error (e.g. address in use).
    boost::asio::ip::tcp::endpoint listen(const boost::asio::ip::tcp::endpoint& endpoint);
    void start();
    void stop();  // closes the listener and every admin connection

private:
    struct State;
    std::shared_ptr<State> state_;
};

}  // namespace sluice::observe
