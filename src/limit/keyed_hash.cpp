#include "limit/keyed_hash.hpp"

#include <bit>
#include <cstring>
#include <random>

namespace sluice::limit {
namespace {

constexpr std::uint64_t rotl(std::uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct State {
    std::uint64_t v0, v1, v2, v3;
    void round() {
        v0 += v1;
        v1 = rotl(v1, 13);
        v1 ^= v0;
        v0 = rotl(v0, 32);
        v2 += v3;
        v3 = rotl(v3, 16);
        v3 ^= v2;
        v0 += v3;
        v3 = rotl(v3, 21);
        v3 ^= v0;
        v2 += v1;
        v1 = rotl(v1, 17);
        v1 ^= v2;
        v2 = rotl(v2, 32);
    }
    void absorb(std::uint64_t m) {
        v3 ^= m;
        round();
        round();
        v0 ^= m;
    }
};

// The first n (at most 8) bytes at p as a little-endian number.
std::uint64_t little_endian(const unsigned char* p, std::size_t n) {
    if constexpr (std::endian::native == std::endian::little) {
        std::uint64_t x = 0;
        std::memcpy(&x, p, n);  // one load for a whole word
        return x;
    } else {
        std::uint64_t x = 0;
        for (std::size_t i = 0; i < n; ++i) x |= static_cast<std::uint64_t>(p[i]) << (8 * i);
        return x;
    }
}

struct ProcessKey {
    std::uint64_t k0, k1;
    ProcessKey() {
        std::random_device random;  // the kernel's getrandom
        k0 = (static_cast<std::uint64_t>(random()) << 32) ^ random();
        k1 = (static_cast<std::uint64_t>(random()) << 32) ^ random();
    }
};

}  // namespace

std::uint64_t siphash24(std::uint64_t k0, std::uint64_t k1, std::string_view data) {
    State s{k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull, k0 ^ 0x6c7967656e657261ull,
            k1 ^ 0x7465646279746573ull};
    const auto* p = reinterpret_cast<const unsigned char*>(data.data());
    const std::size_t n = data.size();
    const std::size_t whole = n - n % 8;
    for (std::size_t i = 0; i < whole; i += 8) s.absorb(little_endian(p + i, 8));
    s.absorb((static_cast<std::uint64_t>(n & 0xff) << 56) | little_endian(p + whole, n - whole));
    s.v2 ^= 0xff;
    for (int i = 0; i < 4; ++i) s.round();
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

std::size_t KeyedHash::operator()(std::string_view text) const {
    static const ProcessKey key;
    return static_cast<std::size_t>(siphash24(key.k0, key.k1, text));
}

}  // namespace sluice::limit
