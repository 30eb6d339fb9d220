// A connection's bytes: a TCP socket, or TLS over one. Reads and writes go through
// whichever it is (it is an Asio AsyncReadStream and AsyncWriteStream); deadlines, socket
// options, shutdown and close act on the TCP socket underneath (socket()).
//
// Include only where needed: it brings in Asio's OpenSSL layer.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>

#include "net/read_readiness.hpp"

namespace sluice::http {

// A read's completion that reports its result (net::ReadReadiness::read_done) before the
// handler runs; everything associated with the handler (executor, allocator, cancellation)
// stays its own (the associator below).
template <class Handler>
struct ReportedRead {
    Handler handler;
    boost::asio::ip::tcp::socket* socket;
    std::size_t asked;
    void operator()(const boost::system::error_code& ec, std::size_t n) {
        if (!ec) sluice::net::ReadReadiness(*socket).read_done(n, asked);
        std::move(handler)(ec, n);
    }
};

// A read of `socket` into `buffer` whose result is reported before `handler` runs.
template <class Handler>
void read_reported(boost::asio::ip::tcp::socket& socket, boost::asio::mutable_buffer buffer, Handler&& handler) {
    socket.async_read_some(sluice::net::ReadReadiness(socket).buffer(buffer),
                           ReportedRead<std::decay_t<Handler>>{std::forward<Handler>(handler), &socket, buffer.size()});
}

// The TCP socket under TLS. OpenSSL's layer reads it whenever it wants more bytes, and on a
// keep-alive connection the read for the next request found nothing: these reads are
// reported as a plain connection's request reads are, so that one that drained the socket
// with no close behind lets the next wait without a receive first.
class ReportedSocket {
public:
    using tcp = boost::asio::ip::tcp;
    using executor_type = tcp::socket::executor_type;
    using lowest_layer_type = tcp::socket::lowest_layer_type;

    explicit ReportedSocket(tcp::socket socket) : socket_(std::move(socket)) {}

    tcp::socket& socket() { return socket_; }
    executor_type get_executor() { return socket_.get_executor(); }
    lowest_layer_type& lowest_layer() { return socket_.lowest_layer(); }
    const lowest_layer_type& lowest_layer() const { return socket_.lowest_layer(); }

    // (What Asio's TLS layer calls: one buffer, a handler.)
    template <class Handler>
    void async_read_some(const boost::asio::mutable_buffer& buffer, Handler&& handler) {
        read_reported(socket_, buffer, std::forward<Handler>(handler));
    }
    template <class ConstBuffers, class Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token) {
        return socket_.async_write_some(buffers, std::forward<Token>(token));
    }

private:
    tcp::socket socket_;
};

class Stream {
public:
    using tcp = boost::asio::ip::tcp;
    using TlsStream = boost::asio::ssl::stream<ReportedSocket>;
    using executor_type = tcp::socket::executor_type;

    explicit Stream(tcp::socket socket) : plain_(std::move(socket)) {}
    explicit Stream(const executor_type& ex) : plain_(tcp::socket(ex)) {}
    // TLS over `socket`, as a server or (after start_tls) a client.
    Stream(tcp::socket socket, boost::asio::ssl::context& context)
        : tls_(std::make_unique<TlsStream>(std::move(socket), context)) {}

    // From now on TLS over the (connected) socket; handshake next.
    void start_tls(boost::asio::ssl::context& context) {
        tls_ = std::make_unique<TlsStream>(ReportedSocket(std::move(*plain_)), context);
        plain_.reset();
    }

    tcp::socket& socket() { return tls_ ? tls_->next_layer().socket() : *plain_; }
    bool is_tls() const { return tls_ != nullptr; }
    TlsStream& tls() { return *tls_; }
    executor_type get_executor() { return tls_ ? tls_->get_executor() : plain_->get_executor(); }

    template <class MutableBuffers, class Token>
    auto async_read_some(const MutableBuffers& buffers, Token&& token) {
        if (tls_) return tls_->async_read_some(buffers, std::forward<Token>(token));
        return plain_->async_read_some(buffers, std::forward<Token>(token));
    }

    // A read that reports its result (net/read_readiness.hpp): where it drained the socket
    // with no close behind, the next read waits for the socket without attempting a receive
    // first, as for the next request on a keep-alive connection, which comes later: a
    // receive per request that would find nothing. (Over TLS every read of the socket
    // underneath is reported: ReportedSocket.)
    template <class Token>
    auto async_read_reported(boost::asio::mutable_buffer buffer, Token&& token) {
        if (tls_) return tls_->async_read_some(buffer, std::forward<Token>(token));
        return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
            [](auto handler, tcp::socket* socket, boost::asio::mutable_buffer buffer) {
                read_reported(*socket, buffer, std::move(handler));
            },
            token, &*plain_, buffer);
    }

    // Over TLS, a sequence of buffers (head, chunk frame, body piece...) is gathered first:
    // an SSL stream writes only the first buffer of a sequence per call, which would make
    // each piece a record and a system call of its own.
    template <class ConstBuffers, class Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token) {
        if (tls_) {
            if (!gather_) gather_ = std::make_unique<std::array<char, 16384>>();
            const std::size_t n = boost::asio::buffer_copy(boost::asio::buffer(*gather_), buffers);
            return tls_->async_write_some(boost::asio::buffer(gather_->data(), n), std::forward<Token>(token));
        }
        return plain_->async_write_some(buffers, std::forward<Token>(token));
    }

    // Sends what a plain connection's socket takes at once, without waiting: one sendmsg of
    // up to 8 of the buffers, not through Asio's reactor, so a write that completes at once
    // (nearly every request and response piece: the send buffer has room) needs no
    // asynchronous operation and no trip through the event loop. Returns the bytes sent: 0
    // over TLS (the record layer writes), when the socket would block, and on an error, which
    // `ec` then holds (what an asynchronous write would report). The caller writes the rest
    // asynchronously; no other write may be pending on the stream.
    std::size_t send_now(const boost::asio::const_buffer* buffers, std::size_t count, boost::system::error_code& ec);
    template <std::size_t N>
    std::size_t send_now(const std::array<boost::asio::const_buffer, N>& buffers, boost::system::error_code& ec) {
        return send_now(buffers.data(), N, ec);
    }

    // True when the peer has neither closed the connection nor sent anything: a receive that
    // only peeks finds nothing (a pooled connection is checked so before reuse). The next
    // read then waits for the socket to become readable without first attempting a receive
    // (net/read_readiness.hpp): a response never comes back before its request was sent, so that
    // attempt would find nothing, a system call per request.
    bool quiet();
    // Over TLS: bytes read from the socket that were not handed out yet, decrypted or not,
    // wherever they wait (OpenSSL's buffers, the pair of BIOs Asio's layer feeds it
    // through). A pooled connection with any is not reused: they would be read as the next
    // request's response, and quiet() only sees the socket. False over plain TCP.
    bool holds_unread_tls();
    // Whether the next read first attempts a receive (Asio's "speculative" read): false after
    // quiet() or a reported read said so, until the socket is next reported. For tests.
    bool attempts_read_first();
    // Whether epoll reports the peer's close on its own (after a reported read). For tests.
    bool watches_peer_close();

private:
    std::optional<tcp::socket> plain_;
    std::unique_ptr<TlsStream> tls_;
    std::unique_ptr<std::array<char, 16384>> gather_;
};

// The part of `buffers` past their first `n` bytes: what a write that sent `n` left.
template <std::size_t N>
std::array<boost::asio::const_buffer, N> rest_after(std::array<boost::asio::const_buffer, N> buffers, std::size_t n) {
    for (auto& piece : buffers) {
        const std::size_t skipped = n < piece.size() ? n : piece.size();
        piece += skipped;
        n -= skipped;
    }
    return buffers;
}

}  // namespace sluice::http

namespace boost::asio {
template <template <typename, typename> class Associator, typename Handler, typename DefaultCandidate>
struct associator<Associator, sluice::http::ReportedRead<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
    static typename Associator<Handler, DefaultCandidate>::type get(const sluice::http::ReportedRead<Handler>& h) noexcept {
        return Associator<Handler, DefaultCandidate>::get(h.handler);
    }
    static auto get(const sluice::http::ReportedRead<Handler>& h, const DefaultCandidate& c) noexcept
        -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c)) {
        return Associator<Handler, DefaultCandidate>::get(h.handler, c);
    }
};
}  // namespace boost::asio
