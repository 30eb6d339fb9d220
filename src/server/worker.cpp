#include "server/worker.hpp"

#include <boost/asio/detail/socket_option.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <tuple>
#include <spdlog/spdlog.h>

#include "http/client_session.hpp"
#include "http/exchange.hpp"
#include "limit/store.hpp"
#include "observe/logging.hpp"
#include "observe/metrics.hpp"
#include "net/accept_errors.hpp"

namespace sluice::server {

namespace {

// Every request copies its worker's snapshot pointer (Exchange). Copies of the one pointer
// the server hands out would all count in one control block, whose cache line every worker's
// core would then write twice per request; a holder of the worker's own keeps the counting on
// this worker's core. The snapshot lives while any worker's holder does.
std::shared_ptr<const Snapshot> worker_local(std::shared_ptr<const Snapshot> shared) {
    auto holder = std::make_shared<const std::shared_ptr<const Snapshot>>(std::move(shared));
    const Snapshot* snapshot = holder->get();
    return {std::move(holder), snapshot};
}

}  // namespace

namespace net = boost::asio;
using tcp = net::ip::tcp;
using reuse_port = net::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

Worker::Worker(unsigned index, std::shared_ptr<const Snapshot> snapshot, std::atomic<std::size_t>& connections,
               limit::MemoryLimiter* memory, std::shared_ptr<limit::SharedBatches> shared)
    : index_(index),
      snapshot_(worker_local(std::move(snapshot))),
      connections_(connections),
      guard_(net::make_work_guard(io_)),
      pool_(io_.get_executor()),
      store_(limit::make_store(io_, snapshot_->config->store, memory, std::move(shared))) {}

Worker::~Worker() {
    stop_now();
    join();
    pool_.shut();
    acceptors_.clear();
    store_watch_.reset();
    store_.reset();  // answers pending decisions (shutting_down)
}

void Worker::remove_session(http::ClientSession* s) {
    sessions_.erase(s);
    // The store connection stays until the last in-flight request has its decision.
    if (stopping_ && sessions_.empty()) stop_store();
}

net::awaitable<limit::Decision> Worker::decide(const limit::RouteLimits& route, const limit::RequestKeyValues& request) {
    if (auto now = store_->decide_now(route, request)) co_return std::move(*now);
    limit::Decision decision;
    co_await ask_store(route, request, decision);
    co_return decision;
}

std::optional<limit::Decision> Worker::decide_now(const limit::RouteLimits& route,
                                                  const limit::RequestKeyValues& request) {
    return store_->decide_now(route, request);
}

net::awaitable<void> Worker::ask_store(const limit::RouteLimits& route, const limit::RequestKeyValues& request,
                                       limit::Decision& out) {
    // The coroutine's handler goes to the store as it is, with where the decision goes
    // (limit::DecisionCallback keeps both inline): nothing is allocated for it, and the
    // decision is moved once, into `out`, not through the coroutines' results.
    return net::async_initiate<decltype(net::use_awaitable), void()>(
        [&route, &request, &out, this](auto handler) {
            store_->decide(route, request, [handler = std::move(handler), out = &out](limit::Decision&& d) mutable {
                *out = std::move(d);
                std::move(handler)();
            });
        },
        net::use_awaitable);
}

net::awaitable<void> Worker::decide_both(const limit::RouteLimits& a, const limit::RequestKeyValues& a_request,
                                         limit::Decision& a_out, const limit::RouteLimits& b,
                                         const limit::RequestKeyValues& b_request, limit::Decision& b_out) {
    std::optional<limit::Decision> a_now = store_->decide_now(a, a_request);
    std::optional<limit::Decision> b_now = store_->decide_now(b, b_request);
    if (a_now) a_out = std::move(*a_now);
    if (b_now) b_out = std::move(*b_now);
    if (a_now && b_now) co_return;
    if (a_now || b_now) {
        if (a_now) co_await ask_store(b, b_request, b_out);
        else co_await ask_store(a, a_request, a_out);
        co_return;
    }
    co_await net::async_initiate<decltype(net::use_awaitable), void()>(
        [&, this](auto handler) {
            // The handler runs once both decisions are in (a shared count: either may come first).
            using Handler = decltype(handler);
            struct Both {
                explicit Both(Handler&& h) : done(std::move(h)) {}
                Handler done;
                int left = 2;
            };
            auto both = std::make_shared<Both>(std::move(handler));
            for (auto [route, request, out] : {std::tuple{&a, &a_request, &a_out}, std::tuple{&b, &b_request, &b_out}}) {
                store_->decide(*route, *request, [both, out](limit::Decision&& d) {
                    *out = std::move(d);
                    if (--both->left == 0) std::move(both->done)();
                });
            }
        },
        net::use_awaitable);
}

void Worker::charge(const limit::RouteLimits& route, const limit::RequestKeyValues& request,
                    std::function<void(limit::Decision)> done) {
    if (auto now = store_->decide_now(route, request)) return done(std::move(*now));
    store_->decide(route, request, std::move(done));
}

void Worker::inspect_limits(std::shared_ptr<const Snapshot> snapshot, std::size_t route, std::size_t set,
                            std::shared_ptr<const limit::OwnedKeyValues> values,
                            std::function<void(limit::Decision)> done) {
    net::post(io_, [this, snapshot = std::move(snapshot), route, set, values = std::move(values),
                    done = std::move(done)]() mutable {
        const auto& config = snapshot->config->routes[route];
        const limit::RouteLimits limits = snapshot->limit_sets[route][set].route_limits(config.name);
        store_->inspect(limits, values->view(),
                        [snapshot, values, done = std::move(done)](limit::Decision d) { done(std::move(d)); });
    });
}

void Worker::reset_limits(std::vector<std::string> keys, std::function<void(std::string, std::int64_t)> done) {
    net::post(io_, [this, keys = std::move(keys), done = std::move(done)]() mutable {
        store_->reset(keys, std::move(done));
        store_->forget(keys);
    });
}

void Worker::forget_limits(std::vector<std::string> keys) {
    net::post(io_, [this, keys = std::move(keys)] { store_->forget(keys); });
}

void Worker::release_slots(limit::Slots&& slots) {
    if (store_) store_->release(std::move(slots));
}

void Worker::renew_slots(const limit::Slots& slots) {
    if (store_) store_->renew(slots);
}

// Every 50 ms: ticks the slow waits, and copies the store's state (owned by this thread)
// where other threads may read it.
void Worker::watch_store() {
    slow_waits_.tick();
    store_ready_ = store_->ready();
    {
        auto nodes = store_->nodes();
        std::lock_guard lock(store_nodes_mutex_);
        store_nodes_ = std::move(nodes);
    }
    if (!store_watch_ || stopping_) return;
    store_watch_->expires_after(std::chrono::milliseconds(50));
    store_watch_->async_wait([this](boost::system::error_code ec) {
        if (!ec) watch_store();
    });
}

void Worker::publish(std::shared_ptr<const Snapshot> snapshot) {
    net::post(io_, [this, snapshot = std::move(snapshot)]() mutable {
        // Pooled connections to servers that are gone would never be taken again.
        pool_.clear();
        round_robin_.clear();
        // A remembered rejection was computed with the old limit parameters.
        store_->reloaded();
        snapshot_ = worker_local(std::move(snapshot));
    });
}

tcp::endpoint Worker::listen(const tcp::endpoint& endpoint) {
    auto acceptor = std::make_unique<tcp::acceptor>(io_);
    acceptor->open(endpoint.protocol());
    acceptor->set_option(net::socket_base::reuse_address(true));
    acceptor->set_option(reuse_port(true));
    if (endpoint.address().is_v6()) acceptor->set_option(net::ip::v6_only(true));
    acceptor->bind(endpoint);
    acceptor->listen(net::socket_base::max_listen_connections);
    auto bound = acceptor->local_endpoint();
    acceptors_.push_back(std::move(acceptor));
    return bound;
}

void Worker::start() {
    store_->start();
    store_watch_ = std::make_unique<net::steady_timer>(io_);
    watch_store();
    thread_ = std::thread([this] {
        observe::set_stripe(index_);
        // Access lines wait for the end of the event loop's turn and go to the writer together.
        observe::set_access_line_poster([this](std::function<void()> flush) { net::post(io_, std::move(flush)); });
        // An exception out of a handler must not end the worker and every connection on
        // it: it is logged and the event loop goes on (run() may be called again after a
        // handler threw). Sessions contain their own (see start_client_session).
        while (true) {
            try {
                io_.run();
                break;
            } catch (const std::exception& e) {
                spdlog::critical("worker {}: unexpected error in an event handler: {}; the worker goes on", index_,
                                 e.what());
            } catch (...) {
                spdlog::critical("worker {}: unexpected error in an event handler; the worker goes on", index_);
            }
        }
        observe::flush_access_lines();  // (a posted flush the stopped loop did not run)
        if (!stopping_) {
            died_ = true;
            spdlog::critical("worker {}: its event loop ended while the server was running; its connections are no "
                             "longer served (/readyz answers 503)",
                             index_);
        }
        finished_ = true;
    });
}

void Worker::accept_on(tcp::acceptor& acceptor, std::size_t listener) {
    acceptor.async_accept([this, &acceptor, listener](boost::system::error_code ec, tcp::socket socket) {
        if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
        if (ec) {
            sluice::net::warn_accept_failed("listener", ec);
            if (sluice::net::accept_exhausted(ec)) {
                // Descriptors (or memory) ran out: accepting again now fails again at once.
                auto pause = std::make_shared<net::steady_timer>(io_, sluice::net::accept_pause);
                pause->async_wait([this, &acceptor, listener, pause](boost::system::error_code) {
                    if (!stopping_ && acceptor.is_open()) accept_on(acceptor, listener);
                });
                return;
            }
        } else {
            auto max = snapshot_->config->server.max_connections;
            if (connections_.fetch_add(1) >= max) {
                connections_.fetch_sub(1);
                static std::atomic<long> last_warning{0};
                long now = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::steady_clock::now().time_since_epoch()).count();
                if (last_warning.exchange(now) != now)
                    spdlog::warn("max_connections ({}) reached: refusing new connections", max);
                boost::system::error_code ignored;
                socket.close(ignored);
            } else {
                http::start_client_session(*this, std::move(socket), listener);
            }
        }
        accept_on(acceptor, listener);
    });
}

void Worker::accept() {
    net::post(io_, [this] {
        if (stopping_) return;
        for (std::size_t i = 0; i < acceptors_.size(); ++i) accept_on(*acceptors_[i], i);
    });
}

std::size_t Worker::next_server(std::size_t upstream_index, std::size_t server_count) {
    if (round_robin_.size() <= upstream_index) round_robin_.resize(upstream_index + 1, index_);
    return round_robin_[upstream_index]++ % server_count;
}

void Worker::shutdown() {
    net::post(io_, [this] {
        stopping_ = true;
        stop_deadline_ = std::chrono::steady_clock::now() + snapshot_->config->server.shutdown_timeout;
        for (auto& acceptor : acceptors_) {
            boost::system::error_code ec;
            acceptor->close(ec);
        }
        // Copy: closing a session may remove it from the set.
        std::vector<http::ClientSession*> sessions(sessions_.begin(), sessions_.end());
        for (auto* s : sessions) s->stop_if_idle();
        pool_.shut();  // sessions still finishing close their upstream connections
        if (store_watch_) store_watch_->cancel();
        slow_waits_.fire_all();  // no more ticks: what waits is watched now
        if (sessions_.empty()) stop_store();
        guard_.reset();
    });
}

std::vector<redis::NodeState> Worker::store_nodes() const {
    std::lock_guard lock(store_nodes_mutex_);
    return store_nodes_;
}

void Worker::stop_now() {
    // On the worker's thread: the requests abandoned now give their concurrency slots back
    // first, and the store writes those releases before its connections close (else every
    // slot of a stopping instance stayed taken for its lease, shrinking the limit the other
    // instances share). Bounded: the loop stops after a second whatever the store does.
    net::post(io_, [this] {
        if (stopping_now_) return;
        stopping_now_ = true;
        // The requests under way get their access lines (and counts) now: nothing of theirs
        // runs after this job.
        const std::vector<http::ClientSession*> sessions(sessions_.begin(), sessions_.end());
        for (auto* session : sessions) session->abandon();
        std::vector<http::SlotHold*> holds;
        for (auto* hold = slot_holds_; hold != nullptr; hold = hold->next_held()) holds.push_back(hold);
        for (auto* hold : holds) hold->give_back_now();
        auto bound = std::make_shared<net::steady_timer>(io_, std::chrono::seconds(1));
        bound->async_wait([this, bound](boost::system::error_code ec) {
            if (!ec) io_.stop();
        });
        if (store_stopped_) return io_.stop();
        stop_store([this] { io_.stop(); });
    });
    guard_.reset();
}

void Worker::stop_store(std::function<void()> stopped) {
    if (store_stopped_) return;
    store_stopped_ = true;
    store_->stop(std::move(stopped));
}

void Worker::join() {
    if (thread_.joinable()) thread_.join();
}

}  // namespace sluice::server
