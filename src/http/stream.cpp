#include "http/stream.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>

namespace sluice::http {

bool Stream::quiet() {
    auto& sock = socket();
    if (!sock.is_open()) return false;
    char byte;
    const ::ssize_t n = ::recv(sock.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n >= 0) return false;  // closed by the peer (0) or bytes nobody asked for
    if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
    // Nothing there, no byte and no close, and the worker's loop is single-threaded: what
    // arrives from now on makes a report of its own, so the next read can wait for it.
    sluice::net::ReadReadiness(sock).skip_read_attempt();
    return true;
}

bool Stream::holds_unread_tls() {
    if (!tls_) return false;
    SSL* ssl = tls_->native_handle();
    // SSL_has_pending: records read and not yet processed too (SSL_pending counts only
    // decrypted bytes); the read BIO: bytes Asio's layer passed in that OpenSSL has not read.
    if (SSL_has_pending(ssl) != 0) return true;
    BIO* input = SSL_get_rbio(ssl);
    return input != nullptr && BIO_ctrl_pending(input) > 0;
}

bool Stream::attempts_read_first() { return sluice::net::ReadReadiness(socket()).attempts_read_first(); }

bool Stream::watches_peer_close() { return sluice::net::ReadReadiness(socket()).watches_peer_close(); }

std::size_t Stream::send_now(const boost::asio::const_buffer* buffers, std::size_t count,
                             boost::system::error_code& ec) {
    ec.clear();
    if (tls_ || !plain_->is_open()) return 0;
    constexpr std::size_t max_pieces = 8;
    ::iovec pieces[max_pieces];
    std::size_t used = 0;
    for (std::size_t i = 0; i < count && used < max_pieces; ++i) {
        if (buffers[i].size() == 0) continue;
        pieces[used].iov_base = const_cast<void*>(buffers[i].data());
        pieces[used].iov_len = buffers[i].size();
        ++used;
    }
    if (used == 0) return 0;
    ::msghdr message{};
    message.msg_iov = pieces;
    message.msg_iovlen = used;
    const ::ssize_t sent = ::sendmsg(plain_->native_handle(), &message, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent >= 0) return static_cast<std::size_t>(sent);
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        ec.assign(errno, boost::system::system_category());
    return 0;
}

}  // namespace sluice::http
