// RedisLimiter on a real redis-server: route-level decisions, deadline, store errors.
#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "../support/io_loop.hpp"
#include "../support/limit_configs.hpp"
#include "../support/redis_server.hpp"
#include "limit/redis_limiter.hpp"
#include "redis/topology.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using namespace sluice::test;
using limit::Decision;
using limit::RedisLimiter;
using limit::RequestKeyValues;
using limit::RouteLimits;
using Outcome = Decision::Outcome;

namespace {

redis::RedisConnectionOptions options_for(std::uint16_t port) {
    redis::RedisConnectionOptions options;
    options.port = port;
    options.backoff_min = 10ms;
    options.backoff_max = 100ms;
    return options;
}

struct Fixture {
    // A long default deadline: on a loaded machine a working Redis must not turn a decision
    // into a store error. The deadline test passes a short one.
    explicit Fixture(std::uint16_t port, std::chrono::milliseconds timeout = 2s)
        : connection(io, options_for(port)), topology(redis::topology_of(connection)), limiter(io, *topology, "sluice", timeout) {
        connection.start();
    }

    void wait_ready() { REQUIRE(run_until(io, [&] { return connection.ready(); })); }

    // Issues a decision; `decisions` collects every callback.
    void decide_async(const std::vector<config::LimitConfig>& limits, std::optional<std::string> user = {}) {
        limiter.decide(RouteLimits{"login", limits},
                       RequestKeyValues{"203.0.113.7", "POST", "/login",
                                        [&user](std::string_view name) -> std::optional<std::string_view> {
                                            if (name == "x-user" && user) return *user;
                                            return std::nullopt;
                                        }},
                       [this](Decision d) { decisions.push_back(std::move(d)); });
    }

    Decision decide(const std::vector<config::LimitConfig>& limits, std::optional<std::string> user = {}) {
        const auto before = decisions.size();
        decide_async(limits, std::move(user));
        REQUIRE(decisions.size() == before);  // never answered inside decide()
        REQUIRE(run_until(io, [&] { return decisions.size() > before; }));
        return decisions.back();
    }

    boost::asio::io_context io;
    redis::RedisConnection connection;
    std::unique_ptr<redis::Topology> topology;
    RedisLimiter limiter;
    std::vector<Decision> decisions;
};

}  // namespace

TEST_CASE("redis limiter: one round trip decides every limit of the route", "[redis_limiter][redis]") {
    RedisServer server;
    SyncRedis check(server.port());
    Fixture f(server.port());
    f.wait_ready();
    const std::vector<config::LimitConfig> limits{token_bucket("burst", 5, 1s, 2),
                                                  sliding_window("minute", 3, 60s)};

    auto first = f.decide(limits);
    CHECK(first.outcome == Outcome::allowed);
    REQUIRE(first.limits.size() == 2);
    CHECK(first.limits[0].remaining == 1);
    CHECK(first.limits[1].remaining == 2);
    CHECK(first.time_us > 0);
    CHECK(check.integer({"EXISTS", "sluice:{login:203.0.113.7}:burst", "sluice:{login:203.0.113.7}:minute"}) == 2);

    CHECK(f.decide(limits).outcome == Outcome::allowed);
    auto third = f.decide(limits);
    CHECK(third.outcome == Outcome::limited);
    CHECK(third.limited_by == 0u);
    CHECK(third.limits[0].retry_after > 0ms);
    CHECK(third.limits[1].allowed);
    CHECK(third.limits[1].remaining == 1);  // not charged for the rejected request
    CHECK(check.integer({"ZCARD", "sluice:{login:203.0.113.7}:minute"}) == 2);
}

TEST_CASE("redis limiter: shadow limits and limits that do not apply", "[redis_limiter][redis]") {
    RedisServer server;
    Fixture f(server.port());
    f.wait_ready();
    const std::vector<config::LimitConfig> limits{sliding_window("shadow", 1, 60s, {client_ip()}, true),
                                                  token_bucket("per_user", 1, 60s, 1, {header("x-user")})};

    auto a = f.decide(limits);
    CHECK(a.outcome == Outcome::allowed);
    CHECK_FALSE(a.limits[1].applies);
    auto b = f.decide(limits, "alice");
    CHECK(b.outcome == Outcome::allowed);
    CHECK(b.shadow_limited());
    CHECK(b.limits[1].applies);
    auto c = f.decide(limits, "alice");
    CHECK(c.outcome == Outcome::limited);
    CHECK(c.limited_by == 1u);
}

TEST_CASE("redis limiter: no applicable limit means no round trip", "[redis_limiter][redis]") {
    Fixture f(1);  // nothing listens: any round trip would be a store error
    auto d = f.decide({token_bucket("per_user", 1, 60s, 1, {header("x-user")})});
    CHECK(d.outcome == Outcome::allowed);
    CHECK_FALSE(d.limits[0].applies);
}

// Calls of one command so far, from INFO commandstats.
long long command_calls(SyncRedis& redis, const std::string& command) {
    const auto info = redis.text({"INFO", "commandstats"});
    const auto at = info.find("cmdstat_" + command + ":calls=");
    if (at == std::string::npos) return 0;
    return std::stoll(info.substr(at + command.size() + 15));
}

TEST_CASE("redis limiter: decisions asked for together go out as one call and are each counted",
          "[redis_limiter][redis]") {
    RedisServer server;
    SyncRedis check(server.port());
    Fixture f(server.port(), 2s);
    f.wait_ready();
    const std::vector<config::LimitConfig> limits{sliding_window("w", 50, 60s)};
    for (int i = 0; i < 60; ++i) f.decide_async(limits);
    REQUIRE(run_until(f.io, [&] { return f.decisions.size() == 60; }));
    for (int i = 0; i < 50; ++i) {
        INFO("decision " << i);
        CHECK(f.decisions[i].outcome == Outcome::allowed);
        CHECK(f.decisions[i].limits[0].remaining == static_cast<std::uint64_t>(49 - i));
    }
    for (int i = 50; i < 60; ++i) CHECK(f.decisions[i].outcome == Outcome::limited);
    CHECK(check.integer({"ZCARD", "sluice:{login:203.0.113.7}:w"}) == 50);
    CHECK(command_calls(check, "fcall") == 1);

    SECTION("a long run is split into calls of at most 64 requests, in order") {
        const std::vector<config::LimitConfig> big{token_bucket("tb", 100, 60s, 100)};
        for (int i = 0; i < 150; ++i) f.decide_async(big);
        REQUIRE(run_until(f.io, [&] { return f.decisions.size() == 210; }));
        for (int i = 0; i < 150; ++i) {
            INFO("decision " << i);
            const auto& d = f.decisions[60 + i];
            CHECK(d.outcome == (i < 100 ? Outcome::allowed : Outcome::limited));
            if (i < 100) CHECK(d.limits[0].remaining == static_cast<std::uint64_t>(99 - i));
        }
        CHECK(command_calls(check, "fcall") == 1 + 3);
    }
}

TEST_CASE("redis limiter: the deadline answers when redis is paused; the late reply is ignored",
          "[redis_limiter][redis]") {
    RedisServer server;
    SyncRedis admin(server.port());
    Fixture f(server.port(), 25ms);
    f.wait_ready();
    const std::vector<config::LimitConfig> limits{token_bucket("burst", 5, 1s, 10)};
    REQUIRE(f.decide(limits).outcome == Outcome::allowed);

    admin.must({"CLIENT", "PAUSE", "500"});
    const auto start = std::chrono::steady_clock::now();
    auto late = f.decide(limits);
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(late.outcome == Outcome::store_error);
    CHECK_THAT(late.error, Catch::Contains("25ms"));
    CHECK(took >= 25ms);
    CHECK(took < 200ms);

    run_for(f.io, 700ms);  // the pause ends and the reply arrives
    CHECK(f.decisions.size() == 2);
    CHECK(f.connection.ready());
    CHECK(f.decide(limits).outcome == Outcome::allowed);
}

TEST_CASE("redis limiter: store errors", "[redis_limiter][redis]") {
    const std::vector<config::LimitConfig> limits{token_bucket("burst", 5, 1s, 10)};
    SECTION("redis down") {
        Fixture f(1);
        auto d = f.decide(limits);
        CHECK(d.outcome == Outcome::store_error);
        CHECK(d.limits.empty());
        CHECK_FALSE(d.error.empty());
    }
    SECTION("an error reply") {
        RedisServer server;
        SyncRedis admin(server.port());
        Fixture f(server.port());
        f.wait_ready();
        admin.must({"CONFIG", "SET", "maxmemory", "1"});
        auto d = f.decide(limits);
        CHECK(d.outcome == Outcome::store_error);
        CHECK_THAT(d.error, Catch::Contains("OOM"));
    }
    SECTION("the connection drops mid-decision") {
        RedisServer server;
        Fixture f(server.port(), 2s);
        f.wait_ready();
        server.suspend();
        f.decide_async(limits);
        run_for(f.io, 20ms);
        server.kill();
        REQUIRE(run_until(f.io, [&] { return !f.decisions.empty(); }));
        CHECK(f.decisions[0].outcome == Outcome::store_error);
    }
}

namespace {

// Decide calls Redis has run since start: FCALL, EVALSHA and EVAL.
std::int64_t script_calls(SyncRedis& redis) {
    auto info = redis.text({"INFO", "commandstats"});
    std::int64_t total = 0;
    for (const char* name : {"cmdstat_fcall:calls=", "cmdstat_evalsha:calls=", "cmdstat_eval:calls="}) {
        auto at = info.find(name);
        if (at != std::string::npos) total += std::stoll(info.substr(at + std::string(name).size()));
    }
    return total;
}

}  // namespace

TEST_CASE("redis limiter: a rejection is remembered until its retry time, without round trips",
          "[redis_limiter][redis]") {
    RedisServer server;
    SyncRedis check(server.port());
    Fixture f(server.port());
    f.wait_ready();
    // One token, refilled after 400 ms.
    const std::vector<config::LimitConfig> limits{token_bucket("burst", 1, 400ms, 1)};

    CHECK(f.decide(limits).outcome == Outcome::allowed);
    auto rejected = f.decide(limits);
    REQUIRE(rejected.outcome == Outcome::limited);
    const auto calls = script_calls(check);
    CHECK(f.limiter.remembered_rejections() == 1);

    for (int i = 0; i < 20; ++i) {
        auto again = f.decide(limits);
        CHECK(again.outcome == Outcome::limited);
        CHECK(again.limited_by == 0u);
        CHECK(again.limits[0].retry_after > 0ms);
        CHECK(again.limits[0].retry_after <= rejected.limits[0].retry_after);
        CHECK(again.time_us == 0);  // not a store decision
    }
    CHECK(script_calls(check) == calls);  // answered without Redis

    SECTION("after the retry time Redis decides again, and admits") {
        std::this_thread::sleep_for(rejected.limits[0].retry_after + 20ms);
        CHECK(f.decide(limits).outcome == Outcome::allowed);
        CHECK(script_calls(check) == calls + 1);
    }
    SECTION("a reload forgets what was remembered") {
        f.limiter.clear_rejections();
        CHECK(f.decide(limits).outcome == Outcome::limited);
        CHECK(script_calls(check) == calls + 1);
    }
    SECTION("a client with another key is not affected") {
        const std::vector<config::LimitConfig> per_user{token_bucket("burst", 1, 400ms, 1, {header("x-user")})};
        CHECK(f.decide(per_user, "bob").outcome == Outcome::allowed);
        CHECK(script_calls(check) == calls + 1);
    }
}
