#include "redis/cluster_topology.hpp"

#include <array>
#include <map>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "config/config.hpp"

namespace sluice::redis {

namespace asio = boost::asio;

namespace {

constexpr std::size_t slot_count = cluster_slots;
// Nodes a slot map may name at most: far above real clusters, low enough that a hostile
// reply cannot make a worker open thousands of connections.
constexpr std::size_t max_nodes = 512;

}  // namespace

namespace {

class ClusterTopology final : public Topology {
public:
    ClusterTopology(asio::io_context& io, const config::RedisConfig& config)
        : io_(io), refresh_timer_(io), periodic_timer_(io) {
        base_ = RedisConnectionOptions::from_config(config);
        base_.database = 0;
        base_.unix_path.clear();
        for (const auto& seed : config.nodes) seeds_.push_back(join_address(seed.host, seed.port));
        slots_.fill(-1);
    }

    ~ClusterTopology() override { stop(); }

    RedisConnection::ScriptId add_script(const ScriptCode& code) override {
        scripts_.push_back(code);
        return scripts_.size() - 1;
    }

    void start() override {
        if (started_) return;
        started_ = true;
        for (const auto& seed : seeds_)
            if (Node* n = node_at(seed)) n->seed = true;
        refresh("start");
        arm_periodic();
    }

    void stop() override {
        started_ = false;
        refresh_timer_.cancel();
        periodic_timer_.cancel();
        for (auto& n : nodes_) n->connection->stop();
    }

    bool ready() const override {
        if (!complete_) return false;
        for (const auto& n : nodes_)
            if (n->owns_slots && !n->connection->ready()) return false;
        return true;
    }

    std::vector<NodeState> nodes() const override {
        std::vector<NodeState> states;
        std::map<std::string, bool> listed;
        for (const auto& n : nodes_) {
            if (n->owns_slots) {
                states.push_back({n->address, "master", n->connection->ready()});
                listed[n->address] = true;
            }
        }
        for (const auto& replica : replicas_) {
            if (listed.count(replica)) continue;
            listed[replica] = true;
            // A replica takes no decisions: "up" says it is in the map, not that we talk to it.
            states.push_back({replica, "replica", true});
        }
        return states;
    }

    bool sharded() const override { return true; }

    RedisConnection* route(std::uint16_t slot) override {
        const int index = slots_[slot & (slot_count - 1)];
        return index < 0 ? nullptr : nodes_[static_cast<std::size_t>(index)]->connection.get();
    }

    RedisConnection* node(std::string_view address) override {
        std::string host;
        std::uint16_t port = 0;
        if (!split_address(address, host, port)) return nullptr;
        Node* n = node_at(join_address(host, port));
        return n ? n->connection.get() : nullptr;
    }

    void moved(std::uint16_t slot, std::string_view address) override {
        std::string host;
        std::uint16_t port = 0;
        if (!split_address(address, host, port)) return;
        Node* n = node_at(join_address(host, port));
        if (n == nullptr) return;
        slot &= slot_count - 1;
        if (slots_[slot] != n->index) {
            spdlog::warn("redis cluster: slot {} moved from {} to {} (MOVED reply)", slot,
                         slots_[slot] < 0 ? std::string("nobody") : nodes_[static_cast<std::size_t>(slots_[slot])]->address,
                         n->address);
            slots_[slot] = n->index;
            n->owns_slots = true;
        }
        refresh("MOVED for slot " + std::to_string(slot) + " to " + n->address);
    }

    void refresh(const std::string& why) override {
        if (!started_) return;
        if (refreshing_) {
            again_ = true;
            return;
        }
        // MOVED replies come in bursts (every request of a moved slot): one refresh at a time,
        // and not more often than every 50 ms.
        const auto now = std::chrono::steady_clock::now();
        if (now - last_refresh_ < std::chrono::milliseconds(50)) {
            schedule_refresh(std::chrono::milliseconds(50), why);
            return;
        }
        Node* asked = pick_ready();
        if (asked == nullptr) {
            // Connections are still being set up: look again shortly.
            schedule_refresh(std::chrono::milliseconds(20), why);
            return;
        }
        refreshing_ = true;
        last_refresh_ = now;
        spdlog::debug("redis cluster: reading the slot map from {} ({})", asked->address, why);
        asked->connection->command(
            {"CLUSTER", "SLOTS"}, [this, alive = std::weak_ptr<int>(alive_), address = asked->address, why](RedisResult result) {
                if (alive.expired()) return;
                refreshing_ = false;
                if (!result.ok()) {
                    warn_throttled(fmt::format("redis cluster: CLUSTER SLOTS on {} failed: {}", address,
                                               result.error->message));
                    return schedule_refresh(std::chrono::milliseconds(100), why);
                }
                std::vector<SlotRange> ranges;
                std::string error;
                if (!parse_cluster_slots(result.reply, address, ranges, error)) {
                    warn_throttled(fmt::format(
                        "redis cluster: {} answered CLUSTER SLOTS with something else than a slot map: {}", address,
                        error));
                    return schedule_refresh(std::chrono::milliseconds(100), why);
                }
                apply(ranges, address);
                if (std::exchange(again_, false)) schedule_refresh(std::chrono::milliseconds(50), "MOVED meanwhile");
            });
    }

    void poll_replies() override {
        for (auto& n : nodes_)
            if (n->owns_slots) n->connection->poll_replies();
    }

private:
    struct Node {
        int index = 0;
        std::string address;
        std::unique_ptr<RedisConnection> connection;
        bool owns_slots = false;
        bool seed = false;
    };

    // A node that keeps failing the slot map is asked again every 100 ms: say it once every
    // 10 s, not every time.
    void warn_throttled(const std::string& text) {
        const auto now = std::chrono::steady_clock::now();
        if (now - last_warning_ >= std::chrono::seconds(10)) {
            last_warning_ = now;
            spdlog::warn("{}", text);
        } else {
            spdlog::debug("{}", text);
        }
    }

    Node* node_at(const std::string& address) {
        for (auto& n : nodes_)
            if (n->address == address) return n.get();
        if (nodes_.size() >= max_nodes) {
            spdlog::warn("redis cluster: more than {} nodes named; {} ignored", max_nodes, address);
            return nullptr;
        }
        std::string host;
        std::uint16_t port = 0;
        if (!split_address(address, host, port)) return nullptr;
        auto n = std::make_unique<Node>();
        n->index = static_cast<int>(nodes_.size());
        n->address = address;
        auto options = base_;
        options.host = host;
        options.port = port;
        n->connection = std::make_unique<RedisConnection>(io_, options);
        for (const auto& code : scripts_) n->connection->add_script(code);
        n->connection->on_trouble([this, address](RedisConnection::Trouble trouble, const std::string& detail) {
            on_trouble(address, trouble, detail);
        });
        if (started_) n->connection->start();
        nodes_.push_back(std::move(n));
        return nodes_.back().get();
    }

    void on_trouble(const std::string& address, RedisConnection::Trouble trouble, const std::string& detail) {
        Node* n = nullptr;
        for (auto& candidate : nodes_)
            if (candidate->address == address) n = candidate.get();
        if (n == nullptr || !n->owns_slots) return;
        if (trouble == RedisConnection::Trouble::lost) return refresh("lost " + address + ": " + detail);
        if (trouble == RedisConnection::Trouble::error_reply &&
            (detail.starts_with("CLUSTERDOWN") || detail.starts_with("READONLY") || detail.starts_with("MASTERDOWN")))
            refresh(address + " answered " + detail.substr(0, 60));
    }

    // A node to ask for the slot map: a master first, else a seed, else anything ready.
    Node* pick_ready() {
        Node* fallback = nullptr;
        for (std::size_t i = 0; i < nodes_.size(); ++i) {
            auto& n = nodes_[(next_ask_ + i) % nodes_.size()];
            if (!n->connection->ready()) continue;
            if (n->owns_slots) {
                next_ask_ = (next_ask_ + i + 1) % nodes_.size();
                return n.get();
            }
            if (!fallback) fallback = n.get();
        }
        return fallback;
    }

    void schedule_refresh(std::chrono::milliseconds delay, const std::string& why) {
        if (refresh_scheduled_ || !started_) return;
        refresh_scheduled_ = true;
        refresh_timer_.expires_after(delay);
        refresh_timer_.async_wait([this, alive = std::weak_ptr<int>(alive_), why](boost::system::error_code ec) {
            if (ec || alive.expired()) return;
            refresh_scheduled_ = false;
            refresh(why);
        });
    }

    void arm_periodic() {
        periodic_timer_.expires_after(std::chrono::seconds(5));
        periodic_timer_.async_wait([this, alive = std::weak_ptr<int>(alive_)](boost::system::error_code ec) {
            if (ec || alive.expired() || !started_) return;
            refresh("periodic");
            arm_periodic();
        });
    }

    void apply(const std::vector<SlotRange>& ranges, const std::string& asked) {
        std::array<int, slot_count> slots;
        slots.fill(-1);
        std::vector<std::string> replicas;
        for (const auto& range : ranges) {
            Node* n = node_at(range.master);
            if (n == nullptr) continue;
            for (std::size_t s = range.first; s <= range.last; ++s) slots[s] = n->index;
            for (const auto& r : range.replicas) replicas.push_back(r);
        }
        std::size_t covered = 0;
        for (int owner : slots) covered += owner >= 0 ? 1 : 0;
        log_changes(slots, asked);
        slots_ = slots;
        replicas_ = std::move(replicas);
        for (auto& n : nodes_) n->owns_slots = false;
        for (int owner : slots_)
            if (owner >= 0) nodes_[static_cast<std::size_t>(owner)]->owns_slots = true;
        const bool was_complete = std::exchange(complete_, covered == slot_count);
        if (!complete_ && (was_complete || first_map_))
            spdlog::warn("redis cluster: the slot map from {} covers {} of 16384 slots; requests of the others "
                         "follow on_error",
                         asked, covered);
        first_map_ = false;
    }

    // The process log names every change of owner, a range at a time.
    void log_changes(const std::array<int, slot_count>& next, const std::string& asked) {
        auto name = [&](int index) { return index < 0 ? std::string("nobody") : nodes_[static_cast<std::size_t>(index)]->address; };
        std::size_t s = 0;
        while (s < slot_count) {
            if (slots_[s] == next[s]) {
                ++s;
                continue;
            }
            std::size_t e = s;
            while (e + 1 < slot_count && slots_[e + 1] == slots_[s] && next[e + 1] == next[s] && slots_[e + 1] != next[e + 1])
                ++e;
            const std::string range = s == e ? "slot " + std::to_string(s)
                                             : "slots " + std::to_string(s) + "-" + std::to_string(e);
            if (first_map_)
                spdlog::info("redis cluster: {} on {} (map from {})", range, name(next[s]), asked);
            else
                spdlog::warn("redis cluster: {} moved from {} to {} (map from {})", range, name(slots_[s]),
                             name(next[s]), asked);
            s = e + 1;
        }
    }

    asio::io_context& io_;
    RedisConnectionOptions base_;
    std::vector<std::string> seeds_;
    std::vector<ScriptCode> scripts_;
    std::vector<std::unique_ptr<Node>> nodes_;
    std::vector<std::string> replicas_;
    std::array<int, slot_count> slots_{};
    asio::steady_timer refresh_timer_;
    asio::steady_timer periodic_timer_;
    std::chrono::steady_clock::time_point last_refresh_{};
    std::chrono::steady_clock::time_point last_warning_{};
    std::size_t next_ask_ = 0;
    bool started_ = false;
    bool refreshing_ = false;
    bool again_ = false;
    bool refresh_scheduled_ = false;
    bool complete_ = false;
    bool first_map_ = true;
    std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace

std::unique_ptr<Topology> make_cluster_topology(asio::io_context& io, const config::RedisConfig& config) {
    return std::make_unique<ClusterTopology>(io, config);
}

}  // namespace sluice::redis
