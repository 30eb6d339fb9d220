// libFuzzer target: hiredis's reply reader building sluice's RedisReply trees, and the
// decide script's reply read from them.
// Sources: src/redis/redis_reply.cpp src/limit/decide_reply.cpp (links hiredis)
//
// The input is fed in pieces (sizes from its first byte); every reply is taken and freed.
// Checked: no crash, leak or unbounded allocation (run with -rss_limit_mb), and the same
// replies whatever the pieces. A string reply is also read as a decide reply (as many keys
// as its length holds, and one more and one fewer): accepted exactly when an independent
// reading finds the documented shape, and then read the same.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "limit/decide_reply.hpp"
#include "redis/redis_reply.hpp"

namespace {

std::string describe(const sluice::redis::RedisReply& r) {
    using T = sluice::redis::RedisReply::Type;
    switch (r.type) {
    case T::integer: return "i" + std::to_string(r.integer);
    case T::string: return "s" + r.text;
    case T::status: return "t" + r.text;
    case T::array: {
        std::string out = "[";
        for (const auto& e : r.elements) out += describe(e) + ",";
        return out + "]";
    }
    default: return "n";
    }
}

// The decide reply's integer at `i`, read byte by byte (little-endian, two's complement).
std::int64_t field(const std::string& text, std::size_t i) {
    std::uint64_t v = 0;
    for (std::size_t b = 0; b < 8; ++b) v |= std::uint64_t{static_cast<unsigned char>(text[8 * i + b])} << (8 * b);
    return static_cast<std::int64_t>(v);
}

void check_decide_reply(const sluice::redis::RedisReply& reply) {
    using T = sluice::redis::RedisReply::Type;
    const std::size_t n = reply.text.size() >= 8 ? (reply.text.size() / 8 - 1) / 4 : 0;
    for (const bool cluster : {false, true}) {
        for (const std::size_t keys : {n, n + 1, n > 0 ? n - 1 : 0}) {
            bool shaped = reply.type == T::string && reply.text.size() == 8 * (1 + 4 * keys);
            for (std::size_t i = 0; shaped && i < 1 + 4 * keys; ++i) {
                const auto v = field(reply.text, i);
                if (v < 0 || (i % 4 == 1 && !(v == 0 || v == 1 || v == 3 || (cluster && v == 2)))) shaped = false;
            }
            if (sluice::limit::is_decide_reply(reply, keys, cluster) != shaped) __builtin_trap();
            if (!shaped) continue;
            if (sluice::limit::decide_time(reply) != field(reply.text, 0)) __builtin_trap();
            for (std::size_t k = 0; k < keys; ++k) {
                const auto r = sluice::limit::decide_result(reply, k);
                const auto allowed = field(reply.text, 1 + 4 * k);
                if (r.allowed != (allowed == 1 || allowed == 2) || r.banned != (allowed == 3)) __builtin_trap();
                if (r.remaining != static_cast<std::uint64_t>(field(reply.text, 2 + 4 * k))) __builtin_trap();
                // Times are read as a century at most (decide_reply.hpp).
                constexpr std::int64_t year_ms = sluice::limit::max_reply_ms;
                const auto third = field(reply.text, 3 + 4 * k);
                if (r.allowed ? r.wait.count() != std::min(third, year_ms * 1000)
                              : r.retry_after.count() != std::min(third, year_ms))
                    __builtin_trap();
                if (r.reset.count() != std::min(field(reply.text, 4 + 4 * k), year_ms)) __builtin_trap();
                if (cluster && sluice::limit::decide_elsewhere(reply, k) != (allowed == 2)) __builtin_trap();
            }
        }
    }
}

std::vector<std::string> read_all(const std::uint8_t* data, std::size_t size, std::size_t piece) {
    std::vector<std::string> out;
    redisReader* reader = redisReaderCreate();
    sluice::redis::build_owned_replies(*reader);
    for (std::size_t at = 0; at < size; at += piece) {
        if (redisReaderFeed(reader, reinterpret_cast<const char*>(data) + at, std::min(piece, size - at)) != REDIS_OK)
            break;
        while (true) {
            void* reply = nullptr;
            if (redisReaderGetReply(reader, &reply) != REDIS_OK) {
                out.push_back("error");
                redisReaderFree(reader);
                return out;
            }
            if (reply == nullptr) break;
            auto result = sluice::redis::take_reply(reply);
            if (result.ok()) check_decide_reply(result.reply);
            out.push_back(result.ok() ? describe(result.reply) : "E" + result.error->message);
            reader->fn->freeObject(reply);
        }
    }
    redisReaderFree(reader);
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const std::size_t piece = 1 + data[0] % 13;
    const auto whole = read_all(data + 1, size - 1, size);
    const auto split = read_all(data + 1, size - 1, piece);
    if (whole != split) __builtin_trap();
    return 0;
}
