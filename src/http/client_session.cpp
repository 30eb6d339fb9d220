// The request path, top to bottom: read head, validate, route, decide, forward, relay,
// loop for keep-alive. One coroutine per client connection, on its worker's io_context.
#include "http/client_session.hpp"

#include <poll.h>

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include "config/value_syntax.hpp"
#include "http/body_reader.hpp"
#include "http/body_writer.hpp"
#include "http/deadlines.hpp"
#include "http/exchange.hpp"
#include "http/h2_session.hpp"
#include "http/head_scan.hpp"
#include "http/header_rules.hpp"
#include "http/limit_verdict.hpp"
#include "http/onward_heads.hpp"
#include "http/problem.hpp"
#include "http/request_head.hpp"
#include "http/request_target.hpp"
#include "http/stream.hpp"
#include "http/tunnel.hpp"
#include "http/upstream_io.hpp"
#include "http/upstream_connection.hpp"
#include "http/route_match.hpp"
#include "limit/client_ip.hpp"
#include "limit/cost.hpp"
#include "limit/limit_params.hpp"
#include "limit/rate_limit_headers.hpp"
#include "net/cidr.hpp"
#include "observe/access_log.hpp"
#include "server/worker.hpp"
#include "tls/context.hpp"

namespace sluice::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;
namespace net_ip = sluice::net;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto nothrow = net::as_tuple(net::use_awaitable);
constexpr std::size_t drain_limit = 64 * 1024;      // unread request body we read and discard to keep the connection
constexpr auto linger_time = std::chrono::seconds(1);  // reading what a client still sends after our final response

// Whether the peer closed (FIN or reset), even with bytes of its still unread: poll's
// POLLRDHUP, which a peek cannot tell behind data.
bool peer_closed(tcp::socket& socket) {
    pollfd p{socket.native_handle(), POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}



// Why a client's handshake failed, for sluice_tls_handshake_failures_total{reason}.
observe::TlsFailure classify_tls_failure(const boost::system::error_code& ec) {
    using observe::TlsFailure;
    if (ec == net::ssl::error::stream_truncated || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::broken_pipe)
        return TlsFailure::closed;
    if (ec.category() != net::error::get_ssl_category()) return TlsFailure::other;
    switch (ERR_GET_REASON(static_cast<unsigned long>(ec.value()))) {
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
        return TlsFailure::plain_http;
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_UNKNOWN_PROTOCOL:
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
        return TlsFailure::protocol_version;
    case SSL_R_NO_SHARED_CIPHER:
    case SSL_R_NO_SHARED_GROUPS:
    case SSL_R_NO_SUITABLE_SIGNATURE_ALGORITHM:
        return TlsFailure::no_shared_cipher;
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
    case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
        return TlsFailure::certificate_rejected;
    default:
        return TlsFailure::other;
    }
}

// Failed handshakes are counted every one; logged at most once per 10 s per worker, with
// the number not logged, so that a scan or a flood does not flood the log.
void warn_tls_failure(std::string_view peer, observe::TlsFailure reason, const std::string& detail) {
    thread_local Clock::time_point last{};
    thread_local std::uint64_t suppressed = 0;
    const auto now = Clock::now();
    if (last != Clock::time_point{} && now - last < std::chrono::seconds(10)) {
        ++suppressed;
        return;
    }
    last = now;
    const auto name = observe::tls_failure_names[static_cast<std::size_t>(reason)];
    if (suppressed == 0)
        spdlog::warn("TLS handshake from {} failed: {} ({})", peer, name, detail);
    else
        spdlog::warn("TLS handshake from {} failed: {} ({}); {} other failed handshakes not logged since the "
                     "last one (sluice_tls_handshake_failures_total counts them all)",
                     peer, name, detail, suppressed);
    suppressed = 0;
}

// A BodyWriter's parts as one gathered write.
std::array<net::const_buffer, 5> gathered(const BodyWriter::Parts& parts) {
    std::array<net::const_buffer, 5> out;
    for (std::size_t i = 0; i < parts.size(); ++i) out[i] = net::buffer(parts[i].data(), parts[i].size());
    return out;
}

class Session final : public ClientSession, public std::enable_shared_from_this<Session> {
public:
    Session(server::Worker& worker, tcp::socket socket, std::shared_ptr<tls::ServerContext> tls, bool http2)
        : worker_(worker),
          http2_(http2),
          tls_(std::move(tls)),
          stream_(tls_ ? Stream(std::move(socket), tls_->context()) : Stream(std::move(socket))),
          timer_(stream_.get_executor()) {
        boost::system::error_code ec;
        auto peer = stream_.socket().remote_endpoint(ec);
        peer_ip_ = ec ? "-" : peer.address().to_string();
        peer_address_ = net_ip::IpAddress::parse(peer_ip_);  // (every request of a trusted proxy asks)
        stream_.socket().set_option(tcp::no_delay(true), ec);
    }

    ~Session() override { worker_.connections().fetch_sub(1); }

    net::awaitable<void> run();

    void abandon() override {
        if (h2_) h2_abandon(*h2_);
        if (exchange_) http::abandon(*exchange_);
    }

    void stop_if_idle() override {
        if (h2_) h2_stop(*h2_);
        if (idle_) {
            boost::system::error_code ec;
            stream_.socket().cancel(ec);
        }
        // A request held back past the point where the server gives up is answered 503 now.
        if (hold_timer_ && held_until_ > worker_.stop_deadline()) {
            hold_cut_ = true;
            hold_timer_->cancel();
        }
    }

private:
    struct Head {
        enum class Kind { ready, closed, timeout, too_large, malformed } kind = Kind::closed;
        std::size_t size = 0;
        std::string_view problem;
    };

    // How holding a request back ended: its time came, its client went away, or the server
    // is stopping and its time would come after shutdown_timeout.
    enum class Hold { done, client_gone, stopping };

    // The request path, phase by phase (a fixed list, not a registry): read_head, then
    // read_request_head (pure), identify_client, route_request, the limits (prepare_limits,
    // the limiter's decide, read_decision), the hold (a
    // leaky bucket's wait), then forward or a check route's 200. A phase that ends the request
    // returns the reply; serve_one writes it, and finish() logs and counts the request once.
    net::awaitable<bool> serve_one(bool first);
    net::awaitable<Head> read_head(bool first);
    net::awaitable<bool> forward(Exchange& x);
    // Writes `answer` (the request is not forwarded). To keep the connection, a request body
    // not read yet is read and discarded first; a large one, or one whose client waits for a
    // 100 Continue to send it, ends the connection instead.
    net::awaitable<bool> reply(const config::ServerConfig& server, LocalReply answer, bool keep_alive,
                               observe::AccessRecord& rec);
    net::awaitable<bool> drain_body(const config::ServerConfig& server);
    // After the upstream's 101 to a WebSocket handshake: the 101 to the client, then bytes
    // both ways until both sides are done, either fails, or nothing moved for
    // server.tunnel_idle_timeout. The connection closes after it.
    net::awaitable<bool> tunnel(const config::Config& cfg, const server::Snapshot& snap,
                                std::unique_ptr<UpstreamConnection> conn, UpstreamResponse& res,
                                const limit::HeaderList& rate_headers, observe::AccessRecord& rec);
    // Answers a request whose body failed (malformed, too large, timed out: `ec`) and ends
    // the connection; false.
    net::awaitable<bool> refuse_request_body(const config::ServerConfig& server, boost::system::error_code ec,
                                             observe::AccessRecord& rec);
    net::awaitable<void> close_gracefully();
    // The connection speaks HTTP/2: ALPN chose h2, or (prior knowledge) it starts with the
    // connection preface, which stays in buffer_ for the HTTP/2 connection.
    net::awaitable<bool> speaks_h2();
    // Holds the request back (a leaky bucket's wait) on a timer: nothing read, no upstream
    // connection held. A plain client that closes meanwhile ends it (TLS ones are not watched).
    net::awaitable<Hold> hold_back(std::chrono::microseconds wait, observe::Metrics& metrics);
    // The server side of a TLS handshake; false (counted and, a few times a minute, logged)
    // when it fails or does not finish within the listener's handshake_timeout.
    net::awaitable<bool> tls_handshake();

    // Deadlines: one timer per connection for both sides (Deadlines says when it waits). On
    // expiry the pending operation is cancelled and timed_out_ (client side) or
    // upstream_timed_out_ (upstream side) tells why.
    void arm(config::Duration d) {
        timed_out_ = false;
        if (deadlines_.arm(Deadlines::Side::client, Clock::now() + d)) start_timer();
    }
    void arm_until(Clock::time_point until) {
        timed_out_ = false;
        if (deadlines_.arm(Deadlines::Side::client, until)) start_timer();
    }
    void disarm() { deadlines_.disarm(Deadlines::Side::client); }
    // Both sides' deadlines as upstream_io's operations take them.
    struct ClientDeadline final : IoDeadline {
        explicit ClientDeadline(Session& s) : session(s) {}
        Session& session;
        void arm(tcp::socket&, Clock::time_point until) override { session.arm_until(until); }
        boost::system::error_code disarm(boost::system::error_code ec) override {
            session.disarm();
            return session.timed_out_ ? beast::error::timeout : ec;
        }
    };
    struct UpstreamDeadline final : IoDeadline {
        explicit UpstreamDeadline(Session& s) : session(s) {}
        Session& session;
        void arm(tcp::socket& socket, Clock::time_point until) override { session.arm_upstream_until(socket, until); }
        boost::system::error_code disarm(boost::system::error_code ec) override { return session.disarm_upstream(ec); }
    };
    // The same for one operation on an upstream connection; disarm before `socket` can go.
    void arm_upstream(tcp::socket& socket, config::Duration d) { arm_upstream_until(socket, Clock::now() + d); }
    void arm_upstream_until(tcp::socket& socket, Clock::time_point deadline) {
        upstream_timed_out_ = false;
        upstream_socket_ = &socket;
        if (deadlines_.arm(Deadlines::Side::upstream, deadline)) start_timer();
    }
    // Disarms; an operation the deadline cancelled reports beast::error::timeout.
    boost::system::error_code disarm_upstream(boost::system::error_code ec) {
        deadlines_.disarm(Deadlines::Side::upstream);
        upstream_socket_ = nullptr;
        if (upstream_timed_out_ && ec == net::error::operation_aborted) return beast::error::timeout;
        return ec;
    }
    // Watches a plain client connection for its end (FIN or reset) while the upstream is
    // answering; pipelined bytes stop the watch (they are read later, as usual). A TLS
    // client is not watched: its bytes cannot be told apart without reading them.
    // The watch is a one-byte MSG_PEEK receive, not a wait for readability: a wait re-arms
    // epoll with epoll_ctl every time, the receive costs one attempt that finds nothing (Asio
    // tries a receive at once on a socket that has read before) and no second receive when
    // the client sends or closes: its result says which. The peek consumes nothing.
    void watch_client() {
        client_gone_ = false;
        if (stream_.is_tls()) return;
        const auto generation = ++client_watch_generation_;
        client_watched_ = true;
        stream_.socket().async_receive(
            net::buffer(&client_peek_, 1), tcp::socket::message_peek,
            [self = shared_from_this(), generation](boost::system::error_code ec, std::size_t n) {
                if (generation != self->client_watch_generation_ || !self->client_watched_) return;
                if (ec == net::error::operation_aborted) return;
                self->client_watched_ = false;
                if (!ec && n > 0) {  // pipelined bytes (or a body): the client is there
                    if (self->hold_timer_) self->hold_timer_->cancel();  // (a hold looks for its close another way)
                    return;
                }
                self->client_gone_ = true;  // end of stream, or reset
                boost::system::error_code ignored;
                if (self->upstream_socket_) self->upstream_socket_->cancel(ignored);
                if (self->hold_timer_) self->hold_timer_->cancel();
            });
    }
    // watch_client for the upstream's answer, should it take a while: a worker tick (50 to
    // 100 ms) later (server::SlowWaits), or at once when the worker is stopping. Most answers
    // come sooner and need no watch; a client gone meanwhile is seen when the watch starts,
    // or when its response is written if that comes first.
    void watch_client_soon() {
        client_gone_ = false;
        if (stream_.is_tls()) return;
        if (worker_.stopping()) return watch_client();
        worker_.slow_waits().add(watch_later_);
    }
    void unwatch_client() {
        watch_later_.unlink();
        ++client_watch_generation_;
        if (!client_watched_) return;
        client_watched_ = false;
        boost::system::error_code ignored;
        stream_.socket().cancel(ignored);  // only the peek is pending on it now
    }

    void stop_timer() {
        ++timer_generation_;
        deadlines_.stopped();
        timer_.cancel();
    }
    void start_timer() {
        auto generation = ++timer_generation_;
        timer_.expires_at(deadlines_.start());  // a wait already pending completes as superseded
        timer_.async_wait([self = shared_from_this(), generation](boost::system::error_code ec) {
            if (generation != self->timer_generation_) return;
            if (ec) {
                self->deadlines_.stopped();
                return;
            }
            const auto fired = self->deadlines_.fire(Clock::now());
            boost::system::error_code ignored;
            if (fired.client) {
                self->timed_out_ = true;
                self->stream_.socket().cancel(ignored);
            }
            if (fired.upstream) {
                self->upstream_timed_out_ = true;
                if (self->upstream_socket_) self->upstream_socket_->cancel(ignored);
            }
            if (fired.again) self->start_timer();
        });
    }

    server::Worker& worker_;
    const bool http2_;  // the listener offers HTTP/2 (ALPN h2 on TLS, prior knowledge on plain)
    std::shared_ptr<H2Connection> h2_;  // the connection is HTTP/2 (serve_h2 runs)
    std::shared_ptr<tls::ServerContext> tls_;  // the listener's, as when the connection came; null: plain
    Stream stream_;
    net::steady_timer timer_;
    Deadlines deadlines_;
    ClientDeadline client_deadline_{*this};
    UpstreamDeadline upstream_deadline_{*this};
    std::uint64_t timer_generation_ = 0;
    bool timed_out_ = false;
    tcp::socket* upstream_socket_ = nullptr;  // the socket of the upstream operation armed
    bool upstream_timed_out_ = false;
    bool client_watched_ = false;  // watch_client's peek is pending
    char client_peek_ = 0;         // where it peeks
    bool client_gone_ = false;     // it saw the client go while the upstream was answering
    std::uint64_t client_watch_generation_ = 0;
    struct WatchLater final : server::SlowWait {
        explicit WatchLater(Session& s) : session(s) {}
        Session& session;
        void fire() override { session.watch_client(); }
    };
    WatchLater watch_later_{*this};  // watch_client_soon's link
    bool idle_ = false;  // waiting for a request with nothing received: graceful stop may close it
    Exchange* exchange_ = nullptr;  // the request under way (ServingExchange)
    // The first head's deadline, when looking for the h2 preface began it.
    std::optional<Clock::time_point> first_head_deadline_;
    bool preface_ended_ = false;  // the connection ended (or failed) while looking for the preface
    net::steady_timer* hold_timer_ = nullptr;  // the request is held back on it (hold_back)
    Clock::time_point held_until_{};
    bool hold_cut_ = false;  // graceful stop ended the hold
    beast::flat_buffer buffer_;
    std::string peer_ip_;
    std::optional<net_ip::IpAddress> peer_address_;  // peer_ip_, parsed
    std::string head_;  // a message head being written; kept for its capacity
    // The current request's body, as its head framed it; Expect: 100-continue was sent.
    BodyReader request_body_;
    std::uint64_t request_length_ = 0;
    bool request_expects_ = false;
};

net::awaitable<void> Session::run() {
    worker_.add_session(this);
    bool first = true;
    if (tls_ && !co_await tls_handshake()) {
        boost::system::error_code ec;
        stream_.socket().close(ec);
        stop_timer();
        worker_.remove_session(this);
        co_return;
    }
    try {
        if (http2_ && co_await speaks_h2()) {
            // Handed over with what was read (Beast's model): the HTTP/2 connection owns it now.
            const std::string early(static_cast<const char*>(buffer_.data().data()), buffer_.size());
            buffer_.consume(buffer_.size());
            co_await serve_h2(worker_, stream_, peer_ip_, early, h2_);
        } else if (!preface_ended_) {
            while (true) {
                if (!co_await serve_one(first)) break;
                first = false;
            }
        }
    } catch (const std::exception& e) {
        spdlog::error("client {}: {}", peer_ip_, e.what());
    }
    co_await close_gracefully();
    stop_timer();
    worker_.remove_session(this);
}

net::awaitable<bool> Session::speaks_h2() {
    if (stream_.is_tls()) {
        const unsigned char* protocol = nullptr;
        unsigned int size = 0;
        SSL_get0_alpn_selected(stream_.tls().native_handle(), &protocol, &size);
        co_return size == 2 && protocol[0] == 'h' && protocol[1] == '2';
    }
    // Prior knowledge: the connection preface, or an HTTP/1.1 request (which differs from it
    // by its fourth byte at the latest). One header_timeout for both: the head that follows
    // keeps this deadline (read_head), a client stalling inside the preface gets no second.
    first_head_deadline_ = Clock::now() + worker_.snapshot()->config->server.header_timeout;
    arm_until(*first_head_deadline_);
    while (true) {
        const std::string_view data(static_cast<const char*>(buffer_.data().data()), buffer_.size());
        const std::size_t n = std::min(data.size(), h2_preface.size());
        if (data.substr(0, n) != h2_preface.substr(0, n) || n == h2_preface.size()) {
            disarm();
            co_return n == h2_preface.size() && data.substr(0, n) == h2_preface;
        }
        // Nothing received yet: idle, as a keep-alive connection between requests (a graceful
        // stop closes it at once).
        if (buffer_.size() == 0 && worker_.stopping()) {
            disarm();
            co_return false;
        }
        idle_ = buffer_.size() == 0;
        auto [ec, got] = co_await stream_.async_read_some(buffer_.prepare(8192), nothrow);
        idle_ = false;
        if (ec || timed_out_) {
            disarm();
            // The timeout: HTTP/1.1's reading of the head answers it (408 when something came).
            // The end of the connection, or its failure: nothing more to read. (Read again,
            // a connection closed at once could wait for a report epoll had given already, till
            // its header_timeout.)
            if (!timed_out_) preface_ended_ = true;
            co_return false;
        }
        buffer_.commit(got);
    }
}

net::awaitable<void> Session::close_gracefully() {
    boost::system::error_code ec;
    if (stream_.is_tls()) {
        // close_notify, then the client's own or its FIN, within the linger time: the same
        // courtesy as below, and the client can tell our close from a cut connection.
        // A stop closes at once: close_notify is written, the client's is not waited for
        // (as nginx's no_wait_shutdown). Either way a client that does not read is given up
        // on after the linger time.
        if (worker_.stopping()) SSL_set_shutdown(stream_.tls().native_handle(), SSL_RECEIVED_SHUTDOWN);
        arm(std::chrono::duration_cast<config::Duration>(linger_time));
        co_await stream_.tls().async_shutdown(nothrow);
        disarm();
        stream_.socket().close(ec);
        co_return;
    }
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (!ec && !worker_.stopping()) {
        // Read what the client still sends, so that closing does not reset the connection
        // before it has read our last response.
        arm(std::chrono::duration_cast<config::Duration>(linger_time));
        std::array<char, 4096> scratch;
        while (true) {
            auto [rec, n] = co_await stream_.socket().async_read_some(net::buffer(scratch), nothrow);
            if (rec || timed_out_) break;
        }
        disarm();
    }
    stream_.socket().close(ec);
}

net::awaitable<bool> Session::tls_handshake() {
    // A connection still in its handshake has no request yet: a graceful stop closes it at
    // once, as an idle one (and counts no failure for it).
    if (worker_.stopping()) co_return false;
    arm(tls_->handshake_timeout());
    idle_ = true;
    auto [ec] = co_await stream_.tls().async_handshake(net::ssl::stream_base::server, nothrow);
    idle_ = false;
    disarm();
    auto& metrics = *worker_.snapshot()->metrics;
    if (!ec && !timed_out_) {
        observe::add(metrics.tls_handshakes);
        co_return true;
    }
    if (worker_.stopping() && ec == net::error::operation_aborted) co_return false;
    const auto reason = timed_out_ ? observe::TlsFailure::timeout : classify_tls_failure(ec);
    observe::add(metrics.tls_handshake_failures[static_cast<std::size_t>(reason)]);
    warn_tls_failure(peer_ip_, reason, timed_out_ ? std::string("not finished in time") : ec.message());
    if (reason == observe::TlsFailure::plain_http) {
        // As nginx does: a person who typed http:// to a TLS port gets told so, in plain
        // text on the raw socket (OpenSSL has read the request line; nothing is forwarded).
        static constexpr std::string_view answer =
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 52\r\n"
            "Connection: close\r\n\r\nThis port speaks HTTPS: the request was plain HTTP.\n";
        static_assert(std::string_view("This port speaks HTTPS: the request was plain HTTP.\n").size() == 52);
        arm(std::chrono::seconds(1));
        co_await net::async_write(stream_.socket(), net::buffer(answer.data(), answer.size()), nothrow);
        disarm();
    }
    co_return false;
}

net::awaitable<Session::Head> Session::read_head(bool first) {
    // The server settings are looked up afresh after every wait, never held across one: a
    // reload during the wait replaces the snapshot (and frees the old one once no request
    // uses it), and the request that then arrives is read under the new settings.
    auto server = [this]() -> const config::ServerConfig& { return worker_.snapshot()->config->server; };
    Head head;
    std::size_t scanned = 0;
    bool got_bytes = buffer_.size() > 0;
    if (first && first_head_deadline_)
        arm_until(*first_head_deadline_);  // (begun while looking for the h2 preface)
    else
        arm(first || got_bytes ? server().header_timeout : server().idle_timeout);
    while (true) {
        const std::size_t max_header_bytes = server().max_header_bytes;
        std::string_view data(static_cast<const char*>(buffer_.data().data()), buffer_.size());
        auto scan = scan_request_head(data, scanned);
        if (scan.leading_crlf && scan.state != HeadScan::State::incomplete) {
            buffer_.consume(scan.leading_crlf);
            scanned -= scan.leading_crlf;
        }
        if (scan.state == HeadScan::State::complete) {
            disarm();
            head.kind = scan.head_size > max_header_bytes ? Head::Kind::too_large : Head::Kind::ready;
            head.size = scan.head_size;
            co_return head;
        }
        if (scan.state == HeadScan::State::malformed) {
            disarm();
            head.kind = Head::Kind::malformed;
            head.problem = scan.problem;
            co_return head;
        }
        if (auto problem = check_request_line(data.substr(scan.leading_crlf)); !problem.empty()) {
            disarm();
            head.kind = Head::Kind::malformed;
            head.problem = problem;
            co_return head;
        }
        // (Empty lines before the request line count too: skipped only once a line follows,
        // a stream of them would otherwise grow the buffer, and be scanned again after each
        // read, until header_timeout.)
        if (data.size() > max_header_bytes) {
            disarm();
            head.kind = Head::Kind::too_large;
            co_return head;
        }
        if (worker_.stopping() && !got_bytes) co_return head;  // closed

        idle_ = !got_bytes;
        // An idle keep-alive connection keeps no buffer that a large body grew.
        if (!got_bytes && buffer_.capacity() > 16 * 1024) buffer_.shrink_to_fit();
        // (Reported: where it drained the socket, the next read, of the rest of this head, a
        // body or the next request, waits for the client without a receive first.)
        auto [ec, n] = co_await stream_.async_read_reported(buffer_.prepare(8192), nothrow);
        idle_ = false;
        if (timed_out_) {
            head.kind = got_bytes ? Head::Kind::timeout : Head::Kind::closed;
            co_return head;
        }
        if (ec) {
            disarm();
            co_return head;  // closed (EOF, reset, or cancelled by a graceful stop)
        }
        buffer_.commit(n);
        if (!got_bytes && n > 0) {
            got_bytes = true;
            if (!first) arm(server().header_timeout);
        }
    }
}

net::awaitable<bool> Session::serve_one(bool first) {
    // The snapshot is taken when the head has arrived, not before waiting for it: a reload
    // during a keep-alive pause applies to the next request on that connection too.
    const auto head = co_await read_head(first);
    Exchange x(worker_.snapshot(), peer_ip_, peer_address_ ? &*peer_address_ : nullptr);
    const ServingExchange serving(exchange_, x);
    const auto& cfg = x.cfg;
    auto& rec = x.rec;
    rec.client = peer_ip_;
    rec.peer = peer_ip_;
    rec.method = "-";
    rec.target = "-";

    switch (head.kind) {
    case Head::Kind::closed:
        co_return false;
    case Head::Kind::timeout:
        co_return finish(x, co_await reply(cfg.server, local_problem(408, "request head not received in time"), false, rec));
    case Head::Kind::too_large:
        co_return finish(x, co_await reply(cfg.server, local_problem(431, "request head larger than max_header_bytes"),
                                           false, rec));
    case Head::Kind::malformed:
        co_return finish(x, co_await reply(cfg.server, local_problem(400, head.problem), false, rec));
    case Head::Kind::ready:
        break;
    }

    RequestHead parsed = read_request_head(std::span<char>(static_cast<char*>(buffer_.data().data()), head.size),
                                           cfg.server, x.request, rec);
    buffer_.consume(head.size);
    if (parsed.parsed) identify_client(x);
    if (parsed.refusal) co_return finish(x, co_await reply(cfg.server, std::move(*parsed.refusal), false, rec));
    request_body_ = std::move(parsed.body);
    request_length_ = parsed.length;
    request_expects_ = parsed.expects;
    x.key_path = std::move(parsed.target.path);
    x.key_query = std::move(parsed.target.query);
    x.keep_alive = x.request.keep_alive() && !worker_.stopping();

    if (auto refusal = route_request(x)) co_return finish(x, co_await reply(cfg.server, std::move(*refusal), x.keep_alive, rec));
    if (x.route->has_limits() && !exempt_from_limits(x)) {
        limit::RequestKeyValues values = key_values(x);
        if (auto refusal = prepare_limits(x, values))
            co_return finish(x, co_await reply(cfg.server, std::move(*refusal), x.keep_alive, rec));
        if (!x.limit_set->limits.empty()) {  // (a plan may have none)
            const limit::RouteLimits limits = x.limit_set->route_limits(x.route->name);
            const auto decide_started = Clock::now();
            limit::Decision decision;
            if (auto known = worker_.decide_now(limits, values)) decision = std::move(*known);
            else co_await worker_.ask_store(limits, values, decision);
            x.snap.metrics->store_latency.observe(ms_since(decide_started) / 1000.0);
            if (auto refusal = read_decision(x, decision, worker_))
                co_return finish(x, co_await reply(cfg.server, std::move(*refusal), x.keep_alive, rec));
        }
    }

    if (x.wait.count() > 0) {
        const auto hold_started = Clock::now();
        const Hold held = co_await hold_back(x.wait, *x.snap.metrics);
        x.waiting_place.reset();
        rec.wait_ms = ms_since(hold_started);
        if (held == Hold::client_gone) {
            rec.status = 499;  // nothing reached the upstream
            co_return finish(x, false);
        }
        if (held == Hold::stopping) {
            LocalReply too_late = local_problem(503, "sluice is shutting down: the request's turn would come too late");
            too_late.headers = std::move(x.rate_headers);
            too_late.headers.emplace_back("Retry-After", "1");
            co_return finish(x, co_await reply(cfg.server, std::move(too_late), false, rec));
        }
    }

    if (x.check) {
        // Let it through: 200 and the rate-limit headers, no body.
        LocalReply pass;
        pass.status = 200;
        pass.body = LocalReply::Body::none;
        pass.headers = std::move(x.rate_headers);
        co_return finish(x, co_await reply(cfg.server, std::move(pass), x.keep_alive, rec));
    }
    co_return finish(x, co_await forward(x));
}

net::awaitable<Session::Hold> Session::hold_back(std::chrono::microseconds wait, observe::Metrics& metrics) {
    const auto until = Clock::now() + wait;
    if (worker_.stopping() && until > worker_.stop_deadline()) co_return Hold::stopping;
    disarm();
    net::steady_timer timer(stream_.get_executor());
    timer.expires_at(until);
    hold_timer_ = &timer;
    held_until_ = until;
    hold_cut_ = false;
    metrics.requests_waiting.fetch_add(1, std::memory_order_relaxed);
    struct Done {
        Session& session;
        observe::Metrics& metrics;
        ~Done() {
            session.hold_timer_ = nullptr;
            metrics.requests_waiting.fetch_sub(1, std::memory_order_relaxed);
        }
    } done{*this, metrics};
    watch_client();
    while (true) {
        co_await timer.async_wait(nothrow);
        if (client_gone_ || hold_cut_ || Clock::now() >= until) break;
        if (client_watched_ || stream_.is_tls()) {  // (woken for nothing: wait on)
            timer.expires_at(until);
            continue;
        }
        // The watch ended on bytes the client sent (a request body not read yet, a pipelined
        // request; it woke the hold): a peek can no longer see the client's close. Its FIN
        // behind those bytes (which nginx learns from EPOLLRDHUP) is looked for every 100 ms.
        if (peer_closed(stream_.socket())) {
            client_gone_ = true;
            break;
        }
        timer.expires_at(std::min(until, Clock::now() + std::chrono::milliseconds(100)));
    }
    unwatch_client();
    metrics.wait_time.observe(std::chrono::duration<double>(Clock::now() - (until - wait)).count());
    if (client_gone_) co_return Hold::client_gone;
    if (hold_cut_) co_return Hold::stopping;
    co_return Hold::done;
}

namespace {

// Connection names `upgrade` (in any of its values).
}  // namespace

net::awaitable<bool> Session::tunnel(const config::Config& cfg, const server::Snapshot& snap,
                                     std::unique_ptr<UpstreamConnection> conn, UpstreamResponse& res,
                                     const limit::HeaderList& rate_headers, observe::AccessRecord& rec) {
    auto& fields = res.fields;
    strip_hop_by_hop(fields);
    strip_framing(fields);
    append_via(fields, res.version);
    replace_field(fields, bhttp::field::connection, "upgrade");
    replace_field(fields, bhttp::field::upgrade, "websocket");
    for (const auto& [name, value] : rate_headers) replace_field(fields, name, value);
    head_.clear();
    write_response_head(11, 101, res.reason, fields, head_);
    rec.status = 101;
    rec.forwarded = true;
    const auto opened = std::chrono::steady_clock::now();

    // The 101 and whatever the upstream sent right after it; then the connection is the
    // tunnel's, with whatever the client sent right after its handshake.
    const std::uint64_t upstream_early = conn->buffer.size();
    const std::array<net::const_buffer, 2> first{net::buffer(head_), conn->buffer.data()};
    arm(cfg.server.idle_timeout);
    auto [wec, wn] = co_await net::async_write(stream_, first, nothrow);
    disarm();
    if (wec || timed_out_) co_return false;
    conn->buffer.consume(conn->buffer.size());
    const std::string client_early(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    buffer_.consume(buffer_.size());

    ++snap.metrics->tunnels_active;
    const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(cfg.server.tunnel_idle_timeout);
    const TunnelBytes moved = co_await relay_tunnel(stream_, conn->stream, client_early, idle);
    --snap.metrics->tunnels_active;
    rec.tunnel_up = moved.up;
    rec.tunnel_down = upstream_early + moved.down;
    rec.bytes_sent = *rec.tunnel_down;
    rec.tunnel_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - opened).count();
    co_return false;
}

net::awaitable<bool> Session::forward(Exchange& x) {
    const auto& snap = x.snap;
    const auto& route = *x.route;
    const bool keep_alive = x.keep_alive;
    const limit::HeaderList& rate_headers = x.rate_headers;
    auto& rec = x.rec;
    const auto& cfg = *snap.config;
    const auto& upstream_cfg = cfg.upstreams[route.upstream_index];
    const auto& req = x.request;
    const unsigned client_version = req.version();
    const bool is_head = req.method() == bhttp::verb::head;

    // The request as the upstream gets it: our own framing, never the client's.
    head_.clear();
    const RequestOnward onward =
        request_onward(req, request_body_, request_length_, upstream_cfg.name,
                       {peer_ip_, x.peer_trusted, client_version, stream_.is_tls()}, rec.request_id, head_);
    if (onward.refusal) co_return co_await reply(cfg.server, *onward.refusal, false, rec);
    const bool expect_continue = onward.expect_continue;
    const bool websocket = onward.websocket;
    const bool has_body = !request_body_.done();

    auto chunk = worker_.relay_buffers().take();
    const std::span<char> relay(chunk.data(), chunk.size());

    // The body bytes that came with the head are decoded before any upstream is chosen: a
    // body already malformed there is refused with nothing sent upstream at all.
    std::size_t first_piece = 0;
    if (has_body) {
        auto got = co_await read_body(request_body_, buffer_, stream_, relay, cfg.server.idle_timeout, false, client_deadline_);
        if (request_body_.failed()) co_return co_await refuse_request_body(cfg.server, got.ec, rec);
        first_piece = got.n;
    }
    std::unique_ptr<UpstreamConnection> conn;
    UpstreamResponse response;  // the upstream's latest head
    Clock::time_point upstream_started;
    bool continue_sent = false;
    boost::system::error_code body_refused;  // the upstream stopped taking the request body

    // A pooled connection the server closed just as we used it fails before any byte
    // of response: a request without a body is then sent once more on a new connection,
    // if its method is idempotent (may_resend).
    for (int attempt = 0;; ++attempt) {
        Upstream failure;
        body_refused.clear();
        upstream_started = Clock::now();
        conn = co_await connect_upstream(worker_, stream_.get_executor(), snap, route.upstream_index, attempt > 0, failure,
                                         upstream_deadline_);
        if (!conn) {
            rec.upstream_ms = ms_since(upstream_started);
            LocalReply failed = failure == Upstream::timed_out ? local_problem(504, "upstream connect timed out")
                                                               : local_problem(502, "upstream refused the connection");
            co_await charge_response(x, failed.status);
            co_return co_await reply(cfg.server, std::move(failed), keep_alive, rec);
        }
        const bool retryable = conn->uses > 0 && !has_body && attempt == 0 && may_resend(req.method());
        rec.upstream = conn->key;

        if (expect_continue && !continue_sent) {
            static constexpr std::string_view continue_line = "HTTP/1.1 100 Continue\r\n\r\n";
            arm(cfg.server.idle_timeout);
            auto [wec, wn] = co_await net::async_write(stream_, net::buffer(continue_line), nothrow);
            disarm();
            if (wec) co_return false;
            continue_sent = true;
        }

        // The head, then the body as it arrives, each piece framed by us: a Content-Length
        // body as it is, a chunked one as chunks we write. The head leaves with whatever
        // body bytes came with it.
        boost::system::error_code upstream_error;
        BodyWriter writer(head_, onward.body);
        for (bool first = true;; first = false) {
            std::size_t n = first ? first_piece : 0;
            if (!first && !request_body_.done()) {
                // The upstream connection is dropped on a failure here: it holds an unfinished
                // request, which the upstream never sees completed.
                auto got = co_await read_body(request_body_, buffer_, stream_, relay, cfg.server.idle_timeout, true,
                                              client_deadline_);
                if (request_body_.failed() || got.ec) co_return co_await refuse_request_body(cfg.server, got.ec, rec);
                n = got.n;
            }
            const bool body_done = request_body_.done();
            if (!first && n == 0 && !body_done) continue;
            const auto out = gathered(writer.frame(std::string_view(relay.data(), n), body_done));
            const std::size_t sent = conn->stream.send_now(out, upstream_error);
            if (!upstream_error && sent < net::buffer_size(out)) {
                arm_upstream(conn->stream.socket(), upstream_cfg.timeout);
                auto [wec0, wn] = co_await net::async_write(conn->stream, rest_after(out, sent), nothrow);
                upstream_error = disarm_upstream(wec0);
            }
            if (upstream_error || body_done) break;
        }
        // The upstream stopped taking the body (it closed, or reset the connection): it may
        // have answered first, a 413 say, as a server that rejects an upload by its head
        // does. Its answer is read from what arrived before the close, and relayed; the
        // connection to the client closes after it (its body was not all read). Without an
        // answer, the write's failure is what the client hears of. (Not for a request without
        // a body: a pooled connection the server closed is then tried again, and what such a
        // server said before it closed, a 408 say, answers nothing.)
        if (has_body && upstream_error && upstream_error != beast::error::timeout &&
            upstream_error != net::error::operation_aborted)
            body_refused = std::exchange(upstream_error, {});

        // Response head; informational (1xx) responses are relayed and the final one awaited.
        // The upstream timeout runs from the request sent to the final head received.
        // Meanwhile a client that goes away is noticed (as nginx does): the upstream
        // request is abandoned and its slots given back at once.
        std::string_view invalid;
        // The upstream answered something (a head, an interim one too): the request reached
        // it, so it is never sent again.
        bool answered = false;
        const auto head_deadline = Clock::now() + upstream_cfg.timeout;
        if (!upstream_error) watch_client_soon();
        for (int interim = 0; !upstream_error && !client_gone_; ++interim) {
            const auto got = co_await read_upstream_head(*conn, response, head_deadline, upstream_deadline_);
            if (got.ec || !got.problem.empty()) {
                upstream_error = got.ec;
                invalid = got.problem;
                break;
            }
            answered = true;
            const auto status = response.status;
            if (status >= 200) break;
            if (status == 101) {
                if (websocket && switches_to_websocket(response)) break;  // the tunnel
                invalid = websocket ? "upstream switched protocols but not to websocket"
                                    : "upstream switched protocols, which sluice does not relay";
                break;
            }
            if (interim >= max_interim_responses) {
                invalid = "upstream sent too many informational responses";
                break;
            }
            // A 100 Continue is not relayed: the upstream never sees Expect (stripped), and a
            // client that sent it had sluice's own 100 before its body went.
            if (client_version >= 11 && status != 100) {
                auto& info = response.fields;
                strip_hop_by_hop(info);
                strip_framing(info);
                append_via(info, response.version);
                // Not in head_: that holds the request, which a retry would send again.
                std::string interim_head;
                write_response_head(11, status, response.reason, info, interim_head);
                arm(cfg.server.idle_timeout);
                auto [iec, in] = co_await net::async_write(stream_, net::buffer(interim_head), nothrow);
                disarm();
                if (iec) co_return false;
            }
        }
        unwatch_client();
        if (body_refused && (upstream_error || !invalid.empty() || response.status < 200)) {
            upstream_error = body_refused;  // no final answer came before the close
            invalid = {};
        }
        if (client_gone_) {
            rec.upstream_ms = ms_since(upstream_started);
            rec.status = 499;  // nginx's "client closed request"
            spdlog::debug("client {} went away while upstream {} server {} was answering", peer_ip_,
                          upstream_cfg.name, conn->key);
            co_return false;
        }
        if (!upstream_error && invalid.empty()) break;

        rec.upstream_ms = ms_since(upstream_started);
        // Retried only when not a byte of response came back (a partial head stays in the
        // connection's buffer): the pooled connection was closed before the request arrived.
        if (retryable && !answered && conn->buffer.size() == 0 && invalid.empty() &&
            is_connection_lost(upstream_error)) {
            spdlog::debug("upstream {} server {}: pooled connection closed, retrying", upstream_cfg.name, conn->key);
            continue;
        }
        if (upstream_error == beast::error::timeout) {
            spdlog::warn("upstream {} server {}: no response within {} ms", upstream_cfg.name, conn->key,
                         upstream_cfg.timeout.count());
            co_await charge_response(x, 504);
            co_return co_await reply(cfg.server, local_problem(504, "upstream did not answer in time"), false, rec);
        }
        const std::string problem =
            invalid.empty() ? "upstream failed: " + upstream_error.message() : std::string(invalid);
        spdlog::warn("upstream {} server {}: {}", upstream_cfg.name, conn->key, problem);
        const bool body_read = request_body_.done();
        co_await charge_response(x, 502);
        co_return co_await reply(cfg.server, local_problem(502, problem), keep_alive && body_read, rec);
    }
    rec.upstream_ms = ms_since(upstream_started);

    // The response as the client gets it.
    const unsigned status = response.status;
    if (status == 101) {
        snap.metrics->upstream_latency.observe(*rec.upstream_ms / 1000.0);
        // A cost the head reports, and limits that count 101 ("1xx"): charged before the 101
        // goes, as any status (not when the tunnel closes, an hour later: every tunnel opened
        // meanwhile passed).
        if (x.unsettled || x.charge_worker) co_await settle_and_charge(x, &response.fields, status);
        co_return co_await tunnel(cfg, snap, std::move(conn), response, rate_headers, rec);
    }
    const auto framing = check_response_framing(response.fields, response.version, status, is_head);
    if (!framing.ok()) {
        spdlog::warn("upstream {} server {}: {}", upstream_cfg.name, conn->key, framing.problem);
        co_await charge_response(x, 502);
        co_return co_await reply(cfg.server, local_problem(502, framing.problem), keep_alive, rec);
    }
    rec.forwarded = true;
    snap.metrics->upstream_latency.observe(*rec.upstream_ms / 1000.0);

    using Body = Framing::Body;
    const bool upstream_keeps = response.keep_alive;
    head_.clear();
    const ResponseOnward back =
        response_onward(response, framing, client_version, keep_alive && !body_refused && !worker_.stopping(), rate_headers, head_);
    const bool keep = back.keep_alive;
    rec.status = status;

    BodyReader body = response_body_reader(framing);
    if (settles_trailer(x)) body.keep_trailers();
    // Pooled only when the response ends exactly where its framing says, with nothing read
    // past it (UpstreamPool::put checks the buffer), and the server keeps it open; not after
    // a bodiless response whose fields announced a body (Framing::announced_body).
    const bool pooled = upstream_keeps && !body_refused && !framing.announced_body && framing.body != Body::until_close;

    // The head leaves at once with the body bytes that came with it (one system call for a
    // small response); then the body as it arrives, piece by piece.
    BodyWriter writer(head_, back.body);
    for (bool first = true;; first = false) {
        std::size_t n = 0;
        if (!body.done()) {
            auto got = co_await read_body(body, conn->buffer, conn->stream, relay, upstream_cfg.timeout, !first,
                                          upstream_deadline_);
            if (body.failed() || got.ec) {
                // The client has the head: it sees the connection close before the body's
                // end (no last chunk), never a body that looks complete.
                spdlog::warn("upstream {} server {}: response body cut short: {}", upstream_cfg.name, conn->key,
                             got.ec == beast::error::timeout ? "timed out"
                             : got.ec                        ? got.ec.message()
                                                             : std::string(body.problem()));
                if (!first) co_return false;
                // Nothing sent yet: the head is still ours to replace, and the 502 is what
                // limits counting statuses are charged for (sluice's own 502, as any); a cost
                // the head reported is settled all the same.
                if (x.unsettled || x.charge_worker) co_await settle_and_charge(x, &response.fields, 502);
                co_return co_await reply(cfg.server, local_problem(502, "upstream sent an invalid response body"), false, rec);
            }
            n = got.n;
        }
        // A cost the head reports, and limits that count the status: before the head goes
        // (with the first bytes of the body that came with it: a body invalid in those is a
        // 502 instead, above), in one store round trip.
        if (first && (x.unsettled || x.charge_worker)) co_await settle_and_charge(x, &response.fields, status);
        const bool body_done = body.done();
        if (!first && n == 0 && !body_done) continue;
        // A cost the trailer reports: settled before the body's end goes.
        if (body_done && x.unsettled) co_await settle_trailer(x, body.trailers());
        // The upstream's response is whole: its connection goes back to the pool before the
        // last bytes go to the client (a client slow to take them, or gone, does not keep it
        // from the next request).
        if (body_done && pooled) worker_.upstream_pool().put(std::move(conn), upstream_cfg.max_idle);
        const auto out = gathered(writer.frame(std::string_view(relay.data(), n), body_done));
        boost::system::error_code wec;
        const std::size_t sent = stream_.send_now(out, wec);
        if (wec) co_return false;
        if (sent < net::buffer_size(out)) {
            arm(cfg.server.idle_timeout);
            std::tie(wec, std::ignore) = co_await net::async_write(stream_, rest_after(out, sent), nothrow);
            disarm();
            if (wec || timed_out_) co_return false;
        }
        rec.bytes_sent += n;
        if (body_done) break;
    }
    co_return keep;
}

net::awaitable<bool> Session::refuse_request_body(const config::ServerConfig& server, boost::system::error_code ec,
                                                  observe::AccessRecord& rec) {
    using State = BodyReader::State;
    const auto state = request_body_.state();
    spdlog::warn("client {}: request body: {}", peer_ip_, ec ? ec.message() : std::string(request_body_.problem()));
    if (state == State::malformed) co_return co_await reply(server, local_problem(400, request_body_.problem()), false, rec);
    if (state == State::too_large)
        co_return co_await reply(server, local_problem(413, "request body larger than max_body_bytes"), false, rec);
    if (state == State::trailer_too_large)
        co_return co_await reply(server, local_problem(431, request_body_.problem()), false, rec);
    if (ec == beast::error::timeout)
        co_return co_await reply(server, local_problem(408, "request body not received in time"), false, rec);
    rec.status = 499;  // client went away (nginx's convention)
    co_return false;
}

net::awaitable<bool> Session::drain_body(const config::ServerConfig& server) {
    std::array<char, 8192> scratch;
    std::size_t total = 0;
    while (!request_body_.done()) {
        if (request_body_.raw_remaining() > drain_limit - total) co_return false;
        auto got = co_await read_body(request_body_, buffer_, stream_, scratch, server.header_timeout, true, client_deadline_);
        if (got.ec || request_body_.failed()) co_return false;
        total += got.n;
        if (total > drain_limit) co_return false;
    }
    co_return true;
}

net::awaitable<bool> Session::reply(const config::ServerConfig& server, LocalReply answer, bool keep_alive,
                                    observe::AccessRecord& rec) {
    if (keep_alive && !request_body_.done()) keep_alive = !request_expects_ && co_await drain_body(server);
    keep_alive = keep_alive && !worker_.stopping();
    const unsigned status = answer.status;
    std::string body;
    switch (answer.body) {
    case LocalReply::Body::problem:
        body = problem_json(status, answer.detail);
        break;
    case LocalReply::Body::problem_with_limit:
        body = problem_json(status, answer.detail, {{"route", rec.route}, {"limit", rec.limit}});
        break;
    case LocalReply::Body::none:
        break;
    }
    // Serialized in one piece: cheaper than a Beast response's header map and buffer sequence,
    // which matters on the path that answers 429s at several times the forwarded rate.
    ProblemResponse response;
    response.status = status;
    response.version = rec.version == 10 ? 10u : 11u;
    response.keep_alive = keep_alive;
    response.head = rec.method == "HEAD";
    response.headers = &answer.headers;
    response.body = body;
    const std::string out = serialize(response);
    rec.status = status;
    rec.bytes_sent = response.head ? 0 : body.size();
    // At once, unless the client has sent more already: then the asynchronous write, which
    // lets the worker's other connections have their turn before the next request (requests
    // pipelined behind one another need no read, and every one could be answered here).
    const std::array<net::const_buffer, 1> whole{net::buffer(out)};
    boost::system::error_code ec;
    const std::size_t sent = buffer_.size() == 0 ? stream_.send_now(whole, ec) : 0;
    if (!ec && sent < out.size()) {
        arm(server.idle_timeout);
        std::tie(ec, std::ignore) = co_await net::async_write(stream_, rest_after(whole, sent), nothrow);
        disarm();
    }
    co_return keep_alive && !ec;
}

}  // namespace

void start_client_session(server::Worker& worker, tcp::socket socket, std::size_t listener) {
    const auto& contexts = worker.snapshot()->listener_tls;
    auto tls = listener < contexts.size() ? contexts[listener] : nullptr;
    const auto& listen = worker.snapshot()->config->server.listen;
    const bool http2 = listener < listen.size() && listen[listener].http2;
    auto session = std::make_shared<Session>(worker, std::move(socket), std::move(tls), http2);
    // Whatever escapes a session ends that session only: an exception here would otherwise
    // leave io_context::run and end the worker thread with every connection on it.
    net::co_spawn(worker.io(), [session]() -> net::awaitable<void> { co_await session->run(); },
                  [](std::exception_ptr e) {
                      if (!e) return;
                      try {
                          std::rethrow_exception(e);
                      } catch (const std::exception& ex) {
                          spdlog::error("client session ended by an unexpected error: {}", ex.what());
                      } catch (...) {
                          spdlog::error("client session ended by an unexpected error");
                      }
                  });
}

}  // namespace sluice::http
