// The Lua scripts and MemoryLimiter give identical decisions for the same sequence.
//
// Honest about time: Redis decides on its own clock (TIME), as in production; each
// decision reports the time it used, and MemoryLimiter is then asked the same question at
// that same instant through its injected clock.
#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "../support/io_loop.hpp"
#include "../support/limit_configs.hpp"
#include "../support/redis_server.hpp"
#include "limit/memory_limiter.hpp"
#include "limit/redis_limiter.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using namespace sluice::test;
using limit::Decision;

TEST_CASE("differential: redis scripts and memory limiter agree decision by decision",
          "[differential][redis]") {
    RedisServer server;
    boost::asio::io_context io;
    redis::RedisConnectionOptions options;
    options.port = server.port();
    redis::RedisConnection connection(io, options);
    limit::RedisLimiter redis_limiter(io, connection, "sluice", 2s, /*remember_rejections=*/false);
    connection.start();
    REQUIRE(run_until(io, [&] { return connection.ready(); }));

    std::int64_t memory_now = 0;
    limit::MemoryLimiter memory_limiter("sluice", [&] { return memory_now; });

    // Small windows and intervals so that a couple of seconds cross many edges.
    const std::vector<config::LimitConfig> limits{
        token_bucket("burst", 4, 100ms, 3),                                 // a token every 25 ms
        token_bucket("odd", 3, 100ms, 2),                                   // every 33.333 ms
        sliding_window("window", 5, 120ms),
        sliding_window("shadow", 1, 80ms, {client_ip(), method()}, true),
        token_bucket("per_user", 10, 1s, 4, {header("x-user")}),
    };
    // One-limit routes take the script's single-limit paths (token_bucket.alone,
    // sliding_window.alone).
    const std::vector<config::LimitConfig> alone{token_bucket("alone", 3, 100ms, 2, {client_ip()})};
    const std::vector<config::LimitConfig> watch{token_bucket("watch", 2, 100ms, 1, {client_ip()}, true)};
    const std::vector<config::LimitConfig> window_alone{sliding_window("window_alone", 3, 90ms, {client_ip(), method()})};
    const std::vector<config::LimitConfig> window_watch{sliding_window("window_watch", 2, 70ms, {client_ip()}, true)};
    const std::vector<limit::RouteLimits> routes{{"login", limits},
                                                 {"alone", alone},
                                                 {"watch", watch},
                                                 {"window_alone", window_alone},
                                                 {"window_watch", window_watch}};
    int alone_limited = 0, watch_shadow_limited = 0, window_alone_limited = 0, window_watch_shadow_limited = 0;
    const std::vector<std::string> ips{"203.0.113.7", "198.51.100.2", "2001:db8::1"};
    const std::vector<std::string> methods{"GET", "POST"};
    const std::vector<std::optional<std::string>> users{std::nullopt, "alice", "bob"};

    std::mt19937 random(20240521);
    int allowed = 0, limited = 0, shadow_limited = 0;
    for (int i = 0; i < 400; ++i) {
        const auto& ip = ips[random() % ips.size()];
        const auto& method = methods[random() % methods.size()];
        const auto& user = users[random() % users.size()];
        const limit::RequestKeyValues request{
            ip, method, "/login", [&user](std::string_view name) -> std::optional<std::string_view> {
                if (name == "x-user" && user) return *user;
                return std::nullopt;
            }};
        for (const auto& route : routes) {
            std::optional<Decision> from_redis;
            redis_limiter.decide(route, request, [&](Decision d) { from_redis = std::move(d); });
            REQUIRE(run_until(io, [&] { return from_redis.has_value(); }));
            REQUIRE(from_redis->outcome != Decision::Outcome::store_error);

            memory_now = from_redis->time_us;
            const Decision from_memory = memory_limiter.decide(route, request);

            INFO("request " << i << " on route " << route.route << " at " << memory_now << " from " << ip << " "
                             << method);
            REQUIRE(from_memory.outcome == from_redis->outcome);
            REQUIRE(from_memory.limited_by == from_redis->limited_by);
            REQUIRE(from_memory.limits.size() == from_redis->limits.size());
            for (std::size_t l = 0; l < route.limits.size(); ++l) {
                INFO("limit " << route.limits[l].name);
                const auto& m = from_memory.limits[l];
                const auto& r = from_redis->limits[l];
                CHECK(m.applies == r.applies);
                CHECK(m.shadow == r.shadow);
                CHECK(m.allowed == r.allowed);
                CHECK(m.remaining == r.remaining);
                CHECK(m.retry_after == r.retry_after);
                CHECK(m.reset == r.reset);
            }
            if (route.route == "login") {
                allowed += from_redis->outcome == Decision::Outcome::allowed;
                limited += from_redis->outcome == Decision::Outcome::limited;
                shadow_limited += from_redis->shadow_limited();
            } else if (route.route == "alone") {
                alone_limited += from_redis->outcome == Decision::Outcome::limited;
            } else if (route.route == "window_alone") {
                window_alone_limited += from_redis->outcome == Decision::Outcome::limited;
            } else {
                CHECK(from_redis->outcome == Decision::Outcome::allowed);  // shadow only
                (route.route == "watch" ? watch_shadow_limited : window_watch_shadow_limited) +=
                    from_redis->shadow_limited();
            }
        }

        std::this_thread::sleep_for(std::chrono::microseconds(random() % 12'000));
    }
    // The sequence exercised both sides of every rule.
    CHECK(allowed > 50);
    CHECK(limited > 50);
    CHECK(shadow_limited > 10);
    CHECK(alone_limited > 20);
    CHECK(watch_shadow_limited > 20);
    CHECK(window_alone_limited > 20);
    CHECK(window_watch_shadow_limited > 20);
}
