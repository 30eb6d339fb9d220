// Whether the Redis that holds sluice's keys may drop them: its maxmemory-policy and
// maxmemory, read once with a blocking connection (for --check and the start-up log).
// Every key sluice writes has a TTL, so under memory pressure an allkeys-* policy and a
// volatile-* one may both evict them, which resets those clients' limits; with
// noeviction a full Redis refuses the write instead, and on_error decides.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace sluice::redis {

struct MemorySettings {
    std::string address;  // where it was read ("127.0.0.1:6379")
    std::string policy;   // maxmemory-policy
    std::uint64_t maxmemory = 0;
};

// What an operator should hear about these settings (empty: nothing). Pure.
std::vector<std::string> memory_warnings(const MemorySettings& settings);

// Reads the settings of the Redis `store` names (standalone: its address; sentinel: the
// master the first sentinel that answers names; cluster: the first seed that answers),
// within `timeout` per connection. nullopt and `error` when none could be read (not
// reachable, CONFIG refused by an ACL or renamed).
std::optional<MemorySettings> read_memory_settings(const config::StoreConfig& store, std::chrono::milliseconds timeout,
                                                   std::string& error);

}  // namespace sluice::redis
