#include "limit/decide_reply.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

namespace sluice::limit {

namespace {

// The integer at `index` of a decide reply (see lua/decide.lua: little-endian, 64 bits each).
std::int64_t reply_field(const redis::RedisReply& reply, std::size_t index) {
    std::uint64_t value = 0;
    std::memcpy(&value, reply.text.data() + 8 * index, 8);
    if constexpr (std::endian::native == std::endian::big) value = __builtin_bswap64(value);
    return static_cast<std::int64_t>(value);
}

}  // namespace

bool is_decide_reply(const redis::RedisReply& reply, std::size_t limits, bool cluster) {
    using redis::RedisReply;
    if (reply.type != RedisReply::Type::string || limits > reply.text.size() / 32 ||
        reply.text.size() != 8 * (1 + 4 * limits))
        return false;
    const std::int64_t most_allowed = cluster ? 2 : 1;
    for (std::size_t i = 0; i < 1 + 4 * limits; ++i) {
        const std::int64_t value = reply_field(reply, i);
        if (value < 0) return false;
        // allowed: 0 | 1 | 3 (banned) (| 2)
        if (i % 4 == 1 && value > most_allowed && value != 3) return false;
    }
    return true;
}

bool decide_elsewhere(const redis::RedisReply& reply, std::size_t index) {
    return reply_field(reply, 1 + 4 * index) == 2;
}

std::int64_t decide_time(const redis::RedisReply& reply) { return reply_field(reply, 0); }

LimitResult decide_result(const redis::RedisReply& reply, std::size_t index) {
    const std::size_t first = 1 + 4 * index;
    const std::int64_t allowed = reply_field(reply, first);
    LimitResult result;
    result.applies = true;
    result.allowed = allowed == 1 || allowed == 2;
    result.banned = allowed == 3;
    result.remaining = static_cast<std::uint64_t>(reply_field(reply, first + 1));
    // An admitted request's third field is how long a leaky bucket holds it back (0 for the
    // other algorithms); a rejected one's, when to try again. Times are held to a year (the
    // longest a limit speaks of is a calendar month): a reply's 2^62 µs overflowed in
    // nanoseconds, and made a Retry-After of 9223372036854776.
    const std::int64_t third = reply_field(reply, first + 2);
    if (result.allowed) result.wait = std::chrono::microseconds(std::min(third, max_reply_ms * 1000));
    else result.retry_after = std::chrono::milliseconds(std::min(third, max_reply_ms));
    result.reset = std::chrono::milliseconds(std::min(reply_field(reply, first + 3), max_reply_ms));
    return result;
}

}  // namespace sluice::limit
