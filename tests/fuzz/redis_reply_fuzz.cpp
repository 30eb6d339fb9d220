// libFuzzer target: hiredis's reply reader building sluice's RedisReply trees.
// Sources: src/redis/redis_reply.cpp (links hiredis)
//
// The input is fed in pieces (sizes from its first byte); every reply is taken and freed.
// Checked: no crash, leak or unbounded allocation (run with -rss_limit_mb), and the same
// replies whatever the pieces.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

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
