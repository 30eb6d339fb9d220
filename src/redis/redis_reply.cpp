#include "redis/redis_reply.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>

#include <strings.h>

#include <hiredis/async.h>
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

// ---- what a reader refuses, whatever it builds ------------------------------------------
// A reader's privdata is the asynchronous context it reads for (build_*_replies), or none;
// hiredis copies it into every task.

const ::redisAsyncContext* context_of(const ::redisReadTask* task) {
    return static_cast<const ::redisAsyncContext*>(task->privdata);
}

// A new reply that is not an error while no command waits for one and the connection is
// not subscribed: hiredis 0.14 asserts (and the process ends). An error reply hiredis takes
// itself (it disconnects, with the server's text: "max number of clients reached").
bool unsolicited(const ::redisReadTask* task, int type) {
    if (task->parent != nullptr || type == REDIS_REPLY_ERROR) return false;
    const auto* context = context_of(task);
    if (context == nullptr || (context->c.flags & (REDIS_SUBSCRIBED | REDIS_MONITORING))) return false;
    return context->replies.head == nullptr;
}

// A message of a subscribed connection that hiredis's pub/sub code reads (no regular
// command waits for a reply): an array of at least two, whose first two are strings, and
// an "unsubscribe" or "punsubscribe" with a third, an integer. hiredis asserts on the
// first rules and reads past the array without the third. `type` is what `task` is; `text`
// its string when it is one, `elements` its count when it is an array.
bool pushed_wrong(const ::redisReadTask* task, int type, std::string_view text = {}, int elements = 0) {
    const auto* context = context_of(task);
    if (context == nullptr || !(context->c.flags & REDIS_SUBSCRIBED) || context->replies.head != nullptr) return false;
    if (task->parent == nullptr) return type == REDIS_REPLY_ARRAY && elements < 2;
    if (task->parent->parent != nullptr) return false;  // deeper: not hiredis's to read
    if (task->idx < 2 && type != REDIS_REPLY_STRING) return true;
    const auto is_unsubscribe = [](std::string_view kind) {
        return (kind.size() == 11 && strncasecmp(kind.data(), "unsubscribe", 11) == 0) ||
               (kind.size() == 12 && strncasecmp(kind.data(), "punsubscribe", 12) == 0);
    };
    if (task->idx == 0 && is_unsubscribe(text)) return task->parent->elements < 3;
    if (task->idx == 2 && type != REDIS_REPLY_INTEGER) {
        const auto* parent = static_cast<const ::redisReply*>(task->parent->obj);
        const ::redisReply* kind = parent->element[0];
        return kind != nullptr && is_unsubscribe(std::string_view(kind->str, kind->len));
    }
    return false;
}

// A whole reply built by build_owned_replies. hiredis itself looks at a reply only as a
// ::redisReply, and only at its type and error text (a reply no command waited for), so
// the root begins with one; the tree below it is plain RedisReply values, each element
// built in place in its array.
struct OwnedReply {
    ::redisReply head{};
    RedisReply value;
    std::size_t elements_in_all = 0;  // announced by its arrays (max_reply_elements_in_all)
};

// Counts an array of `elements` against its reply's bound: false past it.
bool within_bound(std::size_t& in_all, int elements) {
    in_all += static_cast<std::size_t>(elements);
    return in_all <= max_reply_elements_in_all;
}

// The root object hiredis keeps for the reply `task` is part of.
void* root_object(const ::redisReadTask* task) {
    while (task->parent != nullptr) task = task->parent;
    return task->obj;
}

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
    if (unsolicited(task, task->type)) return nullptr;
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
    if (unsolicited(task, REDIS_REPLY_ARRAY)) return nullptr;
    if (task->parent != nullptr &&
        !within_bound(static_cast<OwnedReply*>(root_object(task))->elements_in_all, elements))
        return nullptr;
    try {
        RedisReply* value = nullptr;
        void* obj = place(task, value);
        if (obj == nullptr) return nullptr;
        if (task->parent == nullptr) static_cast<OwnedReply*>(obj)->elements_in_all = static_cast<std::size_t>(elements);
        value->type = RedisReply::Type::array;
        value->elements.resize(static_cast<std::size_t>(elements));
        return obj;
    } catch (...) {
        return nullptr;
    }
}

void* create_integer(const ::redisReadTask* task, long long integer) {
    if (unsolicited(task, REDIS_REPLY_INTEGER)) return nullptr;
    RedisReply* value = nullptr;
    void* obj = place(task, value);
    if (obj == nullptr) return nullptr;
    value->type = RedisReply::Type::integer;
    value->integer = integer;
    return obj;
}

void* create_nil(const ::redisReadTask* task) {
    if (unsolicited(task, REDIS_REPLY_NIL)) return nullptr;
    RedisReply* value = nullptr;
    return place(task, value);  // a RedisReply is nil until set
}

// hiredis frees only whole replies (after the callback, or a partial one on a protocol error).
void free_reply(void* reply) { delete static_cast<OwnedReply*>(reply); }

::redisReplyObjectFunctions owned_functions{create_string, create_array, create_integer, create_nil, free_reply};

// ---- plain hiredis replies, bounded ----------------------------------------------------------
// The layout freeReplyObject expects: calloc'd redisReply, malloc'd str, calloc'd element.

// A root is followed by the count of elements its arrays announced (freeReplyObject frees
// it whole all the same).
struct HiredisRoot {
    ::redisReply reply;
    std::size_t elements_in_all;
};

::redisReply* new_hiredis_reply(const ::redisReadTask* task, int type) {
    const std::size_t size = task->parent == nullptr ? sizeof(HiredisRoot) : sizeof(::redisReply);
    auto* reply = static_cast<::redisReply*>(std::calloc(1, size));
    if (reply != nullptr) reply->type = type;
    return reply;
}

// Whether `task`, of `type`, is refused: no command waits for it, or a subscribed
// connection's message that hiredis cannot read.
bool refused(const ::redisReadTask* task, int type, std::string_view text = {}, int elements = 0) {
    return unsolicited(task, type) || pushed_wrong(task, type, text, elements);
}

void* hang(const ::redisReadTask* task, ::redisReply* reply) {
    if (reply != nullptr && task->parent != nullptr) {
        auto* parent = static_cast<::redisReply*>(task->parent->obj);
        parent->element[task->idx] = reply;
    }
    return reply;
}

void* hiredis_string(const ::redisReadTask* task, char* str, std::size_t len) {
    if (refused(task, task->type, std::string_view(str, len))) return nullptr;
    auto* reply = new_hiredis_reply(task, task->type);
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
    if (refused(task, REDIS_REPLY_ARRAY, {}, elements)) return nullptr;
    if (task->parent != nullptr &&
        !within_bound(reinterpret_cast<HiredisRoot*>(root_object(task))->elements_in_all, elements))
        return nullptr;
    auto* reply = new_hiredis_reply(task, REDIS_REPLY_ARRAY);
    if (reply == nullptr) return nullptr;
    if (task->parent == nullptr) reinterpret_cast<HiredisRoot*>(reply)->elements_in_all = static_cast<std::size_t>(elements);
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
    if (refused(task, REDIS_REPLY_INTEGER)) return nullptr;
    auto* reply = new_hiredis_reply(task, REDIS_REPLY_INTEGER);
    if (reply == nullptr) return nullptr;
    reply->integer = integer;
    return hang(task, reply);
}

void* hiredis_nil(const ::redisReadTask* task) {
    if (refused(task, REDIS_REPLY_NIL)) return nullptr;
    return hang(task, new_hiredis_reply(task, REDIS_REPLY_NIL));
}

::redisReplyObjectFunctions bounded_hiredis_functions{hiredis_string, hiredis_array, hiredis_integer, hiredis_nil,
                                                      freeReplyObject};

}  // namespace

void build_owned_replies(::redisReader& reader, const ::redisAsyncContext* context) {
    reader.fn = &owned_functions;
    reader.privdata = const_cast<::redisAsyncContext*>(context);
}
void build_bounded_hiredis_replies(::redisReader& reader, const ::redisAsyncContext* context) {
    reader.fn = &bounded_hiredis_functions;
    reader.privdata = const_cast<::redisAsyncContext*>(context);
}

RedisResult take_reply(void* reply) {
    auto& root = *static_cast<OwnedReply*>(reply);
    if (root.head.type == REDIS_REPLY_ERROR)
        return {RedisError{RedisError::Code::reply_error, std::move(root.value.text)}, {}};
    return {std::nullopt, std::move(root.value)};
}

std::string connection_error(int err, const char* errstr) {
    if (err == REDIS_ERR_OOM)
        return "the server sent a reply sluice refuses (one no command waited for, a message hiredis cannot read, an "
               "array of more than " + std::to_string(max_reply_elements) + " elements or arrays of more than " +
               std::to_string(max_reply_elements_in_all) + " in all), or memory ran out";
    return errstr;
}

RedisResult copy_reply(const ::redisReply& reply) {
    if (reply.type == REDIS_REPLY_ERROR)
        return {RedisError{RedisError::Code::reply_error, std::string(reply.str, reply.len)}, {}};
    return {std::nullopt, copy_value(reply)};
}

}  // namespace sluice::redis
