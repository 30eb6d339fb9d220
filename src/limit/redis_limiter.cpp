#include "limit/redis_limiter.hpp"

#include <memory>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "limit/decide_script.hpp"

namespace sluice::limit {
namespace {

namespace asio = boost::asio;

// Remembered rejections kept at most; past it expired ones are swept, then all are dropped.
constexpr std::size_t max_rejections = 100000;

// Requests per EVALSHA at most: a batch keeps Redis busy for a few microseconds per request,
// and other clients of the same Redis wait meanwhile.
constexpr std::size_t max_batch = 64;

}  // namespace

// One decision in flight. Whichever comes first, the reply or the deadline, answers;
// the other finds `answered` set and does nothing.
struct RedisLimiter::Pending {
    explicit Pending(RedisLimiter::Callback cb) : callback(std::move(cb)) {}

    void answer(Decision decision) {
        if (answered) return;
        answered = true;
        callback(std::move(decision));
    }

    RedisLimiter::Callback callback;
    bool answered = false;
    std::vector<LimitResult> results;  // one per route limit; `applies` and `shadow` filled in
    std::vector<std::size_t> sent;     // route index of each key sent
    std::size_t first_key = 0;         // index of its first key in the batch
};

struct RedisLimiter::Batch {
    std::vector<std::string> keys;
    DecideArgs args;
    std::vector<std::shared_ptr<Pending>> pending;
};

struct RedisLimiter::DeadlineTimer {
    explicit DeadlineTimer(asio::io_context& io) : timer(io) {}
    asio::steady_timer timer;
};

RedisLimiter::~RedisLimiter() = default;

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
            connection_.poll_replies();
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

RedisLimiter::RedisLimiter(asio::io_context& io_context, redis::RedisConnection& connection,
                           std::string key_prefix, std::chrono::milliseconds timeout, bool remember_rejections)
    : io_context_(io_context),
      connection_(connection),
      script_(connection.add_script(decide_script_source())),
      key_prefix_(std::move(key_prefix)),
      timeout_(timeout),
      remember_rejections_(remember_rejections),
      deadline_timer_(std::make_unique<DeadlineTimer>(io_context)) {}

std::optional<Decision> RedisLimiter::remembered(const std::vector<std::optional<std::string>>& keys,
                                                 const RouteLimits& route) {
    if (rejections_.empty()) return std::nullopt;
    const auto now = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < keys.size(); ++i) {
        if (!keys[i] || route.limits[i].shadow) continue;
        auto it = rejections_.find(*keys[i]);
        if (it == rejections_.end()) continue;
        if (it->second.until <= now || it->second.limit != i) {
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
        results[i].retry_after = std::chrono::ceil<std::chrono::milliseconds>(it->second.until - now);
        return Decision::from_results(std::move(results), 0);
    }
    return std::nullopt;
}

void RedisLimiter::remember(const std::string& key, std::chrono::steady_clock::time_point sent,
                            const Decision& decision) {
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
    rejections_[key] = Rejection{sent + retry, decision.limits[index], index};
}

void RedisLimiter::decide(const RouteLimits& route, const RequestKeyValues& request, Callback callback) {
    std::optional<KeyPlan> own_plan;  // only when the caller has none
    if (!route.plan) own_plan = make_key_plan(route.route, route.limits);
    const KeyPlan& plan = route.plan ? *route.plan : *own_plan;
    auto keys = build_limit_keys(key_prefix_, RouteLimits{route.route, route.limits, &plan}, request);
    if (auto known = remembered(keys, route)) {
        asio::post(io_context_, [callback = std::move(callback), d = std::move(*known)]() mutable { callback(std::move(d)); });
        return;
    }
    auto pending = std::make_shared<Pending>(std::move(callback));
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

    if (!batch_) batch_ = std::make_shared<Batch>();
    auto& batch = *batch_;
    pending->first_key = batch.keys.size();
    pending->sent.reserve(applying);
    for (std::size_t i = 0; i < route.limits.size(); ++i) {
        if (!keys[i]) continue;
        pending->results[i].applies = true;
        pending->sent.push_back(i);
        batch.keys.push_back(std::move(*keys[i]));
        batch.args.limit(plan.limits[i].args);
    }
    batch.args.end_request();
    batch.pending.push_back(pending);

    // Answered decisions at the front need no deadline any more: drop them now rather than
    // keep their memory until the timer reaches them.
    while (!deadlines_.empty()) {
        auto front = deadlines_.front().second.lock();
        if (front && !front->answered) break;
        deadlines_.pop_front();
    }
    deadlines_.emplace_back(std::chrono::steady_clock::now() + timeout_, std::move(pending));
    if (!deadline_timer_waiting_) watch_deadlines(false);

    if (batch.pending.size() >= max_batch) {
        flush(false);
    } else if (!flush_posted_) {
        flush_posted_ = true;
        asio::post(io_context_, [this, alive = std::weak_ptr<int>(alive_)] {
            if (alive.expired()) return;
            flush_posted_ = false;
            flush(true);
        });
    }
}

void RedisLimiter::flush(bool write_now) {
    if (!batch_ || batch_->pending.empty()) return;
    auto batch = std::move(batch_);
    const auto sent = std::chrono::steady_clock::now();
    connection_.evalsha(script_, batch->keys, batch->args.take(), [this, batch, sent](redis::RedisResult result) {
        if (!result.ok()) {
            for (auto& pending : batch->pending) pending->answer(Decision::store_failure(result.error->message));
            return;
        }
        const auto& reply = result.reply;
        if (!is_decide_reply(reply, batch->keys.size())) {
            for (auto& pending : batch->pending)
                pending->answer(Decision::store_failure("malformed reply from the decide script"));
            return;
        }
        for (auto& pending : batch->pending) {
            if (pending->answered) continue;  // the deadline already answered
            for (std::size_t k = 0; k < pending->sent.size(); ++k) {
                auto& slot = pending->results[pending->sent[k]];
                const bool shadow = slot.shadow;
                slot = decide_result(reply, pending->first_key + k);
                slot.shadow = shadow;
            }
            auto decision = Decision::from_results(std::move(pending->results), decide_time(reply));
            if (remember_rejections_ && decision.outcome == Decision::Outcome::limited) {
                std::size_t k = 0;
                while (pending->sent[k] != *decision.limited_by) ++k;
                remember(batch->keys[pending->first_key + k], sent, decision);
            }
            pending->answer(std::move(decision));
        }
    });
    // Under load the loop's queue is long; waiting for the next writable event would cost
    // the decision another turn of it.
    if (write_now) connection_.flush_output();
}

}  // namespace sluice::limit
