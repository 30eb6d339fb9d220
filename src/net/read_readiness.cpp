#include "net/read_readiness.hpp"

#include <boost/version.hpp>

#if BOOST_VERSION == 108100 && defined(BOOST_ASIO_HAS_EPOLL) && !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT)
#define SLUICE_READ_READINESS 1
#include <sys/epoll.h>
#endif

namespace sluice::net {

#ifdef SLUICE_READ_READINESS
namespace {

namespace detail = boost::asio::detail;
using Reactor = detail::epoll_reactor;
using State = Reactor::descriptor_state;

// Asio's members are private; an explicit instantiation may name them, and a friend
// function defined by it hands the member pointer out.
template <class Tag, typename Tag::type Member>
struct Reach {
    friend typename Tag::type member(Tag) { return Member; }
};
struct AttemptFlags {
    using type = bool (State::*)[Reactor::max_ops];
    friend type member(AttemptFlags);
};
struct RegisteredEvents {
    using type = std::uint32_t State::*;
    friend type member(RegisteredEvents);
};
struct Descriptor {
    using type = int State::*;
    friend type member(Descriptor);
};
struct StateReactor {
    using type = Reactor* State::*;
    friend type member(StateReactor);
};
struct EpollFd {
    using type = int Reactor::*;
    friend type member(EpollFd);
};
struct ReportWord {  // scheduler_operation::task_result_: the events of the last report
    using type = unsigned int detail::scheduler_operation::*;
    friend type member(ReportWord);
};
struct DescriptorData {
    using type = Reactor::per_descriptor_data detail::reactive_descriptor_service::implementation_type::*;
    friend type member(DescriptorData);
};
template struct Reach<AttemptFlags, &State::try_speculative_>;
template struct Reach<RegisteredEvents, &State::registered_events_>;
template struct Reach<Descriptor, &State::descriptor_>;
template struct Reach<StateReactor, &State::reactor_>;
template struct Reach<EpollFd, &Reactor::epoll_fd_>;
template struct Reach<ReportWord, &detail::scheduler_operation::task_result_>;
template struct Reach<DescriptorData, &detail::reactive_descriptor_service::implementation_type::reactor_data_>;

struct SocketAccess : boost::asio::ip::tcp::socket {
    static State* state(boost::asio::ip::tcp::socket& socket) {
        constexpr auto impl = &SocketAccess::impl_;
        return (socket.*impl).get_implementation().reactor_data_;
    }
};
struct DescriptorAccess : boost::asio::posix::stream_descriptor {
    static State* state(boost::asio::posix::stream_descriptor& descriptor) {
        constexpr auto impl = &DescriptorAccess::impl_;
        return (descriptor.*impl).get_implementation().*member(DescriptorData{});
    }
};

State* as_state(void* p) { return static_cast<State*>(p); }
// descriptor_state derives privately from its operation; a C-style cast may name that base.
unsigned int* report_word(State* state) {
    if (state == nullptr) return nullptr;
    return &(((detail::scheduler_operation*)state)->*member(ReportWord{}));
}

}  // namespace

ReadReadiness::ReadReadiness(boost::asio::ip::tcp::socket& socket)
    : state_(socket.is_open() ? SocketAccess::state(socket) : nullptr), report_(report_word(as_state(state_))) {}

ReadReadiness::ReadReadiness(boost::asio::posix::stream_descriptor& descriptor)
    : state_(descriptor.is_open() ? DescriptorAccess::state(descriptor) : nullptr),
      report_(report_word(as_state(state_))) {}

void ReadReadiness::read_done(std::size_t got, std::size_t asked) {
    State* state = as_state(state_);
    if (state == nullptr || got == 0 || got >= asked) return;
    std::uint32_t& registered = state->*member(RegisteredEvents{});
    if (registered == 0) return;  // not in epoll (Asio's fallback for regular files)
    if ((registered & EPOLLRDHUP) == 0) {
        // Registered anew with the close reported: a close already there is reported now
        // (epoll polls the socket on a change), so this read's word says nothing yet.
        ::epoll_event ev{};
        ev.events = registered | EPOLLRDHUP;
        ev.data.ptr = state;
        Reactor* reactor = state->*member(StateReactor{});
        if (::epoll_ctl(reactor->*member(EpollFd{}), EPOLL_CTL_MOD, state->*member(Descriptor{}), &ev) == 0)
            registered = ev.events;
        return;
    }
    const unsigned int word = *report_;
    if ((word & receive_mark) == 0) return;  // a report came after the receive
    if ((word & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) return;
    (state->*member(AttemptFlags{}))[Reactor::read_op] = false;
}

void ReadReadiness::skip_read_attempt() {
    if (State* state = as_state(state_)) (state->*member(AttemptFlags{}))[Reactor::read_op] = false;
}

bool ReadReadiness::attempts_read_first() const {
    if (State* state = as_state(state_)) return (state->*member(AttemptFlags{}))[Reactor::read_op];
    return true;
}

bool ReadReadiness::watches_peer_close() const {
    if (State* state = as_state(state_)) return (state->*member(RegisteredEvents{}) & EPOLLRDHUP) != 0;
    return false;
}

#else

ReadReadiness::ReadReadiness(boost::asio::ip::tcp::socket&) {}
ReadReadiness::ReadReadiness(boost::asio::posix::stream_descriptor&) {}
void ReadReadiness::read_done(std::size_t, std::size_t) {}
void ReadReadiness::skip_read_attempt() {}
bool ReadReadiness::attempts_read_first() const { return true; }
bool ReadReadiness::watches_peer_close() const { return false; }

#endif

}  // namespace sluice::net
