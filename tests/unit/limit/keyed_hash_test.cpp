// The limiters' table hash: SipHash-2-4 as its authors define it, under a key of this
// process's own.
#include <catch2/catch.hpp>

#include <set>
#include <type_traits>
#include <string>

#include "limit/keyed_hash.hpp"
#include "limit/memory_limiter.hpp"

using namespace sluice;

TEST_CASE("siphash24 gives the reference outputs") {
    // The SipHash paper's key 00 01 .. 0f.
    const std::uint64_t k0 = 0x0706050403020100ull, k1 = 0x0f0e0d0c0b0a0908ull;
    CHECK(limit::siphash24(k0, k1, "") == 0x726fdb47dd0e0e31ull);
    std::string fifteen;
    for (int i = 0; i < 15; ++i) fifteen.push_back(static_cast<char>(i));
    CHECK(limit::siphash24(k0, k1, fifteen) == 0xa129ca6149be45e5ull);  // the paper's Appendix A
}

TEST_CASE("siphash24 depends on every byte, the length and the key") {
    const std::uint64_t k0 = 1, k1 = 2;
    std::set<std::uint64_t> seen;
    std::string text;
    for (int n = 0; n < 64; ++n) {
        seen.insert(limit::siphash24(k0, k1, text));  // lengths 0 to 63, all zero bytes
        text.push_back('\0');
    }
    CHECK(seen.size() == 64);
    const std::string key = "sluice:api:per_client:192.0.2.7";
    for (std::size_t i = 0; i < key.size(); ++i) {
        std::string changed = key;
        changed[i] ^= 1;
        CHECK(limit::siphash24(k0, k1, changed) != limit::siphash24(k0, k1, key));
    }
    CHECK(limit::siphash24(k0, k1 + 1, key) != limit::siphash24(k0, k1, key));
}

TEST_CASE("KeyedHash is stable within the process and spreads keys over shards") {
    limit::KeyedHash hash;
    CHECK(hash("sluice:api:per_client:192.0.2.7") == hash(std::string("sluice:api:per_client:192.0.2.7")));
    // 64,000 client keys over 64 shards: every shard gets its share within a wide margin.
    std::size_t counts[64] = {};
    for (int i = 0; i < 64000; ++i) ++counts[hash("sluice:api:per_client:10." + std::to_string(i)) % 64];
    for (auto c : counts) {
        CHECK(c > 800);
        CHECK(c < 1200);
    }
}

// The maps keep each element's hash (libstdc++ does for a hash that may throw): a walk over a
// bucket or a rehash does not compute SipHash again per element.
static_assert(!std::is_nothrow_invocable_v<limit::KeyedHash, const std::string&>);
