// A string hash that clients cannot aim: SipHash-2-4 under a key drawn at random when the
// process starts. The limiters' tables are keyed by text clients choose (an API key, a
// header, a query parameter, an X-Forwarded-For address from a trusted proxy); with
// std::hash (MurmurHash2 under a fixed seed in libstdc++) a client could send keys that all
// land in one bucket and turn every look-up into a walk over them (hash flooding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice::limit {

// SipHash-2-4 of `data` under the 128-bit key (k0, k1), as its authors define it.
std::uint64_t siphash24(std::uint64_t k0, std::uint64_t k1, std::string_view data);

// For unordered containers and shard choice: SipHash-2-4 under this process's key. Not
// declared noexcept on purpose: libstdc++ then keeps each element's hash in its node (as it
// does for std::hash of strings) instead of computing it again on every bucket walk and
// rehash, which for a hash this strong costs more than it saves.
struct KeyedHash {
    std::size_t operator()(std::string_view text) const;
};

}  // namespace sluice::limit
