// The workers' decisions on one Redis (standalone, or Sentinel's master) as few calls as
// possible: one process-wide queue of batches, a bounded number of calls in flight.
//
// Each worker has its own connection and, alone, sends what one turn of its event loop
// collected, one call in flight at a time: with 4 workers at 64 connections that is four
// calls of about 8 decisions where one of 32 would do, and a call's fixed cost in Redis
// (the command, the function call, its arguments) is paid per call: on a core of its own,
// 7.7 against 5.2 us of Redis CPU per decision (loadtest/decide_cost.sh). Here, a worker whose
// batch is due while `max_in_flight` calls of the process are in flight hands the batch over
// (its keys and arguments, never its pending decisions); the next worker to send takes every
// batch handed over with its own, as one call on its own connection, and when the reply comes
// each worker gets its part, on its own thread. A worker with nothing in flight process-wide
// sends at once: nothing waits while Redis is idle.
//
// A worker's pending decisions (which hold its sessions' completion handlers) never leave its
// thread: a part carries keys and arguments, and its reply is posted to its owner's
// io_context, which matches it to the decisions it kept. A member that left is posted nothing
// (the registry is read under the same lock as the posts), so no io_context is used after its
// worker is gone. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "limit/decide_script.hpp"
#include "redis/redis_reply.hpp"

namespace boost::asio {
class io_context;
}

namespace sluice::limit {

class SharedBatches {
public:
    // One worker's batch.
    struct Part {
        std::uint64_t member = 0;  // whose (join's number)
        std::uint64_t id = 0;      // which, in its member's numbering
        std::vector<std::string> keys;
        DecideParts args;
    };
    // One call: its parts in order and, once answered, its result. Read only once sent; the
    // members read their parts from any thread.
    struct Call {
        std::vector<Part> parts;
        std::vector<std::size_t> first_key;  // each part's first key in the call
        std::size_t keys = 0;
        std::uint64_t number = 0;
        std::chrono::steady_clock::time_point sent{};
        redis::RedisResult result;
        bool well_formed = false;  // result is a decide reply for `keys` keys
    };
    // Runs on the member's io_context: its part `index` of `call` was answered.
    using Deliver = std::function<void(const std::shared_ptr<const Call>& call, std::size_t index)>;
    // Runs on the member's io_context: parts wait and no member may be about to send them.
    using Wake = std::function<void()>;

    // `max_in_flight`: calls of the process in flight at a time (the next one grows
    // meanwhile); `max_requests`: requests one call takes at most (a member's own batch is
    // always sent whole).
    explicit SharedBatches(std::size_t max_in_flight = 2, std::size_t max_requests = 128);

    // A worker's limiter: its number (never 0). Deliver and Wake are only ever posted to
    // `io_context`, and never once leave() has returned.
    std::uint64_t join(boost::asio::io_context& io_context, Deliver deliver, Wake wake);
    // Parts of the member still waiting are dropped (its own decisions are its own to answer);
    // the member whose part waits longest is woken, should the one leaving have been the one
    // to send it.
    void leave(std::uint64_t member);

    // A member has `part` due (or nothing: only what others handed over). Returns the call
    // it sends now, on its own connection, with its part first; or nullptr when its part
    // waits for the next call (or there is nothing to send). `take_others`: false where the
    // member's connection is not ready (it sends only its own). `force`: send even when
    // `max_in_flight` calls are in flight (a full batch never waits). A call in flight for
    // longer than `stale_after` no longer counts: a Redis that stopped answering one
    // connection does not hold back the others.
    std::shared_ptr<Call> offer(std::optional<Part> part, bool take_others, bool force,
                                std::chrono::steady_clock::duration stale_after);
    // `call` was answered (its result is set): each member's part is posted to it, except
    // `here`'s (0: none), which its caller concludes itself. Returns whether parts wait, which
    // `here` sends next; with `here` 0 the member whose part waits longest is woken to do it.
    bool answered(const std::shared_ptr<Call>& call, std::uint64_t here);

    // For tests and the stats: parts waiting, calls in flight.
    std::size_t waiting() const;
    std::size_t in_flight() const;

private:
    struct Member {
        std::uint64_t id;
        boost::asio::io_context* io_context;
        Deliver deliver;
        Wake wake;
    };
    const Member* member(std::uint64_t id) const;  // under the lock

    const std::size_t max_in_flight_;
    const std::size_t max_requests_;
    mutable std::mutex mutex_;
    std::vector<Member> members_;
    std::deque<Part> waiting_;
    std::vector<std::pair<std::uint64_t, std::chrono::steady_clock::time_point>> in_flight_;  // call number, sent
    std::uint64_t members_made_ = 0;
    std::uint64_t calls_made_ = 0;
};

}  // namespace sluice::limit
