// What the start-up log and --check say about the Redis that holds the keys.
#include <catch2/catch.hpp>

#include "redis/memory_policy.hpp"

using sluice::redis::memory_warnings;
using sluice::redis::MemorySettings;

TEST_CASE("redis memory policy: evicting policies and no maxmemory are warned about", "[redis]") {
    CHECK(memory_warnings(MemorySettings{"r:6379", "noeviction", 100 << 20}).empty());
    for (const char* policy : {"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-ttl"}) {
        CAPTURE(policy);
        const auto warnings = memory_warnings(MemorySettings{"r:6379", policy, 100 << 20});
        REQUIRE(warnings.size() == 1);
        CHECK(warnings[0].find(std::string("Redis at r:6379 has maxmemory-policy ") + policy +
                               ": when it reaches maxmemory it may evict sluice's keys") == 0);
    }
    const auto none = memory_warnings(MemorySettings{"r:6379", "noeviction", 0});
    REQUIRE(none.size() == 1);
    CHECK(none[0].find("Redis at r:6379 has no maxmemory") == 0);
    CHECK(memory_warnings(MemorySettings{"r:6379", "allkeys-lru", 0}).size() == 2);
}
