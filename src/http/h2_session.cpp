#include "http/h2_session.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "http/body_writer.hpp"
#include "http/exchange.hpp"
#include "http/h2_codec.hpp"
#include "http/header_rules.hpp"
#include "http/onward_heads.hpp"
#include "http/upstream_io.hpp"
#include "net/cidr.hpp"
#include "server/worker.hpp"

namespace sluice::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

namespace {

constexpr auto nothrow = net::as_tuple(net::use_awaitable);
constexpr std::size_t response_buffer_bytes = 64 * 1024;  // a stream's response bytes sluice holds at most
constexpr std::size_t piece_bytes = 16 * 1024;

// gRPC status for a request sluice answers itself (the gRPC HTTP mapping; 429 is
// RESOURCE_EXHAUSTED, as a rate limit is, not UNAVAILABLE).
int grpc_status_for(unsigned status) {
    switch (status) {
    case 429: case 413: case 431: return 8;   // RESOURCE_EXHAUSTED
    case 401: return 16;                      // UNAUTHENTICATED
    case 403: return 7;                       // PERMISSION_DENIED
    case 404: return 12;                      // UNIMPLEMENTED
    case 408: case 504: return 4;             // DEADLINE_EXCEEDED
    case 502: case 503: return 14;            // UNAVAILABLE
    default: return status >= 500 ? 13 : 3;   // INTERNAL, INVALID_ARGUMENT
    }
}

// grpc-message: percent-encoded outside printable ASCII (gRPC over HTTP/2).
std::string grpc_message(std::string_view text) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    for (const unsigned char c : text) {
        if (c < 0x20 || c > 0x7e || c == '%') {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

bool is_grpc(const H2Request& request) {
    for (const auto& [name, value] : request.fields)
        if (name == "content-type") return value.rfind("application/grpc", 0) == 0;
    return false;
}

}  // namespace

// One stream: its request's state and what the connection tells it (body bytes, the end of
// the body, room for more response, the stream's end).
struct H2Stream {
    explicit H2Stream(std::int32_t stream_id) : id(stream_id) {}
    std::int32_t id;
    H2Request request;
    std::string body;  // request body received, not yet forwarded
    std::uint64_t body_total = 0;
    bool body_end = false;
    bool discard = false;  // answered before its body ended: what still comes is read and dropped
    std::uint64_t dropped = 0;  // ... that much so far (at most max_body_bytes: on_body)
    bool closed = false;  // the stream is gone (reset by the client, or the connection ended)
    // Cancelled when something above changes; made when the stream first waits (most
    // streams never do: a timer made costs a lookup of Asio's timer service, under its lock).
    std::optional<net::steady_timer> wake;
    // Its upstream operation under way (StreamDeadlines): the socket, and when it times out.
    tcp::socket* upstream_socket = nullptr;
    Clock::time_point upstream_deadline = Clock::time_point::max();
    bool timed_out = false;
    bool armed = false;  // in StreamDeadlines' list
    Exchange* exchange = nullptr;  // its request, while served (ServingExchange)

    void notify() {
        if (wake) wake->cancel();
    }
    net::steady_timer& wake_timer(const net::any_io_executor& executor) {
        if (!wake) wake.emplace(executor);
        return *wake;
    }
    // Waits for notify(), at most `limit`; false when the limit passed.
    net::awaitable<bool> wait(const net::any_io_executor& executor, config::Duration limit) {
        auto& timer = wake_timer(executor);
        timer.expires_after(limit);
        auto [ec] = co_await timer.async_wait(nothrow);
        co_return ec == net::error::operation_aborted;
    }
};

// The upstream deadlines of a connection's streams, on one timer: it waits for the earliest,
// and is started again only when a deadline comes before the one it waits for (a deadline
// set later, as each next read's is, waits for the timer to come round: it then waits again
// for what is left). A timer per stream, set and cancelled for every upstream read, cost
// two timer-queue operations under the reactor's lock and a handler per read.
class StreamDeadlines {
public:
    explicit StreamDeadlines(const net::any_io_executor& executor) : timer_(executor) {}

    void arm(H2Stream& s, tcp::socket& socket, Clock::time_point until) {
        s.timed_out = false;
        s.upstream_socket = &socket;
        s.upstream_deadline = until;
        if (!s.armed) {
            s.armed = true;
            armed_.push_back(&s);
        }
        if (!waiting_ || until < expiry_) start(until);
    }
    void disarm(H2Stream& s) {
        s.upstream_socket = nullptr;
        s.upstream_deadline = Clock::time_point::max();
        if (!s.armed) return;
        s.armed = false;
        auto it = std::find(armed_.begin(), armed_.end(), &s);
        *it = armed_.back();
        armed_.pop_back();
    }

private:
    void start(Clock::time_point until) {
        waiting_ = true;
        expiry_ = until;
        timer_.expires_at(until);  // (a wait for a later time ends as aborted)
        timer_.async_wait([this, alive = std::weak_ptr<int>(alive_)](boost::system::error_code ec) {
            if (ec || alive.expired()) return;
            fire();
        });
    }
    void fire() {
        waiting_ = false;
        const auto now = Clock::now();
        auto next = Clock::time_point::max();
        for (H2Stream* s : armed_) {
            if (s->upstream_deadline > now) {
                next = std::min(next, s->upstream_deadline);
                continue;
            }
            if (!s->upstream_socket || s->upstream_deadline == Clock::time_point::max()) continue;
            s->timed_out = true;
            s->upstream_deadline = Clock::time_point::max();
            boost::system::error_code ignored;
            s->upstream_socket->cancel(ignored);
        }
        if (next != Clock::time_point::max()) start(next);
    }

    net::steady_timer timer_;
    std::vector<H2Stream*> armed_;  // streams with an upstream operation under way
    bool waiting_ = false;
    Clock::time_point expiry_{};  // what the timer waits for, while waiting_
    std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // its handler holds it weakly
};

// A stream's upstream deadline, for the upstream operations (upstream_io.hpp); it takes the
// stream off the list when it ends however it ends.
class StreamDeadline final : public IoDeadline {
public:
    StreamDeadline(StreamDeadlines& deadlines, std::shared_ptr<H2Stream> s) : deadlines_(deadlines), s_(std::move(s)) {}
    ~StreamDeadline() override { deadlines_.disarm(*s_); }
    StreamDeadline(const StreamDeadline&) = delete;
    StreamDeadline& operator=(const StreamDeadline&) = delete;
    void arm(tcp::socket& socket, Clock::time_point until) override { deadlines_.arm(*s_, socket, until); }
    boost::system::error_code disarm(boost::system::error_code ec) override {
        deadlines_.disarm(*s_);
        if (s_->timed_out && ec == net::error::operation_aborted) return beast::error::timeout;
        return ec;
    }

private:
    StreamDeadlines& deadlines_;
    std::shared_ptr<H2Stream> s_;
};

class H2Connection final : public H2Codec::Handler, public std::enable_shared_from_this<H2Connection> {
public:
    H2Connection(server::Worker& worker, Stream& stream, std::string_view peer_ip, const H2Settings& settings)
        : worker_(worker), stream_(stream), peer_ip_(peer_ip), peer_address_(sluice::net::IpAddress::parse(peer_ip)),
          codec_(*this, settings), kick_(stream.get_executor()),
          reader_done_(stream.get_executor()), idle_(stream.get_executor()), head_timer_(stream.get_executor()),
          deadlines_(stream.get_executor()) {}

    net::awaitable<void> run(std::string_view early) {
        auto self = shared_from_this();
        if (!early.empty() && !codec_.receive(early)) report_abuse();
        watch_head();
        reading_ = true;
        net::co_spawn(stream_.get_executor(), [self]() { return self->read_loop(); }, net::detached);
        co_await write_loop();
        // The writer is done: the reader is stopped and awaited (it uses the stream).
        boost::system::error_code ignored;
        stream_.socket().cancel(ignored);
        for (auto& [id, s] : streams_) {
            s->closed = true;
            s->notify();
            if (s->upstream_socket) s->upstream_socket->cancel(ignored);
        }
        // The reader and every stream use the connection's stream, which is the caller's:
        // they end (as closed, at the latest when a decision under way comes back) first.
        while (reading_ || serving_ > 0) {
            reader_done_.expires_after(std::chrono::seconds(5));
            co_await reader_done_.async_wait(nothrow);
        }
    }

    void abandon() {
        for (auto& [id, stream] : streams_)
            if (stream->exchange) http::abandon(*stream->exchange);
    }

    void stop() {
        stopping_ = true;
        codec_.shut_down();
        for (auto& [id, stream] : streams_) stream->notify();  // held streams look at the stop
        kick();
    }

    // H2Codec::Handler
    void on_request(std::int32_t id, H2Request request) override {
        auto s = std::make_shared<H2Stream>(id);
        s->request = std::move(request);
        s->body_end = s->request.end_stream;
        streams_[id] = s;
        // (The idle timer, if it waits, finds a stream under way when it fires.)
        net::co_spawn(stream_.get_executor(), [self = shared_from_this(), s]() { return self->serve(s); },
                      [](std::exception_ptr e) {
                          if (!e) return;
                          try {
                              std::rethrow_exception(e);
                          } catch (const std::exception& ex) {
                              spdlog::error("HTTP/2 stream ended by an unexpected error: {}", ex.what());
                          }
                      });
    }
    void on_body(std::int32_t id, std::string_view data) override {
        auto it = streams_.find(id);
        if (it == streams_.end()) {
            codec_.consumed(id, data.size());
            return;
        }
        if (it->second->discard) {
            codec_.consumed(id, data.size());
            // A client that goes on sending a body nobody reads (its answer held back by its
            // own shut window, say) is not read for ever.
            it->second->dropped += data.size();
            if (it->second->dropped > worker_.snapshot()->config->server.max_body_bytes) {
                it->second->discard = false;  // (reset once)
                codec_.reset(id, 8 /* CANCEL */);
            }
            kick();
            return;
        }
        it->second->body.append(data);
        it->second->body_total += data.size();
        it->second->notify();
    }
    void on_body_end(std::int32_t id) override {
        if (auto it = streams_.find(id); it != streams_.end()) {
            it->second->body_end = true;
            it->second->notify();
        }
    }
    void on_closed(std::int32_t id, std::uint32_t) override {
        auto it = streams_.find(id);
        if (it == streams_.end()) return;
        auto& s = *it->second;
        s.closed = true;
        s.notify();
        boost::system::error_code ignored;
        if (s.upstream_socket) s.upstream_socket->cancel(ignored);
        streams_.erase(it);
        watch_idle();
    }
    void on_drained(std::int32_t id) override {
        if (auto it = streams_.find(id); it != streams_.end()) it->second->notify();
    }

private:
    // Wakes the writer when it waits (a timer cancelled: not for nothing, it takes the
    // reactor's lock and a handler).
    void kick() {
        if (!writer_waiting_) return;
        writer_waiting_ = false;
        kick_.cancel();
    }

    // An idle connection (no stream under way) is closed after idle_timeout, counted from
    // the last frame read or the last stream's end, whichever came later.
    // Only the deadline moves (before every read): the timer is started again only when it
    // does not wait or waits for a later time, and when it fires before the deadline it
    // waits again for what is left.
    void watch_idle() {
        if (!streams_.empty() || stopping_ || !reading_) return;
        idle_deadline_ = Clock::now() + worker_.snapshot()->config->server.idle_timeout;
        if (!idle_waiting_ || idle_deadline_ < idle_expiry_) wait_idle(idle_deadline_);
    }
    void wait_idle(Clock::time_point until) {
        auto self = weak_from_this().lock();
        if (!self) return;
        idle_waiting_ = true;
        idle_expiry_ = until;
        idle_.expires_at(until);  // (a wait for a later time ends as aborted)
        idle_.async_wait([self](boost::system::error_code ec) {
            if (ec) return;
            self->idle_waiting_ = false;
            // A stream under way: watch_idle starts it again when the last one ends.
            if (!self->streams_.empty() || self->stopping_ || !self->reading_) return;
            if (Clock::now() < self->idle_deadline_) return self->wait_idle(self->idle_deadline_);
            self->stop();
        });
    }

    // A request head must be whole within header_timeout of its first frame, as an
    // HTTP/1.1 head must (a trickle does not extend it). While a HEADERS block is open no
    // other frame may come on the connection, so a block left open ends the connection.
    void watch_head() {
        const auto block = codec_.open_header_block();
        if (block == head_block_) return;
        head_block_ = block;
        if (block == 0) {
            head_timer_.cancel();
            return;
        }
        head_timer_.expires_after(worker_.snapshot()->config->server.header_timeout);
        head_timer_.async_wait([self = shared_from_this(), block](boost::system::error_code ec) {
            if (ec || self->head_block_ != block || self->codec_.open_header_block() != block) return;
            spdlog::warn("client {}: HTTP/2 request head not complete within header_timeout; connection closed",
                         self->peer_ip_);
            self->codec_.give_up();
            self->kick();
        });
    }

    void report_abuse() {
        if (codec_.abuse() == H2Abuse::none || codec_.abuse() == H2Abuse::protocol_error) return;
        static_assert(static_cast<std::size_t>(H2Abuse::control_flood) == observe::http2_abuse_names.size());
        observe::add(worker_.snapshot()->metrics->http2_abuse[static_cast<std::size_t>(codec_.abuse()) - 1]);
        spdlog::warn("client {}: HTTP/2 connection ended with GOAWAY ENHANCE_YOUR_CALM: {}", peer_ip_,
                     h2_abuse_name(codec_.abuse()));
    }

    net::awaitable<void> read_loop() {
        auto self = shared_from_this();
        std::array<char, 16384> buffer;
        while (!codec_.finished()) {
            watch_idle();
            auto [ec, n] = co_await stream_.async_read_reported(net::buffer(buffer), nothrow);
            if (ec) break;
            if (!codec_.receive(std::string_view(buffer.data(), n))) {
                report_abuse();
                kick();
                break;
            }
            watch_head();
            // (A request's frames mostly ask for nothing back: its stream answers later.)
            if (codec_.wants_write()) kick();
        }
        idle_.cancel();
        head_timer_.cancel();
        reading_ = false;
        reader_done_.cancel();
        kick();
    }

    // The frames ready are written together (gather_output), up to a TLS record's worth: a
    // write per frame made a response's HEADERS and DATA a record and a send each (h2load, 64
    // connections: sluice's CPU per request 22 -> 18.5 µs; 8 streams on 8 connections 17 ->
    // 10 µs). Frames past it, a large body's, go in the next write. The buffer lives only
    // while there is something to write (an idle connection keeps none).
    static constexpr std::size_t max_gathered = 16 * 1024;
    net::awaitable<void> write_loop() {
        while (true) {
            {
                std::string gathered;
                while (codec_.gather_output(gathered, max_gathered)) {
                    auto [ec, n] = co_await net::async_write(stream_, net::buffer(gathered), nothrow);
                    if (ec) co_return;
                    gathered.clear();
                }
            }
            if (codec_.finished() || !reading_) co_return;
            kick_.expires_at(Clock::time_point::max());
            writer_waiting_ = true;
            co_await kick_.async_wait(nothrow);
            writer_waiting_ = false;
        }
    }

    // The response to a request sluice answers itself; a gRPC request gets it the gRPC way
    // (HTTP 200, trailers only, grpc-status).
    void answer(H2Stream& s, Exchange& x, const LocalReply& reply) {
        x.rec.status = reply.status;
        if (s.closed) return;
        H2Fields fields = h2_fields(reply.headers);
        if (is_grpc(s.request)) {
            fields.emplace_back("content-type", "application/grpc");
            fields.emplace_back("grpc-status", std::to_string(grpc_status_for(reply.status)));
            fields.emplace_back("grpc-message", grpc_message(reply.detail));
            codec_.respond(s.id, 200, fields, false);
        } else {
            std::string body;
            if (reply.body == LocalReply::Body::problem) body = problem_json(reply.status, reply.detail);
            if (reply.body == LocalReply::Body::problem_with_limit)
                body = problem_json(reply.status, reply.detail, {{"route", x.rec.route}, {"limit", x.rec.limit}});
            if (!body.empty()) fields.emplace_back("content-type", "application/problem+json");
            fields.emplace_back("content-length", std::to_string(body.size()));
            const bool with_body = !body.empty() && x.rec.method != "HEAD";
            codec_.respond(s.id, reply.status, fields, with_body);
            if (with_body) codec_.send_body(s.id, body, true);
            x.rec.bytes_sent = with_body ? body.size() : 0;
        }
        end_unread_body(s);
        kick();
    }

    // After the response: the client need not send the rest of a body nobody reads (RFC
    // 9113 8.1: RST_STREAM NO_ERROR after the response). gRPC clients take that reset for an
    // error, so their bodies are read to their end and dropped instead.
    void end_unread_body(H2Stream& s) {
        if (s.body_end) return;
        drop_unread_body(s);
        if (!is_grpc(s.request)) codec_.reset_after_response(s.id);
        kick();
    }
    // The body received and what still comes is read and dropped (the windows open again
    // for it), up to max_body_bytes more: past that the stream is reset (on_body).
    void drop_unread_body(H2Stream& s) {
        codec_.consumed(s.id, s.body.size());
        s.body.clear();
        s.discard = true;
    }

    net::awaitable<void> serve(std::shared_ptr<H2Stream> sp) {
        auto self = shared_from_this();
        struct Serving {
            H2Connection& c;
            explicit Serving(H2Connection& connection) : c(connection) { ++c.serving_; }
            ~Serving() {
                --c.serving_;
                c.reader_done_.cancel();
            }
        } serving(*this);
        H2Stream& s = *sp;
        Exchange x(worker_.snapshot(), peer_ip_, peer_address_ ? &*peer_address_ : nullptr);
        const ServingExchange serving_exchange(s.exchange, x);
        auto& rec = x.rec;
        rec.client = std::string(peer_ip_);
        rec.peer = std::string(peer_ip_);
        rec.method = s.request.method.empty() ? "-" : s.request.method;
        rec.target = s.request.path.empty() ? "-" : s.request.path;
        rec.version = 20;
        auto done = [&](const LocalReply& reply) {
            answer(s, x, reply);
            finish(x, false);
        };
        if (s.request.too_large) co_return done(local_problem(431, "request header list larger than max_header_list_bytes"));
        std::string problem;
        std::string head = h1_head_for(s.request, problem);
        if (head.empty()) co_return done(local_problem(400, problem));
        RequestHead parsed = read_request_head(std::span<char>(head.data(), head.size()), x.cfg.server, x.request, rec);
        rec.version = 20;
        if (parsed.parsed) identify_client(x);
        if (parsed.refusal) co_return done(*parsed.refusal);
        x.key_path = std::move(parsed.target.path);
        x.key_query = std::move(parsed.target.query);
        if (auto refusal = route_request(x)) co_return done(*refusal);
        if (x.route->has_limits() && !exempt_from_limits(x)) {
            limit::RequestKeyValues values = key_values(x);
            if (auto refusal = prepare_limits(x, values)) co_return done(*refusal);
            if (!x.limit_set->limits.empty()) {  // (a plan may have none)
                const limit::RouteLimits limits = x.limit_set->route_limits(x.route->name);
                const auto decide_started = Clock::now();
                limit::Decision decision;
                if (auto known = worker_.decide_now(limits, values)) decision = std::move(*known);
                else co_await worker_.ask_store(limits, values, decision);
                x.snap.metrics->store_latency.observe(ms_since(decide_started) / 1000.0);
                if (auto refusal = read_decision(x, decision, worker_)) co_return done(*refusal);
            }
        }
        if (x.wait.count() > 0) {
            // Held back: the stream's timer, cut short when the client resets the stream, or
            // when a graceful stop begins and the request's turn would come after its end
            // (503 now, as over HTTP/1.1: stop() wakes the streams).
            const auto hold_started = Clock::now();
            const auto until = hold_started + x.wait;
            const auto too_late = [&] { return worker_.stopping() && until > worker_.stop_deadline(); };
            x.snap.metrics->requests_waiting.fetch_add(1, std::memory_order_relaxed);
            auto& wake = s.wake_timer(stream_.get_executor());
            while (!s.closed && Clock::now() < until && !too_late()) {
                wake.expires_at(until);
                co_await wake.async_wait(nothrow);
            }
            x.snap.metrics->requests_waiting.fetch_sub(1, std::memory_order_relaxed);
            x.snap.metrics->wait_time.observe(std::chrono::duration<double>(Clock::now() - hold_started).count());
            x.waiting_place.reset();
            rec.wait_ms = ms_since(hold_started);
            if (s.closed) {
                rec.status = 499;
                co_return (void)finish(x, false);
            }
            if (Clock::now() < until && too_late()) {
                LocalReply cut = local_problem(503, "sluice is shutting down: the request's turn would come too late");
                cut.headers = std::move(x.rate_headers);
                cut.headers.emplace_back("Retry-After", "1");
                co_return done(cut);
            }
        }
        if (x.check) {
            LocalReply pass;
            pass.status = 200;
            pass.body = LocalReply::Body::none;
            pass.headers = std::move(x.rate_headers);
            co_return done(pass);
        }
        co_await forward(sp, x, parsed);
        finish(x, false);
    }

    // The request to its upstream over HTTP/1.1, its response back on the stream.
    net::awaitable<void> forward(const std::shared_ptr<H2Stream>& sp, Exchange& x, RequestHead& parsed) {
        H2Stream& s = *sp;
        const auto& snap = x.snap;
        const auto& cfg = x.cfg;
        const auto& upstream_cfg = cfg.upstreams[x.route->upstream_index];
        auto& rec = x.rec;
        const auto& req = x.request;
        const bool is_head = req.method() == bhttp::verb::head;
        StreamDeadline deadline(deadlines_, sp);
        std::string head;
        const RequestOnward onward = request_onward(req, parsed.body, parsed.length, upstream_cfg.name,
                                                    {peer_ip_, x.peer_trusted, 20, stream_.is_tls()}, rec.request_id, head);
        if (onward.refusal) co_return answer(s, x, *onward.refusal);
        const bool has_body = !s.body_end || !s.body.empty();

        std::unique_ptr<UpstreamConnection> conn;
        UpstreamResponse response;  // the upstream's latest head
        boost::system::error_code body_refused;  // the upstream stopped taking the request body
        const auto upstream_started = Clock::now();
        for (int attempt = 0;; ++attempt) {
            Upstream failure;
            body_refused.clear();
            conn = co_await connect_upstream(worker_, stream_.get_executor(), snap, x.route->upstream_index, attempt > 0,
                                             failure, deadline);
            if (!conn) {
                rec.upstream_ms = ms_since(upstream_started);
                const LocalReply failed = failure == Upstream::timed_out ? local_problem(504, "upstream connect timed out")
                                                                         : local_problem(502, "upstream refused the connection");
                co_await charge_response(x, failed.status);
                co_return answer(s, x, failed);
            }
            const bool retryable = conn->uses > 0 && !has_body && attempt == 0 && may_resend(req.method());
            rec.upstream = conn->key;

            // The head, then the body as its DATA frames arrive, framed by us; the client's
            // window opens again as each piece has gone upstream.
            boost::system::error_code upstream_error;
            BodyWriter writer(head, onward.body);
            for (bool first = true;; first = false) {
                if (s.closed) break;
                if (s.body_total > cfg.server.max_body_bytes) {
                    conn.reset();
                    co_return answer(s, x, local_problem(413, "request body larger than max_body_bytes"));
                }
                const std::size_t n = std::min(s.body.size(), piece_bytes);
                const std::string piece = s.body.substr(0, n);
                s.body.erase(0, n);
                const bool body_done = s.body_end && s.body.empty();
                if (!first && n == 0 && !body_done) {
                    if (!co_await s.wait(stream_.get_executor(), cfg.server.idle_timeout) && !s.closed) {
                        conn.reset();
                        co_return answer(s, x, local_problem(408, "request body not received in time"));
                    }
                    continue;
                }
                std::array<net::const_buffer, 5> out;
                const auto parts = writer.frame(piece, body_done);
                for (std::size_t i = 0; i < parts.size(); ++i) out[i] = net::buffer(parts[i].data(), parts[i].size());
                const std::size_t sent = conn->stream.send_now(out, upstream_error);
                if (!upstream_error && sent < net::buffer_size(out)) {
                    deadline.arm(conn->stream.socket(), Clock::now() + upstream_cfg.timeout);
                    auto [wec, wn] = co_await net::async_write(conn->stream, rest_after(out, sent), nothrow);
                    upstream_error = deadline.disarm(wec);
                }
                if (n > 0) {
                    codec_.consumed(s.id, n);
                    kick();
                }
                if (upstream_error || body_done) break;
            }
            if (s.closed) {
                rec.status = 499;
                co_return;
            }
            // The upstream stopped taking the body (closed, reset): an answer it sent first (a
            // 413, say) is read and relayed, as over HTTP/1.1; the rest of the body is not
            // wanted: dropped as it comes from now on, and the stream reset NO_ERROR after the
            // answer (end_unread_body). Not for a request without a body (HTTP/1.1's reason).
            if (has_body && upstream_error && upstream_error != beast::error::timeout &&
                upstream_error != net::error::operation_aborted) {
                body_refused = std::exchange(upstream_error, {});
                drop_unread_body(s);
            }
            std::string_view invalid;
            bool answered = false;
            const auto head_deadline = Clock::now() + upstream_cfg.timeout;
            for (int interim = 0; !upstream_error && !s.closed; ++interim) {
                const auto got = co_await read_upstream_head(*conn, response, head_deadline, deadline);
                if (got.ec || !got.problem.empty()) {
                    upstream_error = got.ec;
                    invalid = got.problem;
                    break;
                }
                answered = true;
                const auto status = response.status;
                if (status >= 200) break;
                if (status == 101) {
                    invalid = "upstream switched protocols, which an HTTP/2 stream cannot relay";
                    break;
                }
                if (interim >= max_interim_responses) {
                    invalid = "upstream sent too many informational responses";
                    break;
                }
            }
            if (body_refused && (upstream_error || !invalid.empty() || response.status < 200)) {
                upstream_error = body_refused;  // no final answer came before the close
                invalid = {};
            }
            if (s.closed) {
                rec.upstream_ms = ms_since(upstream_started);
                rec.status = 499;
                co_return;
            }
            if (!upstream_error && invalid.empty()) break;
            rec.upstream_ms = ms_since(upstream_started);
            if (retryable && !answered && conn->buffer.size() == 0 && invalid.empty() && is_connection_lost(upstream_error))
                continue;
            if (upstream_error == beast::error::timeout) {
                spdlog::warn("upstream {} server {}: no response within {} ms", upstream_cfg.name, conn->key,
                             upstream_cfg.timeout.count());
                co_await charge_response(x, 504);
                co_return answer(s, x, local_problem(504, "upstream did not answer in time"));
            }
            const std::string problem =
                invalid.empty() ? "upstream failed: " + upstream_error.message() : std::string(invalid);
            spdlog::warn("upstream {} server {}: {}", upstream_cfg.name, conn->key, problem);
            co_await charge_response(x, 502);
            co_return answer(s, x, local_problem(502, problem));
        }
        rec.upstream_ms = ms_since(upstream_started);

        const unsigned status = response.status;
        const auto framing = check_response_framing(response.fields, response.version, status, is_head);
        if (!framing.ok()) {
            spdlog::warn("upstream {} server {}: {}", upstream_cfg.name, conn->key, framing.problem);
            co_await charge_response(x, 502);
            co_return answer(s, x, local_problem(502, framing.problem));
        }
        rec.forwarded = true;
        snap.metrics->upstream_latency.observe(*rec.upstream_ms / 1000.0);
        const bool upstream_keeps = response.keep_alive;
        using Body = Framing::Body;
        const bool with_body = framing.body != Body::none && !(framing.body == Body::length && framing.length == 0);
        if (x.charge_worker || x.unsettled) {
            // Counted before the client has the head (as over HTTP/1.1), in one store round trip.
            co_await settle_and_charge(x, &response.fields, status);
            if (s.closed) {
                rec.status = 499;
                co_return;
            }
        }
        {
            thread_local H2Fields fields;  // (nghttp2 copies them before respond returns)
            response_onward_h2(response, framing, x.rate_headers, fields);
            codec_.respond(s.id, status, fields, with_body);
        }
        rec.status = status;
        kick();
        if (with_body) {
            BodyReader body = response_body_reader(framing);
            if (settles_trailer(x)) body.keep_trailers();
            auto chunk = worker_.relay_buffers().take();
            const std::span<char> relay(chunk.data(), chunk.size());
            while (!body.done()) {
                // A client that does not read (its window stays shut) holds at most
                // response_buffer_bytes here, and no more is read from the upstream.
                while (codec_.buffered(s.id) >= response_buffer_bytes && !s.closed)
                    if (!co_await s.wait(stream_.get_executor(), cfg.server.idle_timeout)) break;
                if (s.closed) co_return;
                if (codec_.buffered(s.id) >= response_buffer_bytes) {
                    codec_.reset(s.id, 8 /* CANCEL */);
                    kick();
                    co_return;
                }
                auto got = co_await read_body(body, conn->buffer, conn->stream, relay, upstream_cfg.timeout, true, deadline);
                if (body.failed() || got.ec) {
                    spdlog::warn("upstream {} server {}: response body cut short: {}", upstream_cfg.name, conn->key,
                                 got.ec ? got.ec.message() : std::string(body.problem()));
                    codec_.reset(s.id, 2 /* INTERNAL_ERROR */);
                    kick();
                    co_return;
                }
                if (body.done() && x.unsettled) {
                    // A cost the trailer reports: settled before the body's end goes.
                    co_await settle_trailer(x, body.trailers());
                    if (s.closed) co_return;
                }
                codec_.send_body(s.id, std::string_view(relay.data(), got.n), body.done());
                rec.bytes_sent += got.n;
                kick();
            }
        }
        if (body_refused) {
            if (!s.closed) end_unread_body(s);
            co_return;  // (the connection is not reused)
        }
        if (upstream_keeps && !framing.announced_body && framing.body != Body::until_close)
            worker_.upstream_pool().put(std::move(conn), upstream_cfg.max_idle);
    }

    server::Worker& worker_;
    Stream& stream_;
    std::string_view peer_ip_;
    std::optional<sluice::net::IpAddress> peer_address_;  // peer_ip_, parsed (identify_client)
    H2Codec codec_;
    std::map<std::int32_t, std::shared_ptr<H2Stream>> streams_;
    net::steady_timer kick_;         // the writer waits on it
    bool writer_waiting_ = false;    // ... now
    net::steady_timer reader_done_;  // run() waits on it for the reader
    net::steady_timer idle_;
    Clock::time_point idle_deadline_{};  // watch_idle: when the connection, idle, is closed
    Clock::time_point idle_expiry_{};    // what idle_ waits for, while idle_waiting_
    bool idle_waiting_ = false;
    net::steady_timer head_timer_;   // the open request head's header_timeout (watch_head)
    StreamDeadlines deadlines_;      // the streams' upstream operations'
    std::uint64_t head_block_ = 0;   // the block it times, 0: none
    bool reading_ = false;
    bool stopping_ = false;
    std::size_t serving_ = 0;  // streams whose serve() runs
};

net::awaitable<void> serve_h2(server::Worker& worker, Stream& stream, std::string_view peer_ip, std::string_view early,
                              std::shared_ptr<H2Connection>& handle) {
    const auto& limits = worker.snapshot()->config->server.http2;
    H2Settings settings;
    settings.max_concurrent_streams = limits.max_concurrent_streams;
    settings.max_header_list_bytes = limits.max_header_list_bytes;
    settings.max_resets_per_second = limits.max_resets_per_second;
    settings.max_control_frames_per_second = limits.max_control_frames_per_second;
    settings.stream_window_bytes = limits.stream_window_bytes;
    handle = std::make_shared<H2Connection>(worker, stream, peer_ip, settings);
    co_await handle->run(early);
    handle.reset();
}

void h2_stop(H2Connection& connection) { connection.stop(); }

void h2_abandon(H2Connection& connection) { connection.abandon(); }

}  // namespace sluice::http
