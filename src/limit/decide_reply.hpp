// Reading the decide script's reply (lua/decide.lua): one string of little-endian 64-bit
// integers, now_us and then four per key. What Redis sends is checked before it is read.
#pragma once

#include <cstddef>
#include <cstdint>

#include "limit/decision.hpp"
#include "redis/redis_reply.hpp"

namespace sluice::limit {

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
