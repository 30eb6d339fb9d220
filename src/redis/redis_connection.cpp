#include "redis/redis_connection.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <exception>
#include <iterator>
#include <optional>
#include <random>
#include <string_view>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <hiredis/async.h>
#include <spdlog/spdlog.h>

#include "config/config.hpp"
#include "redis/redis_adapter.hpp"

namespace sluice::redis {

namespace asio = boost::asio;
using SteadyClock = std::chrono::steady_clock;

RedisConnectionOptions RedisConnectionOptions::from_config(const config::RedisConfig& config) {
    RedisConnectionOptions options;
    if (config.tcp) {
        options.host = config.tcp->host;
        options.port = config.tcp->port;
    } else {
        options.unix_path = config.unix_path;
    }
    options.username = config.username;
    options.password = config.password;
    options.database = config.database;
    return options;
}

namespace {

// A caller's command in flight; hiredis carries it as privdata.
struct Request {
    RedisConnection::Callback callback;
    // EVALSHA or FCALL only, kept to retry as EVAL: the whole command in RESP, and where its
    // arguments after the script's name begin (the number of keys, the keys, the arguments).
    std::string command;
    std::size_t tail = 0;
    std::size_t argc = 0;  // the arguments after the script's name
    std::optional<RedisConnection::ScriptId> script;  // set while a NOSCRIPT retry is allowed
};

// One command of the connect handshake, or a health-check PING.
struct InternalCommand {
    std::uint64_t generation;
    std::string what;
    std::optional<RedisConnection::ScriptId> script;  // SCRIPT LOAD of this script
    bool last = false;                                 // its reply completes the handshake
    bool role = false;                                 // ROLE: must say master
    std::optional<RedisConnection::ScriptId> library;  // FUNCTION LOAD of this script's library
};

void deliver(const RedisConnection::Callback& callback, RedisResult result) {
    try {
        callback(std::move(result));
    } catch (const std::exception& e) {  // must not unwind through hiredis
        spdlog::error("redis: a reply callback threw: {}", e.what());
    } catch (...) {
        spdlog::error("redis: a reply callback threw");
    }
}

RedisResult failure(RedisError::Code code, std::string message) {
    return {RedisError{code, std::move(message)}, {}};
}

bool is_noscript(const RedisResult& result) {
    return result.error && result.error->code == RedisError::Code::reply_error &&
           result.error->message.starts_with("NOSCRIPT");
}

bool is_no_function(const RedisResult& result) {
    return result.error && result.error->code == RedisError::Code::reply_error &&
           result.error->message == "ERR Function not found";
}

// RESP's "<prefix><n>\r\n".
void append_resp_number(std::string& out, char prefix, std::size_t n) {
    char digits[24];
    digits[0] = prefix;
    auto [end, ec] = std::to_chars(digits + 1, digits + sizeof digits - 2, n);
    *end++ = '\r';
    *end++ = '\n';
    out.append(digits, end);
}

void append_resp_arg(std::string& out, std::string_view arg) {
    append_resp_number(out, '$', arg.size());
    out.append(arg).append("\r\n", 2);
}

// Appends a command in RESP (what redisAsyncCommandArgv would build, without its
// printf-style formatting of every length).
void format_command(const std::vector<std::string>& args, std::string& out) {
    append_resp_number(out, '*', args.size());
    for (const auto& arg : args) append_resp_arg(out, arg);
}

// The head of a script call of `argc` arguments after the script's name: "EVALSHA sha",
// "FCALL name" or "EVAL script".
void append_script_head(std::string& out, std::string_view verb, std::string_view script, std::size_t argc) {
    append_resp_number(out, '*', argc + 2);
    append_resp_arg(out, verb);
    append_resp_arg(out, script);
}

int issue(::redisAsyncContext* context, redisCallbackFn* fn, void* privdata,
          const std::vector<std::string>& args) {
    thread_local std::string command;  // hiredis copies it; the buffer is reused
    command.clear();
    format_command(args, command);
    return redisAsyncFormattedCommand(context, fn, privdata, command.data(), command.size());
}

}  // namespace

class RedisConnection::Impl : public std::enable_shared_from_this<Impl> {
public:
    Impl(asio::io_context& io_context, RedisConnectionOptions options)
        : io_context_(io_context),
          options_(std::move(options)),
          resolver_(io_context),
          connect_timer_(io_context),
          health_timer_(io_context),
          reconnect_timer_(io_context),
          random_(std::random_device{}()) {}

    ~Impl() { stop(); }

    ScriptId add_script(ScriptCode code) {
        scripts_.push_back(Script{std::move(code), {}, false});
        return scripts_.size() - 1;
    }

    bool uses_function(ScriptId script) const { return scripts_.at(script).use_function; }

    void start() {
        if (!stopped_) return;
        stopped_ = false;
        connect();
    }

    void stop() {
        stopped_ = true;
        reconnect_pending_ = false;
        resolver_.cancel();
        connect_timer_.cancel();
        health_timer_.cancel();
        reconnect_timer_.cancel();
        ready_ = false;
        if (auto* context = std::exchange(context_, nullptr)) {
            context->data = nullptr;  // pending callbacks now report shutting_down
            redisAsyncFree(context);
        }
    }

    bool ready() const { return ready_; }
    std::uint64_t ready_count() const { return ready_count_; }

    void poll_replies() {
        // hiredis reads what the (non-blocking) socket has, nothing when empty, and runs
        // the callbacks of complete replies; a closed connection goes down the usual path.
        if (ready_ && context_) redisAsyncHandleRead(context_);
    }

    void flush_output() {
        // A write that would block leaves the rest queued for the writable event.
        if (ready_ && context_) redisAsyncHandleWrite(context_);
    }

    void command(const std::vector<std::string>& args, Callback callback) {
        if (!ready_) return fail_later(std::move(callback), RedisError::Code::not_connected);
        auto request = std::make_unique<Request>(Request{std::move(callback), {}, 0, 0, std::nullopt});
        send(std::move(request), args);
    }

    template <class Args>
    void evalsha(ScriptId script, const std::vector<std::string>& keys, const Args& args, Callback callback,
                 bool write_now) {
        if (!ready_) return fail_later(std::move(callback), RedisError::Code::not_connected);
        auto request = std::make_unique<Request>(Request{std::move(callback), {}, 0, 0, script});
        const auto& code = scripts_.at(script);
        const std::string_view verb = code.use_function ? "FCALL" : "EVALSHA";
        const std::string_view name = code.use_function ? std::string_view(code.code.function) : code.sha;
        // Formatted once, straight from the caller's strings, into the command kept for a retry:
        // the head, then each argument written where its room is (a string sized once).
        auto& out = request->command;
        // Its room at once: "$<size>\r\n<arg>\r\n" is at most 20 digits of size and 5 more
        // bytes; the head ("*<n>", the verb, the name, the number of keys) 128 and its names.
        std::size_t most = 128 + verb.size() + name.size();
        for (const auto& key : keys) most += key.size() + 25;
        for (const auto& arg : args) most += arg.size() + 25;
        out.reserve(most);
        request->argc = 1 + keys.size() + args.size();
        append_script_head(out, verb, name, request->argc);
        request->tail = out.size();
        char digits[24];
        auto [end, ec] = std::to_chars(digits, digits + sizeof digits, keys.size());
        append_resp_arg(out, std::string_view(digits, static_cast<std::size_t>(end - digits)));
        const std::size_t start = out.size();
        out.resize(most);
        char* p = out.data() + start;
        auto put = [&p](std::string_view arg) {
            *p++ = '$';
            p = std::to_chars(p, p + 20, arg.size()).ptr;
            *p++ = '\r';
            *p++ = '\n';
            std::memcpy(p, arg.data(), arg.size());
            p += arg.size();
            *p++ = '\r';
            *p++ = '\n';
        };
        for (const auto& key : keys) put(key);
        for (const auto& arg : args) put(arg);
        out.resize(static_cast<std::size_t>(p - out.data()));
        if (write_now) hold_write_attempts(context_, true);
        const int queued = redisAsyncFormattedCommand(context_, &on_request_reply, request.get(), out.data(), out.size());
        if (write_now) hold_write_attempts(context_, false);
        if (queued == REDIS_OK) {
            request.release();  // on_request_reply owns it now
            if (write_now) flush_output();
            return;
        }
        fail_later(std::move(request->callback), RedisError::Code::connection_lost);
    }

private:
    struct Script {
        ScriptCode code;
        std::string sha;            // from SCRIPT LOAD; the same on every server
        bool use_function = false;  // this connection's server loaded the library
    };

    // ---- issuing ------------------------------------------------------------------------

    void send(std::unique_ptr<Request> request, const std::vector<std::string>& args) {
        if (issue(context_, &on_request_reply, request.get(), args) == REDIS_OK) {
            request.release();  // on_request_reply owns it now
            return;
        }
        fail_later(std::move(request->callback), RedisError::Code::connection_lost);
    }

    // Errors found before anything was sent are delivered from the io_context, never
    // from inside the call that issued the command.
    void fail_later(Callback callback, RedisError::Code code) {
        const char* message = code == RedisError::Code::not_connected ? "not connected to redis"
                                                                       : "command not queued";
        asio::post(io_context_, [callback = std::move(callback), code, message] {
            deliver(callback, failure(code, message));
        });
    }

    static void on_request_reply(::redisAsyncContext* context, void* raw_reply, void* privdata) {
        std::unique_ptr<Request> request(static_cast<Request*>(privdata));
        auto* self = static_cast<Impl*>(context->data);  // nullptr once stopped
        if (raw_reply == nullptr) {
            if (self == nullptr)
                return deliver(request->callback,
                               failure(RedisError::Code::shutting_down, "redis connection stopped"));
            return deliver(request->callback,
                           failure(RedisError::Code::connection_lost,
                                   context->err ? connection_error(context->err, context->errstr)
                                               : std::string("redis connection closed")));
        }
        RedisResult result = take_reply(raw_reply);
        if (self != nullptr) {
            self->last_reply_ = SteadyClock::now();
            if (request->script && is_noscript(result))
                return self->retry_with_eval(context, std::move(request));
            if (request->script && is_no_function(result))
                return self->retry_as_eval(context, std::move(request));
        }
        std::string error = result.ok() ? std::string() : result.error->message;
        deliver(request->callback, std::move(result));
        if (self == nullptr || error.empty()) return;
        if (self->options_.require_master && error.starts_with("READONLY")) {
            self->report(Trouble::not_master, error);
            return self->drop("the server answers READONLY: it is a replica now");
        }
        self->report(Trouble::error_reply, error);
    }

    // Runs inside the EVALSHA reply callback: the script was flushed (or the server
    // restarted between SCRIPT LOAD and now). EVAL also caches it again.
    void retry_with_eval(::redisAsyncContext* context, std::unique_ptr<Request> request) {
        const ScriptId script = *std::exchange(request->script, std::nullopt);
        spdlog::debug("redis: NOSCRIPT for script {}, retrying once with EVAL", script);
        if (reissue_as_eval(context, *request, scripts_[script].code.script) == REDIS_OK) {
            request.release();
            return;
        }
        deliver(request->callback,
                failure(RedisError::Code::connection_lost, "EVAL retry could not be queued"));
    }

    // Runs inside the FCALL reply callback: the library is gone (FUNCTION FLUSH, or the
    // server restarted without it). The call goes again as EVAL of the script form, which
    // carries its code and so cannot miss it (a FUNCTION LOAD followed by the FCALL could:
    // another client may flush in between); a FUNCTION LOAD, sent first, brings the library
    // back for the calls after it.
    void retry_as_eval(::redisAsyncContext* context, std::unique_ptr<Request> request) {
        const ScriptId script = *std::exchange(request->script, std::nullopt);
        spdlog::debug("redis: function {} not found, loading its library again and retrying once with EVAL",
                      scripts_[script].code.function);
        const std::vector<std::string> load{"FUNCTION", "LOAD", scripts_[script].code.library};
        // (FCALL function numkeys ... and EVAL script numkeys ... alike.) The load's reply
        // says nothing the call needs: "already exists" when another connection was first.
        if (issue(context, &on_ignored_reply, nullptr, load) == REDIS_OK &&
            reissue_as_eval(context, *request, scripts_[script].code.script) == REDIS_OK) {
            request.release();
            return;
        }
        deliver(request->callback,
                failure(RedisError::Code::connection_lost, "retry after a missing function could not be queued"));
    }

    static void on_ignored_reply(::redisAsyncContext*, void*, void*) {}

    // The kept EVALSHA/FCALL `request` again, as EVAL of `source` with the same arguments.
    static int reissue_as_eval(::redisAsyncContext* context, Request& request, std::string_view source) {
        const std::string_view tail = std::string_view(request.command).substr(request.tail);
        std::string command;
        command.reserve(48 + source.size() + tail.size());
        append_script_head(command, "EVAL", source, request.argc);
        command.append(tail);
        request.command = std::move(command);  // (no retry after this one: `tail` is not used again)
        return redisAsyncFormattedCommand(context, &on_request_reply, &request, request.command.data(),
                                          request.command.size());
    }

    // ---- connecting ---------------------------------------------------------------------

    std::string endpoint() const {
        if (!options_.unix_path.empty()) return "unix:" + options_.unix_path;
        return options_.host + ":" + std::to_string(options_.port);
    }

    void connect() {
        ++generation_;
        reconnect_pending_ = false;
        arm_connect_timer();
        if (!options_.unix_path.empty()) return open(redisAsyncConnectUnix(options_.unix_path.c_str()));
        boost::system::error_code ec;
        auto address = asio::ip::make_address(options_.host, ec);
        if (!ec) return open(redisAsyncConnect(address.to_string().c_str(), options_.port));
        // hiredis would resolve with a blocking getaddrinfo: resolve here instead.
        resolver_.async_resolve(
            options_.host, std::to_string(options_.port),
            [weak = weak_from_this(), generation = generation_](
                const boost::system::error_code& ec, const asio::ip::tcp::resolver::results_type& results) {
                auto self = weak.lock();
                if (!self || self->stopped_ || generation != self->generation_ || self->reconnect_pending_)
                    return;
                if (ec || results.empty()) {
                    self->connect_failed("cannot resolve " + self->options_.host + ": " +
                                         (ec ? ec.message() : "no address"));
                    return;
                }
                const auto address = results.begin()->endpoint().address().to_string();
                self->open(redisAsyncConnect(address.c_str(), self->options_.port));
            });
    }

    void open(::redisAsyncContext* context) {
        if (context == nullptr) return connect_failed("out of memory");
        if (context->err) {
            std::string reason = context->errstr;
            redisAsyncFree(context);
            return connect_failed(reason);
        }
        context->data = this;
        build_owned_replies(*context->c.reader, context);  // replies are read with take_reply
        if (!attach_asio_adapter(io_context_, context)) {
            redisAsyncFree(context);
            return connect_failed("cannot watch the socket");
        }
        redisAsyncSetDisconnectCallback(context, &on_disconnect);
        redisAsyncSetConnectCallback(context, &on_connect);
        context_ = context;
    }

    static void on_connect(const ::redisAsyncContext* const_context, int status) {
        auto* context = const_cast<::redisAsyncContext*>(const_context);
        auto* self = static_cast<Impl*>(context->data);
        if (self == nullptr || self->context_ != context) return;
        if (status != REDIS_OK) {
            self->context_ = nullptr;  // hiredis frees it when this returns
            return self->connect_failed(context->errstr);
        }
        self->handshake(context);
    }

    // AUTH, SELECT, SCRIPT LOAD..., PING: pipelined; the PING reply makes the connection
    // ready. The PING also catches a server that wants a password we were not given.
    void handshake(::redisAsyncContext* context) {
        std::vector<std::pair<InternalCommand, std::vector<std::string>>> steps;
        if (!options_.password.empty()) {
            std::vector<std::string> auth{"AUTH"};
            if (!options_.username.empty()) auth.push_back(options_.username);
            auth.push_back(options_.password);
            steps.push_back({InternalCommand{generation_, "AUTH", {}}, std::move(auth)});
        }
        if (options_.require_master) steps.push_back({InternalCommand{generation_, "ROLE", {}, false, true}, {"ROLE"}});
        if (options_.database != 0)
            steps.push_back({InternalCommand{generation_, "SELECT", {}},
                             {"SELECT", std::to_string(options_.database)}});
        for (ScriptId id = 0; id < scripts_.size(); ++id) {
            auto& script = scripts_[id];
            script.use_function = false;
            if (!script.code.library.empty())
                steps.push_back({InternalCommand{generation_, "FUNCTION LOAD", {}, false, false, id},
                                 {"FUNCTION", "LOAD", script.code.library}});
            steps.push_back({InternalCommand{generation_, "SCRIPT LOAD", id},
                             {"SCRIPT", "LOAD", script.code.script}});
        }
        steps.push_back({InternalCommand{generation_, "PING", {}, true}, {"PING"}});

        for (auto& [step, args] : steps) {
            auto owned = std::make_unique<InternalCommand>(std::move(step));
            if (issue(context, &on_handshake_reply, owned.get(), args) != REDIS_OK) {
                // Not from inside hiredis's connect callback: free it from the io_context.
                asio::post(io_context_, [weak = weak_from_this(), generation = generation_] {
                    auto self = weak.lock();
                    if (self && generation == self->generation_) self->drop("handshake not queued");
                });
                return;
            }
            owned.release();
        }
    }

    static void on_handshake_reply(::redisAsyncContext* context, void* raw_reply, void* privdata) {
        std::unique_ptr<InternalCommand> step(static_cast<InternalCommand*>(privdata));
        auto* self = static_cast<Impl*>(context->data);
        if (self == nullptr || self->context_ != context || step->generation != self->generation_) return;
        if (raw_reply == nullptr) return;  // connection lost: on_disconnect handles it
        RedisResult result = take_reply(raw_reply);
        if (step->library) {
            // Loaded now, or already there (the name is the code's): FCALL. Refused (no
            // FUNCTION before Redis 7, an ACL user without it): EVALSHA, as ever.
            auto& script = self->scripts_[*step->library];
            script.use_function = result.ok() || result.error->message.find("already exists") != std::string::npos;
            if (!script.use_function && !self->function_refusal_logged_) {
                self->function_refusal_logged_ = true;
                spdlog::info("redis: {} refuses FUNCTION LOAD ({}); deciding with EVALSHA instead of FCALL",
                             self->endpoint(), result.error->message);
            }
            return;
        }
        if (!result.ok()) {
            // A script whose library loaded is called with FCALL: its script form is spare.
            if (step->script && self->scripts_[*step->script].use_function) return;
            return self->drop(step->what + " failed: " + result.error->message);
        }
        if (step->role) {
            const auto& reply = result.reply;
            const bool master = reply.type == RedisReply::Type::array && !reply.elements.empty() &&
                                reply.elements[0].text == "master";
            if (!master) {
                const std::string role = reply.type == RedisReply::Type::array && !reply.elements.empty()
                                             ? reply.elements[0].text
                                             : std::string("unknown");
                self->report(Trouble::not_master, role);
                return self->drop("it is not a master (ROLE says " + role + ")");
            }
        }
        if (step->script) {
            // 40 hex digits, or the server is not what it seems: every call would carry what
            // it sent (16 MB, in an audit).
            const auto& sha = result.reply.text;
            const bool hex = sha.size() == 40 && std::all_of(sha.begin(), sha.end(), [](char c) {
                return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
            });
            if (result.reply.type != RedisReply::Type::string || !hex)
                return self->drop("SCRIPT LOAD answered something other than a SHA1 digest");
            self->scripts_[*step->script].sha = sha;
        }
        if (step->last) self->became_ready();
    }

    void became_ready() {
        ready_ = true;
        ++ready_count_;
        attempt_ = 0;
        failure_logged_ = false;
        connect_timer_.cancel();
        last_reply_ = SteadyClock::now();
        ping_outstanding_ = false;
        arm_health_timer();
        spdlog::info("redis: connected to {}", endpoint());
    }

    // ---- losing the connection ----------------------------------------------------------

    static void on_disconnect(const ::redisAsyncContext* const_context, int status) {
        auto* context = const_cast<::redisAsyncContext*>(const_context);
        auto* self = static_cast<Impl*>(context->data);
        if (self == nullptr || self->context_ != context) return;  // we closed it ourselves
        self->context_ = nullptr;
        self->closed(context->err ? connection_error(context->err, context->errstr) : std::string("closed"));
    }

    // Closes the current connection on purpose (failed handshake, timeout, dead health
    // check). Pending callbacks get connection_lost; nothing is resent.
    void drop(const std::string& reason) {
        auto* context = std::exchange(context_, nullptr);
        if (context == nullptr) return;
        redisAsyncFree(context);  // inside a hiredis callback this happens when it returns
        closed(reason);
    }

    void connect_failed(const std::string& reason) { closed(reason); }

    void closed(const std::string& reason) {
        const bool was_ready = std::exchange(ready_, false);
        report(Trouble::lost, reason);
        ping_outstanding_ = false;
        connect_timer_.cancel();
        health_timer_.cancel();
        if (was_ready) {
            spdlog::warn("redis: connection to {} lost: {}", endpoint(), reason);
        } else if (!failure_logged_) {
            spdlog::warn("redis: cannot connect to {}: {}", endpoint(), reason);
            failure_logged_ = true;
        } else {
            spdlog::debug("redis: cannot connect to {}: {}", endpoint(), reason);
        }
        schedule_reconnect();
    }

    void schedule_reconnect() {
        if (stopped_ || reconnect_pending_) return;
        reconnect_pending_ = true;
        reconnect_timer_.expires_after(backoff_delay());
        reconnect_timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
            auto self = weak.lock();
            if (ec || !self || self->stopped_ || !self->reconnect_pending_) return;
            self->connect();
        });
    }

    // min * 2^attempt capped at max, then uniformly in [d/2, d].
    std::chrono::milliseconds backoff_delay() {
        const auto max = std::max(options_.backoff_max.count(), std::int64_t{1});
        auto delay = std::max(options_.backoff_min.count(), std::int64_t{1});
        for (unsigned i = 0; i < attempt_ && delay < max; ++i) delay *= 2;
        delay = std::min(delay, max);
        ++attempt_;
        std::uniform_int_distribution<std::int64_t> jitter(delay / 2, delay);
        return std::chrono::milliseconds(jitter(random_));
    }

    // ---- timers -------------------------------------------------------------------------

    void arm_connect_timer() {
        connect_timer_.expires_after(options_.connect_timeout);
        connect_timer_.async_wait(
            [weak = weak_from_this(), generation = generation_](const boost::system::error_code& ec) {
                auto self = weak.lock();
                if (ec || !self || self->stopped_ || generation != self->generation_ || self->ready_ ||
                    self->reconnect_pending_)
                    return;
                if (self->context_) return self->drop("connect timed out");
                self->resolver_.cancel();
                self->connect_failed("name resolution timed out");
            });
    }

    void arm_health_timer() {
        if (options_.health_interval.count() <= 0) return;
        health_timer_.expires_after(options_.health_interval);
        health_timer_.async_wait(
            [weak = weak_from_this(), generation = generation_](const boost::system::error_code& ec) {
                auto self = weak.lock();
                if (ec || !self || !self->ready_ || generation != self->generation_) return;
                self->health_check();
            });
    }

    void health_check() {
        if (ping_outstanding_) return drop("no reply to the health-check PING");
        if (SteadyClock::now() - last_reply_ >= options_.health_interval) {
            auto ping = std::make_unique<InternalCommand>(InternalCommand{generation_, "PING", {}});
            if (issue(context_, &on_ping_reply, ping.get(), {"PING"}) != REDIS_OK)
                return drop("health-check PING not queued");
            ping.release();
            ping_outstanding_ = true;
        }
        arm_health_timer();
    }

    static void on_ping_reply(::redisAsyncContext* context, void* raw_reply, void* privdata) {
        std::unique_ptr<InternalCommand> ping(static_cast<InternalCommand*>(privdata));
        auto* self = static_cast<Impl*>(context->data);
        if (self == nullptr || self->context_ != context || ping->generation != self->generation_) return;
        if (raw_reply == nullptr) return;
        self->ping_outstanding_ = false;
        self->last_reply_ = SteadyClock::now();
        RedisResult result = take_reply(raw_reply);
        if (!result.ok()) return self->drop("health-check PING failed: " + result.error->message);
        // Anything but PONG is a reply out of step (another command's, the rest of one cut in
        // two): the replies after it would answer the wrong commands.
        if (result.reply.type != RedisReply::Type::status || result.reply.text != "PONG")
            self->drop("the health-check PING was answered with something other than PONG: replies are out of step");
    }

public:
    std::string address() const { return endpoint(); }

    void retarget(const std::string& host, std::uint16_t port) {
        const bool same = options_.unix_path.empty() && options_.host == host && options_.port == port;
        if (same && !stopped_ && (ready_ || context_ != nullptr)) return;
        const std::string before = endpoint();
        options_.unix_path.clear();
        options_.host = host;
        options_.port = port;
        attempt_ = 0;
        failure_logged_ = false;
        if (stopped_) return start();
        if (auto* context = std::exchange(context_, nullptr)) {
            redisAsyncFree(context);
            closed_quietly();
            spdlog::info("redis: leaving {} for {}", before, endpoint());
        }
        reconnect_timer_.cancel();
        resolver_.cancel();
        connect();
    }

    void reconnect(const std::string& reason) {
        if (stopped_) return;
        if (context_ == nullptr) return;  // already reconnecting
        drop(reason);
    }

    void on_trouble(TroubleHandler handler) { trouble_ = std::move(handler); }

private:
    // Tells the topology, from the io_context (its handler may retarget or reconnect).
    void report(Trouble trouble, const std::string& detail) {
        if (!trouble_) return;
        asio::post(io_context_, [weak = weak_from_this(), trouble, detail] {
            auto self = weak.lock();
            if (self && !self->stopped_ && self->trouble_) self->trouble_(trouble, detail);
        });
    }

    // The connection was closed on purpose to go elsewhere: no warning, no backoff.
    void closed_quietly() {
        ready_ = false;
        ping_outstanding_ = false;
        connect_timer_.cancel();
        health_timer_.cancel();
        reconnect_pending_ = false;
    }

    TroubleHandler trouble_;
    asio::io_context& io_context_;
    RedisConnectionOptions options_;
    std::vector<Script> scripts_;
    asio::ip::tcp::resolver resolver_;
    asio::steady_timer connect_timer_;
    asio::steady_timer health_timer_;
    asio::steady_timer reconnect_timer_;
    std::minstd_rand random_;

    ::redisAsyncContext* context_ = nullptr;  // the current connection, if any
    std::uint64_t generation_ = 0;            // one per connection attempt
    bool stopped_ = true;
    bool ready_ = false;
    bool reconnect_pending_ = false;
    bool ping_outstanding_ = false;
    bool failure_logged_ = false;
    bool function_refusal_logged_ = false;
    unsigned attempt_ = 0;
    std::uint64_t ready_count_ = 0;
    SteadyClock::time_point last_reply_{};
};

RedisConnection::RedisConnection(asio::io_context& io_context, RedisConnectionOptions options)
    : impl_(std::make_shared<Impl>(io_context, std::move(options))) {}

RedisConnection::~RedisConnection() { impl_->stop(); }

RedisConnection::ScriptId RedisConnection::add_script(std::string source) {
    return impl_->add_script(ScriptCode{std::move(source), {}, {}});
}
RedisConnection::ScriptId RedisConnection::add_script(ScriptCode code) { return impl_->add_script(std::move(code)); }
bool RedisConnection::uses_function(ScriptId script) const { return impl_->uses_function(script); }
void RedisConnection::start() { impl_->start(); }
void RedisConnection::stop() { impl_->stop(); }
bool RedisConnection::ready() const { return impl_->ready(); }
void RedisConnection::poll_replies() { impl_->poll_replies(); }
void RedisConnection::flush_output() { impl_->flush_output(); }
std::uint64_t RedisConnection::ready_count() const { return impl_->ready_count(); }
std::string RedisConnection::address() const { return impl_->address(); }
void RedisConnection::retarget(const std::string& host, std::uint16_t port) { impl_->retarget(host, port); }
void RedisConnection::reconnect(const std::string& reason) { impl_->reconnect(reason); }
void RedisConnection::on_trouble(TroubleHandler handler) { impl_->on_trouble(std::move(handler)); }

void RedisConnection::command(const std::vector<std::string>& args, Callback callback) {
    impl_->command(args, std::move(callback));
}

void RedisConnection::evalsha(ScriptId script, const std::vector<std::string>& keys, const std::vector<std::string>& args,
                              Callback callback, bool write_now) {
    impl_->evalsha(script, keys, args, std::move(callback), write_now);
}

void RedisConnection::evalsha_views(ScriptId script, const std::vector<std::string>& keys,
                                    const std::vector<std::string_view>& args, Callback callback, bool write_now) {
    impl_->evalsha(script, keys, args, std::move(callback), write_now);
}

}  // namespace sluice::redis
