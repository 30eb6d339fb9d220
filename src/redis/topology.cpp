// Standalone and Sentinel topologies (one data connection each), the slot hash, and the
// choice of topology. The cluster topology is in cluster_topology.cpp.
#include "redis/topology.hpp"

#include <utility>

#include <boost/asio/io_context.hpp>
#include <spdlog/spdlog.h>

#include "config/config.hpp"
#include "redis/cluster_topology.hpp"
#include "redis/sentinel_watcher.hpp"

namespace sluice::redis {

namespace {

// One server through one connection: standalone mode owns it (start and stop it), a
// borrowed one is the caller's.
class OneServer final : public Topology {
public:
    OneServer(boost::asio::io_context& io, const config::RedisConfig& config)
        : owned_(std::make_unique<RedisConnection>(io, RedisConnectionOptions::from_config(config))),
          connection_(*owned_) {}
    explicit OneServer(RedisConnection& borrowed) : connection_(borrowed) {}

    RedisConnection::ScriptId add_script(const ScriptCode& code) override { return connection_.add_script(code); }
    void start() override {
        if (owned_) connection_.start();
    }
    void stop() override {
        if (owned_) connection_.stop();
    }
    bool ready() const override { return connection_.ready(); }
    std::vector<NodeState> nodes() const override { return {{connection_.address(), "standalone", connection_.ready()}}; }
    bool sharded() const override { return false; }
    RedisConnection* route(std::uint16_t) override { return &connection_; }
    void poll_replies() override { connection_.poll_replies(); }

private:
    std::unique_ptr<RedisConnection> owned_;
    RedisConnection& connection_;
};

RedisConnectionOptions sentinel_data_options(const config::RedisConfig& config) {
    auto options = RedisConnectionOptions::from_config(config);
    options.host.clear();  // unknown until a sentinel names the master
    options.unix_path.clear();
    options.require_master = true;
    return options;
}

SentinelOptions sentinel_options(const config::RedisConfig& config) {
    SentinelOptions options;
    for (const auto& s : config.sentinels) options.sentinels.push_back({s.host, s.port});
    options.master_name = config.master_name;
    options.username = config.sentinel_username;
    options.password = config.sentinel_password;
    return options;
}

// store.redis.mode sentinel: the data connection goes wherever the sentinels say the master
// is, and refuses to stay on a server that is not a master. During a failover it moves to the
// replica being promoted as soon as the leading sentinel names it: the old master would still
// take writes, but they would be lost.
class SentinelTopology final : public Topology {
public:
    SentinelTopology(boost::asio::io_context& io, const config::RedisConfig& config)
        : master_name_(config.master_name),
          connection_(io, sentinel_data_options(config)),
          watcher_(io, sentinel_options(config), [this](const SentinelNews& news) { on_news(news); }) {
        connection_.on_trouble([this](RedisConnection::Trouble trouble, const std::string& detail) {
            // The replica being promoted may not be a master yet: the connection retries it
            // on its own; only a failover that takes too long is asked about again.
            if (promoting()) return;
            switch (trouble) {
            case RedisConnection::Trouble::lost:
                if (known_) watcher_.reask("the connection to the master was lost: " + detail);
                break;
            case RedisConnection::Trouble::not_master:
                watcher_.reask(connection_.address() + " is not a master (" + detail + ")");
                break;
            case RedisConnection::Trouble::error_reply:
                if (detail.starts_with("LOADING") || detail.starts_with("MASTERDOWN"))
                    watcher_.reask(connection_.address() + " answered " + detail.substr(0, 60));
                break;
            }
        });
    }

    RedisConnection::ScriptId add_script(const ScriptCode& code) override { return connection_.add_script(code); }
    void start() override { watcher_.start(); }
    void stop() override {
        watcher_.stop();
        connection_.stop();
    }
    bool ready() const override { return connection_.ready(); }
    std::vector<NodeState> nodes() const override {
        std::vector<NodeState> nodes;
        if (known_) nodes.push_back({connection_.address(), "master", connection_.ready()});
        for (const auto& s : watcher_.sentinels()) nodes.push_back({s.address, "sentinel", s.up});
        return nodes;
    }
    bool sharded() const override { return false; }
    RedisConnection* route(std::uint16_t) override { return &connection_; }
    void poll_replies() override { connection_.poll_replies(); }

private:
    // How long a promotion may take before the sentinels are asked again.
    static constexpr std::chrono::seconds promotion_time{10};

    bool promoting() const { return promoting_ && std::chrono::steady_clock::now() < promoting_until_; }

    void on_news(const SentinelNews& news) {
        const std::string address = join_address(news.host, news.port);
        switch (news.kind) {
        case SentinelNews::Kind::aborted:
            if (!promoting_) return;
            promoting_ = false;
            spdlog::warn("redis sentinel: the failover of {} was called off ({}); asking again", master_name_,
                         news.source);
            return watcher_.reask("failover called off");
        case SentinelNews::Kind::promoting:
            if (promoting_ && address == master_) return;
            spdlog::warn("redis sentinel: failover of {}: {} is being promoted ({}); decisions wait for it and "
                         "follow on_error meanwhile{}",
                         master_name_, address, news.source, known_ ? "; leaving " + master_ : std::string());
            promoting_ = true;
            promoting_until_ = std::chrono::steady_clock::now() + promotion_time;
            break;
        case SentinelNews::Kind::master:
            // During a promotion the sentinels still name the old master until it is over.
            if (promoting() && address != master_) return;
            promoting_ = false;
            break;
        case SentinelNews::Kind::switched:
            promoting_ = false;
            break;
        }
        if (!known_ || address != master_)
            spdlog::info("redis sentinel: master {} is {} ({}{})", master_name_, address, news.source,
                         known_ ? ", was " + master_ : std::string());
        master_ = address;
        known_ = true;
        connection_.retarget(news.host, news.port);
    }

    std::string master_name_;
    std::string master_;
    bool known_ = false;
    bool promoting_ = false;
    std::chrono::steady_clock::time_point promoting_until_{};
    RedisConnection connection_;
    SentinelWatcher watcher_;
};

}  // namespace

std::unique_ptr<Topology> make_topology(boost::asio::io_context& io, const config::RedisConfig& config) {
    switch (config.mode) {
    case config::RedisMode::sentinel:
        return std::make_unique<SentinelTopology>(io, config);
    case config::RedisMode::cluster:
        return make_cluster_topology(io, config);
    case config::RedisMode::standalone:
        break;
    }
    return std::make_unique<OneServer>(io, config);
}

std::unique_ptr<Topology> topology_of(RedisConnection& connection) { return std::make_unique<OneServer>(connection); }

}  // namespace sluice::redis
