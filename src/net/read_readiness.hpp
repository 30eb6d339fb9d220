// Whether a socket's next read must first attempt a receive, as Asio's epoll reactor keeps
// it, and what lets us say "no": a read that drained the socket with no close behind it.
//
// Asio attempts a receive at once when a read starts on a socket it has seen readable
// (its "speculative" read). On a keep-alive connection that is one receive per request that
// finds nothing: the next request comes later. Knowing it would find nothing needs two
// things Asio does not keep: that the read took everything there was (fewer bytes than
// asked for), and that the peer's close was not already queued behind those bytes (a FIN
// arriving with the last bytes is reported together with them and never again, with
// edge-triggered epoll: a read that waits for another report would wait for ever). nginx
// knows the second from EPOLLRDHUP in the event it was woken by. Here the socket is
// registered for EPOLLRDHUP (one epoll_ctl, the first time), and the word in which Asio
// keeps the events of the socket's last report is read: a read into buffer() marks that
// word with a bit epoll never reports, just before each receive it attempts; a report
// collected afterwards overwrites the word. So after a short read, a marked word without
// EPOLLRDHUP says: nothing was reported between that receive and now, and no close was
// there when the last report was collected; anything that arrives later makes a report of
// its own. Only then is the next read told to wait for the socket (read_done).
//
// This reaches into Asio's private state, so it is compiled for the Asio of Boost 1.81 with
// its epoll reactor only (Debian bookworm's); elsewhere every call is a no-op and reads
// attempt a receive first, as Asio does. It relies on the io_context being run by one
// thread (a worker's), where a report collected by epoll is always handled before the next
// epoll_wait.
#pragma once

#include <cstddef>

#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

namespace sluice::net {

class ReadReadiness {
public:
    // Of an open socket or descriptor; look it up again after the socket is closed or moved.
    explicit ReadReadiness(boost::asio::ip::tcp::socket& socket);
    explicit ReadReadiness(boost::asio::posix::stream_descriptor& descriptor);

    // EPOLLONESHOT: a bit epoll never reports (it is a registration flag).
    static constexpr unsigned int receive_mark = 1u << 30;

    // A one-piece buffer sequence for async_read_some / async_receive that marks the
    // socket's report word each time the reactor receives into it.
    struct Buffer {
        boost::asio::mutable_buffer piece;
        unsigned int* report = nullptr;
        const boost::asio::mutable_buffer* begin() const {
            if (report) *report |= receive_mark;
            return &piece;
        }
        const boost::asio::mutable_buffer* end() const { return &piece + 1; }
    };
    Buffer buffer(boost::asio::mutable_buffer piece) const { return Buffer{piece, report_}; }

    // After a read into buffer() returned `got` bytes (no error) of `asked`: if it drained
    // the socket with no close behind (above), the next read waits for the socket without
    // attempting a receive. The first call on a socket registers it for EPOLLRDHUP instead
    // (one epoll_ctl); later calls can tell.
    void read_done(std::size_t got, std::size_t asked);

    // The next read waits for the socket's next report without attempting a receive first:
    // right only when a receive has just found nothing (Stream::quiet).
    void skip_read_attempt();
    // Whether the next read attempts a receive first. For tests.
    bool attempts_read_first() const;
    // Whether the socket is registered for EPOLLRDHUP (read_done has run on it). For tests.
    bool watches_peer_close() const;

private:
    void* state_ = nullptr;           // Asio's epoll_reactor::descriptor_state, or none
    unsigned int* report_ = nullptr;  // its report word
};

}  // namespace sluice::net
