// Drives a hiredis async context from a boost::asio::io_context (one thread).
#pragma once

namespace boost::asio {
class io_context;
}
struct redisAsyncContext;  // hiredis

namespace sluice::redis {

// Installs the five hiredis event hooks on `context` so that its socket is serviced by
// `io_context`. Call it right after redisAsyncConnect*, before redisAsyncSetConnectCallback.
// The adapter frees itself when hiredis frees the context (its `cleanup` hook); it never
// closes the socket, which hiredis owns. Returns false if `context` already has hooks.
bool attach_asio_adapter(boost::asio::io_context& io_context, ::redisAsyncContext* context);

}  // namespace sluice::redis
