// Where a worker's Redis commands go: one server (standalone), the master Sentinel names
// (sentinel), or the master that owns a key's hash slot (cluster). The limiter asks for a
// connection per slot and never knows which of the three it talks to, except that a sharded
// topology wants keys of several slots passed as arguments (see lua/cluster_keys.lua).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "redis/redis_connection.hpp"
#include "redis/topology_parse.hpp"

namespace boost::asio {
class io_context;
}
namespace sluice::config {
struct RedisConfig;
}

namespace sluice::redis {

// One server of the topology as the admin port shows it.
struct NodeState {
    std::string address;  // host:port
    std::string role;     // "standalone", "master", "replica", "sentinel", "seed"
    bool up = false;      // connected and ready (sentinel: its last answer worked)
};

// Not thread-safe: one per worker, on the worker's io_context.
class Topology {
public:
    virtual ~Topology() = default;

    // Registers a script on every data connection, now and later. Before start().
    virtual RedisConnection::ScriptId add_script(const ScriptCode& code) = 0;
    virtual void start() = 0;
    // Closes every connection; pending commands get `shutting_down`.
    virtual void stop() = 0;
    // Every slot has a ready master connection (standalone, sentinel: the one is ready).
    virtual bool ready() const = 0;
    virtual std::vector<NodeState> nodes() const = 0;

    // Sharded: requests of different slots may live on different masters.
    virtual bool sharded() const = 0;
    // The connection for a key of `slot` (anything when not sharded); nullptr when no node
    // is known for it yet. The pointer stays valid until the topology is destroyed.
    virtual RedisConnection* route(std::uint16_t slot) = 0;
    // Cluster only: the connection to `address` ("host:port", as a MOVED or ASK reply
    // names it), created when new; nullptr when the address is not acceptable.
    virtual RedisConnection* node(std::string_view address) { (void)address; return nullptr; }
    // Cluster only: a MOVED reply said `slot` lives at `address` now.
    virtual void moved(std::uint16_t slot, std::string_view address) { (void)slot; (void)address; }
    // Commands may be answered by a new slot map soon (CLUSTERDOWN, an unexpected error):
    // learn the topology again.
    virtual void refresh(const std::string& why) { (void)why; }
    // Every connection: read replies already on the sockets now (see RedisConnection).
    virtual void poll_replies() = 0;
};

// One server over a connection the caller owns and starts (tests, tools): start and stop
// do nothing, the rest is the connection's.
std::unique_ptr<Topology> topology_of(RedisConnection& connection);

// The topology store.redis describes (mode standalone, sentinel or cluster).
std::unique_ptr<Topology> make_topology(boost::asio::io_context& io_context, const config::RedisConfig& config);

}  // namespace sluice::redis
