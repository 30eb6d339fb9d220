// What a Redis command gives back: a reply value, or an error. No hiredis or Asio types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

struct redisReply;  // hiredis
struct redisReader;
struct redisAsyncContext;

namespace sluice::redis {

// An owned copy of a RESP2 reply.
struct RedisReply {
    enum class Type { nil, integer, string, status, array };
    Type type = Type::nil;
    std::int64_t integer = 0;         // Type::integer
    std::string text;                 // Type::string, Type::status
    std::vector<RedisReply> elements;  // Type::array
};

struct RedisError {
    enum class Code {
        not_connected,    // no ready connection: the command was not sent
        connection_lost,  // sent, but the connection closed before the reply; never resent
        reply_error,      // Redis answered with an error reply (message holds it)
        shutting_down,    // the connection object was stopped or destroyed
    };
    Code code;
    std::string message;
};

// Exactly one of the two is meaningful: `error` when set, else `reply`.
struct RedisResult {
    std::optional<RedisError> error;
    RedisReply reply;
    bool ok() const { return !error.has_value(); }
};

// Copies a hiredis reply; an error reply becomes a RedisError with Code::reply_error.
RedisResult copy_reply(const ::redisReply& reply);

// The most elements one array reply may announce. sluice's largest reply is a batch's
// decision (src/limit/decide_script.hpp: a few integers per limit of up to 64 requests);
// this is far above it. An array announcing more fails the connection (a protocol error).
inline constexpr std::size_t max_reply_elements = 1 << 16;

// The most elements all the arrays of one reply may announce together: nested arrays of
// max_reply_elements each would otherwise turn 4 bytes of input into an element each.
inline constexpr std::size_t max_reply_elements_in_all = 1 << 18;

// The most bytes a connection's reader may hold unparsed (a reply still arriving): past it
// the connection fails (the adapter's check). A bulk string announcing gigabytes would
// otherwise be kept for as long as the server streamed it.
inline constexpr std::size_t max_unparsed_reply_bytes = 16 << 20;

// Makes `reader` build its replies as RedisReply trees directly: no hiredis reply object
// per element, no copy (a script's reply of dozens of integers cost a calloc and a free
// each). Call it before the first reply is read. The replies it hands to callbacks are
// then no ::redisReply (only their head is, for hiredis's own look at errors): read them
// with take_reply, never copy_reply; hiredis frees them after the callback as usual.
// With `context`, the asynchronous context the reader is of, a reply that no command
// waits for (and is not an error) fails the connection: hiredis 0.14 asserts on one, which
// ended the process. Arrays are bounded (max_reply_elements, max_reply_elements_in_all).
void build_owned_replies(::redisReader& reader, const ::redisAsyncContext* context = nullptr);

// Makes `reader` build ordinary hiredis ::redisReply objects (freeReplyObject frees them, and
// hiredis's own pub/sub handling can read them), with the same bounds and checks as
// build_owned_replies. For connections that SUBSCRIBE (the Sentinel watcher); read the
// replies with copy_reply. Once subscribed, a message that hiredis's pub/sub code cannot
// read (fewer than two elements, a first or second that is not a string, an unsubscribe
// without its count: hiredis asserts, or reads past the array) fails the connection too.
void build_bounded_hiredis_replies(::redisReader& reader, const ::redisAsyncContext* context = nullptr);

// hiredis's error text for a connection, said so that an operator can act on it: a reader
// that refused an oversized reply reports "Out of memory".
std::string connection_error(int err, const char* errstr);

// The reply of a reader set up by build_owned_replies, moved out of it; an error reply
// becomes a RedisError with Code::reply_error.
RedisResult take_reply(void* reply);

}  // namespace sluice::redis
