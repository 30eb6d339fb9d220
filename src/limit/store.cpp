#include "limit/store.hpp"

#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "config/config.hpp"
#include "limit/memory_limiter.hpp"
#include "limit/redis_limiter.hpp"
#include "limit/shared_batches.hpp"

namespace sluice::limit {

namespace {

class MemoryStore final : public Store {
public:
    MemoryStore(boost::asio::io_context& io, MemoryLimiter& limiter) : io_(io), limiter_(limiter) {}
    void start() override {}
    void stop(std::function<void()> stopped) override {
        if (stopped) boost::asio::post(io_, std::move(stopped));
    }
    bool ready() const override { return true; }
    std::optional<Decision> decide_now(const RouteLimits& route, const RequestKeyValues& request) override {
        return limiter_.decide(route, request);
    }
    void decide(const RouteLimits& route, const RequestKeyValues& request, Callback callback) override {
        boost::asio::post(io_, [callback = std::move(callback), d = limiter_.decide(route, request)]() mutable {
            callback(std::move(d));
        });
    }
    void inspect(const RouteLimits& route, const RequestKeyValues& request, Callback callback) override {
        boost::asio::post(io_, [callback = std::move(callback), d = limiter_.decide(route, request, true)]() mutable {
            callback(std::move(d));
        });
    }
    void reset(const std::vector<std::string>& keys, ResetCallback callback) override {
        boost::asio::post(io_, [callback = std::move(callback), n = limiter_.reset(keys)] { callback({}, n); });
    }
    void release(Slots&& slots) override { limiter_.release(slots); }
    void renew(const Slots& slots) override { limiter_.renew(slots); }
    std::vector<redis::NodeState> nodes() const override { return {}; }

private:
    boost::asio::io_context& io_;
    MemoryLimiter& limiter_;
};

class RedisStore final : public Store {
public:
    RedisStore(boost::asio::io_context& io, const config::StoreConfig& config, std::shared_ptr<SharedBatches> shared)
        : topology_(redis::make_topology(io, config.redis)),
          limiter_(std::make_unique<RedisLimiter>(io, *topology_, config.redis.key_prefix, config.redis.timeout, true,
                                                  std::move(shared))) {}

    ~RedisStore() override {
        // Pending decisions are answered (shutting_down) while the limiter still exists.
        topology_->stop();
        topology_.reset();
        limiter_.reset();
    }

    void start() override { topology_->start(); }
    void stop(std::function<void()> stopped) override {
        // Calls this worker sent with other workers' decisions are answered first.
        limiter_->stop([this, stopped = std::move(stopped)] {
            topology_->stop();
            limiter_->closed();
            if (stopped) stopped();
        });
    }
    bool ready() const override { return topology_->ready(); }
    void decide(const RouteLimits& route, const RequestKeyValues& request, Callback callback) override {
        limiter_->decide(route, request, std::move(callback));
    }
    void inspect(const RouteLimits& route, const RequestKeyValues& request, Callback callback) override {
        limiter_->decide(route, request, std::move(callback), true);
    }
    void reset(const std::vector<std::string>& keys, ResetCallback callback) override {
        limiter_->reset(keys, std::move(callback));
    }
    void forget(const std::vector<std::string>& keys) override { limiter_->forget(keys); }
    void release(Slots&& slots) override { limiter_->release(std::move(slots)); }
    void renew(const Slots& slots) override { limiter_->renew(slots); }
    void reloaded() override { limiter_->clear_rejections(); }
    std::vector<redis::NodeState> nodes() const override { return topology_->nodes(); }

private:
    std::unique_ptr<redis::Topology> topology_;
    std::unique_ptr<RedisLimiter> limiter_;
};

}  // namespace

std::unique_ptr<Store> make_store(boost::asio::io_context& io, const config::StoreConfig& config,
                                  MemoryLimiter* memory, std::shared_ptr<SharedBatches> shared) {
    if (memory != nullptr) return std::make_unique<MemoryStore>(io, *memory);
    return std::make_unique<RedisStore>(io, config, std::move(shared));
}

std::shared_ptr<SharedBatches> make_shared_batches(const config::StoreConfig& config) {
    if (config.type != config::StoreType::redis || config.redis.mode == config::RedisMode::cluster ||
        !config.redis.shared_batches)
        return nullptr;
    return std::make_shared<SharedBatches>();
}

}  // namespace sluice::limit
