#include "limit/decide_script.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>

#include <lua_scripts.hpp>

#include "limit/limit_params.hpp"

namespace sluice::limit {

std::string decide_script_source(bool cluster) {
    const std::string_view inputs = cluster ? lua::cluster_keys : lua::standalone_keys;
    std::string source;
    source.reserve(64 + lua::token_bucket.size() + lua::sliding_window.size() + lua::fixed_window.size() +
                   lua::concurrency.size() + inputs.size() + lua::decide.size());
    // Redis reads the flags only from the very first line.
    if (cluster) source.append("#!lua flags=allow-cross-slot-keys\n");
    source.append(lua::token_bucket).append("\n");
    source.append(lua::sliding_window).append("\n");
    source.append(lua::fixed_window).append("\n");
    source.append(lua::concurrency).append("\n");
    source.append(inputs).append("\n");
    source.append(lua::decide);
    return source;
}

std::string release_script_source() { return std::string(lua::release); }

bool decide_args_vary(const config::LimitConfig& limit) {
    return !limit.cost_header.empty() || limit.calendar.has_value();
}

CalendarArg calendar_arg(const config::LimitConfig& limit, std::int64_t now_us) {
    const WindowBounds current = fixed_window_at(limit, now_us);
    const WindowBounds before = fixed_window_at(limit, current.start_us - 1);
    const WindowBounds after = fixed_window_at(limit, current.end_us);
    CalendarArg arg;
    arg.valid_from_us = current.start_us;
    arg.valid_until_us = current.end_us;
    arg.text = std::to_string(before.start_us) + "," + std::to_string(current.start_us) + "," +
               std::to_string(current.end_us) + "," + std::to_string(after.end_us);
    return arg;
}

void append_decide_args(const config::LimitConfig& limit, std::uint64_t cost, std::string_view window,
                        std::vector<std::string>& args, bool may_wait) {
    const char* shadow = limit.shadow ? "1" : "0";
    switch (limit.algorithm) {
    case config::Algorithm::token_bucket: {
        const auto params = token_bucket_params(limit);
        args.insert(args.end(), {"token_bucket", shadow, std::to_string(cost), std::to_string(params.interval_us),
                                 std::to_string(params.burst)});
        break;
    }
    case config::Algorithm::sliding_window: {
        const auto params = sliding_window_params(limit);
        args.insert(args.end(), {"sliding_window", shadow, std::to_string(cost), std::to_string(params.limit),
                                 std::to_string(params.window_us)});
        break;
    }
    case config::Algorithm::fixed_window:
        args.insert(args.end(), {"fixed_window", shadow, std::to_string(cost), std::to_string(limit.limit),
                                 window.empty() ? std::to_string(fixed_window_us(limit)) : std::string(window)});
        break;
    case config::Algorithm::concurrency:
        args.insert(args.end(), {"concurrency", shadow, std::to_string(cost), std::to_string(limit.limit),
                                 std::to_string(lease_us(limit))});
        break;
    case config::Algorithm::leaky_bucket: {
        const auto params = leaky_bucket_params(limit, may_wait);
        args.insert(args.end(), {"leaky_bucket", shadow, std::to_string(cost), std::to_string(params.interval_us),
                                 std::to_string(params.burst) + "," + std::to_string(params.delay_us) + "," +
                                     std::to_string(params.max_wait_us)});
        break;
    }
    }
}

void append_decide_args(const config::LimitConfig& limit, std::vector<std::string>& args) {
    append_decide_args(limit, limit.cost_header.empty() ? limit.cost : limit.default_cost, {}, args);
}


void DecideArgs::end_request() {
    // Batches hold few distinct plans (one per route and set of applying limits): a linear
    // search over them is cheaper than building a key to look them up by.
    std::size_t number = 0;
    for (std::size_t p = 0; p < plan_starts_.size() && number == 0; ++p) {
        const auto start = plan_starts_[p];
        const auto end = p + 1 < plan_starts_.size() ? plan_starts_[p + 1] : plans_.size();
        if (end - start != 1 + decide_args_per_limit * current_.size()) continue;
        bool same = true;
        for (std::size_t i = 0; i < current_.size() && same; ++i) {
            const auto& args = *current_[i];
            for (std::size_t f = 0; f < decide_args_per_limit && same; ++f)
                same = plans_[start + 1 + decide_args_per_limit * i + f] == args[f];
        }
        if (same) number = p + 1;
    }
    if (number == 0) {
        plan_starts_.push_back(plans_.size());
        plans_.push_back(std::to_string(current_.size()));
        for (const auto* args : current_) plans_.insert(plans_.end(), args->begin(), args->end());
        number = plan_starts_.size();
    }
    requests_.push_back(std::to_string(number));
    current_.clear();
    owned_.clear();
}

void DecideArgs::end_request(std::string token) {
    end_request();
    requests_.push_back(std::move(token));
}

std::vector<std::string> DecideArgs::take() {
    std::vector<std::string> argv;
    argv.reserve(1 + plans_.size() + requests_.size());
    argv.push_back(std::to_string(plan_starts_.size()));
    std::move(plans_.begin(), plans_.end(), std::back_inserter(argv));
    std::move(requests_.begin(), requests_.end(), std::back_inserter(argv));
    plans_.clear();
    plan_starts_.clear();
    requests_.clear();
    current_.clear();
    owned_.clear();
    return argv;
}

bool is_decide_reply(const redis::RedisReply& reply, std::size_t limits, bool cluster) {
    using redis::RedisReply;
    if (reply.type != RedisReply::Type::array || reply.elements.size() != 1 + 4 * limits) return false;
    const std::int64_t most_allowed = cluster ? 2 : 1;
    for (std::size_t i = 0; i < reply.elements.size(); ++i) {
        const auto& element = reply.elements[i];
        if (element.type != RedisReply::Type::integer || element.integer < 0) return false;
        if (i % 4 == 1 && element.integer > most_allowed) return false;  // allowed: 0 | 1 (| 2)
    }
    return true;
}

bool decide_elsewhere(const redis::RedisReply& reply, std::size_t index) {
    return reply.elements[1 + 4 * index].integer == 2;
}

std::int64_t decide_time(const redis::RedisReply& reply) { return reply.elements[0].integer; }

LimitResult decide_result(const redis::RedisReply& reply, std::size_t index) {
    const auto* field = &reply.elements[1 + 4 * index];
    LimitResult result;
    result.applies = true;
    result.allowed = field[0].integer != 0;
    result.remaining = static_cast<std::uint64_t>(field[1].integer);
    // An admitted request's third field is how long a leaky bucket holds it back (0 for the
    // other algorithms); a rejected one's, when to try again.
    if (result.allowed) result.wait = std::chrono::microseconds(field[2].integer);
    else result.retry_after = std::chrono::milliseconds(field[2].integer);
    result.reset = std::chrono::milliseconds(field[3].integer);
    return result;
}

}  // namespace sluice::limit
