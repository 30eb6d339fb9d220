// The workers' decisions on one Redis (standalone, or Sentinel's master): a batch that waits
// anyway rides with the next call any worker sends.
//
// Each worker has its own connection with one call in flight at a time; what becomes due
// meanwhile waits for that call's reply and grows (group commit). With several workers that
// means several calls of a few decisions each where one would do: a call's fixed cost in
// Redis (the command, the function call, its arguments) is paid per call, 18.2 us of Redis
// CPU per decision alone in its call, 7.7 in calls of 8, 5.2 in calls of 32
// (loadtest/decide_cost.sh). Here, a worker whose batch is due while its own call is in
// flight hands the batch over (its keys and arguments, never its pending decisions), and the
// next worker to send, itself included, takes every batch handed over with its own, as one
// call on its own connection; when the reply comes each worker gets its part, on its own
// thread. Nothing waits longer than it would have: a worker with no call in flight sends at
// once, and a handed-over batch goes with whichever call is sent first, its own worker's
// next one at the latest. store.redis.shared_batches turns it on (off by default: on two
// cores it cost sluice a few per cent of CPU for about 15 % fewer Redis calls; on 16 cores
// it raised the rate 2-50 % with 8 workers on one Redis, but with 4 workers at 256
// connections it lowered it 19-33 %: loadtest/results/many_cores_twelfth.md).
//
// Measured and not kept (issue 24's note): a process-wide limit of calls in flight (batches
// grew, but at 4 workers the hand-over waited for a busy worker's loop and Redis idled), and
// one sender thread for all workers (more thread hops than Redis time saved at 4 workers).
//
// A worker's pending decisions (which hold its sessions' completion handlers) never leave its
// thread: a part carries keys and arguments, and its reply is kept for its owner (taken when
// the owner's own call is answered, or at its deadline) or posted to the owner's io_context
// when the owner has no call in flight; the owner matches it to the decisions it kept. A member that left is posted nothing
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
        // When its last decision's deadline has passed: every decision of it was answered
        // then (a store error), so it is no longer worth sending and is dropped from the queue.
        std::chrono::steady_clock::time_point expires = std::chrono::steady_clock::time_point::max();
    };
    // One call: its parts in order and, once answered, its result. Read only once sent; the
    // members read their parts from any thread.
    struct Call {
        std::vector<Part> parts;
        std::vector<std::size_t> first_key;  // each part's first key in the call
        std::size_t keys = 0;
        std::uint64_t number = 0;
        std::uint64_t sender = 0;
        std::chrono::steady_clock::time_point sent{};  // set by the sender before it sends
        redis::RedisResult result;
        bool well_formed = false;  // result is a decide reply for `keys` keys
    };
    // Runs on the member's io_context: its part `index` of `call` was answered.
    using Deliver = std::function<void(const std::shared_ptr<const Call>& call, std::size_t index)>;
    // Runs on the member's io_context: parts wait and the member that was to send them left.
    using Wake = std::function<void()>;

    // `max_requests`: requests one call takes at most (a member's own batch is always sent
    // whole; batches handed over join while the call stays within it).
    explicit SharedBatches(std::size_t max_requests = 128);

    // A worker's limiter: its number (never 0). Deliver and Wake are only ever posted to
    // `io_context`, and never once leave() has returned.
    std::uint64_t join(boost::asio::io_context& io_context, Deliver deliver, Wake wake);
    // Parts of the member still waiting are dropped (its own decisions are its own to answer);
    // the member whose part waits longest is woken, should the one leaving have been the one
    // to send it.
    void leave(std::uint64_t member);

    // `member` has `part` due (or nothing: only what others handed over). Returns the call it
    // sends now, on its own connection, with its part first; or nullptr when its part waits
    // (it has a call in flight: the next call any member sends takes it) or there is nothing
    // to send. `take_others`: false where the member's connection is not ready (it sends only
    // its own, which fails at once). `force`: send even with a call in flight (a full batch
    // never waits).
    std::shared_ptr<Call> offer(std::uint64_t member, std::optional<Part> part, bool take_others, bool force);
    // A part of an answered call, for its member.
    using Answered = std::pair<std::shared_ptr<const Call>, std::size_t>;
    // `call` was answered (its result is set). `here` (0: none) concludes its own parts of it
    // itself. Another member's part is kept for it while it has a call of its own in flight
    // (it takes them when that call is answered: no wake-up of its thread, and no later than
    // its batch would have been answered without riding), else posted to it. `ready` gets what
    // was kept for `here`. Returns whether parts wait, which `here` sends next; with `here` 0
    // the member whose part waits longest is woken to do it.
    bool answered(const std::shared_ptr<Call>& call, std::uint64_t here, std::vector<Answered>& ready);

    // The member's own waiting parts, taken out of the queue (its connection is down: they
    // fail now, as they would have without the queue, rather than at their deadline and then
    // be sent anyway when Redis is back).
    std::vector<Part> withdraw(std::uint64_t member);
    // What was kept for the member (its own call is late: its deadline looks before failing).
    std::vector<Answered> take_kept(std::uint64_t member);

    // For tests: parts waiting, calls in flight.
    std::size_t waiting() const;
    std::size_t in_flight() const;
    // Batches sent in another member's call so far (sluice_redis_shared_batches_total).
    std::uint64_t carried() const;

private:
    struct Member {
        std::uint64_t id;
        boost::asio::io_context* io_context;
        Deliver deliver;
        Wake wake;
        std::vector<Answered> kept;  // its parts answered while it had a call in flight
    };
    Member* member(std::uint64_t id);  // under the lock
    const Member* member(std::uint64_t id) const;  // under the lock
    void wake_oldest();                            // under the lock

    const std::size_t max_requests_;
    mutable std::mutex mutex_;
    std::vector<Member> members_;
    std::deque<Part> waiting_;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> in_flight_;  // call number, sender
    std::uint64_t members_made_ = 0;
    std::uint64_t calls_made_ = 0;
    std::uint64_t carried_ = 0;
};

}  // namespace sluice::limit
