#include "observe/admin_server.hpp"

#include <chrono>
#include <unordered_set>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "observe/stats_page.hpp"

namespace sluice::observe {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

namespace {

constexpr auto nothrow = net::as_tuple(net::use_awaitable);

struct Answer {
    bhttp::status status = bhttp::status::ok;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
};

}  // namespace

struct AdminServer::State : std::enable_shared_from_this<State> {
    State(net::io_context& io, const Metrics& m) : io(io), metrics(m), acceptor(io) {}

    net::io_context& io;
    const Metrics& metrics;
    tcp::acceptor acceptor;
    std::unordered_set<beast::tcp_stream*> connections;
    const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

    // " (down: ADDRESS ROLE, ...)" when the store has nodes that are down.
    std::string nodes_down() const {
        std::string down;
        for (const auto& n : metrics.store_nodes()) {
            if (n.up) continue;
            down += (down.empty() ? " (down: " : ", ") + n.address + " " + n.role;
        }
        return down.empty() ? down : down + ")";
    }

    Answer answer(std::string_view path) const {
        Answer a;
        if (path == "/metrics") {
            a.content_type = "text/plain; version=0.0.4; charset=utf-8";
            a.body = prometheus_text(metrics);
        } else if (path == "/healthz") {
            a.body = "ok\n";
        } else if (path == "/readyz") {
            const bool alive = metrics.workers_alive();
            const bool ready = alive && metrics.store_ready();
            a.status = ready ? bhttp::status::ok : bhttp::status::service_unavailable;
            a.body = ready    ? "ready\n"
                     : !alive ? "not ready: a worker thread has stopped\n"
                              : "not ready: the rate-limit store does not answer" + nodes_down() + "\n";
        } else if (path == "/stats") {
            a.content_type = "text/html; charset=utf-8";
            a.body = std::string(stats_page_html);
        } else if (path == "/stats.json") {
            a.content_type = "application/json";
            a.body = stats_json(metrics, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
        } else {
            a.status = bhttp::status::not_found;
            a.body = "not found: try /metrics, /healthz, /readyz, /stats or /stats.json\n";
        }
        return a;
    }

    // `self` is a parameter, so the coroutine frame owns it from the start.
    static net::awaitable<void> serve(std::shared_ptr<State> self, tcp::socket socket) {
        auto& connections = self->connections;
        beast::tcp_stream stream(std::move(socket));
        connections.insert(&stream);
        beast::flat_buffer buffer;
        while (true) {
            bhttp::request_parser<bhttp::empty_body> parser;
            parser.header_limit(16 * 1024);
            stream.expires_after(std::chrono::seconds(30));
            auto [ec, n] = co_await bhttp::async_read(stream, buffer, parser, nothrow);
            if (ec) break;
            const auto& req = parser.get();
            bhttp::response<bhttp::string_body> res;
            if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head) {
                res.result(bhttp::status::method_not_allowed);
                res.set(bhttp::field::allow, "GET, HEAD");
                res.set(bhttp::field::content_type, "text/plain; charset=utf-8");
                res.body() = "only GET and HEAD\n";
            } else {
                std::string_view target(req.target().data(), req.target().size());
                auto a = self->answer(target.substr(0, target.find('?')));
                res.result(a.status);
                res.set(bhttp::field::content_type, a.content_type);
                res.body() = std::move(a.body);
            }
            res.set(bhttp::field::server, "sluice-admin");
            res.set(bhttp::field::cache_control, "no-store");
            res.version(req.version());
            res.keep_alive(req.keep_alive());
            res.prepare_payload();
            if (req.method() == bhttp::verb::head) res.body().clear();
            auto [wec, wn] = co_await bhttp::async_write(stream, res, nothrow);
            if (wec || !req.keep_alive()) break;
        }
        connections.erase(&stream);
        beast::error_code ignored;
        stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    }

    void accept() {
        acceptor.async_accept([self = shared_from_this()](boost::system::error_code ec, tcp::socket socket) {
            if (!self->acceptor.is_open()) return;
            if (!ec) net::co_spawn(self->io, serve(self, std::move(socket)), net::detached);
            self->accept();
        });
    }
};

AdminServer::AdminServer(net::io_context& io, const Metrics& metrics) : state_(std::make_shared<State>(io, metrics)) {}

AdminServer::~AdminServer() { stop(); }

tcp::endpoint AdminServer::listen(const tcp::endpoint& endpoint) {
    auto& a = state_->acceptor;
    a.open(endpoint.protocol());
    a.set_option(net::socket_base::reuse_address(true));
    a.bind(endpoint);
    a.listen();
    return a.local_endpoint();
}

void AdminServer::start() { state_->accept(); }

void AdminServer::stop() {
    boost::system::error_code ec;
    state_->acceptor.close(ec);
    for (auto* stream : state_->connections) stream->socket().close(ec);
}

}  // namespace sluice::observe
