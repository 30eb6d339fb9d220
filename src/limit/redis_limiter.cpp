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
};

struct RedisLimiter::DeadlineTimer {
    explicit DeadlineTimer(asio::io_context& io) : timer(io) {}
    asio::steady_timer timer;
};

RedisLimiter::~RedisLimiter() = default;

void RedisLimiter::watch_deadlines() {
    const auto now = std::chrono::steady_clock::now();
    while (!deadlines_.empty()) {
        auto& [deadline, weak] = deadlines_.front();
        auto pending = weak.lock();
        if (!pending || pending->answered) {
            deadlines_.pop_front();
            continue;
        }
        if (deadline > now) break;
        deadlines_.pop_front();
        pending->answer(Decision::store_failure("no reply from redis within " + std::to_string(timeout_.count()) + "ms"));
    }
    if (deadlines_.empty()) return;
    deadline_timer_waiting_ = true;
    deadline_timer_->timer.expires_at(deadlines_.front().first);
    deadline_timer_->timer.async_wait([this](const boost::system::error_code& ec) {
        if (ec) return;  // only cancelled when the limiter goes away: `this` may be gone
        deadline_timer_waiting_ = false;
        watch_deadlines();
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
    auto keys = build_limit_keys(key_prefix_, route, request);
    if (auto known = remembered(keys, route)) {
        asio::post(io_context_, [callback = std::move(callback), d = std::move(*known)]() mutable { callback(std::move(d)); });
        return;
    }
    auto pending = std::make_shared<Pending>(std::move(callback));

    std::vector<std::string> sent_keys;
    std::vector<std::string> args;
    pending->results.resize(route.limits.size());
    for (std::size_t i = 0; i < route.limits.size(); ++i) {
        pending->results[i].shadow = route.limits[i].shadow;
        if (!keys[i]) continue;
        pending->results[i].applies = true;
        pending->sent.push_back(i);
        sent_keys.push_back(std::move(*keys[i]));
        append_decide_args(route.limits[i], args);
    }

    if (sent_keys.empty()) {
        asio::post(io_context_, [pending] {
            pending->answer(Decision::from_results(std::move(pending->results), 0));
        });
        return;
    }

    // Answered decisions at the front need no deadline any more: drop them now rather than
    // keep their memory until the timer reaches them.
    while (!deadlines_.empty()) {
        auto front = deadlines_.front().second.lock();
        if (front && !front->answered) break;
        deadlines_.pop_front();
    }
    deadlines_.emplace_back(std::chrono::steady_clock::now() + timeout_, pending);
    if (!deadline_timer_waiting_) watch_deadlines();

    const auto sent = std::chrono::steady_clock::now();
    std::vector<std::string> keys_by_limit(route.limits.size());
    for (std::size_t k = 0; k < pending->sent.size(); ++k) keys_by_limit[pending->sent[k]] = sent_keys[k];
    connection_.evalsha(script_, sent_keys, args,
                        [this, pending, sent, keys_by_limit = std::move(keys_by_limit)](redis::RedisResult result) {
        if (pending->answered) return;  // the deadline already answered
        if (!result.ok()) return pending->answer(Decision::store_failure(result.error->message));
        auto reply = parse_decide_reply(result.reply, pending->sent.size());
        if (!reply) return pending->answer(Decision::store_failure("malformed reply from the decide script"));
        for (std::size_t k = 0; k < pending->sent.size(); ++k) {
            auto& slot = pending->results[pending->sent[k]];
            const bool shadow = slot.shadow;
            slot = reply->results[k];
            slot.shadow = shadow;
        }
        auto decision = Decision::from_results(std::move(pending->results), reply->now_us);
        if (remember_rejections_ && decision.outcome == Decision::Outcome::limited)
            remember(keys_by_limit[*decision.limited_by], sent, decision);
        pending->answer(std::move(decision));
    });
}

}  // namespace sluice::limit
