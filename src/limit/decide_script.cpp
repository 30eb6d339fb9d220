#include "limit/decide_script.hpp"

#include <charconv>
#include <cstdint>

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

std::optional<DecideFigures> read_decide_reply(const redis::RedisReply& reply, std::size_t limits) {
    if (reply.type != redis::RedisReply::Type::string) return std::nullopt;
    DecideFigures figures;
    figures.values.reserve(4 * limits);
    const char* at = reply.text.data();
    const char* const end = at + reply.text.size();
    bool first = true;
    while (at != end) {
        std::uint64_t value = 0;
        auto [next, ec] = std::from_chars(at, end, value);
        if (ec != std::errc() || (next != end && (*next != ' ' || next + 1 == end))) return std::nullopt;
        if (first) {
            if (value > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
            figures.now_us = static_cast<std::int64_t>(value);
            first = false;
        } else {
            figures.values.push_back(value);
        }
        at = next == end ? end : next + 1;
    }
    if (first || figures.values.size() != 4 * limits) return std::nullopt;
    return figures;
}

LimitResult decide_result(const DecideFigures& figures, std::size_t index) {
    const auto* field = &figures.values[4 * index];
    LimitResult result;
    result.applies = true;
    result.allowed = field[0] != 0;
    result.remaining = field[1];
    result.retry_after = std::chrono::milliseconds(static_cast<std::int64_t>(field[2]));
    result.reset = std::chrono::milliseconds(static_cast<std::int64_t>(field[3]));
    return result;
}

std::optional<DecideReply> parse_decide_reply(const redis::RedisReply& reply, std::size_t limits) {
    const auto figures = read_decide_reply(reply, limits);
    if (!figures) return std::nullopt;
    DecideReply out;
    out.now_us = figures->now_us;
    out.results.reserve(limits);
    for (std::size_t i = 0; i < limits; ++i) out.results.push_back(decide_result(*figures, i));
    return out;
}

}  // namespace sluice::limit
