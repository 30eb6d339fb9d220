#include "http/stream.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>

#include <boost/version.hpp>

namespace sluice::http {

// Asio's epoll reactor keeps, for each socket, whether a read should first be attempted
// at once (try_speculative_): set whenever epoll reports the socket readable, cleared only
// by a read of 0 bytes. An operation started while it is clear is queued with no system
// call and performed when epoll next reports the socket (edge-triggered: any byte or close
// arriving from now on is reported). Clearing it is right only when a receive has just
// found nothing, no byte and no close, with no wait in between (the worker's event loop is
// single-threaded): what arrives afterwards sets it again. A receive that returned fewer
// bytes than asked for is not enough: the peer's close may already be queued behind them,
// reported together with them and never again (tried: a close-delimited response then
// hung; nginx knows it from EPOLLRDHUP, which Asio does not ask for). The flag is private
// to Asio; it is reached through the socket's protected implementation and an explicit
// instantiation, which the language lets name private members. (Asio itself clears it only
// for a socket epoll accepted; a TCP socket always is.) Only for the Asio of Boost 1.81 with
// its epoll reactor (bookworm's); elsewhere quiet() only peeks and reads attempt a receive
// first as before.
#if BOOST_VERSION == 108100 && defined(BOOST_ASIO_HAS_EPOLL) && !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT)
#define SLUICE_READ_ATTEMPT_FLAG 1
namespace {

using Reactor = boost::asio::detail::epoll_reactor;

struct AttemptFlags {
    using type = bool (Reactor::descriptor_state::*)[Reactor::max_ops];
    friend type member(AttemptFlags);
};
template <class Tag, typename Tag::type Member>
struct Reach {
    friend typename Tag::type member(Tag) { return Member; }
};
template struct Reach<AttemptFlags, &Reactor::descriptor_state::try_speculative_>;

struct SocketAccess : boost::asio::ip::tcp::socket {
    static auto& implementation(boost::asio::ip::tcp::socket& socket) {
        constexpr auto impl = &SocketAccess::impl_;
        return (socket.*impl).get_implementation();
    }
};

bool* read_attempt_flag(boost::asio::ip::tcp::socket& socket) {
    Reactor::descriptor_state* state = SocketAccess::implementation(socket).reactor_data_;
    if (state == nullptr) return nullptr;
    return &(state->*member(AttemptFlags{}))[Reactor::read_op];
}

}  // namespace
#endif

bool Stream::quiet() {
    auto& sock = socket();
    if (!sock.is_open()) return false;
    char byte;
    const ::ssize_t n = ::recv(sock.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n >= 0) return false;  // closed by the peer (0) or bytes nobody asked for
    if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
#ifdef SLUICE_READ_ATTEMPT_FLAG
    if (bool* attempt = read_attempt_flag(sock)) *attempt = false;
#endif
    return true;
}

bool Stream::attempts_read_first() {
#ifdef SLUICE_READ_ATTEMPT_FLAG
    if (bool* attempt = read_attempt_flag(socket())) return *attempt;
#endif
    return true;
}

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
