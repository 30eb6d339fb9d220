// Reading the decide script's reply (lua/decide.lua): one string of little-endian 64-bit
// integers, now_us and then four per key. What Redis sends is checked before it is read.
#pragma once

#include <cstddef>
#include <cstdint>

#include "limit/decision.hpp"
#include "redis/redis_reply.hpp"

namespace sluice::limit {

// The most a decide reply's times are read as: a century of milliseconds (in nanoseconds,
// far from overflowing). A wait or a reset that long comes only from a Redis that is not
// ours (its reply is not trusted further), or from a debt a response cost left (a token
// bucket of a long `per` charged a huge reported cost: the memory store counts it whole).
inline constexpr std::int64_t max_reply_ms = std::int64_t{100} * 366 * 24 * 3600 * 1000;

// Whether `reply` holds `limits` results (all requests of a batch together) in the
// documented shape. The two readers below expect a reply that passed it.
// `cluster`: "allowed" may also be 2 ("elsewhere", see decide_elsewhere).
bool is_decide_reply(const redis::RedisReply& reply, std::size_t limits, bool cluster = false);
// The cluster script did not decide the key at `index`: a key of its request is not served
// by that node now. Only for a reply that passed is_decide_reply with `cluster`.
bool decide_elsewhere(const redis::RedisReply& reply, std::size_t index);
// The Redis TIME the script used.
std::int64_t decide_time(const redis::RedisReply& reply);
// The result of the key at `index` (counted over the whole batch); `applies` set, `shadow` not.
LimitResult decide_result(const redis::RedisReply& reply, std::size_t index);

}  // namespace sluice::limit
