// The Redis side of a decision: the Lua code, its arguments, its reply. Pure.
//
// The code is lua/token_bucket.lua + lua/sliding_window.lua + lua/fixed_window.lua +
// lua/concurrency.lua + lua/decide.lua + lua/standalone_keys.lua (or cluster_keys.lua),
// joined here (each algorithm keeps its own file; decide.lua runs them), in two forms: a
// Redis 7 function library (FUNCTION LOAD, then FCALL: built once, kept between calls) and
// a script (EVALSHA: for a Redis, or an ACL user, without FUNCTION). One call decides a
// batch of requests, in order. See lua/decide.lua for the protocol:
//   KEYS  one per limit, request after request
//   ARGV  the number of plans; each plan as one text, its limits separated by ";", each
//         limit five fields separated by spaces: algorithm ("token_bucket" |
//         "sliding_window" | "fixed_window" | "concurrency" | "leaky_bucket"), shadow
//         ("0" | "1"), cost, then interval_us, burst (token_bucket) or limit, window_us
//         (sliding_window) or limit, window_us or calendar boundaries (fixed_window) or
//         limit, lease_us (concurrency) or interval_us, "burst,delay_us,max_wait_us"
//         (leaky_bucket);
//         then one plan number per request (and the request's owner token when its
//         plan has a concurrency limit)
//   reply an array of integers: now_us, then per limit (KEYS order): allowed (0|1),
//         remaining, retry_after_ms (allowed: wait_us, how long a leaky bucket holds the
//         request back, in microseconds), reset_ms
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "limit/decide_reply.hpp"
#include "limit/decision.hpp"
#include "redis/redis_connection.hpp"
#include "redis/redis_reply.hpp"

namespace sluice::limit {

// The decide code in both forms: the script (EVAL / EVALSHA), and the library (FUNCTION
// LOAD: "#!lua name=sluice_<hash>" and the same code) with its function "sluice_decide_<hash>"
// (FCALL). `cluster`: the Redis Cluster variant (lua/cluster_keys.lua: a batch's keys in ARGV;
// the function has the flag allow-cross-slot-keys). The names end with a hash of the code:
// instances of two sluice versions sharing one Redis each find their own.
redis::ScriptCode decide_code(bool cluster = false);
// The script form alone.
std::string decide_script_source(bool cluster = false);
// lua/release.lua: a request's concurrency slots given back or renewed, by owner token.
// `cluster`: with the flag allow-cross-slot-keys (a shebang line, Redis 7), for a release call
// whose keys, of several hash slots of one master, travel in ARGV.
std::string release_script_source(bool cluster = false);

inline constexpr std::size_t decide_args_per_limit = 5;

// Whether a limit's arguments change with the request (a cost header) or with time (a
// calendar window); the others are worked out once per configuration (KeyPlan).
bool decide_args_vary(const config::LimitConfig& limit);

// A calendar window's argument: the boundaries of the window holding `now_us` on the proxy's
// clock and of its two neighbours, "b0,b1,b2,b3" in microseconds. Redis picks the one its
// TIME falls in, so clocks apart by less than a window still agree. Valid (the same text)
// while the proxy's clock is in [valid_from_us, valid_until_us).
struct CalendarArg {
    std::string text;
    std::int64_t valid_from_us = 0;
    std::int64_t valid_until_us = 0;
};
CalendarArg calendar_arg(const config::LimitConfig& limit, std::int64_t now_us);

// The five arguments of a limit in a plan, appended to `args`: for a request of `cost` and,
// for a calendar fixed window, `window` (a CalendarArg's text).
// `may_wait` false: a leaky bucket limits a request it would hold back (see leaky_bucket_params).
void append_decide_args(const config::LimitConfig& limit, std::uint64_t cost, std::string_view window,
                        std::vector<std::string>& args, bool may_wait = true);
// The same for a limit whose arguments do not vary: its fixed (or default) cost.
void append_decide_args(const config::LimitConfig& limit, std::vector<std::string>& args);

// A call's ARGV in parts: the batches of several workers, each built by its own DecideArgs,
// go to Redis as one call (decide_argv).
struct DecideParts {
    std::vector<std::string> plans;      // each plan's text
    std::vector<std::uint32_t> plan_of;  // each request's plan, from 0
    std::vector<std::string> tokens;     // each request's owner token; "" where it has none
    std::size_t requests() const { return plan_of.size(); }
};

// The ARGV of one call deciding the requests of `parts`, one part after the other, in order:
// a plan with the same text in several parts is sent once. Their texts are moved into it.
// A call of one plan without owner tokens leaves out the requests' plan numbers, as
// DecideArgs does.
std::vector<std::string> decide_argv(const std::vector<DecideParts*>& parts);

// The ARGV of one call, built request by request: requests with the same limits share one
// plan. For each request: `limit` with the append_decide_args of each limit it is decided
// against, in the order of its keys, then `end_request`. The referenced arguments must stay
// alive until end_request. A batch of one plan without owner tokens (mostly: one route's
// requests) goes without the requests' plan numbers (lua/decide.lua).
//
// Plans are kept from one batch to the next (a worker's batches mostly hold the same few
// routes): a request whose limits came with ids (KeyPlan) finds its plan, text made, by them.
// Those made of arguments without ids (a cost per request, a calendar window) last one batch.
class DecideArgs {
public:
    void limit(const std::vector<std::string>& args) { current_.push_back(&args); }
    // The same with arguments known by `id`, a number no other arguments are known by (a
    // route's key plan: KeyPlan::Limit::id): a request whose limits have the same ids as an
    // earlier request's has its plan without comparing the arguments' texts.
    void limit(const std::vector<std::string>& args, std::uint64_t id) {
        current_.push_back(&args);
        current_ids_.push_back(id);
    }
    // The same with arguments made for this request alone.
    void limit(std::vector<std::string>&& args) {
        current_.push_back(owned_.emplace_back(std::make_unique<std::vector<std::string>>(std::move(args))).get());
    }
    void end_request();
    // The same for a request with a concurrency limit: `token` names its slots.
    void end_request(std::string token);
    std::size_t requests() const { return plan_of_.size(); }
    // The whole ARGV as views into this builder: valid until it changes. clear() when sent.
    const std::vector<std::string_view>& argv();
    // The whole ARGV, owned; the builder is empty again after it.
    std::vector<std::string> take();
    // The same in parts (to be merged with other batches by decide_argv).
    DecideParts take_parts();
    // Empty again (for the next batch; the plans known by ids are kept).
    void clear();

private:
    struct Plan {
        std::string text;               // see lua/decide.lua
        std::vector<std::string> args;  // 5 arguments per limit
        std::vector<std::uint64_t> ids; // where all its arguments came with one; else empty
    };
    std::vector<Plan> plans_;             // known plans, this batch's and kept ones
    std::vector<std::uint32_t> number_;   // per plan: its number in this batch, from 1 (0: not in it)
    std::vector<std::uint32_t> sent_;     // this batch's plans in number order (indices into plans_)
    std::vector<std::uint64_t> current_ids_;  // the current request's, of the lists that came with one
    std::vector<std::uint32_t> plan_of_;      // each request's plan number, from 0
    std::vector<std::string> tokens_;         // each request's owner token, or ""
    std::size_t tokened_ = 0;                 // requests with one
    std::vector<const std::vector<std::string>*> current_;
    // The current request's own arguments (where current_ points; allocated only when used).
    std::vector<std::unique_ptr<std::vector<std::string>>> owned_;
    std::vector<std::string> numbers_;        // "0", "1", ...: what argv's numbers point to
    std::vector<std::string_view> argv_;
    std::string_view number_text(std::size_t n);
};

}  // namespace sluice::limit
