#include "observe/admin_server.hpp"

#include <cctype>
#include <chrono>
#include <list>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "net/accept_errors.hpp"
#include "observe/admin_origin.hpp"
#include "observe/stats_page.hpp"

namespace sluice::observe {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

namespace {

constexpr auto nothrow = net::as_tuple(net::use_awaitable);

// Connections the admin port holds open at once (each is kept up to 30 s between requests):
// enough for scrapers, probes and a few /stats pages, far below the process's descriptors.
// Past it the oldest is closed for the newest: whoever holds 128 open cannot keep a health
// probe out.
constexpr std::size_t max_admin_connections = 128;

// One connection being served, in the order they came (State::connections).
struct AdminConnection {
    beast::tcp_stream* stream;
    bool listed = true;  // in State::connections (false: closed to make room)
};

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
    std::list<AdminConnection*> connections;  // oldest first
    std::size_t open_connections = 0;  // accepted, not yet ended or closed for room (counted before serve runs)
    LimitsHandler limits;
    std::string token;
    std::function<RecentLimited::Top()> top_limited;
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
            a.body = stats_json(metrics, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                                top_limited ? top_limited() : RecentLimited::Top{});
        } else {
            a.status = bhttp::status::not_found;
            a.body = "not found: try /metrics, /healthz, /readyz, /stats or /stats.json\n";
        }
        return a;
    }

    // Whether `authorization` is "Bearer <token>" (the scheme in any case), compared in
    // constant time.
    bool authorized(std::string_view authorization) const {
        constexpr std::string_view scheme = "bearer ";
        if (authorization.size() < scheme.size()) return false;
        for (std::size_t i = 0; i < scheme.size(); ++i)
            if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i]) return false;
        const auto given = authorization.substr(scheme.size());
        unsigned char differ = given.size() == token.size() ? 0 : 1;
        for (std::size_t i = 0; i < token.size(); ++i)
            differ |= static_cast<unsigned char>(token[i] ^ (i < given.size() ? given[i] : 0));
        return differ == 0;
    }

    // /limits and /limits/reset: method, token or loopback, query; then the server's answer.
    net::awaitable<Answer> limits_answer(const bhttp::request<bhttp::empty_body>& req, std::string_view target,
                                         beast::tcp_stream& stream) {
        Answer a;
        a.content_type = "application/json";
        const auto path = target.substr(0, target.find('?'));
        const auto method = req.method();
        const bool reset = (path == "/limits" && method == bhttp::verb::delete_) ||
                           (path == "/limits/reset" && method == bhttp::verb::post);
        const bool look = path == "/limits" && (method == bhttp::verb::get || method == bhttp::verb::head);
        auto fail = [&](bhttp::status status, const std::string& message) {
            a.status = status;
            a.body = "{\"error\":\"" + message + "\"}\n";
            return a;
        };
        if (!reset && !look) co_return fail(bhttp::status::method_not_allowed, "method not allowed here");
        if (!token.empty()) {
            const auto it = req.find(bhttp::field::authorization);
            if (it == req.end() || !authorized(std::string_view(it->value().data(), it->value().size())))
                co_return fail(bhttp::status::unauthorized, "a bearer token is needed (admin.token)");
        } else if (reset) {
            boost::system::error_code ec;
            const auto peer = stream.socket().remote_endpoint(ec);
            auto address = peer.address();
            if (address.is_v6() && address.to_v6().is_v4_mapped())
                address = net::ip::make_address_v4(net::ip::v4_mapped, address.to_v6());
            if (ec || !address.is_loopback())
                co_return fail(bhttp::status::forbidden, "resets are served to loopback only unless admin.token is set");
        }
        if (!limits) co_return fail(bhttp::status::not_found, "no limits here");
        std::string error;
        const auto q = target.find('?');
        auto query = parse_query(q == std::string_view::npos ? std::string_view() : target.substr(q + 1), error);
        if (!query) co_return fail(bhttp::status::bad_request, error);
        auto answer = co_await net::async_initiate<decltype(net::use_awaitable), void(LimitsAnswer)>(
            [&](auto handler) {
                auto shared = std::make_shared<decltype(handler)>(std::move(handler));
                limits(LimitsCall{reset, std::move(*query)}, [shared](LimitsAnswer answer) { (*shared)(std::move(answer)); });
            },
            net::use_awaitable);
        a.status = static_cast<bhttp::status>(answer.status);
        a.body = std::move(answer.json);
        co_return a;
    }

    // `self` is a parameter, so the coroutine frame owns it from the start.
    static net::awaitable<void> serve(std::shared_ptr<State> self, tcp::socket socket) {
        beast::tcp_stream stream(std::move(socket));
        AdminConnection connection{&stream};
        const auto listed = self->connections.insert(self->connections.end(), &connection);
        struct Held {  // however the coroutine ends
            State& state;
            AdminConnection& connection;
            std::list<AdminConnection*>::iterator listed;
            ~Held() {
                if (!connection.listed) return;  // (closed for room: counted off then)
                state.connections.erase(listed);
                --state.open_connections;
            }
        } held{*self, connection, listed};
        beast::flat_buffer buffer;
        while (true) {
            bhttp::request_parser<bhttp::empty_body> parser;
            parser.header_limit(16 * 1024);
            stream.expires_after(std::chrono::seconds(30));
            auto [ec, n] = co_await bhttp::async_read(stream, buffer, parser, nothrow);
            if (ec) break;
            const auto& req = parser.get();
            bhttp::response<bhttp::string_body> res;
            std::string_view target(req.target().data(), req.target().size());
            const auto path = target.substr(0, target.find('?'));
            const auto field = [&req](bhttp::field name) {
                const auto it = req.find(name);
                return it == req.end() ? std::string_view() : std::string_view(it->value().data(), it->value().size());
            };
            const auto sec_fetch_site = [&req] {
                const auto it = req.find("Sec-Fetch-Site");
                return it == req.end() ? std::string_view() : std::string_view(it->value().data(), it->value().size());
            };
            if (const auto refusal =
                    admin_browser_refusal(field(bhttp::field::host), field(bhttp::field::origin), sec_fetch_site())) {
                res.result(bhttp::status::forbidden);
                res.set(bhttp::field::content_type, "text/plain; charset=utf-8");
                res.body() = *refusal + "\n";
            } else if (path == "/limits" || path == "/limits/reset") {
                auto a = co_await self->limits_answer(req, target, stream);
                res.result(a.status);
                res.set(bhttp::field::content_type, a.content_type);
                if (a.status == bhttp::status::unauthorized)
                    res.set(bhttp::field::www_authenticate, "Bearer realm=\"sluice-admin\"");
                if (a.status == bhttp::status::method_not_allowed)
                    res.set(bhttp::field::allow, path == "/limits" ? "GET, HEAD, DELETE" : "POST");
                res.body() = std::move(a.body);
            } else if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head) {
                res.result(bhttp::status::method_not_allowed);
                res.set(bhttp::field::allow, "GET, HEAD");
                res.set(bhttp::field::content_type, "text/plain; charset=utf-8");
                res.body() = "only GET and HEAD\n";
            } else {
                auto a = self->answer(path);
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
        beast::error_code ignored;
        stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    }

    void accept() {
        acceptor.async_accept([self = shared_from_this()](boost::system::error_code ec, tcp::socket socket) {
            if (!self->acceptor.is_open()) return;
            if (ec) {
                sluice::net::warn_accept_failed("admin", ec);
                if (sluice::net::accept_exhausted(ec)) {
                    auto pause = std::make_shared<net::steady_timer>(self->io, sluice::net::accept_pause);
                    pause->async_wait([self, pause](boost::system::error_code) {
                        if (self->acceptor.is_open()) self->accept();
                    });
                    return;
                }
            } else if (self->open_connections >= max_admin_connections && self->connections.empty()) {
                // (All of them still starting: none to close for room.)
                boost::system::error_code ignored;
                socket.close(ignored);
                self->refused_connections();
            } else {
                if (self->open_connections >= max_admin_connections) {
                    // Whoever holds this many open does not get the process's descriptors too,
                    // nor keeps a new one (a health probe) out: the oldest makes room.
                    AdminConnection* oldest = self->connections.front();
                    self->connections.pop_front();
                    oldest->listed = false;
                    --self->open_connections;
                    boost::system::error_code ignored;
                    oldest->stream->socket().close(ignored);
                    self->refused_connections();
                }
                ++self->open_connections;
                net::co_spawn(self->io, serve(self, std::move(socket)), net::detached);
            }
            self->accept();
        });
    }

    void refused_connections() {
        const auto now = std::chrono::steady_clock::now();
        if (now - last_refusal_warning < std::chrono::seconds(1)) return;
        last_refusal_warning = now;
        spdlog::warn("admin: {} connections are open: closing the oldest for each new one", max_admin_connections);
    }
    std::chrono::steady_clock::time_point last_refusal_warning{};
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

void AdminServer::set_limits_handler(LimitsHandler handler) { state_->limits = std::move(handler); }

void AdminServer::set_token(std::string token) { state_->token = std::move(token); }

void AdminServer::set_top_limited(std::function<RecentLimited::Top()> provider) {
    state_->top_limited = std::move(provider);
}

void AdminServer::stop() {
    boost::system::error_code ec;
    state_->acceptor.close(ec);
    for (auto* connection : state_->connections) connection->stream->socket().close(ec);
}

}  // namespace sluice::observe
