// A worker thread: its own single-threaded io_context, acceptors (SO_REUSEPORT),
// client sessions and upstream keep-alive pool. Nothing here is shared with other
// workers except the connection counter.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <mutex>
#include <thread>
#include <functional>
#include <unordered_set>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "http/relay_buffers.hpp"
#include "http/upstream_pool.hpp"
#include "limit/decision.hpp"
#include "limit/limit_key.hpp"
#include "observe/limited_clients.hpp"
#include "redis/topology.hpp"
#include "server/slow_waits.hpp"
#include "server/snapshot.hpp"

namespace sluice::http {
class ClientSession;
class SlotHold;
}
namespace sluice::limit {
class MemoryLimiter;
class SharedBatches;
class Store;
}  // namespace sluice::limit

namespace sluice::server {

class Worker {
public:
    // `memory` is the process's in-memory limiter for store.type memory, else nullptr
    // (then the worker keeps its own Redis connections); `shared` the process's queue of
    // Redis batches (limit::make_shared_batches), or nullptr.
    Worker(unsigned index, std::shared_ptr<const Snapshot> snapshot, std::atomic<std::size_t>& connections,
           limit::MemoryLimiter* memory, std::shared_ptr<limit::SharedBatches> shared = nullptr);
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;
    ~Worker();

    // Binds an acceptor (SO_REUSEPORT) to `endpoint`; throws boost::system::system_error.
    // Returns the bound endpoint (port 0 becomes the real port).
    boost::asio::ip::tcp::endpoint listen(const boost::asio::ip::tcp::endpoint& endpoint);

    void start();     // runs the io_context on a new thread and connects to the store
    void accept();    // thread-safe: starts taking connections on the listeners
    void shutdown();  // thread-safe: stop accepting, close idle sessions, finish in-flight ones
    void stop_now();  // thread-safe: abandon whatever is left (the slots it holds go back first)
    // Thread-safe: requests that start after this use `snapshot`.
    void publish(std::shared_ptr<const Snapshot> snapshot);
    void join();
    bool finished() const { return finished_.load(); }
    // The thread ended while the worker was not stopping: it serves nothing any more.
    bool died() const { return died_.load(); }

    // Called on the worker's own thread only:
    boost::asio::io_context& io() { return io_; }
    unsigned index() const { return index_; }
    const std::shared_ptr<const Snapshot>& snapshot() const { return snapshot_; }
    http::UpstreamPool& upstream_pool() { return pool_; }
    http::RelayBuffers& relay_buffers() { return relay_buffers_; }
    // Waits that want something done should they last (ticked with watch_store, every 50 ms;
    // all fired at once when the worker starts stopping, and at once from then on).
    SlowWaits& slow_waits() { return slow_waits_; }
    // The first of the requests holding concurrency slots now (whose slots stop_now gives
    // back; SlotHold links the others to it, allocating nothing).
    http::SlotHold*& slot_holds() { return slot_holds_; }
    std::size_t next_server(std::size_t upstream_index, std::size_t server_count);
    bool stopping() const { return stopping_; }
    // While stopping: when the server gives up on what is left (shutdown_timeout after the stop).
    std::chrono::steady_clock::time_point stop_deadline() const { return stop_deadline_; }
    void add_session(http::ClientSession* s) { sessions_.insert(s); }
    void remove_session(http::ClientSession* s);
    // One store round trip for all limits of a route; never throws, store trouble is a
    // Decision with Outcome::store_error.
    boost::asio::awaitable<limit::Decision> decide(const limit::RouteLimits& route,
                                                   const limit::RequestKeyValues& request);
    // decide() in two steps, for the request path (no coroutine frame of its own): the
    // decision when the store makes it at once (the memory store), else nullopt, and then
    // ask_store(), awaited at once (route and request are read when it starts), which puts
    // the decision into `out` (moved once, not through the coroutines' results).
    std::optional<limit::Decision> decide_now(const limit::RouteLimits& route, const limit::RequestKeyValues& request);
    boost::asio::awaitable<void> ask_store(const limit::RouteLimits& route, const limit::RequestKeyValues& request,
                                           limit::Decision& out);
    // Two store round trips at once, awaited together (on Redis both go in one call, with one
    // deadline): a response's settle and its charge, which a stalled store would otherwise
    // hold up one after the other. `a`, `b` and their requests are read when it starts.
    boost::asio::awaitable<void> decide_both(const limit::RouteLimits& a, const limit::RequestKeyValues& a_request,
                                             limit::Decision& a_out, const limit::RouteLimits& b,
                                             const limit::RequestKeyValues& b_request, limit::Decision& b_out);
    // The same without waiting: a response's charge to the limits that count its status
    // (http::finish). `done` runs once, on this worker's thread, perhaps inside
    // this call (the memory store); `route` and `request` are only read during the call.
    void charge(const limit::RouteLimits& route, const limit::RequestKeyValues& request,
                std::function<void(limit::Decision)> done);
    // The admin port's /limits, from the main thread: run on this worker's thread, against
    // its store; `done` runs on the worker's thread (post it back where it belongs).
    // `snapshot` and `values` are kept alive until then.
    // `set`: the route's set of limits (Snapshot::limit_sets).
    void inspect_limits(std::shared_ptr<const Snapshot> snapshot, std::size_t route, std::size_t set,
                        std::shared_ptr<const limit::OwnedKeyValues> values,
                        std::function<void(limit::Decision)> done);
    void reset_limits(std::vector<std::string> keys, std::function<void(std::string, std::int64_t)> done);
    void forget_limits(std::vector<std::string> keys);
    // A request's concurrency slots given back, or renewed while it runs (see Store).
    void release_slots(limit::Slots&& slots);
    void renew_slots(const limit::Slots& slots);
    // The store answers (Redis connected and ready; always true for memory). Thread-safe.
    bool store_ready() const { return store_ready_.load(std::memory_order_relaxed); }
    // Thread-safe: the store's nodes as this worker last saw them (every 50 ms).
    std::vector<redis::NodeState> store_nodes() const;
    // Thread-safe: clients limited this summary interval.
    observe::LimitedClients& limited_clients() { return limited_clients_; }
    std::atomic<std::size_t>& connections() { return connections_; }

private:
    // `listener`: the index of the acceptor's server.listen entry (which says whether it is TLS).
    void accept_on(boost::asio::ip::tcp::acceptor& acceptor, std::size_t listener);
    void watch_store();

    // Declared before io_ so that sessions destroyed with io_'s pending handlers can still
    // unregister and read the snapshot; the pool and acceptors hold sockets of io_ and go first.
    unsigned index_;
    std::unordered_set<http::ClientSession*> sessions_;
    http::SlotHold* slot_holds_ = nullptr;
    // store_->stop(), once.
    void stop_store(std::function<void()> stopped = {});
    bool store_stopped_ = false;  // (store_->stop() asked for)
    bool stopping_now_ = false;   // stop_now's job ran
    SlowWaits slow_waits_;  // sessions' links (unlinked when they go)
    http::RelayBuffers relay_buffers_;
    std::vector<std::size_t> round_robin_;
    std::shared_ptr<const Snapshot> snapshot_;
    std::atomic<std::size_t>& connections_;
    bool stopping_ = false;
    std::chrono::steady_clock::time_point stop_deadline_ = std::chrono::steady_clock::time_point::max();
    std::atomic<bool> finished_{false};
    std::atomic<bool> died_{false};
    std::atomic<bool> store_ready_{false};
    mutable std::mutex store_nodes_mutex_;
    std::vector<redis::NodeState> store_nodes_;
    observe::LimitedClients limited_clients_;
    // One thread runs it; other threads only post to it, and the acceptors and the Redis
    // connection are set up before that thread starts: no locking of socket state needed.
    // (http::Stream::quiet relies on it too: it writes Asio's per-socket state unlocked.)
    boost::asio::io_context io_{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
    std::vector<std::unique_ptr<boost::asio::ip::tcp::acceptor>> acceptors_;
    http::UpstreamPool pool_;
    std::unique_ptr<limit::Store> store_;
    std::unique_ptr<boost::asio::steady_timer> store_watch_;
    std::thread thread_;
};

}  // namespace sluice::server
