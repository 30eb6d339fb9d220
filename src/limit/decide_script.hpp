// The Redis side of a decision: the Lua script, its arguments, its reply. Pure.
//
// The script is lua/token_bucket.lua + lua/sliding_window.lua + lua/standalone_keys.lua (or
// cluster_keys.lua) + lua/decide.lua, joined here
// (each algorithm keeps its own file; decide.lua runs them). One call decides a batch of
// requests, in order. See lua/decide.lua for the protocol:
//   KEYS  one per limit, request after request
//   ARGV  the number of plans; each plan: its number of limits, then four per limit:
//         algorithm ("token_bucket" | "sliding_window"), shadow ("0" | "1"), then
//         interval_us, burst (token_bucket) or limit, window_us (sliding_window);
//         then one plan number per request
//   reply an array of integers: now_us, then per limit (KEYS order): allowed (0|1),
//         remaining, retry_after_ms, reset_ms
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "limit/decision.hpp"
#include "redis/redis_reply.hpp"

namespace sluice::limit {

// `cluster`: the Redis Cluster variant (lua/cluster_keys.lua: a batch's keys in ARGV).
std::string decide_script_source(bool cluster = false);

// The four arguments of a limit in a plan, appended to `args`.
void append_decide_args(const config::LimitConfig& limit, std::vector<std::string>& args);

// The ARGV of one call, built request by request: requests with the same limits share one
// plan. For each request: `limit` with the append_decide_args of each limit it is decided
// against, in the order of its keys, then `end_request`. The referenced arguments must stay
// alive until end_request.
class DecideArgs {
public:
    void limit(const std::vector<std::string>& args) { current_.push_back(&args); }
    void end_request();
    std::size_t requests() const { return requests_.size(); }
    // The whole ARGV; the builder is empty again after it.
    std::vector<std::string> take();

private:
    std::vector<std::string> plans_;          // each plan: its limit count, then 4 per limit
    std::vector<std::size_t> plan_starts_;    // index in plans_ of each plan's limit count
    std::vector<std::string> requests_;       // each request's plan number
    std::vector<const std::vector<std::string>*> current_;
};

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
