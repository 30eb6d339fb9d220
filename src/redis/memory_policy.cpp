#include "redis/memory_policy.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>

#include <hiredis/hiredis.h>

#include "redis/redis_reply.hpp"

namespace sluice::redis {
namespace {

struct Free {
    void operator()(redisContext* c) const { redisFree(c); }
    void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Context = std::unique_ptr<redisContext, Free>;
using Reply = std::unique_ptr<redisReply, Free>;

timeval as_timeval(std::chrono::microseconds d) {
    return timeval{static_cast<time_t>(d.count() / 1000000), static_cast<suseconds_t>(d.count() % 1000000)};
}

// A connection whose commands each get a whole reply within `timeout` (command()), read
// with the bounds of the asynchronous connections (build_bounded_hiredis_replies).
struct Connection {
    Context context;
    std::chrono::milliseconds timeout{};
    redisContext* get() const { return context.get(); }
    explicit operator bool() const { return context != nullptr; }
};

Connection connect(const config::Endpoint* tcp, const std::string& unix_path, std::chrono::milliseconds timeout,
                   std::string& error) {
    const timeval tv = as_timeval(timeout);
    Context c(tcp ? redisConnectWithTimeout(tcp->host.c_str(), tcp->port, tv)
                  : redisConnectUnixWithTimeout(unix_path.c_str(), tv));
    if (!c || c->err) {
        error = c ? c->errstr : "out of memory";
        return {};
    }
    build_bounded_hiredis_replies(*c->reader);
    return {std::move(c), timeout};
}

// One command and its reply, all of it within the connection's timeout: hiredis's blocking
// read times out only a read that gets nothing, and a reply that trickles in a byte at a
// time would have held the start-up for ever.
Reply command(const Connection& connection, const std::vector<std::string>& args, std::string& error) {
    redisContext* c = connection.get();
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    for (const auto& a : args) {
        argv.push_back(a.data());
        lengths.push_back(a.size());
    }
    const auto deadline = std::chrono::steady_clock::now() + connection.timeout;
    const auto failed = [&](const char* what) {
        error = c->errstr[0] ? c->errstr : what;
        return nullptr;
    };
    if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data()) != REDIS_OK)
        return failed("out of memory");
    const auto too_late = [&] {
        error = "no whole reply within " + std::to_string(connection.timeout.count()) + " ms";
        return nullptr;
    };
    // A blocking read or write that reached the socket's timeout (the time left) fails with
    // EAGAIN: the deadline passed.
    const auto timed_out = [c] { return c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK); };
    void* raw = nullptr;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return too_late();
        redisSetTimeout(c, as_timeval(left));
        int written = 1;
        if (c->obuf[0] != '\0' && redisBufferWrite(c, &written) != REDIS_OK)
            return timed_out() ? too_late() : failed("the write failed");
        if (!written) continue;
        if (redisReaderGetReply(c->reader, &raw) != REDIS_OK) return failed("the reply could not be read");
        if (raw != nullptr) break;
        if (c->reader->len - c->reader->pos > max_unparsed_reply_bytes) {
            error = "a reply of more than " + std::to_string(max_unparsed_reply_bytes >> 20) + " MiB";
            return nullptr;
        }
        if (redisBufferRead(c) != REDIS_OK) return timed_out() ? too_late() : failed("no reply");
    }
    Reply r(static_cast<redisReply*>(raw));
    if (!r) {
        error = c->errstr[0] ? c->errstr : "no reply";
        return nullptr;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        error = std::string(r->str, r->len);
        return nullptr;
    }
    return r;
}

bool authenticate(const Connection& c, const std::string& username, const std::string& password, std::string& error) {
    if (password.empty()) return true;
    std::vector<std::string> args{"AUTH"};
    if (!username.empty()) args.push_back(username);
    args.push_back(password);
    return command(c, args, error) != nullptr;
}

// CONFIG GET NAME -> its value.
std::optional<std::string> config_value(const Connection& c, const std::string& name, std::string& error) {
    Reply r = command(c, {"CONFIG", "GET", name}, error);
    if (!r) return std::nullopt;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->type != REDIS_REPLY_STRING) {
        error = "CONFIG GET " + name + " gave no value";
        return std::nullopt;
    }
    return std::string(r->element[1]->str, r->element[1]->len);
}

std::optional<MemorySettings> read_at(const config::Endpoint* tcp, const std::string& unix_path,
                                      const config::RedisConfig& redis, std::chrono::milliseconds timeout,
                                      std::string& error) {
    const std::string address = tcp ? tcp->str() : "unix:" + unix_path;
    Connection c = connect(tcp, unix_path, timeout, error);
    if (!c || !authenticate(c, redis.username, redis.password, error)) {
        error = address + ": " + error;
        return std::nullopt;
    }
    const auto policy = config_value(c, "maxmemory-policy", error);
    const auto maxmemory = policy ? config_value(c, "maxmemory", error) : std::nullopt;
    if (!policy || !maxmemory) {
        error = address + ": " + error;
        return std::nullopt;
    }
    MemorySettings out{address, *policy, 0};
    const bool digits = !maxmemory->empty() && maxmemory->size() <= 19 &&
                        std::all_of(maxmemory->begin(), maxmemory->end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) {
        error = address + ": maxmemory is not a number";
        return std::nullopt;
    }
    out.maxmemory = std::stoull(*maxmemory);
    return out;
}

}  // namespace

std::vector<std::string> memory_warnings(const MemorySettings& s) {
    std::vector<std::string> out;
    if (s.policy.rfind("allkeys-", 0) == 0 || s.policy.rfind("volatile-", 0) == 0)
        out.push_back("Redis at " + s.address + " has maxmemory-policy " + s.policy +
                      ": when it reaches maxmemory it may evict sluice's keys (each has a TTL), and an evicted key "
                      "starts its client's limits again from empty; set maxmemory-policy noeviction (a full Redis then "
                      "refuses the write and store.on_error decides) or give sluice a Redis of its own");
    if (s.maxmemory == 0)
        out.push_back("Redis at " + s.address + " has no maxmemory: it grows with sluice's keys (one per client and "
                      "limit, about 100 bytes for a bucket or window count, about 120 bytes per request in a "
                      "sliding window's log) until the machine runs out; on a Redis other programs share, set "
                      "maxmemory with maxmemory-policy noeviction");
    return out;
}

std::optional<MemorySettings> read_memory_settings(const config::StoreConfig& store, std::chrono::milliseconds timeout,
                                                   std::string& error) {
    const auto& redis = store.redis;
    switch (redis.mode) {
    case config::RedisMode::standalone:
        return read_at(redis.tcp ? &*redis.tcp : nullptr, redis.unix_path, redis, timeout, error);
    case config::RedisMode::cluster:
        for (const auto& seed : redis.nodes)
            if (auto s = read_at(&seed, {}, redis, timeout, error)) return s;
        return std::nullopt;
    case config::RedisMode::sentinel:
        for (const auto& sentinel : redis.sentinels) {
            Connection c = connect(&sentinel, {}, timeout, error);
            if (!c || !authenticate(c, redis.sentinel_username, redis.sentinel_password, error)) continue;
            Reply r = command(c, {"SENTINEL", "get-master-addr-by-name", redis.master_name}, error);
            if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
                r->element[1]->type != REDIS_REPLY_STRING) {
                if (error.empty()) error = sentinel.str() + ": no master named " + redis.master_name;
                continue;
            }
            config::Endpoint master{std::string(r->element[0]->str, r->element[0]->len), 0};
            try {
                const auto port = std::stoul(std::string(r->element[1]->str, r->element[1]->len));
                if (port == 0 || port > 65535) continue;
                master.port = static_cast<std::uint16_t>(port);
            } catch (const std::exception&) {
                continue;
            }
            return read_at(&master, {}, redis, timeout, error);
        }
        return std::nullopt;
    }
    return std::nullopt;
}

}  // namespace sluice::redis
