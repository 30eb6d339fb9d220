// One Redis connection on one single-threaded io_context, kept healthy by itself:
// connect (TCP or unix socket), AUTH, SELECT, SCRIPT LOAD, PING when idle, reconnect with
// capped, jittered exponential backoff. Callers just issue commands; they are pipelined.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "redis/redis_reply.hpp"

namespace boost::asio {
class io_context;
}

namespace sluice::config {
struct RedisConfig;
}

namespace sluice::redis {

struct RedisConnectionOptions {
    std::string host = "127.0.0.1";  // an IP address, or a name resolved before each connect
    std::uint16_t port = 6379;
    std::string unix_path;  // when set, used instead of host:port
    std::string username;   // AUTH username password, when both are set
    std::string password;   // AUTH password, when only this is set
    int database = 0;       // SELECT when not 0
    std::chrono::milliseconds connect_timeout{1000};  // connect plus handshake
    std::chrono::milliseconds health_interval{1000};  // PING after this long without a reply; 0: never
    std::chrono::milliseconds backoff_min{50};        // first reconnect delay ...
    std::chrono::milliseconds backoff_max{2000};      // ... doubling up to this; each jittered to [d/2, d]
    // Sentinel mode: the handshake asks ROLE and refuses a server that is not a master, and a
    // READONLY reply (the master was demoted under us) closes the connection: no command
    // goes to a replica twice.
    bool require_master = false;

    static RedisConnectionOptions from_config(const config::RedisConfig& config);
};

// A Lua script, and maybe the same code as a Redis 7 function library.
struct ScriptCode {
    std::string script;    // the script (EVAL / EVALSHA)
    std::string library;   // "" or a library ("#!lua name=..."): FUNCTION LOAD, then FCALL
    std::string function;  // the function of `library` that does what `script` does
};

// Not thread-safe: every call, and every callback, happens on the io_context's thread.
//
// Callback contract: every callback passed to command/evalsha runs exactly once, with a
// reply or an error, never from inside the call that issued it. A command that was sent is
// never resent: when the connection drops first, its callback gets `connection_lost`.
// Only an explicit NOSCRIPT reply to EVALSHA is retried, once, with EVAL on the same
// connection. Callbacks still pending when the connection is stopped or destroyed run
// right then, inside stop() or the destructor, with `shutting_down`. Callbacks must not
// throw (they run inside hiredis; an exception is caught and logged).
class RedisConnection {
public:
    using Callback = std::function<void(RedisResult)>;
    using ScriptId = std::size_t;

    RedisConnection(boost::asio::io_context& io_context, RedisConnectionOptions options);
    ~RedisConnection();
    RedisConnection(const RedisConnection&) = delete;
    RedisConnection& operator=(const RedisConnection&) = delete;

    // Registers a Lua script, loaded with SCRIPT LOAD on every connect. Call before start().
    ScriptId add_script(std::string source);
    // The same for code with a library form: on every connect FUNCTION LOAD loads the library
    // (unless the server has it already: its name says which code it is) and evalsha() calls
    // its function with FCALL. A server that refuses FUNCTION LOAD (before Redis 7, or an ACL
    // user without it) gets the script, as above, and EVALSHA.
    ScriptId add_script(ScriptCode code);
    // Whether `script` is called as a function on the current connection.
    bool uses_function(ScriptId script) const;

    void start();  // connects in the background; reconnects until stop()
    void stop();   // closes the connection; pending callbacks get `shutting_down`

    // Connected, authenticated, database selected and scripts loaded.
    bool ready() const;
    // How many times the connection became ready (1 after the first connect).
    std::uint64_t ready_count() const;

    // Any command, e.g. {"GET", key}. Fails with `not_connected` unless ready().
    void command(const std::vector<std::string>& args, Callback callback);
    // Reads and dispatches replies already waiting on the socket, now, without waiting for
    // the event loop to get to them (a busy loop can take longer than a decision's
    // deadline). Callbacks run inside this call. Never call it from inside a callback.
    void poll_replies();
    // Writes the commands queued so far to the socket now, rather than on the next turn of
    // the event loop. Never call it from inside a callback.
    void flush_output();

    // EVALSHA of a registered script; on NOSCRIPT, one EVAL with the source. For code with
    // a library that the server loaded: FCALL of its function; when the server answers that
    // the function is not there (FUNCTION FLUSH, or a restart without persistence), the call
    // goes once more as EVAL of the script form, and the library is loaded again for the
    // calls after it. Neither retry can double-count: Redis ran nothing.
    // (The command is formatted once, from keys and args as they are, and kept for that retry.)
    // `write_now`: written to the socket before it returns, as flush_output() right after
    // would (the same rule: never from inside a callback), without a write attempt posted
    // to the event loop meanwhile.
    void evalsha(ScriptId script, const std::vector<std::string>& keys, const std::vector<std::string>& args,
                 Callback callback, bool write_now = false);
    // The same with the ARGV as views: formatted into the command before it returns, they
    // need to live no longer than the call.
    void evalsha_views(ScriptId script, const std::vector<std::string>& keys, const std::vector<std::string_view>& args,
                       Callback callback, bool write_now = false);

    // "host:port" or "unix:/path" of the server it connects to.
    std::string address() const;
    // Connects to another server from now on (Sentinel named a new master): the current
    // connection, if any, is closed (its pending commands get connection_lost, never
    // resent) and the new address is tried at once. Starts the connection when it was
    // never started. A no-op when the address is the current one and it is connected.
    void retarget(const std::string& host, std::uint16_t port);
    // Closes the current connection (its pending commands get connection_lost) and
    // connects again after the usual backoff.
    void reconnect(const std::string& reason);

    // What went wrong, for whoever keeps the topology (Sentinel, Cluster): called from the
    // io_context, never from inside hiredis, after the callbacks concerned have run.
    enum class Trouble {
        lost,          // a ready connection closed, or a connection attempt failed
        not_master,    // the handshake's ROLE, or a READONLY reply: the server is a replica
        error_reply,   // a command got an error reply (the text says which)
    };
    using TroubleHandler = std::function<void(Trouble, const std::string& detail)>;
    void on_trouble(TroubleHandler handler);

private:
    class Impl;
    std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::redis
