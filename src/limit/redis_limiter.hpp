// Decides a request against all limits of its route in ONE round trip to Redis, within a
// deadline. Decisions asked for in the same turn of the event loop go out together as one
// EVALSHA per Redis node (lua/decide.lua decides them in order, atomically), so a busy worker
// pays Redis's per-call cost once per batch, not once per request.
//
// Where a batch goes is the topology's business (redis/topology.hpp): one server, Sentinel's
// master, or on a cluster the master owning the request's slot (a request's keys share one
// hash tag, so one slot). On a cluster, a request the node could not decide (its slot moved
// or is migrating) is sent again on its own, following MOVED and ASK; nothing is resent
// after it may have run.
//
// On one Redis (standalone or Sentinel) the workers share a queue (shared_batches.hpp): a
// batch due while its worker's call is in flight rides with the next call any worker sends.
// Decisions in flight at the same time (concurrent requests) may then run in another order
// than they were asked for, as those of two workers or two instances always could; each is
// still decided once, atomically, against what the ones before it in Redis consumed.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "limit/decide_script.hpp"
#include "limit/decision.hpp"
#include "limit/decision_callback.hpp"
#include "limit/keyed_hash.hpp"
#include "limit/limit_key.hpp"
#include "limit/shared_batches.hpp"
#include "redis/redis_connection.hpp"

namespace sluice::redis {
class Topology;
}

namespace boost::asio {
class io_context;
}

namespace sluice::limit {

// One per worker, on the worker's io_context, next to its topology. Not thread-safe.
class RedisLimiter {
public:
    using Callback = DecisionCallback;

    // Registers the decide script on the topology: construct before topology.start().
    // `timeout` is store.redis.timeout: the most a decision may take.
    // `remember_rejections`: answer repeated requests against a limit Redis rejected from
    // memory until its retry time (see Rejection below); off only where every decision must
    // be Redis's own (the differential test).
    // `shared`: the process's queue of batches (shared_batches.hpp), for a topology that is
    // not sharded: this worker's decisions may go out in another worker's call, and its call
    // may carry theirs. Without it every decision goes on this worker's own connection.
    RedisLimiter(boost::asio::io_context& io_context, redis::Topology& topology,
                 std::string key_prefix, std::chrono::milliseconds timeout, bool remember_rejections = true,
                 std::shared_ptr<SharedBatches> shared = {});
    ~RedisLimiter();

    // The worker stops: its batches waiting in the shared queue are dropped and its decisions
    // not yet answered are answered (store_error). `then` (closing the connection) is posted
    // once the calls this worker sent with other workers' decisions are answered, or after
    // the timeout: another worker's decisions are not failed by this one stopping.
    void stop(std::function<void()> then);
    // The store's connections are closed (after stop's `then`): decisions still without an
    // answer are answered (store_error), and no timer is left waiting.
    void closed();

    // The callback runs exactly once, on the io_context, never inside this call:
    //  - allowed/limited from Redis;
    //  - store_error when the connection is down, Redis answers an error, or no reply came
    //    within `timeout` (then at the deadline; the late reply is ignored);
    //  - allowed without a round trip when no limit of the route applies.
    // `route` and `request` are only read during the call.
    // `inspect`: the state of the limits for this key, taking nothing (every cost 0, no
    // slot, no remembered rejection): for the admin port's /limits.
    void decide(const RouteLimits& route, const RequestKeyValues& request, Callback callback, bool inspect = false);

    // Deletes `keys` (all in one hash slot): the limits' state for a key, back to empty.
    // The callback runs once, on the io_context: an error text (empty: done) and how many
    // keys existed.
    using ResetCallback = std::function<void(std::string, std::int64_t)>;
    void reset(const std::vector<std::string>& keys, ResetCallback callback);

    // Gives back a request's concurrency slots (renew: renews their leases); lua/release.lua.
    // Nothing to wait for: failures are logged at debug level, and the lease takes back what
    // is lost. The slots given back in a turn of the loop go as one call per Redis node (on a
    // cluster per master, their keys in ARGV): at the end of the turn, or before this
    // worker's next decide call, whichever is first (so a decision asked for after a release
    // sees the slot free, as when each was sent at once); their keys and token move into the
    // waiting call's lists. A renewal is a call of its own (only requests running past a
    // third of their lease renew).
    void release(Slots slots);
    void renew(const Slots& slots);

    // Forgets every remembered rejection (on reload: a limit's parameters may change), and
    // the calendar windows worked out for the old configuration's time zones.
    void clear_rejections() {
        rejections_.clear();
        calendars_.clear();
    }
    std::size_t remembered_rejections() const { return rejections_.size(); }
    // Forgets the rejections remembered for these keys (their state was reset).
    void forget(const std::vector<std::string>& keys) {
        for (const auto& key : keys) rejections_.erase(key);
    }

private:
    // A rejection Redis computed stays exact until its retry time: other instances can only
    // consume quota, never return it. So a client that keeps hammering a limit it exhausted
    // is answered from here, without a round trip, until then.
    struct Rejection {
        std::chrono::steady_clock::time_point until;  // answered from here until then
        // When the limit admits again (the retry time answered): `until`, but for a ban,
        // which is remembered for at most a second (another instance's admin reset may lift
        // it any time: at most that long it goes on being refused here).
        std::chrono::steady_clock::time_point ends;
        LimitResult result;  // the rejecting limit's, as Redis answered; retry_after recomputed on use
        std::size_t limit = 0;
        // KeyPlan::Limit::id of the limit that refused: a request decided by another set of
        // limits with the same key (another plan, or the client's overrides) is not refused by it.
        std::uint64_t id = 0;
    };
    void remember(const std::string& key, std::chrono::steady_clock::time_point sent, const Decision& decision,
                  std::uint64_t id);
    std::optional<Decision> remembered(const LimitKeys& keys, const RouteLimits& route,
                                       const KeyPlan& plan);

    // The decisions asked for since the last flush, per node; each sent as one EVALSHA by
    // flush(), which runs from the io_context once the handlers ready now have run (or at
    // once when one is full).
    struct Batch;
    Batch& batch_for(redis::RedisConnection* connection);
    // `write_now`: put them on the sockets at once (only from the posted flush, never from
    // inside a Redis callback).
    void flush(bool write_now);
    // flush(true) on the next turn of the loop (once, however often it is asked for).
    void schedule_flush();
    // `write_now`: on the socket before it returns (RedisConnection::evalsha).
    void send(std::shared_ptr<Batch> batch, bool write_now = false);
    void recycle(const std::shared_ptr<Batch>& batch);
    // With a shared queue: `batch` (or nothing, only what others handed over) offered to it;
    // sent now with what waits there, or handed over. `force`: a full batch.
    void offer(std::shared_ptr<Batch> batch, redis::RedisConnection* connection, bool force, bool write_now);
    // `write_now`: on the socket before it returns (RedisConnection::evalsha).
    void send_shared(redis::RedisConnection* connection, std::shared_ptr<SharedBatches::Call> call,
                     bool write_now = false);
    // This worker's part `index` of an answered shared call: its decisions answered.
    void receive(const std::shared_ptr<const SharedBatches::Call>& call, std::size_t index);
    // Answers `pending` from its results in `reply` (its first key's results at `first`);
    // `keys` holds its keys from `keys_first` on.
    struct Pending;
    // A decision answered as a store failure whose call ran after all: its slots go back
    // (again), behind the call.
    void release_late(Slots slots);
    // stop(), once the last releases are answered (or timed out).
    void stop_after_releases(std::function<void()> then);
    void conclude(Pending& pending, const redis::RedisReply& reply, std::size_t first,
                  const std::vector<std::string>& keys, std::size_t keys_first,
                  std::chrono::steady_clock::time_point sent);
    // Cluster: sends one request on its own, to `to` (nullptr: the slot's master now), after
    // ASKING when `asking`.
    void resend(std::shared_ptr<Pending> pending, redis::RedisConnection* to, bool asking);

    // Deadlines: every decision has the same timeout, so they expire in the order they were
    // issued. One timer waits for the oldest; answered entries are skipped when reached. No
    // timer is started or cancelled per decision.
    struct DeadlineTimer;
    // `poll`: before answering a decision by its deadline, take in the replies already
    // on the socket (only from the timer, never from inside a Redis callback).
    void watch_deadlines(bool poll);

    // The calendar boundaries sent for a calendar fixed window (decide_script.hpp), worked out
    // again when the proxy's clock leaves the window they were made for.
    const std::string& calendar_text(const config::LimitConfig& limit);
    struct Calendar {
        std::shared_ptr<const time::TimeZone> zone;
        CalendarArg arg;
    };
    std::map<std::pair<const time::TimeZone*, time::CalendarUnit>, Calendar> calendars_;

    // The releases waiting for their call (release()), per node: the keys, and per request
    // its token and how many of the keys are its own (lua/release.lua's "releases": two
    // arguments per request). Sent, and emptied (their lists keep their room), by
    // send_releases().
    struct Releases {
        redis::RedisConnection* connection = nullptr;
        std::vector<std::string> keys;
        std::vector<std::string> args;
        std::size_t requests() const { return args.size() / 2; }
    };
    std::vector<Releases> releases_;
    // `answered`: called with the reply (or the connection's failure).
    void send_releases(Releases& list, bool write_now, std::function<void()> answered = {});
    // `write_now`: on the socket before it returns (only from the posted flush). flush()
    // sends them first; release() asks for a flush at the end of the turn.
    void send_releases(bool write_now);

    // Owner tokens: a random prefix per limiter (so per worker and process) and a counter.
    std::string next_token();
    std::string token_prefix_;
    std::uint64_t tokens_made_ = 0;

    boost::asio::io_context& io_context_;
    redis::Topology& topology_;
    bool sharded_;
    redis::RedisConnection::ScriptId script_;
    redis::RedisConnection::ScriptId release_script_;
    KeyPrefix key_prefix_;
    std::chrono::milliseconds timeout_;
    bool remember_rejections_;
    std::unordered_map<std::string, Rejection, KeyedHash> rejections_;  // keyed by what clients send
    std::deque<std::pair<std::chrono::steady_clock::time_point, std::weak_ptr<Pending>>> deadlines_;
    std::unique_ptr<DeadlineTimer> deadline_timer_;
    bool deadline_timer_waiting_ = false;
    std::vector<std::shared_ptr<Batch>> batches_;  // one per node with decisions waiting
    std::vector<std::shared_ptr<Batch>> spare_batches_;  // answered, kept for reuse (recycle)
    std::vector<std::shared_ptr<Batch>> spare_list_;     // an empty list with room, for flush
    // Calls sent, not yet answered, per connection (one, or one per cluster master: looked
    // through rather than hashed).
    std::vector<std::pair<redis::RedisConnection*, int>> in_flight_;
    int& in_flight(redis::RedisConnection* connection);
    bool flush_posted_ = false;
    std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // posted handlers hold it weakly
    // The shared queue (nullptr: none, or a sharded topology), this worker's number in it,
    // its parts sent or waiting there (their decisions stay here) by number, the calls it
    // sent that are not answered yet, and what stop() does when they are.
    std::shared_ptr<SharedBatches> shared_;
    std::uint64_t member_ = 0;
    std::uint64_t parts_made_ = 0;
    std::unordered_map<std::uint64_t, std::shared_ptr<Batch>> handed_;
    // Parts forgotten once every decision was answered (by its deadline) that hold slots a
    // late call may still take: given back again if the part's reply comes. By part number;
    // at most max_late_parts (older ones are left to their lease).
    std::map<std::uint64_t, std::vector<Slots>> late_parts_;
    // Tokens of requests answered as store failures whose calls may still take their slots:
    // whether each request has ended (release_late). Shared with their Pendings.
    std::shared_ptr<std::unordered_map<std::string, bool>> late_tokens_ =
        std::make_shared<std::unordered_map<std::string, bool>>();
    std::size_t shared_sent_ = 0;
    std::function<void()> stopped_;
    std::unique_ptr<DeadlineTimer> stop_timer_;
};

}  // namespace sluice::limit
