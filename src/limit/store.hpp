// The rate-limit store a worker decides against: Redis in any topology (standalone, Sentinel,
// Cluster) or the process's memory. The worker only sees this interface.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "limit/decision.hpp"
#include "limit/decision_callback.hpp"
#include "limit/limit_key.hpp"
#include "redis/topology.hpp"

namespace boost::asio {
class io_context;
}
namespace sluice::config {
struct StoreConfig;
}

namespace sluice::limit {

class MemoryLimiter;
class SharedBatches;

// One per worker, on the worker's io_context. Not thread-safe.
class Store {
public:
    using Callback = DecisionCallback;
    virtual ~Store() = default;

    virtual void start() = 0;
    // Closes the store's connections; decisions still pending are answered (store_error).
    // The slots given back before it are written first. `stopped`, when given, is called
    // (on the io_context) once the connections are closed.
    virtual void stop(std::function<void()> stopped = {}) = 0;
    // Decisions can be made now (every node needed is connected).
    virtual bool ready() const = 0;
    // The memory store decides at once: the decision. The others: nullopt, then decide().
    virtual std::optional<Decision> decide_now(const RouteLimits& route, const RequestKeyValues& request) {
        (void)route;
        (void)request;
        return std::nullopt;
    }
    // The callback runs exactly once, on the io_context, never inside this call (see
    // RedisLimiter::decide).
    virtual void decide(const RouteLimits& route, const RequestKeyValues& request, Callback callback) = 0;
    // Gives back a request's concurrency slots (its response is done, or its client gone),
    // or renews their leases while it runs. Best effort, nothing to wait for: a slot not
    // given back is reclaimed when its lease ends.
    // (The slots are the store's to take: their keys and token go into the release call.)
    virtual void release(Slots&& slots) = 0;
    virtual void renew(const Slots& slots) = 0;
    // The admin port's /limits: the state of a route's limits for one key, taking nothing
    // (callback as for decide), and deleting keys' state (callback: error text or empty,
    // keys that existed). Both answer on the io_context, never inside the call.
    virtual void inspect(const RouteLimits& route, const RequestKeyValues& request, Callback callback) = 0;
    using ResetCallback = std::function<void(std::string, std::int64_t)>;
    virtual void reset(const std::vector<std::string>& keys, ResetCallback callback) = 0;
    // Forgets what this worker remembered about these keys (another worker reset them).
    virtual void forget(const std::vector<std::string>& keys) { (void)keys; }
    // The configuration was reloaded: a limit's parameters may have changed.
    virtual void reloaded() {}
    virtual std::vector<redis::NodeState> nodes() const = 0;
};

// `memory`: the process's shared limiter for store.type memory (nullptr for redis).
// `shared`: the process's queue of batches (make_shared_batches), or nullptr.
std::unique_ptr<Store> make_store(boost::asio::io_context& io_context, const config::StoreConfig& config,
                                  MemoryLimiter* memory, std::shared_ptr<SharedBatches> shared = nullptr);
// One per process, for its workers' stores (shared_batches.hpp), where store.redis.shared_batches
// asks for it; else nullptr (always for the memory store and a Redis Cluster, where each
// master has its own calls).
std::shared_ptr<SharedBatches> make_shared_batches(const config::StoreConfig& config);

}  // namespace sluice::limit
