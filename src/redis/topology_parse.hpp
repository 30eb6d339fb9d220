// What Redis servers and sentinels tell sluice about the topology, read strictly: a key's hash
// slot, addresses, CLUSTER SLOTS replies, +switch-master messages. Pure: no I/O, no logging.
// Whatever a server sends, a wrong topology is never installed from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "redis/redis_reply.hpp"

namespace sluice::redis {

inline constexpr std::size_t cluster_slots = 16384;

// The Redis Cluster hash slot of a key: CRC16 (XMODEM) of the key, or of the text between
// the first '{' and the next '}' when that is not empty, modulo 16384.
std::uint16_t key_slot(std::string_view key);

// An IP address or a DNS host name (no port), as a server may name another.
bool acceptable_host(const std::string& host);
// "host:port" (a name, an IPv4 address, or an IPv6 address in brackets or not, as Redis
// writes them in MOVED, ASK and CLUSTER SLOTS): false when it is not one.
bool split_address(std::string_view address, std::string& host, std::uint16_t& port);
// The inverse: IPv6 addresses in brackets.
std::string join_address(const std::string& host, std::uint16_t port);
// A port as Redis writes it: 1..65535 in decimal digits only.
bool parse_port(const std::string& text, std::uint16_t& port);

// One range of CLUSTER SLOTS: slots first..last belong to the master at `master`.
struct SlotRange {
    std::uint16_t first = 0;
    std::uint16_t last = 0;
    std::string master;                 // "host:port"
    std::vector<std::string> replicas;  // "host:port" each
};
// Reads a CLUSTER SLOTS reply; an empty host (or "?") means the node that was asked
// (`asked`, "host:port"). False, and `error` says why, when the reply is not a slot map:
// ranges out of 0..16383, a slot in two ranges, a master that is no address.
bool parse_cluster_slots(const RedisReply& reply, const std::string& asked, std::vector<SlotRange>& ranges,
                         std::string& error);

// A `+switch-master` message ("name oldip oldport newip newport"): the new address when the
// message is about `master_name` and well formed.
struct SwitchMaster {
    std::string host;
    std::uint16_t port = 0;
};
bool parse_switch_master(const std::string& message, const std::string& master_name, SwitchMaster& out);
// A failover event about a replica of `master_name` ("slave IP:PORT IP PORT @ NAME MIP MPORT",
// sentinel's "%@" of a replica): the replica's address.
bool parse_promoted_replica(const std::string& message, const std::string& master_name, SwitchMaster& out);
// A failover event about the master itself ("master NAME IP PORT ..."): whether it is ours.
bool is_about_master(const std::string& message, const std::string& master_name);

}  // namespace sluice::redis
