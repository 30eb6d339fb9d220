// store.redis.mode cluster: one connection per master, and the slot map (CLUSTER SLOTS) that
// says which master owns the slot of a key.
#pragma once

#include <memory>

#include "redis/topology.hpp"

namespace sluice::redis {

std::unique_ptr<Topology> make_cluster_topology(boost::asio::io_context& io_context, const config::RedisConfig& config);

}  // namespace sluice::redis
