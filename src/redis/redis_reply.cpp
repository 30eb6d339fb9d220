#include "redis/redis_reply.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

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

// A whole reply built by build_owned_replies. hiredis itself looks at a reply only as a
// ::redisReply, and only at its type and error text (a reply no command waited for), so
// the root begins with one; the tree below it is plain RedisReply values, each element
// built in place in its array.
struct OwnedReply {
    ::redisReply head{};
    RedisReply value;
};

// Where the value of `task` goes: a new root, or its slot in the parent array. Returns what
// hiredis keeps for the task (the root's head, or the element).
void* place(const ::redisReadTask* task, RedisReply*& value) {
    if (task->parent == nullptr) {
        auto* root = new (std::nothrow) OwnedReply;
        if (root == nullptr) return nullptr;
        root->head.type = task->type;
        value = &root->value;
        return root;
    }
    void* parent = task->parent->obj;
    auto& array = task->parent->parent == nullptr ? static_cast<OwnedReply*>(parent)->value
                                                  : *static_cast<RedisReply*>(parent);
    value = &array.elements[static_cast<std::size_t>(task->idx)];
    return value;
}

// hiredis's callbacks are C: nothing may throw through them; nullptr reads as out of memory.
void* create_string(const ::redisReadTask* task, char* str, std::size_t len) {
    try {
        RedisReply* value = nullptr;
        void* obj = place(task, value);
        if (obj == nullptr) return nullptr;
        // An error nested in an array (as copy_reply does) is kept as a status.
        value->type = task->type == REDIS_REPLY_STRING ? RedisReply::Type::string : RedisReply::Type::status;
        value->text.assign(str, len);
        if (task->parent == nullptr) {
            auto* root = static_cast<OwnedReply*>(obj);
            root->head.str = root->value.text.data();
            root->head.len = root->value.text.size();
        }
        return obj;
    } catch (...) {
        return nullptr;
    }
}

void* create_array(const ::redisReadTask* task, int elements) {
    // The announced count is allocated at once, before any element arrives: a hostile or
    // broken server's "*20000000" must not cost gigabytes. nullptr reads as out of memory,
    // which fails the connection like any protocol error.
    if (elements < 0 || static_cast<std::size_t>(elements) > max_reply_elements) return nullptr;
    try {
        RedisReply* value = nullptr;
        void* obj = place(task, value);
        if (obj == nullptr) return nullptr;
        value->type = RedisReply::Type::array;
        value->elements.resize(static_cast<std::size_t>(elements));
        return obj;
    } catch (...) {
        return nullptr;
    }
}

void* create_integer(const ::redisReadTask* task, long long integer) {
    RedisReply* value = nullptr;
    void* obj = place(task, value);
    if (obj == nullptr) return nullptr;
    value->type = RedisReply::Type::integer;
    value->integer = integer;
    return obj;
}

void* create_nil(const ::redisReadTask* task) {
    RedisReply* value = nullptr;
    return place(task, value);  // a RedisReply is nil until set
}

// hiredis frees only whole replies (after the callback, or a partial one on a protocol error).
void free_reply(void* reply) { delete static_cast<OwnedReply*>(reply); }

::redisReplyObjectFunctions owned_functions{create_string, create_array, create_integer, create_nil, free_reply};

// ---- plain hiredis replies, bounded ----------------------------------------------------------
// The layout freeReplyObject expects: calloc'd redisReply, malloc'd str, calloc'd element.

::redisReply* new_hiredis_reply(int type) {
    auto* reply = static_cast<::redisReply*>(std::calloc(1, sizeof(::redisReply)));
    if (reply != nullptr) reply->type = type;
    return reply;
}

void* hang(const ::redisReadTask* task, ::redisReply* reply) {
    if (reply != nullptr && task->parent != nullptr) {
        auto* parent = static_cast<::redisReply*>(task->parent->obj);
        parent->element[task->idx] = reply;
    }
    return reply;
}

void* hiredis_string(const ::redisReadTask* task, char* str, std::size_t len) {
    auto* reply = new_hiredis_reply(task->type);
    if (reply == nullptr) return nullptr;
    reply->str = static_cast<char*>(std::malloc(len + 1));
    if (reply->str == nullptr) {
        std::free(reply);
        return nullptr;
    }
    std::memcpy(reply->str, str, len);
    reply->str[len] = '\0';
    reply->len = len;
    return hang(task, reply);
}

void* hiredis_array(const ::redisReadTask* task, int elements) {
    if (elements < 0 || static_cast<std::size_t>(elements) > max_reply_elements) return nullptr;
    auto* reply = new_hiredis_reply(REDIS_REPLY_ARRAY);
    if (reply == nullptr) return nullptr;
    if (elements > 0) {
        reply->element = static_cast<::redisReply**>(std::calloc(static_cast<std::size_t>(elements), sizeof(::redisReply*)));
        if (reply->element == nullptr) {
            std::free(reply);
            return nullptr;
        }
    }
    reply->elements = static_cast<std::size_t>(elements);
    return hang(task, reply);
}

void* hiredis_integer(const ::redisReadTask* task, long long integer) {
    auto* reply = new_hiredis_reply(REDIS_REPLY_INTEGER);
    if (reply == nullptr) return nullptr;
    reply->integer = integer;
    return hang(task, reply);
}

void* hiredis_nil(const ::redisReadTask* task) { return hang(task, new_hiredis_reply(REDIS_REPLY_NIL)); }

::redisReplyObjectFunctions bounded_hiredis_functions{hiredis_string, hiredis_array, hiredis_integer, hiredis_nil,
                                                      freeReplyObject};

}  // namespace

void build_owned_replies(::redisReader& reader) { reader.fn = &owned_functions; }
void build_bounded_hiredis_replies(::redisReader& reader) { reader.fn = &bounded_hiredis_functions; }

RedisResult take_reply(void* reply) {
    auto& root = *static_cast<OwnedReply*>(reply);
    if (root.head.type == REDIS_REPLY_ERROR)
        return {RedisError{RedisError::Code::reply_error, std::move(root.value.text)}, {}};
    return {std::nullopt, std::move(root.value)};
}

std::string connection_error(int err, const char* errstr) {
    if (err == REDIS_ERR_OOM)
        return "the server sent a reply sluice refuses (an array of more than " + std::to_string(max_reply_elements) +
               " elements), or memory ran out";
    return errstr;
}

RedisResult copy_reply(const ::redisReply& reply) {
    if (reply.type == REDIS_REPLY_ERROR)
        return {RedisError{RedisError::Code::reply_error, std::string(reply.str, reply.len)}, {}};
    return {std::nullopt, copy_value(reply)};
}

}  // namespace sluice::redis
