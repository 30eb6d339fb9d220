#include "server/server.hpp"

#include <sys/stat.h>

#include <map>
#include <tuple>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/loader.hpp"
#include "limit/memory_limiter.hpp"
#include "limit/shared_batches.hpp"
#include "limit/store.hpp"
#include "net/accept_errors.hpp"
#include "observe/admin_server.hpp"
#include "observe/recent_limited.hpp"
#include "server/limits_api.hpp"
#include "observe/logging.hpp"
#include "observe/log_time.hpp"
#include "observe/summary.hpp"
#include "redis/memory_policy.hpp"
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
    if (before.server.pid_file != after.server.pid_file) changed.push_back("server.pid_file");
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
        a.redis.sentinel_password != b.redis.sentinel_password || addresses(a.redis.nodes) != addresses(b.redis.nodes) ||
        a.redis.shared_batches != b.redis.shared_batches)
        changed.push_back("store (type, redis)");
    return changed;
}

// Why a listen failed, as a person reads it: the system's words ("Address already in use"),
// not the library's source location.
std::string failure_text(const std::exception& e) {
    if (const auto* system = dynamic_cast<const boost::system::system_error*>(&e)) return system->code().message();
    return e.what();
}

// Every worker binds its listen addresses with SO_REUSEPORT, which the kernel also grants
// when another process of the same user (a second sluice) already listens there: the two
// would share the connections. A plain bind first, closed at once, finds any listener.
void check_port_free(const tcp::endpoint& endpoint) {
    if (endpoint.port() == 0) return;
    boost::asio::io_context io;
    tcp::acceptor probe(io);
    probe.open(endpoint.protocol());
    probe.set_option(boost::asio::socket_base::reuse_address(true));
    if (endpoint.address().is_v6()) probe.set_option(boost::asio::ip::v6_only(true));
    probe.bind(endpoint);
}

// server.pid_file: written once sluice listens, removed when it stops (if it still holds our pid).
bool write_pid_file(const std::string& path) {
    const std::string temporary = path + ".tmp";
    std::FILE* f = std::fopen(temporary.c_str(), "w");
    if (!f) {
        spdlog::error("cannot write the pid file {}: {}", path, std::strerror(errno));
        return false;
    }
    const bool written = std::fprintf(f, "%d\n", static_cast<int>(::getpid())) > 0;
    if (std::fclose(f) != 0 || !written || std::rename(temporary.c_str(), path.c_str()) != 0) {
        spdlog::error("cannot write the pid file {}: {}", path, std::strerror(errno));
        std::remove(temporary.c_str());
        return false;
    }
    return true;
}

void remove_pid_file(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (!f) return;
    int pid = 0;
    const bool read = std::fscanf(f, "%d", &pid) == 1;
    std::fclose(f);
    if (read && pid == static_cast<int>(::getpid())) std::remove(path.c_str());
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
    // The configuration file read again, or only the plan maps (of the running configuration).
    void reload_plan_maps();
    void install(std::shared_ptr<const config::Config> config, const std::string& what);
    // SIGHUP or SIGUSR1 noted before the server took its signals over (note_early_signals).
    void take_early_signals();
    void on_signal(int signo);
    void reload();
    void begin_stop(int signo);
    // `cut`: shutdown_timeout has passed and the workers were told to stop now.
    void wait_drained(std::chrono::steady_clock::time_point deadline, bool cut = false);
    void schedule_summary();
    void write_summary();
    // Every 5 s: the workers' limited clients, into the summary's interval and /stats's minute.
    void schedule_limited_collect();
    void collect_limited();
    // Every second: a plan map (routes[].plan_map) that changed on disk reloads the
    // configuration, as SIGHUP does (limiter state is kept; a map with errors is refused).
    void schedule_plan_map_watch();
    bool plan_maps_changed();
    bool all_finished() const;
    // The admin port's /limits (server/limits_api.hpp), on the main thread.
    void limits_call(observe::AdminServer::LimitsCall call, std::function<void(observe::AdminServer::LimitsAnswer)> done);

    std::shared_ptr<const config::Config> config_;  // as started: what a reload cannot change
    std::string pid_file_;                          // written at start: removed at the end
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
    net::steady_timer limited_timer_{io_};
    net::steady_timer plan_map_timer_{io_};
    std::map<std::string, std::tuple<std::int64_t, std::int64_t, std::uint64_t>> plan_map_seen_;  // mtime ns, size, inode
    observe::LimitedClients::Counts limited_interval_;  // since the last summary line
    observe::RecentLimited recent_limited_;
    observe::SummaryReporter summaries_;
    bool stopping_ = false;
};

void Server::limits_call(observe::AdminServer::LimitsCall call,
                         std::function<void(observe::AdminServer::LimitsAnswer)> done) {
    auto snapshot = snapshot_;
    LimitsProblem problem;
    auto query = read_limits_query(*snapshot->config, call.query, problem);
    if (!query) return done({problem.status, limits_error_json(problem.message)});
    if (workers_.empty()) return done({503, limits_error_json("no worker is running")});
    auto values = std::make_shared<const limit::OwnedKeyValues>(query->values);
    Worker& worker = *workers_.front();
    if (!call.reset) {
        worker.inspect_limits(snapshot, query->route, query->set, values,
                              [this, snapshot, query = *query, done = std::move(done)](limit::Decision d) mutable {
                                  net::post(io_, [snapshot, query, d = std::move(d), done = std::move(done)] {
                                      if (d.outcome == limit::Decision::Outcome::store_error)
                                          return done({503, limits_error_json("the rate-limit store did not answer: " + d.error)});
                                      done({200, limits_state_json(*snapshot->config, query, d)});
                                  });
                              });
        return;
    }
    const auto& route = snapshot->config->routes[query->route];
    const auto keys = limit::build_limit_keys(config_->store.redis.key_prefix,
                                              snapshot->limit_sets[query->route][query->set].route_limits(route.name),
                                              values->view());
    std::vector<std::string> chosen;
    std::vector<std::size_t> reset;
    for (std::size_t i = 0; i < keys.size(); ++i) {
        if (!keys[i] || (query->limit && *query->limit != i)) continue;
        chosen.push_back(*keys[i]);
        reset.push_back(i);
    }
    // A limit's ban goes with its state.
    const auto& limits = snapshot->limit_sets[query->route][query->set].limits;
    std::vector<std::string> deleted = chosen;
    for (std::size_t k = 0; k < reset.size(); ++k)
        if (limits[reset[k]].ban) deleted.push_back(limit::ban_key(chosen[k]));
    // Every worker forgets the rejections it remembered for those keys.
    for (std::size_t w = 1; w < workers_.size(); ++w) workers_[w]->forget_limits(chosen);
    worker.reset_limits(deleted, [this, snapshot, query = *query, reset, chosen, done = std::move(done)](
                                    std::string error, std::int64_t existed) mutable {
        net::post(io_, [snapshot, query, reset, chosen, error = std::move(error), existed, done = std::move(done)] {
            const auto& route = snapshot->config->routes[query.route];
            const auto& set = snapshot->limit_sets[query.route][query.set];
            if (!error.empty()) {
                spdlog::warn("admin: resetting route {} failed: {}", route.name, error);
                return done({503, limits_error_json("the rate-limit store did not answer: " + error)});
            }
            std::string names;
            for (auto i : reset) {
                names += (names.empty() ? "" : ",") + set.limits[i].name;
                set.metrics[i]->count_reset();
            }
            spdlog::info("admin: reset route {} limits {} for key {} ({} of {} keys existed)", route.name,
                         names.empty() ? "-" : names, chosen.empty() ? "-" : chosen.front(), existed, chosen.size());
            done({200, limits_reset_json(*snapshot->config, query, reset, existed)});
        });
    });
}

int Server::run() {
    std::signal(SIGPIPE, SIG_IGN);
    signals_.add(SIGUSR1);
    if (!start()) return 2;
    wait_signal();
    take_early_signals();
    schedule_summary();
    schedule_limited_collect();
    plan_maps_changed();  // what the maps are now
    schedule_plan_map_watch();
    io_.run();
    for (auto& w : workers_) w->join();
    workers_.clear();
    if (!pid_file_.empty()) remove_pid_file(pid_file_);
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
    sluice::net::raise_descriptor_limit(config_->server.max_connections);
    if (config_->store.type == config::StoreType::redis) {
        // Whether Redis may evict the keys: read once before the workers start (a blocking
        // connection, 500 ms for each of its few steps: a Redis that does not answer is the
        // workers' business), and said in the log.
        std::string error;
        if (const auto settings = redis::read_memory_settings(config_->store, std::chrono::milliseconds(500), error)) {
            for (const auto& warning : redis::memory_warnings(*settings)) spdlog::warn("{}", warning);
        } else {
            spdlog::debug("redis: maxmemory-policy not checked ({})", error);
        }
    }
    // store.type memory: one in-process limiter shared by the workers; redis: one connection per worker.
    if (config_->store.type == config::StoreType::memory)
        memory_limiter_ = std::make_unique<limit::MemoryLimiter>(
            config_->store.redis.key_prefix, &limit::MemoryLimiter::wall_microseconds, config_->store.memory.max_keys);
    // store.redis.shared_batches: a worker's waiting batch rides with another worker's call.
    const auto shared_batches = limit::make_shared_batches(config_->store);
    const unsigned count = worker_count(config_->server);
    for (unsigned i = 0; i < count; ++i)
        workers_.push_back(
            std::make_unique<Worker>(i, snapshot_, connections_, memory_limiter_.get(), shared_batches));

    metrics_.connections_active = [this] { return static_cast<std::uint64_t>(connections_.load()); };
    if (shared_batches) metrics_.redis_shared_batches = [shared_batches] { return shared_batches->carried(); };
    if (memory_limiter_) {
        metrics_.memory_store_keys = [this] { return static_cast<std::uint64_t>(memory_limiter_->size()); };
        metrics_.memory_store_evictions = [this] { return memory_limiter_->evictions(); };
    }
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

    // Every address is tried, so that one start names every one that is taken.
    bool listening_everywhere = true;
    std::vector<std::string> listening;
    for (const auto& listen : config_->server.listen) {
        try {
            auto endpoint = resolve_endpoint(listen);
            check_port_free(endpoint);
            // Every worker gets its own acceptor on the same port (SO_REUSEPORT): the kernel
            // spreads connections and no lock is shared. Port 0 binds once, then reuses that port.
            for (auto& worker : workers_) endpoint = worker->listen(endpoint);
            listening.push_back(endpoint_text(endpoint));
        } catch (const std::exception& e) {
            spdlog::error("cannot listen on {}: {}", listen.str(), failure_text(e));
            listening_everywhere = false;
        }
    }
    std::string admin_text = "admin disabled";
    if (config_->admin.listen) {
        try {
            admin_ = std::make_unique<observe::AdminServer>(io_, metrics_);
            admin_->set_token(config_->admin.token);
            admin_->set_top_limited([this] { return recent_limited_.top(5); });
            admin_->set_limits_handler([this](auto call, auto done) { limits_call(std::move(call), std::move(done)); });
            const auto endpoint = resolve_endpoint(*config_->admin.listen);
            check_port_free(endpoint);
            admin_text = "admin on " + endpoint_text(admin_->listen(endpoint));
        } catch (const std::exception& e) {
            spdlog::error("cannot listen on {} (admin): {}", config_->admin.listen->str(), failure_text(e));
            listening_everywhere = false;
        }
    }
    if (!listening_everywhere) return false;
    if (admin_) admin_->start();
    if (!config_->server.pid_file.empty()) {
        if (!write_pid_file(config_->server.pid_file)) return false;
        pid_file_ = config_->server.pid_file;
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
    limited_timer_.cancel();
    plan_map_timer_.cancel();
    for (auto& w : workers_) w->shutdown();
    wait_signal();
    wait_drained(std::chrono::steady_clock::now() + config_->server.shutdown_timeout);
}

// After a stop signal: poll until every worker has drained, or the shutdown timeout passes.
void Server::wait_drained(std::chrono::steady_clock::time_point deadline, bool cut) {
    if (!all_finished()) {
        if (std::chrono::steady_clock::now() < deadline) {
            shutdown_timer_.expires_after(std::chrono::milliseconds(20));
            shutdown_timer_.async_wait([this, deadline, cut](boost::system::error_code ec) {
                if (!ec) wait_drained(deadline, cut);
            });
            return;
        }
        if (!cut) {
            spdlog::warn("shutdown_timeout reached: closing {} remaining connections", connections_.load());
            for (auto& w : workers_) w->stop_now();
            // Their loops stop within a second (the requests cut are logged and their slots
            // given back first): the last summary counts them.
            return wait_drained(std::chrono::steady_clock::now() + std::chrono::seconds(2), true);
        }
    }
    if (snapshot_->config->logging.summary_interval.count() > 0) write_summary();  // the last partial interval
    signals_.cancel();
    if (admin_) admin_->stop();
}

namespace {

void log_reload_problem(const config::Diagnostic& d) {
    if (d.warning)
        spdlog::warn("reload: {}", d.str());
    else
        spdlog::error("reload: {}", d.str());
}

}  // namespace

void Server::reload() {
    const auto& path = config_->source_path;
    auto loaded = config::load_file(path);
    for (const auto& d : loaded.diagnostics) log_reload_problem(d);
    // (Upstream names resolve as --check resolves them: the same FILE:LINE:COL messages.)
    const auto unresolved = loaded.ok() ? unresolved_upstreams(*loaded.config, "the reload is refused")
                                        : std::vector<config::Diagnostic>{};
    for (const auto& d : unresolved) log_reload_problem(d);
    if (!loaded.ok() || !unresolved.empty()) {
        observe::add(metrics_.reloads_failed);
        spdlog::error("reload of {} refused; the running configuration stays", path);
        return;
    }
    install(loaded.config, "reloaded " + path);
}

void Server::reload_plan_maps() {
    // Only the maps: the configuration file may hold an edit not signalled yet (or be half
    // written), which is not the maps' to apply.
    auto next = std::make_shared<config::Config>(*snapshot_->config);
    std::string refused;
    for (auto& route : next->routes) {
        if (!route.plans || route.plans->map_file.empty()) continue;
        std::shared_ptr<const config::RoutePlans> plans;
        for (const auto& d : config::reread_plan_map(next->plans, *route.plans, plans)) log_reload_problem(d);
        if (plans)
            route.plans = std::move(plans);
        else if (refused.empty())
            refused = route.plans->map_file;
    }
    if (!refused.empty()) {
        observe::add(metrics_.reloads_failed);
        spdlog::error("reload of {} refused; the running configuration stays", refused);
        return;
    }
    install(next, "reloaded the plan maps (the configuration file as it was)");
}

void Server::install(std::shared_ptr<const config::Config> config, const std::string& what) {
    std::shared_ptr<const Snapshot> next;
    try {
        next = make_snapshot(std::move(config), metrics_);
    } catch (const std::exception& e) {
        observe::add(metrics_.reloads_failed);
        spdlog::error("reload refused: {}; the running configuration stays", e.what());
        return;
    }
    for (const auto& key : restart_only_changes(*config_, *next->config))
        spdlog::warn("reload: {} changed; that takes effect only after a restart", key);
    spdlog::default_logger()->set_level(spdlog::level::from_str(next->config->logging.level));
    if (next->config->logging.local_time != snapshot_->config->logging.local_time)
        observe::set_process_log_time(*spdlog::default_logger(), next->config->logging.local_time);
    const auto summary_before = snapshot_->config->logging.summary_interval;
    const bool summary_changed = next->config->logging.summary_interval != summary_before;
    // What was counted before a new interval is not its first summary's: the old interval's
    // last (partial) line, as at a stop, or, while there were no summaries, let go.
    if (summary_changed && summary_before.count() > 0) write_summary();
    snapshot_ = next;
    if (summary_changed && summary_before.count() <= 0) {
        collect_limited();
        limited_interval_.clear();
        (void)summaries_.take(metrics_, limited_interval_);
    }
    if (memory_limiter_) memory_limiter_->set_max_keys(next->config->store.memory.max_keys);
    for (auto& w : workers_) w->publish(next);
    // Routes reloads took away (those of this one go once the workers let go of the snapshot
    // before it), when many: a route named anew by each reload kept 80 KB of counters.
    metrics_.prune(64);
    if (admin_) admin_->set_token(next->config->admin.token);
    observe::add(metrics_.reloads_ok);
    if (summary_changed) schedule_summary();
    spdlog::info("{}: {} routes, {} upstreams", what, next->config->routes.size(), next->config->upstreams.size());
}

bool Server::plan_maps_changed() {
    bool changed = false;
    std::map<std::string, std::tuple<std::int64_t, std::int64_t, std::uint64_t>> now;
    for (const auto& route : snapshot_->config->routes) {
        if (!route.plans || route.plans->map_file.empty()) continue;
        struct stat st {};
        std::tuple<std::int64_t, std::int64_t, std::uint64_t> seen{-1, -1, 0};
        if (::stat(route.plans->map_file.c_str(), &st) == 0)
            seen = {static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
                    static_cast<std::int64_t>(st.st_size), static_cast<std::uint64_t>(st.st_ino)};
        const auto before = plan_map_seen_.find(route.plans->map_file);
        if (before != plan_map_seen_.end() && before->second != seen) {
            if (!changed) spdlog::info("plan map {} changed: reloading", route.plans->map_file);
            changed = true;
        }
        now[route.plans->map_file] = seen;
    }
    plan_map_seen_ = std::move(now);
    return changed;
}

void Server::schedule_plan_map_watch() {
    if (stopping_) return;
    plan_map_timer_.expires_after(std::chrono::seconds(1));
    plan_map_timer_.async_wait([this](boost::system::error_code ec) {
        if (ec || stopping_) return;
        // (The signatures were taken before the files are read: a write during the reload
        // is seen at the next tick.)
        if (plan_maps_changed()) reload_plan_maps();
        schedule_plan_map_watch();
    });
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

void Server::collect_limited() {
    observe::LimitedClients::Counts limited;
    for (auto& w : workers_) observe::merge(limited, w->limited_clients().take());
    // (Kept for the summary line only while there are summaries.)
    if (snapshot_->config->logging.summary_interval.count() > 0) observe::merge(limited_interval_, limited);
    recent_limited_.push(limited);
}

void Server::schedule_limited_collect() {
    limited_timer_.expires_after(std::chrono::seconds(5));
    limited_timer_.async_wait([this](boost::system::error_code ec) {
        if (ec || stopping_) return;
        collect_limited();
        // (With summaries, after each: a route's last interval is written first.)
        if (snapshot_->config->logging.summary_interval.count() <= 0) metrics_.prune();
        schedule_limited_collect();
    });
}

void Server::write_summary() {
    // What the workers counted since the last collection goes into this interval too.
    collect_limited();
    observe::LimitedClients::Counts limited = std::move(limited_interval_);
    limited_interval_.clear();
    const auto& logging = snapshot_->config->logging;
    const std::string time = observe::log_time(std::chrono::system_clock::now(), logging.local_time);
    for (const auto& r : summaries_.take(metrics_, limited)) {
        observe::log_summary_line(logging.format == config::LogFormat::json
                                      ? observe::format_summary_json(r, logging.summary_interval, time)
                                      : observe::format_summary_text(r, logging.summary_interval, time));
        if (observe::limited_share_jumped(r)) {
            std::string top;
            for (const auto& [client, n] : r.top_limited) top += fmt::format(" {}:{}", client, n);
            spdlog::warn("route {}: limited share jumped from {:.1f}% to {:.1f}% ({} of {} requests); top limited:{}",
                         r.route, r.previous_pct, r.limited_pct(), r.limited, r.requests, top.empty() ? " -" : top);
        }
    }
    metrics_.prune();  // routes reloads took away, once summarised and no request runs under them
}

}  // namespace

namespace {

volatile std::sig_atomic_t early_hup = 0;
volatile std::sig_atomic_t early_usr1 = 0;

extern "C" void note_early_signal(int signo) {
    if (signo == SIGHUP) early_hup = 1;
    else early_usr1 = 1;
}

}  // namespace

void note_early_signals() {
    struct sigaction action {};
    action.sa_handler = note_early_signal;
    action.sa_flags = SA_RESTART;  // (system calls of the start interrupted by it go on)
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGHUP, &action, nullptr);
    ::sigaction(SIGUSR1, &action, nullptr);
}

void Server::take_early_signals() {
    // (Asio's handlers are in place: what comes from now on is theirs.)
    const bool hup = early_hup != 0, usr1 = early_usr1 != 0;
    early_hup = 0;
    early_usr1 = 0;
    if (usr1) observe::reopen_access_log();
    if (hup) {
        spdlog::info("SIGHUP came while sluice was starting: reloading now");
        reload();
    }
}

int run_server(std::shared_ptr<const config::Config> config) {
    Server server(std::move(config));
    return server.run();
}

}  // namespace sluice::server
