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

// On (`on`) while a command is queued whose issuer calls redisAsyncHandleWrite itself right
// after, off again before that: hiredis's ask for the writable event made meanwhile posts no
// write attempt of its own (one handler less per command). Nothing if no adapter is attached.
void hold_write_attempts(::redisAsyncContext* context, bool on);

}  // namespace sluice::redis
