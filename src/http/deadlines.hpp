// The deadlines of one client connection on one timer: the client side's (the operation on
// the client's socket) and the upstream side's (the operation on the upstream connection the
// request uses). The session owns the timer and the sockets; this decides when the timer
// must wait and which deadline has passed. Pure, header-only.
//
// Arming only moves a deadline: the timer is restarted only when the new deadline is earlier
// than the one it waits for; when it fires early (a deadline moved later meanwhile) it waits
// again for what is left. So the request path does not cancel and restart a timer for every
// read and write. (beast::tcp_stream starts and cancels a timer per operation, and closes
// the socket on timeout, which would make answering 408 impossible.)
#pragma once

#include <algorithm>
#include <chrono>

namespace sluice::http {

class Deadlines {
public:
    using Clock = std::chrono::steady_clock;
    using time_point = Clock::time_point;
    enum class Side { client, upstream };

    // Sets `side`'s deadline. True: the timer must (re)start (start()), because it is not
    // waiting or waits for a later time.
    bool arm(Side side, time_point deadline) {
        at(side) = deadline;
        return !waiting_ || deadline < expiry_;
    }
    void disarm(Side side) { at(side) = time_point::max(); }
    time_point deadline(Side side) const { return side == Side::client ? client_ : upstream_; }

    // The timer starts waiting: until when (the earlier deadline).
    time_point start() {
        waiting_ = true;
        expiry_ = std::min(client_, upstream_);
        return expiry_;
    }
    // The timer was stopped (the connection ends): nothing waits.
    void stopped() { waiting_ = false; }

    struct Fired {
        bool client = false;    // the client side's deadline passed (now disarmed)
        bool upstream = false;  // the upstream side's
        bool again = false;     // a deadline is still armed: start() the timer again
    };
    // The timer's wait completed at `now`.
    Fired fire(time_point now) {
        waiting_ = false;
        Fired fired;
        if (now >= client_) {
            client_ = time_point::max();
            fired.client = true;
        }
        if (now >= upstream_) {
            upstream_ = time_point::max();
            fired.upstream = true;
        }
        fired.again = std::min(client_, upstream_) != time_point::max();
        return fired;
    }

private:
    time_point& at(Side side) { return side == Side::client ? client_ : upstream_; }

    time_point client_ = time_point::max();
    time_point upstream_ = time_point::max();
    time_point expiry_{};   // what the timer waits for, while waiting_
    bool waiting_ = false;
};

}  // namespace sluice::http
