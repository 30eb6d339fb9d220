#include "redis/redis_reply.hpp"

#include <hiredis/hiredis.h>

namespace sluice::redis {
namespace {

RedisReply copy_value(const ::redisReply& r) {
    RedisReply out;
    switch (r.type) {
    case REDIS_REPLY_INTEGER:
        out.type = RedisReply::Type::integer;
        out.integer = r.integer;
        break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        out.type = r.type == REDIS_REPLY_STRING ? RedisReply::Type::string : RedisReply::Type::status;
        out.text.assign(r.str, r.len);
        break;
    case REDIS_REPLY_ARRAY:
        out.type = RedisReply::Type::array;
        out.elements.reserve(r.elements);
        for (std::size_t i = 0; i < r.elements; ++i) out.elements.push_back(copy_value(*r.element[i]));
        break;
    default:
        out.type = RedisReply::Type::nil;
        break;
    }
    return out;
}

}  // namespace

RedisResult copy_reply(const ::redisReply& reply) {
    if (reply.type == REDIS_REPLY_ERROR)
        return {RedisError{RedisError::Code::reply_error, std::string(reply.str, reply.len)}, {}};
    return {std::nullopt, copy_value(reply)};
}

}  // namespace sluice::redis
