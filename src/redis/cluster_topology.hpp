// store.redis.mode cluster: one connection per master, and the slot map (CLUSTER SLOTS) that
// says which master owns the slot of a key.
#pragma once

#include <memory>

#include "redis/topology.hpp"

namespace sluice::redis {

std::unique_ptr<Topology> make_cluster_topology(boost::asio::io_context& io_context, const config::RedisConfig& config);

// One range of CLUSTER SLOTS: slots first..last belong to the master at `master`.
struct SlotRange {
    std::uint16_t first = 0;
    std::uint16_t last = 0;
    std::string master;                // "host:port"
    std::vector<std::string> replicas;  // "host:port" each
};
// Reads a CLUSTER SLOTS reply; an empty host means the node that was asked (`asked`).
// False (and `error` says why) when the reply is not a slot map: a hostile or broken node
// must not install a wrong one. Pure, for tests and fuzzing.
bool parse_cluster_slots(const RedisReply& reply, const std::string& asked, std::vector<SlotRange>& ranges,
                         std::string& error);

}  // namespace sluice::redis
