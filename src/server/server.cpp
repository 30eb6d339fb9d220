#include "server/server.hpp"

#include <algorithm>
#include <csignal>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/loader.hpp"
#include "limit/memory_limiter.hpp"
#include "observe/admin_server.hpp"
#include "observe/logging.hpp"
#include "observe/summary.hpp"
#include "server/snapshot.hpp"
#include "server/worker.hpp"

namespace sluice::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

unsigned worker_count(const config::ServerConfig& server) {
    if (server.workers > 0) return server.workers;
    auto cores = std::thread::hardware_concurrency();
    return cores > 0 ? cores : 1;
}

// What a reload cannot change in a running process; said in the log so nobody waits for it.
std::vector<std::string> restart_only_changes(const config::Config& before, const config::Config& after) {
    std::vector<std::string> changed;
    auto listen_text = [](const config::Config& c) {
        std::string out;
        for (const auto& ep : c.server.listen) out += ep.str() + " ";
        return out;
    };
    if (listen_text(before) != listen_text(after)) changed.push_back("server.listen");
    if (before.server.workers != after.server.workers) changed.push_back("server.workers");
    auto admin = [](const config::Config& c) { return c.admin.listen ? c.admin.listen->str() : std::string(); };
    if (admin(before) != admin(after)) changed.push_back("admin.listen");
    if (before.logging.access_log != after.logging.access_log) changed.push_back("logging.access_log");
    const auto& a = before.store;
    const auto& b = after.store;
    auto addresses = [](const std::vector<config::Endpoint>& list) {
        std::string text;
        for (const auto& e : list) text += e.str() + " ";
        return text;
    };
    if (a.type != b.type || a.redis.mode != b.redis.mode || a.redis.tcp.has_value() != b.redis.tcp.has_value() ||
        (a.redis.tcp && a.redis.tcp->str() != b.redis.tcp->str()) || a.redis.unix_path != b.redis.unix_path ||
        a.redis.username != b.redis.username || a.redis.password != b.redis.password ||
        a.redis.database != b.redis.database || a.redis.timeout != b.redis.timeout ||
        a.redis.key_prefix != b.redis.key_prefix || addresses(a.redis.sentinels) != addresses(b.redis.sentinels) ||
        a.redis.master_name != b.redis.master_name || a.redis.sentinel_username != b.redis.sentinel_username ||
        a.redis.sentinel_password != b.redis.sentinel_password || addresses(a.redis.nodes) != addresses(b.redis.nodes))
        changed.push_back("store (type, redis)");
    return changed;
}

std::string endpoint_text(const tcp::endpoint& ep) {
    auto address = ep.address().to_string();
    if (ep.address().is_v6()) address = "[" + address + "]";
    return address + ":" + std::to_string(ep.port());
}

// The main thread's state: workers, admin port, signals, reload, summaries, graceful stop.
class Server {
public:
    explicit Server(std::shared_ptr<const config::Config> config) : config_(std::move(config)) {}
    int run();

private:
    bool start();
    void wait_signal();
    void on_signal(int signo);
    void reload();
    void begin_stop(int signo);
    void wait_drained(std::chrono::steady_clock::time_point deadline);
    void schedule_summary();
    void write_summary();
    bool all_finished() const;

    std::shared_ptr<const config::Config> config_;  // as started: what a reload cannot change
    net::io_context io_{1};
    net::signal_set signals_{io_, SIGINT, SIGTERM, SIGHUP};
    observe::Metrics metrics_;
    std::shared_ptr<const Snapshot> snapshot_;
    std::atomic<std::size_t> connections_{0};
    std::unique_ptr<limit::MemoryLimiter> memory_limiter_;
    std::vector<std::unique_ptr<Worker>> workers_;
    std::unique_ptr<observe::AdminServer> admin_;
    net::steady_timer shutdown_timer_{io_};
    net::steady_timer summary_timer_{io_};
    observe::SummaryReporter summaries_;
    bool stopping_ = false;
};

int Server::run() {
    std::signal(SIGPIPE, SIG_IGN);
    signals_.add(SIGUSR1);
    if (!start()) return 2;
    wait_signal();
    schedule_summary();
    io_.run();
    for (auto& w : workers_) w->join();
    workers_.clear();
    spdlog::info("stopped");
    return 0;
}

namespace {

std::string store_text(const config::Config& config) {
    const auto& store = config.store;
    if (store.type == config::StoreType::memory) return "memory";
    auto list = [](const std::vector<config::Endpoint>& endpoints) {
        std::string text;
        for (const auto& e : endpoints) text += (text.empty() ? "" : ",") + e.str();
        return text;
    };
    switch (store.redis.mode) {
    case config::RedisMode::sentinel:
        return "redis sentinel master " + store.redis.master_name + " via " + list(store.redis.sentinels);
    case config::RedisMode::cluster:
        return "redis cluster via " + list(store.redis.nodes);
    case config::RedisMode::standalone:
        break;
    }
    return store.redis.tcp ? "redis " + store.redis.tcp->str() : "redis unix:" + store.redis.unix_path;
}

}  // namespace

bool Server::start() {
    try {
        snapshot_ = make_snapshot(config_, metrics_);
    } catch (const std::exception& e) {
        spdlog::error("cannot start: {}", e.what());
        return false;
    }
    // store.type memory: one in-process limiter shared by the workers; redis: one connection per worker.
    if (config_->store.type == config::StoreType::memory)
        memory_limiter_ = std::make_unique<limit::MemoryLimiter>(config_->store.redis.key_prefix);
    const unsigned count = worker_count(config_->server);
    for (unsigned i = 0; i < count; ++i)
        workers_.push_back(std::make_unique<Worker>(i, snapshot_, connections_, memory_limiter_.get()));

    metrics_.connections_active = [this] { return static_cast<std::uint64_t>(connections_.load()); };
    metrics_.log_dropped = [] { return observe::dropped_log_lines(); };
    metrics_.workers_alive = [this] {
        for (const auto& w : workers_)
            if (w->died()) return false;
        return true;
    };
    metrics_.store_ready = [this] {
        for (const auto& w : workers_)
            if (!w->store_ready()) return false;
        return true;
    };
    metrics_.store_nodes = [this] {
        // A node is up when every worker that knows it talks to it.
        std::vector<observe::Metrics::StoreNode> nodes;
        for (const auto& w : workers_) {
            for (const auto& n : w->store_nodes()) {
                auto it = std::find_if(nodes.begin(), nodes.end(), [&](const auto& known) {
                    return known.address == n.address && known.role == n.role;
                });
                if (it == nodes.end()) {
                    nodes.push_back({n.address, n.role, n.up});
                } else {
                    it->up = it->up && n.up;
                }
            }
        }
        return nodes;
    };

    std::vector<std::string> listening;
    for (const auto& listen : config_->server.listen) {
        try {
            auto endpoint = resolve_endpoint(listen);
            // Every worker gets its own acceptor on the same port (SO_REUSEPORT): the kernel
            // spreads connections and no lock is shared. Port 0 binds once, then reuses that port.
            for (auto& worker : workers_) endpoint = worker->listen(endpoint);
            listening.push_back(endpoint_text(endpoint));
        } catch (const std::exception& e) {
            spdlog::error("cannot listen on {}: {}", listen.str(), e.what());
            return false;
        }
    }
    std::string admin_text = "admin disabled";
    if (config_->admin.listen) {
        try {
            admin_ = std::make_unique<observe::AdminServer>(io_, metrics_);
            admin_text = "admin on " + endpoint_text(admin_->listen(resolve_endpoint(*config_->admin.listen)));
        } catch (const std::exception& e) {
            spdlog::error("cannot listen on {} (admin): {}", config_->admin.listen->str(), e.what());
            return false;
        }
        admin_->start();
    }

    for (auto& worker : workers_) worker->start();
    // Connections wait in the listen backlog until every worker's store connection is up (or a
    // short grace passes), so the first requests after a start are limited, not answered by
    // on_error because the connection was still being set up.
    const auto grace_end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!metrics_.store_ready() && std::chrono::steady_clock::now() < grace_end)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!metrics_.store_ready())
        spdlog::warn("the rate-limit store does not answer yet; serving meanwhile with on_error ({})",
                     config_->store.on_error == config::OnError::allow ? "allow" : "deny");
    for (auto& worker : workers_) worker->accept();
    spdlog::info("sluice {} listening on {} with {} workers, {}, store {}, config {}", SLUICE_VERSION,
                 fmt::join(listening, ", "), count, admin_text,
                 store_text(*config_),
                 config_->source_path);
    return true;
}

bool Server::all_finished() const {
    for (const auto& w : workers_)
        if (!w->finished()) return false;
    return true;
}

void Server::wait_signal() {
    signals_.async_wait([this](boost::system::error_code ec, int signo) {
        if (ec) return;
        on_signal(signo);
    });
}

void Server::on_signal(int signo) {
    if (signo == SIGHUP) {
        if (!stopping_) reload();
        wait_signal();
    } else if (signo == SIGUSR1) {
        observe::reopen_access_log();
        spdlog::info("SIGUSR1: access log reopened");
        wait_signal();
    } else if (stopping_) {
        spdlog::warn("second stop signal: closing {} remaining connections now", connections_.load());
        for (auto& w : workers_) w->stop_now();
    } else {
        begin_stop(signo);
    }
}

void Server::begin_stop(int signo) {
    stopping_ = true;
    spdlog::info("{}: stopping; finishing in-flight requests (up to {} ms)", signo == SIGTERM ? "SIGTERM" : "SIGINT",
                 config_->server.shutdown_timeout.count());
    summary_timer_.cancel();
    for (auto& w : workers_) w->shutdown();
    wait_signal();
    wait_drained(std::chrono::steady_clock::now() + config_->server.shutdown_timeout);
}

// After a stop signal: poll until every worker has drained, or the shutdown timeout passes.
void Server::wait_drained(std::chrono::steady_clock::time_point deadline) {
    if (!all_finished()) {
        if (std::chrono::steady_clock::now() < deadline) {
            shutdown_timer_.expires_after(std::chrono::milliseconds(20));
            shutdown_timer_.async_wait([this, deadline](boost::system::error_code ec) {
                if (!ec) wait_drained(deadline);
            });
            return;
        }
        spdlog::warn("shutdown_timeout reached: closing {} remaining connections", connections_.load());
        for (auto& w : workers_) w->stop_now();
    }
    if (snapshot_->config->logging.summary_interval.count() > 0) write_summary();  // the last partial interval
    signals_.cancel();
    if (admin_) admin_->stop();
}

void Server::reload() {
    const auto& path = config_->source_path;
    auto loaded = config::load_file(path);
    for (const auto& d : loaded.diagnostics) {
        if (d.warning)
            spdlog::warn("reload: {}", d.str());
        else
            spdlog::error("reload: {}", d.str());
    }
    if (!loaded.ok()) {
        observe::add(metrics_.reloads_failed);
        spdlog::error("reload of {} refused; the running configuration stays", path);
        return;
    }
    std::shared_ptr<const Snapshot> next;
    try {
        next = make_snapshot(loaded.config, metrics_);
    } catch (const std::exception& e) {
        observe::add(metrics_.reloads_failed);
        spdlog::error("reload of {} refused: {}; the running configuration stays", path, e.what());
        return;
    }
    for (const auto& key : restart_only_changes(*config_, *next->config))
        spdlog::warn("reload: {} changed; that takes effect only after a restart", key);
    spdlog::default_logger()->set_level(spdlog::level::from_str(next->config->logging.level));
    const bool summary_changed = next->config->logging.summary_interval != snapshot_->config->logging.summary_interval;
    snapshot_ = next;
    for (auto& w : workers_) w->publish(next);
    observe::add(metrics_.reloads_ok);
    if (summary_changed) schedule_summary();
    spdlog::info("reloaded {}: {} routes, {} upstreams", path, next->config->routes.size(),
                 next->config->upstreams.size());
}

void Server::schedule_summary() {
    const auto interval = snapshot_->config->logging.summary_interval;
    summary_timer_.cancel();
    if (interval.count() <= 0 || stopping_) return;
    summary_timer_.expires_after(interval);
    summary_timer_.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        write_summary();
        schedule_summary();
    });
}

void Server::write_summary() {
    observe::LimitedClients::Counts limited;
    for (auto& w : workers_) observe::merge(limited, w->limited_clients().take());
    const auto& logging = snapshot_->config->logging;
    for (const auto& r : summaries_.take(metrics_, limited)) {
        observe::log_summary_line(logging.format == config::LogFormat::json
                                      ? observe::format_summary_json(r, logging.summary_interval)
                                      : observe::format_summary_text(r, logging.summary_interval));
        if (observe::limited_share_jumped(r)) {
            std::string top;
            for (const auto& [client, n] : r.top_limited) top += fmt::format(" {}:{}", client, n);
            spdlog::warn("route {}: limited share jumped from {:.1f}% to {:.1f}% ({} of {} requests); top limited:{}",
                         r.route, r.previous_pct, r.limited_pct(), r.limited, r.requests, top.empty() ? " -" : top);
        }
    }
}

}  // namespace

int run_server(std::shared_ptr<const config::Config> config) {
    Server server(std::move(config));
    return server.run();
}

}  // namespace sluice::server
