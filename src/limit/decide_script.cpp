#include "limit/decide_script.hpp"

#include <lua_scripts.hpp>

#include "limit/limit_params.hpp"

namespace sluice::limit {

std::string decide_script_source() {
    std::string source;
    source.reserve(lua::token_bucket.size() + lua::sliding_window.size() + lua::decide.size() + 2);
    source.append(lua::token_bucket).append("\n");
    source.append(lua::sliding_window).append("\n");
    source.append(lua::decide);
    return source;
}

void append_decide_count(std::size_t limits, std::vector<std::string>& args) {
    args.push_back(std::to_string(limits));
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

std::optional<std::int64_t> check_decide_reply(const redis::RedisReply& reply, std::size_t limits) {
    using Type = redis::RedisReply::Type;
    if (reply.type != Type::array || reply.elements.size() != 1 + 4 * limits) return std::nullopt;
    for (const auto& element : reply.elements)
        if (element.type != Type::integer || element.integer < 0) return std::nullopt;
    return reply.elements[0].integer;
}

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

std::optional<DecideReply> parse_decide_reply(const redis::RedisReply& reply, std::size_t limits) {
    const auto now_us = check_decide_reply(reply, limits);
    if (!now_us) return std::nullopt;
    DecideReply out;
    out.now_us = *now_us;
    out.results.reserve(limits);
    for (std::size_t i = 0; i < limits; ++i) out.results.push_back(decide_result(reply, i));
    return out;
}

}  // namespace sluice::limit
