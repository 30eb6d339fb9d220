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
    source.reserve(64 + lua::token_bucket.size() + lua::sliding_window.size() + inputs.size() + lua::decide.size());
    // Redis reads the flags only from the very first line.
    if (cluster) source.append("#!lua flags=allow-cross-slot-keys\n");
    source.append(lua::token_bucket).append("\n");
    source.append(lua::sliding_window).append("\n");
    source.append(inputs).append("\n");
    source.append(lua::decide);
    return source;
}

void append_decide_args(const config::LimitConfig& limit, std::vector<std::string>& args) {
    if (limit.algorithm == config::Algorithm::token_bucket) {
        const auto params = token_bucket_params(limit);
        args.push_back("token_bucket");
        args.push_back(limit.shadow ? "1" : "0");
        args.push_back(std::to_string(params.interval_us));
        args.push_back(std::to_string(params.burst));
    } else {
        const auto params = sliding_window_params(limit);
        args.push_back("sliding_window");
        args.push_back(limit.shadow ? "1" : "0");
        args.push_back(std::to_string(params.limit));
        args.push_back(std::to_string(params.window_us));
    }
}

void DecideArgs::end_request() {
    // Batches hold few distinct plans (one per route and set of applying limits): a linear
    // search over them is cheaper than building a key to look them up by.
    std::size_t number = 0;
    for (std::size_t p = 0; p < plan_starts_.size() && number == 0; ++p) {
        const auto start = plan_starts_[p];
        const auto end = p + 1 < plan_starts_.size() ? plan_starts_[p + 1] : plans_.size();
        if (end - start != 1 + 4 * current_.size()) continue;
        bool same = true;
        for (std::size_t i = 0; i < current_.size() && same; ++i) {
            const auto& args = *current_[i];
            for (std::size_t f = 0; f < 4 && same; ++f) same = plans_[start + 1 + 4 * i + f] == args[f];
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
    result.retry_after = std::chrono::milliseconds(field[2].integer);
    result.reset = std::chrono::milliseconds(field[3].integer);
    return result;
}

}  // namespace sluice::limit
