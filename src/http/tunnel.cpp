#include "http/tunnel.hpp"

#include <array>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <openssl/ssl.h>

namespace sluice::http {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
constexpr auto nothrow = net::as_tuple(net::use_awaitable);

// Tells `to` that nothing more comes from the other side. Over TLS that is close_notify, then
// the TCP half-close (a bare FIN reads as a cut connection, a truncation, to a TLS client).
// TLS lets the other side go on sending (TLS 1.3 says so; OpenSSL reads on after its own
// close_notify in 1.2 too), and the other direction is reading `to` meanwhile, so the
// shutdown must only write: OpenSSL's SSL_shutdown waits for the peer's close_notify unless
// it was received. The flag is set for the call Asio makes as it starts the operation (its
// only call into OpenSSL when there is nothing to wait for) and put back at once, so the
// reading direction reads on.
net::awaitable<void> end_sending(Stream& to) {
    boost::system::error_code ignored;
    if (to.is_tls()) {
        SSL* ssl = to.tls().native_handle();
        const int received = SSL_get_shutdown(ssl) & SSL_RECEIVED_SHUTDOWN;
        SSL_set_shutdown(ssl, SSL_get_shutdown(ssl) | SSL_RECEIVED_SHUTDOWN);
        auto [ec] = co_await net::async_initiate<decltype(nothrow), void(boost::system::error_code)>(
            [&to, ssl, received](auto handler) {
                to.tls().async_shutdown(std::move(handler));
                SSL_set_shutdown(ssl, (SSL_get_shutdown(ssl) & ~SSL_RECEIVED_SHUTDOWN) | received);
            },
            nothrow);
        if (ec) {
            to.socket().shutdown(tcp::socket::shutdown_both, ignored);
            co_return;
        }
    }
    to.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

// One direction of a tunnel: what `from` sends goes to `to` until `from` ends (then `to`
// is told no more comes: end_sending) or either fails (then both are shut, so the other
// direction ends too). The buffer lives on the coroutine frame: 16 KB per direction.
net::awaitable<void> relay_one_way(Stream& from, Stream& to, std::uint64_t& bytes,
                                   std::chrono::steady_clock::time_point& last) {
    std::array<char, 16384> buffer;
    for (;;) {
        auto [ec, n] = co_await from.async_read_reported(net::buffer(buffer), nothrow);
        boost::system::error_code ignored;
        if (ec) {
            if (ec == net::error::eof) {
                co_await end_sending(to);
            } else {
                from.socket().shutdown(tcp::socket::shutdown_both, ignored);
                to.socket().shutdown(tcp::socket::shutdown_both, ignored);
            }
            co_return;
        }
        last = std::chrono::steady_clock::now();
        auto [wec, wn] = co_await net::async_write(to, net::buffer(buffer.data(), n), nothrow);
        if (wec) {
            from.socket().shutdown(tcp::socket::shutdown_both, ignored);
            to.socket().shutdown(tcp::socket::shutdown_both, ignored);
            co_return;
        }
        bytes += n;
        last = std::chrono::steady_clock::now();
    }
}

// Ends when nothing moved for `idle`.
net::awaitable<void> watch_idle(std::chrono::steady_clock::time_point& last, std::chrono::milliseconds idle) {
    net::steady_timer timer(co_await net::this_coro::executor);
    for (;;) {
        timer.expires_at(last + idle);
        co_await timer.async_wait(nothrow);
        if (std::chrono::steady_clock::now() >= last + idle) co_return;
    }
}

}  // namespace

net::awaitable<TunnelBytes> relay_tunnel(Stream& client, Stream& upstream, std::string_view client_early,
                                         std::chrono::milliseconds idle) {
    using namespace net::experimental::awaitable_operators;
    TunnelBytes bytes;
    if (!client_early.empty()) {
        auto [ec, n] = co_await net::async_write(upstream, net::buffer(client_early.data(), client_early.size()),
                                                 nothrow);
        if (ec) co_return bytes;
        bytes.up += client_early.size();
    }
    auto last = std::chrono::steady_clock::now();
    co_await ((relay_one_way(client, upstream, bytes.up, last) && relay_one_way(upstream, client, bytes.down, last)) ||
              watch_idle(last, idle));
    co_return bytes;
}

}  // namespace sluice::http
