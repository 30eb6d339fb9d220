#include "limit/redis_limiter.hpp"

#include <algorithm>
#include <memory>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/container/small_vector.hpp>

#include <cstdio>
#include <random>

#include <spdlog/spdlog.h>

#include "limit/cost.hpp"
#include "limit/limit_params.hpp"
#include "limit/decide_script.hpp"
#include "redis/topology.hpp"

namespace sluice::limit {
namespace {

namespace asio = boost::asio;

// Remembered rejections kept at most; past it expired ones are swept, then all are dropped.
constexpr std::size_t max_rejections = 100000;

// Requests per EVALSHA at most: a batch keeps Redis busy for a few microseconds per request,
// and other clients of the same Redis wait meanwhile.
constexpr std::size_t max_batch = 64;

// Batches one connection (one Redis, or one cluster master) may have in flight; the next one
// waits for a reply and grows meanwhile (group commit). Redis runs one connection's calls one
// after the other, so a batch sent while another is in flight would wait in Redis's socket
// anyway: holding it in the proxy costs the reply's way back, and gains whatever decisions
// arrive meanwhile. Without it, batches shrink as workers multiply (each worker sends what
// one turn of its loop collected): on 16 cores with 8 workers, 1.4 to 3 decisions per call,
// and Redis paid 9.2 us of CPU per decision against 5.1 at 20 per call (loadtest/many_cores.sh).
// A cluster splits each turn's decisions over its masters, which makes its batches smaller
// still. An idle connection still sees a call as soon as a decision is asked for, and a full
// batch (max_batch) never waits.
constexpr int max_in_flight = 1;

// Calls one connection may have unanswered at most, full batches included (they never wait
// for a reply, above). A Redis that answers, but slowly, would otherwise have every full
// batch sent and kept until its reply: the calls grew without bound (an audit: 909 calls and
// 50 MB in 15 s at a reply every 0.8 s). Past it a batch fails at once (a store failure:
// on_error decides), as its deadline would fail it anyway.
constexpr int max_calls_unanswered = 32;

// Answered batches kept for reuse (their lists keep their buffers) at most.
constexpr std::size_t max_spare_batches = 4;

// Parts with slots a late call may take, kept for their reply at most (late_parts_).
constexpr std::size_t max_late_parts = 1024;
// Requests answered as store failures whose calls may still take their slots, followed at
// most (a reply that never comes leaves its entry: past this many they are all forgotten).
constexpr std::size_t max_late_tokens = 4096;

// Cluster redirections (MOVED, ASK, "elsewhere") one request follows at most.
constexpr int max_redirections = 5;

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381": the slot and the address.
bool parse_redirection(const std::string& message, std::string_view kind, std::uint16_t& slot, std::string& address) {
    if (!message.starts_with(kind) || message.size() <= kind.size() || message[kind.size()] != ' ') return false;
    const auto rest = std::string_view(message).substr(kind.size() + 1);
    const auto space = rest.find(' ');
    if (space == std::string_view::npos || space == 0 || space > 5) return false;
    unsigned value = 0;
    for (char c : rest.substr(0, space)) {
        if (c < '0' || c > '9') return false;
        value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value >= 16384) return false;
    slot = static_cast<std::uint16_t>(value);
    address.assign(rest.substr(space + 1));
    return !address.empty() && address.find(' ') == std::string::npos;
}

}  // namespace

// One decision in flight. Whichever comes first, the reply or the deadline, answers;
// the other finds `answered` set and does nothing.
struct RedisLimiter::Pending {
    explicit Pending(RedisLimiter::Callback cb) : callback(std::move(cb)) {}

    void answer(Decision&& decision) {
        if (answered) return;
        answered = true;
        if (!concurrency.empty()) {
            if (decision.outcome == Decision::Outcome::store_error && late_tokens) {
                // The call may still run after this answer (it waited behind another, or its
                // reply is late) and take the slots. If the request has ended by the time the
                // reply comes, its own release may have run before the call, finding nothing:
                // the slots are given back again then, behind the call (release_late). If it
                // still runs, its own release comes after the call and frees them.
                late_release.token = token;
                for (const auto& slot : concurrency) late_release.keys.emplace_back(slot.key, slot.lease_us);
                if (late_tokens->size() >= max_late_tokens) late_tokens->clear();  // (their leases take them back)
                late_tokens->emplace(token, false);
            }
            // (Answered once: the token and the keys are the decision's from now on.)
            decision.slots.token = std::move(token);
            for (auto& slot : concurrency) {
                // Taken when the request was admitted and this limit allowed it; when the
                // store failed, maybe taken (the call can still run): given back all the same.
                const bool taken = decision.outcome == Decision::Outcome::store_error ||
                                   (decision.outcome == Decision::Outcome::allowed &&
                                    slot.index < decision.limits.size() && decision.limits[slot.index].allowed);
                if (taken) decision.slots.keys.emplace_back(std::move(slot.key), slot.lease_us);
            }
        }
        callback(std::move(decision));
    }

    RedisLimiter::Callback callback;
    bool answered = false;
    bool inspect = false;  // an inspection (decide's `inspect`)
    std::vector<LimitResult> results;  // one per route limit; `applies` and `shadow` filled in
    boost::container::small_vector<std::size_t, 4> sent;  // route index of each key sent
    boost::container::small_vector<std::uint64_t, 4> ids;  // KeyPlan::Limit::id of each key sent
    std::size_t first_key = 0;         // index of its first key in the batch
    // Bit i: a rejection by limit i says nothing about the client's next request, which may
    // cost less (a cost header) or find a slot given back (concurrency): not remembered.
    // Bit 63 stands for the rest.
    std::uint64_t not_remembered = 0;
    // Concurrency limits: the owner token of the request's slots, and per limit its route
    // index, key and lease.
    struct Slot {
        std::size_t index;
        std::string key;
        std::int64_t lease_us;
    };
    std::string token;
    std::vector<Slot> concurrency;
    Slots late_release;  // answered as a store failure: its slots, should its call still take them
    // The limiter's tokens of such requests: whether each has ended (its release was asked for).
    std::shared_ptr<std::unordered_map<std::string, bool>> late_tokens;
    // Cluster only, to send it again on its own: its keys, its ARGV as a batch of one, its
    // slot, the redirections followed so far, and its deadline.
    std::vector<std::string> keys;
    std::vector<std::string> single_args;
    std::uint16_t slot = 0;
    int redirections = 0;
    std::chrono::steady_clock::time_point deadline{};
};

struct RedisLimiter::Batch {
    redis::RedisConnection* connection = nullptr;
    std::vector<std::string> keys;
    DecideArgs args;
    std::vector<std::shared_ptr<Pending>> pending;
};

struct RedisLimiter::DeadlineTimer {
    explicit DeadlineTimer(asio::io_context& io) : timer(io) {}
    asio::steady_timer timer;
};

RedisLimiter::~RedisLimiter() {
    if (member_ != 0) shared_->leave(member_);
    // Decisions handed to other workers' calls and not answered yet: answered now, while the
    // limiter exists (as the topology's stop answers those of its own calls).
    auto handed = std::move(handed_);
    for (auto& [id, batch] : handed)
        for (auto& pending : batch->pending) pending->answer(Decision::store_failure("shutting down"));
}

void RedisLimiter::watch_deadlines(bool poll) {
    const auto now = std::chrono::steady_clock::now();
    while (!deadlines_.empty()) {
        auto& [deadline, weak] = deadlines_.front();
        auto pending = weak.lock();
        if (!pending || pending->answered) {
            deadlines_.pop_front();
            continue;
        }
        if (deadline > now) break;
        if (poll) {
            // The reply may be here already, unread because the loop is busy: a decision
            // is late only if Redis is. (Callbacks may add and drop deadlines: start over.)
            poll = false;
            topology_.poll_replies();
            // And what other workers' calls answered for it, kept while its own call is late.
            if (member_ != 0)
                for (const auto& [call, index] : shared_->take_kept(member_)) receive(call, index);
            continue;
        }
        deadlines_.pop_front();
        pending->answer(Decision::store_failure("no reply from redis within " + std::to_string(timeout_.count()) + "ms"));
    }
    if (deadlines_.empty()) return;
    deadline_timer_waiting_ = true;
    deadline_timer_->timer.expires_at(deadlines_.front().first);
    deadline_timer_->timer.async_wait([this](const boost::system::error_code& ec) {
        if (ec) return;  // only cancelled when the limiter goes away: `this` may be gone
        deadline_timer_waiting_ = false;
        watch_deadlines(true);
    });
}

RedisLimiter::RedisLimiter(asio::io_context& io_context, redis::Topology& topology, std::string key_prefix,
                           std::chrono::milliseconds timeout, bool remember_rejections,
                           std::shared_ptr<SharedBatches> shared)
    : io_context_(io_context),
      topology_(topology),
      sharded_(topology.sharded()),
      script_(topology.add_script(decide_code(sharded_))),
      release_script_(topology.add_script(redis::ScriptCode{release_script_source(sharded_), {}, {}})),
      key_prefix_(key_prefix),
      timeout_(timeout),
      remember_rejections_(remember_rejections),
      deadline_timer_(std::make_unique<DeadlineTimer>(io_context)) {
    // Unique across instances and restarts: 64 random bits (then a counter) per limiter.
    std::random_device device;
    const std::uint64_t id = (std::uint64_t{device()} << 32) ^ device();
    char text[24];
    std::snprintf(text, sizeof text, "%016llx-", static_cast<unsigned long long>(id));
    token_prefix_ = text;
    if (shared && !sharded_) {
        shared_ = std::move(shared);
        member_ = shared_->join(
            io_context_,
            [this, alive = std::weak_ptr<int>(alive_)](const std::shared_ptr<const SharedBatches::Call>& call,
                                                       std::size_t index) {
                if (!alive.expired()) receive(call, index);
            },
            [this, alive = std::weak_ptr<int>(alive_)] {
                if (!alive.expired()) schedule_flush();
            });
    }
}

void RedisLimiter::stop(std::function<void()> then) {
    // The slots given back last (the requests that ended just before) go now, and the
    // connections stay until Redis has taken them or the timeout passed: closed at once, the
    // releases never left (every slot of a stopping instance stayed taken for its lease,
    // shrinking the limit every other instance shares).
    std::size_t sending = 0;
    for (const auto& list : releases_) sending += list.args.empty() ? 0 : 1;
    if (sending > 0) {
        struct Gate {
            std::size_t waiting;
            std::function<void()> then;
            DeadlineTimer timer;
        };
        auto gate = std::make_shared<Gate>(Gate{sending, nullptr, DeadlineTimer(io_context_)});
        gate->then = [this, then = std::move(then), alive = std::weak_ptr<int>(alive_)]() mutable {
            if (!alive.expired()) stop_after_releases(std::move(then));
        };
        const auto open = [gate] {
            if (auto f = std::exchange(gate->then, nullptr)) {
                gate->timer.timer.cancel();
                f();
            }
        };
        for (auto& list : releases_)
            if (!list.args.empty())
                send_releases(list, true, [gate, open] {
                    if (--gate->waiting == 0) open();
                });
        gate->timer.timer.expires_after(timeout_);
        gate->timer.timer.async_wait([open](const boost::system::error_code& ec) {
            if (!ec) open();
        });
        return;
    }
    stop_after_releases(std::move(then));
}

void RedisLimiter::closed() {
    // Every decision is answered by now (the connections' end answered those in flight): the
    // deadline timer would only keep the worker's loop alive until the last one's deadline
    // (store.redis.timeout after the last request).
    for (auto& [deadline, weak] : deadlines_)
        if (auto pending = weak.lock(); pending && !pending->answered)
            pending->answer(Decision::store_failure("shutting down"));
    deadlines_.clear();
    if (deadline_timer_waiting_) deadline_timer_->timer.cancel();
    deadline_timer_waiting_ = false;
}

void RedisLimiter::stop_after_releases(std::function<void()> then) {
    if (stopped_) {
        // Stopped already, and still waiting for calls carrying others' decisions: after those.
        stopped_ = [first = std::move(stopped_), then = std::move(then)] {
            first();
            then();
        };
        return;
    }
    if (member_ == 0) return then();
    shared_->leave(member_);
    member_ = 0;
    auto handed = std::move(handed_);
    handed_.clear();
    for (auto& [id, batch] : handed)
        for (auto& pending : batch->pending) pending->answer(Decision::store_failure("shutting down"));
    if (shared_sent_ == 0) return then();
    // When they are answered (send_shared's callback), or at the deadline: whichever is first.
    stopped_ = std::move(then);
    stop_timer_ = std::make_unique<DeadlineTimer>(io_context_);
    stop_timer_->timer.expires_after(timeout_);
    stop_timer_->timer.async_wait([this, alive = std::weak_ptr<int>(alive_)](const boost::system::error_code& ec) {
        if (ec || alive.expired()) return;
        if (auto f = std::exchange(stopped_, nullptr)) f();
    });
}

std::optional<Decision> RedisLimiter::remembered(const LimitKeys& keys,
                                                 const RouteLimits& route, const KeyPlan& plan) {
    if (rejections_.empty()) return std::nullopt;
    const auto now = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < keys.size(); ++i) {
        if (!keys[i] || route.limits[i].shadow) continue;
        auto it = rejections_.find(*keys[i]);
        if (it == rejections_.end()) continue;
        // (A caller without a key plan, made up per call, is matched by index alone.)
        const bool other_set = route.plan != nullptr && it->second.id != plan.limits[i].id;
        if (it->second.until <= now || it->second.limit != i || other_set) {
            rejections_.erase(it);
            continue;
        }
        // Only the rejecting limit is known; the others were not consulted (and count nothing).
        std::vector<LimitResult> results(keys.size());
        for (std::size_t j = 0; j < keys.size(); ++j) results[j].shadow = route.limits[j].shadow;
        results[i] = it->second.result;
        results[i].applies = true;
        results[i].allowed = false;
        results[i].remaining = 0;
        results[i].retry_after = std::chrono::ceil<std::chrono::milliseconds>(it->second.ends - now);
        // The time to the full quota counts down as the retry time does (it was answered
        // with the same `sent`).
        const auto full_at = it->second.ends - it->second.result.retry_after + it->second.result.reset;
        results[i].reset = std::max(std::chrono::milliseconds(0), std::chrono::ceil<std::chrono::milliseconds>(full_at - now));
        return Decision::from_results(std::move(results), 0);
    }
    return std::nullopt;
}

void RedisLimiter::reset(const std::vector<std::string>& keys, ResetCallback callback) {
    if (keys.empty()) {
        asio::post(io_context_, [callback = std::move(callback)] { callback({}, 0); });
        return;
    }
    redis::RedisConnection* connection = topology_.route(sharded_ ? redis::key_slot(keys.front()) : 0);
    if (connection == nullptr) {
        asio::post(io_context_, [callback = std::move(callback)] { callback("no redis master is known for the key", 0); });
        return;
    }
    std::vector<std::string> args{"DEL"};
    args.insert(args.end(), keys.begin(), keys.end());
    connection->command(args, [callback = std::move(callback)](redis::RedisResult result) {
        if (!result.ok()) return callback(result.error ? result.error->message : std::string("redis error"), 0);
        if (result.reply.type != redis::RedisReply::Type::integer) return callback("unexpected reply to DEL", 0);
        callback({}, result.reply.integer);
    });
}

std::string RedisLimiter::next_token() {
    return token_prefix_ + std::to_string(++tokens_made_);
}

// The most releases one call carries: a worker whose connections all end in one turn sends
// them in calls of this many.
constexpr std::size_t max_releases = 512;

void RedisLimiter::release(Slots slots) {
    if (slots.empty()) return;
    if (!late_tokens_->empty())
        if (auto it = late_tokens_->find(slots.token); it != late_tokens_->end()) it->second = true;
    redis::RedisConnection* connection = topology_.route(sharded_ ? redis::key_slot(slots.keys.front().first) : 0);
    if (connection == nullptr) return;  // no master known now: the lease takes the slots back
    Releases* list = nullptr;
    for (auto& known : releases_)
        if (known.connection == connection) list = &known;
    if (list == nullptr) {
        list = &releases_.emplace_back();
        list->connection = connection;
    }
    list->args.push_back(std::move(slots.token));
    list->args.push_back(std::to_string(slots.keys.size()));
    for (auto& key_lease : slots.keys) list->keys.push_back(std::move(key_lease.first));
    if (list->requests() >= max_releases) return send_releases(*list, false);
    schedule_flush();  // (flush sends the releases first)
}

void RedisLimiter::release_late(Slots slots) {
    // Only a request that has ended: one still running frees them itself, after the call.
    const auto it = late_tokens_->find(slots.token);
    if (it == late_tokens_->end()) return;
    const bool ended = it->second;
    late_tokens_->erase(it);
    if (!ended) return;
    // On the connection the call went on (its node's), behind it: Redis runs them in order.
    // (Posted: nothing is sent from inside a reply callback.)
    asio::post(io_context_, [this, slots = std::move(slots), alive = std::weak_ptr<int>(alive_)]() mutable {
        if (!alive.expired()) release(std::move(slots));
    });
}

void RedisLimiter::renew(const Slots& slots) {
    if (slots.empty()) return;
    std::vector<std::string> keys;
    std::vector<std::string> args{"renew", slots.token};
    for (const auto& [key, lease] : slots.keys) {
        keys.push_back(key);
        args.push_back(std::to_string(lease));
    }
    redis::RedisConnection* connection = topology_.route(sharded_ ? redis::key_slot(keys.front()) : 0);
    if (connection == nullptr) return;  // no master known now: the lease takes the slots back
    connection->evalsha(release_script_, keys, args, [keys](redis::RedisResult result) {
        if (!result.ok())
            spdlog::debug("concurrency slots of {}: renew failed: {}", keys.front(),
                          result.error ? result.error->message : std::string("?"));
    });
}

void RedisLimiter::send_releases(bool write_now) {
    for (auto& list : releases_) send_releases(list, write_now);
}

void RedisLimiter::send_releases(Releases& list, bool write_now, std::function<void()> answered) {
    if (list.args.empty()) return;
    const std::size_t count = list.requests();
    // ARGV "releases", on a cluster the number of keys and the keys, then tokens and counts;
    // formatted into the command before evalsha_views returns, so the lists keep their room.
    std::vector<std::string_view> args;
    args.reserve(2 + (sharded_ ? list.keys.size() : 0) + list.args.size());
    args.emplace_back("releases");
    const std::string nkeys = sharded_ ? std::to_string(list.keys.size()) : std::string();
    if (sharded_) {
        args.emplace_back(nkeys);
        args.insert(args.end(), list.keys.begin(), list.keys.end());
    }
    args.insert(args.end(), list.args.begin(), list.args.end());
    static const std::vector<std::string> no_keys;
    list.connection->evalsha_views(
        release_script_, sharded_ ? no_keys : list.keys, args,
        [count, answered = std::move(answered)](redis::RedisResult result) {
            if (!result.ok())
                spdlog::debug("concurrency slots of {} requests: release failed: {}", count,
                              result.error ? result.error->message : std::string("?"));
            if (answered) answered();
        },
        write_now);
    list.keys.clear();
    list.args.clear();
}

const std::string& RedisLimiter::calendar_text(const config::LimitConfig& limit) {
    const std::int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count();
    auto& entry = calendars_[{limit.time_zone.get(), *limit.calendar}];
    if (!entry.zone || now_us < entry.arg.valid_from_us || now_us >= entry.arg.valid_until_us) {
        entry.zone = limit.time_zone;  // held: the address stays this zone's while cached
        entry.arg = calendar_arg(limit, now_us);
    }
    return entry.arg.text;
}

void RedisLimiter::remember(const std::string& key, std::chrono::steady_clock::time_point sent,
                            const Decision& decision, std::uint64_t id) {
    if (rejections_.size() >= max_rejections) {
        const auto now = std::chrono::steady_clock::now();
        std::erase_if(rejections_, [now](const auto& entry) { return entry.second.until <= now; });
        if (rejections_.size() >= max_rejections) rejections_.clear();
    }
    const auto index = *decision.limited_by;
    // Counted from when the request was sent, which is before Redis's TIME, and less the
    // millisecond the script rounds up by: never later than the true instant the limit
    // admits again (a request after it simply asks Redis).
    const auto retry = decision.limits[index].retry_after - std::chrono::milliseconds(1);
    if (retry <= std::chrono::milliseconds(0)) return;
    const auto ends = sent + retry;
    const auto until = decision.limits[index].banned ? std::min(ends, sent + std::chrono::seconds(1)) : ends;
    rejections_[key] = Rejection{until, ends, decision.limits[index], index, id};
}

void RedisLimiter::decide(const RouteLimits& route, const RequestKeyValues& request, Callback callback, bool inspect) {
    std::optional<KeyPlan> own_plan;  // only when the caller has none
    if (!route.plan) own_plan = make_key_plan(route.route, route.limits);
    const KeyPlan& plan = route.plan ? *route.plan : *own_plan;
    auto keys = build_limit_keys(key_prefix_, RouteLimits{route.route, route.limits, &plan}, request);
    // A charge after the response (config::LimitConfig::charges) is always Redis's to make.
    const bool charge = std::any_of(route.limits.begin(), route.limits.end(),
                                    [](const config::LimitConfig& limit) { return limit.charges; });
    if (auto known = inspect || charge ? std::nullopt : remembered(keys, route, plan)) {
        asio::post(io_context_, [callback = std::move(callback), d = std::move(*known)]() mutable { callback(std::move(d)); });
        return;
    }
    auto pending = std::make_shared<Pending>(std::move(callback));
    pending->inspect = inspect;
    pending->results.resize(route.limits.size());
    std::size_t applying = 0;
    for (std::size_t i = 0; i < route.limits.size(); ++i) {
        pending->results[i].shadow = route.limits[i].shadow;
        if (keys[i]) ++applying;
    }
    if (applying == 0) {
        asio::post(io_context_, [pending] {
            pending->answer(Decision::from_results(std::move(pending->results), 0));
        });
        return;
    }

    std::uint16_t slot = 0;
    if (sharded_) {
        for (const auto& key : keys)
            if (key) {
                slot = redis::key_slot(*key);
                break;
            }
    }
    redis::RedisConnection* connection = topology_.route(slot);
    if (connection == nullptr) {
        asio::post(io_context_, [pending, slot] {
            pending->answer(Decision::store_failure("no redis cluster master is known for slot " + std::to_string(slot)));
        });
        return;
    }
    auto& batch = batch_for(connection);
    pending->first_key = batch.keys.size();
    pending->sent.reserve(applying);
    std::optional<DecideArgs> single;  // on a cluster: the request's own call, should it be sent alone
    if (sharded_) single.emplace();
    for (std::size_t i = 0; i < route.limits.size(); ++i) {
        if (!keys[i]) continue;
        pending->results[i].applies = true;
        pending->sent.push_back(i);
        pending->ids.push_back(route.plan ? plan.limits[i].id : 0);
        const auto& limit = route.limits[i];
        const bool concurrency = limit.algorithm == config::Algorithm::concurrency;
        // A leaky bucket asked with may_wait false rejects what it would otherwise hold back:
        // that rejection is this instance's, not the key's.
        const bool no_wait = !request.may_wait && holds_back(limit);
        // (A limit whose response reports its cost can have room again before its retry
        // time: another request's settle gives back what it had reserved.)
        if (!limit.cost_header.empty() || concurrency || inspect || no_wait || limit.charges || limit.reports_cost())
            pending->not_remembered |= std::uint64_t{1} << std::min<std::size_t>(i, 63);
        if (concurrency && inspect) {
            pending->token = "inspect";  // required by the script, never written: nothing is taken
        } else if (concurrency) {
            if (pending->token.empty()) pending->token = next_token();
            pending->concurrency.push_back({i, *keys[i], lease_us(limit)});
            pending->late_tokens = late_tokens_;
        }
        if (sharded_) pending->keys.push_back(*keys[i]);
        batch.keys.push_back(std::move(*keys[i]));
        if (inspect || no_wait || decide_args_vary(limit)) {
            // An inspection is a decision that costs nothing: it reports and writes nothing.
            std::vector<std::string> args;
            args.reserve(decide_args_per_limit);
            append_decide_args(limit, inspect ? 0 : bounded_cost(limit, request),
                               limit.calendar ? calendar_text(limit) : "", args, request.may_wait);
            if (sharded_) single->limit(std::vector<std::string>(args));
            batch.args.limit(std::move(args));
        } else {
            if (sharded_) single->limit(plan.limits[i].args);
            batch.args.limit(plan.limits[i].args, plan.limits[i].id);
        }
    }
    if (pending->token.empty()) batch.args.end_request();
    else batch.args.end_request(pending->token);
    batch.pending.push_back(pending);
    if (sharded_) {
        if (pending->token.empty()) single->end_request();
        else single->end_request(pending->token);
        pending->single_args = single->take();
        pending->slot = slot;
    }

    // Answered decisions at the front need no deadline any more: drop them now rather than
    // keep their memory until the timer reaches them.
    while (!deadlines_.empty()) {
        auto front = deadlines_.front().second.lock();
        if (front && !front->answered) break;
        deadlines_.pop_front();
    }
    pending->deadline = std::chrono::steady_clock::now() + timeout_;
    deadlines_.emplace_back(pending->deadline, std::move(pending));
    if (!deadline_timer_waiting_) watch_deadlines(false);

    if (batch.pending.size() >= max_batch) {
        for (auto it = batches_.begin(); it != batches_.end(); ++it) {
            if ((*it)->connection != connection) continue;
            auto full = std::move(*it);
            batches_.erase(it);
            if (member_ != 0) offer(std::move(full), connection, true, false);
            else send(std::move(full));
            break;
        }
    } else {
        schedule_flush();
    }
}

void RedisLimiter::schedule_flush() {
    if (flush_posted_) return;
    flush_posted_ = true;
    asio::post(io_context_, [this, alive = std::weak_ptr<int>(alive_)] {
        if (alive.expired()) return;
        flush_posted_ = false;
        flush(true);
    });
}

RedisLimiter::Batch& RedisLimiter::batch_for(redis::RedisConnection* connection) {
    for (auto& batch : batches_)
        if (batch->connection == connection) return *batch;
    std::shared_ptr<Batch> batch;
    if (spare_batches_.empty()) {
        batch = std::make_shared<Batch>();
    } else {
        batch = std::move(spare_batches_.back());
        spare_batches_.pop_back();
    }
    batch->connection = connection;
    batches_.push_back(std::move(batch));
    return *batches_.back();
}

void RedisLimiter::flush(bool write_now) {
    send_releases(write_now);  // before any decision asked for after them
    if (member_ != 0) {
        auto batches = std::move(batches_);
        batches_.clear();
        // Nothing of its own: a wake-up to send what others handed over.
        if (batches.empty()) return offer(nullptr, topology_.route(0), false, write_now);
        for (auto& batch : batches) {
            auto* connection = batch->connection;
            offer(std::move(batch), connection, false, write_now);
        }
        return;
    }
    if (batches_.empty()) return;
    // The list's buffers change places rather than go (one allocation less per call).
    auto batches = std::move(batches_);
    batches_ = std::move(spare_list_);
    batches_.clear();
    for (auto& batch : batches) {
        auto* connection = batch->connection;
        if (in_flight(connection) >= max_in_flight && batch->pending.size() < max_batch) {
            batches_.push_back(std::move(batch));  // sent when the call in flight is answered
            continue;
        }
        // Under load the loop's queue is long; waiting for the next writable event would
        // cost the decision another turn of it.
        send(std::move(batch), write_now);
    }
    batches.clear();
    spare_list_ = std::move(batches);
}

int& RedisLimiter::in_flight(redis::RedisConnection* connection) {
    for (auto& [known, calls] : in_flight_)
        if (known == connection) return calls;
    return in_flight_.emplace_back(connection, 0).second;
}

void RedisLimiter::send(std::shared_ptr<Batch> batch, bool write_now) {
    if (batch->pending.empty()) return;
    auto* connection = batch->connection;
    if (in_flight(connection) >= max_calls_unanswered) {
        // (Answered on the next turn: never inside decide(), which may have sent it.)
        asio::post(io_context_, [this, batch = std::move(batch), alive = std::weak_ptr<int>(alive_)] {
            for (auto& pending : batch->pending)
                pending->answer(Decision::store_failure("redis has " + std::to_string(max_calls_unanswered) +
                                                        " calls of this worker unanswered"));
            if (alive.expired()) return;
            batch->args.clear();  // (as after a call)
            recycle(batch);
        });
        return;
    }
    const auto sent = std::chrono::steady_clock::now();
    ++in_flight(connection);
    auto on_reply = [this, batch, sent, alive = std::weak_ptr<int>(alive_)](redis::RedisResult result) {
        if (!alive.expired()) {
            // The batch that waited for this call goes on the next turn of the loop (flush):
            // nothing is sent from inside a reply callback, which also runs while its
            // connection is failing (hiredis is then freeing the context it would write to).
            auto* connection = batch->connection;
            --in_flight(connection);
            for (const auto& waiting : batches_)
                if (waiting->connection == connection) {
                    schedule_flush();
                    break;
                }
        }
        if (!result.ok()) {
            for (auto& pending : batch->pending) pending->answer(Decision::store_failure(result.error->message));
            return;
        }
        const auto& reply = result.reply;
        if (!is_decide_reply(reply, batch->keys.size(), sharded_)) {
            for (auto& pending : batch->pending)
                pending->answer(Decision::store_failure("malformed reply from the decide script"));
            return;
        }
        for (auto& pending : batch->pending) {
            if (pending->answered) {  // the deadline already answered
                if (!alive.expired() && !pending->late_release.empty())
                    release_late(std::exchange(pending->late_release, Slots{}));
                continue;
            }
            if (sharded_ && decide_elsewhere(reply, pending->first_key)) {
                resend(pending, nullptr, false);
                continue;
            }
            conclude(*pending, reply, pending->first_key, batch->keys, pending->first_key, sent);
        }
        if (!alive.expired()) recycle(batch);
    };
    // The ARGV is formatted into the command before evalsha_views returns: views of the builder do.
    const auto& args = batch->args.argv();
    if (!sharded_) {
        connection->evalsha_views(script_, batch->keys, args, std::move(on_reply), write_now);
    } else {
        // Cluster: the keys go first in ARGV (lua/cluster_keys.lua), none in KEYS.
        const std::string count = std::to_string(batch->keys.size());
        std::vector<std::string_view> argv;
        argv.reserve(1 + batch->keys.size() + args.size());
        argv.push_back(count);
        argv.insert(argv.end(), batch->keys.begin(), batch->keys.end());
        argv.insert(argv.end(), args.begin(), args.end());
        connection->evalsha_views(script_, {}, argv, std::move(on_reply), write_now);
    }
    batch->args.clear();
}

void RedisLimiter::recycle(const std::shared_ptr<Batch>& batch) {
    // Kept with its lists' buffers for a later batch, unless something else still holds it.
    if (batch.use_count() > 1 || spare_batches_.size() >= max_spare_batches) return;
    batch->connection = nullptr;
    batch->keys.clear();
    batch->pending.clear();
    spare_batches_.push_back(batch);
}

void RedisLimiter::offer(std::shared_ptr<Batch> batch, redis::RedisConnection* connection, bool force,
                         bool write_now) {
    // Parts whose decisions were all answered (by their deadlines) need nothing more: a late
    // reply for them finds nothing to answer.
    std::erase_if(handed_, [this](const auto& entry) {
        const auto& pending = entry.second->pending;
        if (!std::all_of(pending.begin(), pending.end(), [](const auto& p) { return p->answered; })) return false;
        // Its call may be in flight still: the slots it would take go back when it is answered.
        std::vector<Slots> late;
        for (const auto& p : pending)
            if (!p->late_release.empty()) late.push_back(std::exchange(p->late_release, Slots{}));
        if (!late.empty()) {
            late_parts_[entry.first] = std::move(late);
            if (late_parts_.size() > max_late_parts) late_parts_.erase(late_parts_.begin());
        }
        return true;
    });
    const bool ready = connection != nullptr && connection->ready();
    if (!ready) {
        // The connection is down: this worker's batches fail now, as they would without the
        // queue, not at their deadline (and are never sent when Redis is back).
        for (auto& waiting : shared_->withdraw(member_)) {
            auto it = handed_.find(waiting.id);
            if (it == handed_.end()) continue;
            for (auto& pending : it->second->pending)
                pending->answer(Decision::store_failure("not connected to redis"));
            handed_.erase(it);
        }
        if (!batch) return;
        force = true;  // its own batch goes alone, and fails at once
    }
    std::optional<SharedBatches::Part> part;
    if (batch) {
        if (batch->pending.empty()) return;
        part.emplace();
        part->member = member_;
        part->id = ++parts_made_;
        part->keys = std::move(batch->keys);
        part->args = batch->args.take_parts();
        part->expires = batch->pending.back()->deadline;
        handed_.emplace(part->id, std::move(batch));
    }
    auto call = shared_->offer(member_, std::move(part), ready, force);
    if (!call) return;  // handed over: the next call takes it
    // Under load the loop's queue is long; waiting for the next writable event would
    // cost the decisions another turn of it.
    send_shared(connection, std::move(call), write_now && ready);
}

void RedisLimiter::send_shared(redis::RedisConnection* connection, std::shared_ptr<SharedBatches::Call> call,
                               bool write_now) {
    std::vector<std::string> keys;
    keys.reserve(call->keys);
    std::vector<DecideParts*> args;  // moved into the call: only the keys are read after it
    args.reserve(call->parts.size());
    bool carries_others = false;
    for (auto& part : call->parts) {
        keys.insert(keys.end(), part.keys.begin(), part.keys.end());
        args.push_back(&part.args);
        carries_others |= part.member != member_;
    }
    if (carries_others) ++shared_sent_;
    call->sent = std::chrono::steady_clock::now();
    auto on_reply = [this, call, carries_others, shared = shared_, member = member_,
                     alive = std::weak_ptr<int>(alive_)](redis::RedisResult result) {
        call->result = std::move(result);
        call->well_formed = call->result.ok() && is_decide_reply(call->result.reply, call->keys);
        // A worker that stopped (or is gone) concludes nothing more; one still in the queue
        // concludes its own parts here.
        const bool here = !alive.expired();
        const bool member_now = here && member_ == member;
        // Others' parts are posted to their workers. Parts waiting for a call are sent by this
        // worker on the next turn of its loop (never from inside a reply callback, which also
        // runs while its connection is failing), or, where it stopped, by the worker whose
        // part waits longest.
        std::vector<SharedBatches::Answered> ready;
        const bool waiting = shared->answered(call, member_now ? member : 0, ready);
        if (!here) return;
        if (waiting && member_now) schedule_flush();
        if (carries_others && --shared_sent_ == 0 && stopped_) {
            if (stop_timer_) stop_timer_->timer.cancel();
            asio::post(io_context_, [this, alive] {
                if (alive.expired()) return;
                if (auto f = std::exchange(stopped_, nullptr)) f();
            });
        }
        const std::shared_ptr<const SharedBatches::Call> done = call;
        if (!member_now) return;
        for (std::size_t i = 0; i < done->parts.size(); ++i)
            if (done->parts[i].member == member) receive(done, i);
        // This worker's batches that rode other workers' calls, answered meanwhile.
        for (const auto& [other, index] : ready) receive(other, index);
    };
    connection->evalsha(script_, std::move(keys), decide_argv(args), std::move(on_reply), write_now);
}

void RedisLimiter::receive(const std::shared_ptr<const SharedBatches::Call>& call, std::size_t index) {
    const auto& part = call->parts[index];
    auto it = handed_.find(part.id);
    if (it == handed_.end()) {
        // Answered (by their deadlines, or when the worker stopped) and forgotten: the slots
        // the call took for them, if it took any, go back behind it.
        if (auto late = late_parts_.find(part.id); late != late_parts_.end()) {
            auto slots = std::move(late->second);
            late_parts_.erase(late);
            if (call->result.ok())
                for (auto& s : slots) release_late(std::move(s));
        }
        return;
    }
    auto batch = std::move(it->second);
    handed_.erase(it);
    const auto& result = call->result;
    if (!result.ok()) {
        for (auto& pending : batch->pending) pending->answer(Decision::store_failure(result.error->message));
        return;
    }
    if (!call->well_formed) {
        for (auto& pending : batch->pending)
            pending->answer(Decision::store_failure("malformed reply from the decide script"));
        return;
    }
    const std::size_t first = call->first_key[index];
    for (auto& pending : batch->pending) {
        if (pending->answered) {  // the deadline already answered
            if (!pending->late_release.empty()) release_late(std::exchange(pending->late_release, Slots{}));
            continue;
        }
        conclude(*pending, result.reply, first + pending->first_key, part.keys, pending->first_key, call->sent);
    }
}

void RedisLimiter::conclude(Pending& pending, const redis::RedisReply& reply, std::size_t first,
                            const std::vector<std::string>& keys, std::size_t keys_first,
                            std::chrono::steady_clock::time_point sent) {
    for (std::size_t k = 0; k < pending.sent.size(); ++k) {
        auto& slot = pending.results[pending.sent[k]];
        const bool shadow = slot.shadow;
        slot = decide_result(reply, first + k);
        slot.shadow = shadow;
    }
    auto decision = Decision::from_results(std::move(pending.results), decide_time(reply), pending.inspect);
    const std::size_t by = decision.limited_by.value_or(0);
    if (remember_rejections_ && decision.outcome == Decision::Outcome::limited &&
        !(pending.not_remembered >> std::min<std::size_t>(by, 63) & 1)) {
        std::size_t k = 0;
        while (pending.sent[k] != by) ++k;
        remember(keys[keys_first + k], sent, decision, pending.ids[k]);
    }
    pending.answer(std::move(decision));
}

void RedisLimiter::resend(std::shared_ptr<Pending> pending, redis::RedisConnection* to, bool asking) {
    if (pending->answered) return;
    if (++pending->redirections > max_redirections)
        return pending->answer(Decision::store_failure("more than " + std::to_string(max_redirections) +
                                                       " redis cluster redirections for slot " +
                                                       std::to_string(pending->slot)));
    if (to == nullptr) to = topology_.route(pending->slot);
    if (to == nullptr)
        return pending->answer(
            Decision::store_failure("no redis cluster master is known for slot " + std::to_string(pending->slot)));
    // ASKING holds for the next command on the connection only: the EVALSHA right after it.
    if (asking) to->command({"ASKING"}, [](redis::RedisResult) {});
    const auto sent = std::chrono::steady_clock::now();
    to->evalsha(script_, pending->keys, pending->single_args,
                [this, pending, sent, alive = std::weak_ptr<int>(alive_)](redis::RedisResult result) {
                    if (alive.expired() || pending->answered) return;
                    if (!result.ok()) {
                        const auto& message = result.error->message;
                        std::uint16_t slot = 0;
                        std::string address;
                        if (result.error->code == redis::RedisError::Code::reply_error) {
                            // Redis refused before running anything: following it cannot double-count.
                            if (parse_redirection(message, "MOVED", slot, address)) {
                                topology_.moved(slot, address);
                                return resend(pending, topology_.node(address), false);
                            }
                            if (parse_redirection(message, "ASK", slot, address))
                                return resend(pending, topology_.node(address), true);
                            if (message.starts_with("TRYAGAIN")) {
                                // A multi-key request while its slot migrates: ask again shortly
                                // while the deadline allows.
                                const auto again = std::chrono::steady_clock::now() + std::chrono::milliseconds(10);
                                if (again < pending->deadline) {
                                    auto timer = std::make_shared<asio::steady_timer>(io_context_, again);
                                    timer->async_wait([this, pending, timer, alive = std::weak_ptr<int>(alive_)](
                                                          boost::system::error_code ec) {
                                        if (ec || alive.expired()) return;
                                        --pending->redirections;  // waiting is not a redirection
                                        resend(pending, nullptr, false);
                                    });
                                    return;
                                }
                            }
                            if (message.starts_with("CLUSTERDOWN")) topology_.refresh("CLUSTERDOWN");
                        }
                        return pending->answer(Decision::store_failure(message));
                    }
                    const auto& reply = result.reply;
                    if (!is_decide_reply(reply, pending->keys.size(), true))
                        return pending->answer(Decision::store_failure("malformed reply from the decide script"));
                    if (decide_elsewhere(reply, 0)) return resend(pending, nullptr, false);
                    conclude(*pending, reply, 0, pending->keys, 0, sent);
                });
}

}  // namespace sluice::limit
