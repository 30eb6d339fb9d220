// The Lua scripts and MemoryLimiter give identical decisions for the same sequence.
//
// Honest about time: Redis decides on its own clock (TIME), as in production; each
// decision reports the time it used, and MemoryLimiter is then asked the same question at
// that same instant through its injected clock.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
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
#include "redis/topology.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using namespace sluice::test;
using limit::Decision;

namespace {

redis::RedisConnectionOptions at_port(std::uint16_t port) {
    redis::RedisConnectionOptions options;
    options.port = port;
    return options;
}

// A real Redis running the scripts, and MemoryLimiter with an injected clock, over the same
// routes and the same random clients.
// With `cluster`, the same against a Redis Cluster of 3 masters (the cluster script, batches
// split by master, keys passed as arguments).
struct Differential {
    explicit Differential(bool cluster = false) : cluster_mode(cluster) {
        if (cluster) {
            cluster_servers = std::make_unique<RedisCluster>(3);
            config::RedisConfig config;
            config.mode = config::RedisMode::cluster;
            config.tcp.reset();
            for (auto port : cluster_servers->ports()) config.nodes.push_back({"127.0.0.1", port});
            topology = redis::make_topology(io, config);
        } else {
            server = std::make_unique<RedisServer>();
            connection = std::make_unique<redis::RedisConnection>(io, at_port(server->port()));
            topology = redis::topology_of(*connection);
        }
        redis_limiter = std::make_unique<limit::RedisLimiter>(io, *topology, "sluice", 2s, /*remember_rejections=*/false);
        if (connection) connection->start();
        topology->start();
        REQUIRE(run_until(io, [&] { return topology->ready(); }));
    }
    ~Differential() {
        topology->stop();
        if (connection) connection->stop();
    }

    bool cluster_mode;
    std::unique_ptr<RedisServer> server;
    std::unique_ptr<RedisCluster> cluster_servers;
    boost::asio::io_context io;
    std::unique_ptr<redis::RedisConnection> connection;
    std::unique_ptr<redis::Topology> topology;
    std::unique_ptr<limit::RedisLimiter> redis_limiter;
    std::int64_t memory_now = 0;
    int slots_taken = 0;
    // Slots to give back on both sides, once the decisions asked together are all answered
    // (a batch is decided in Redis before any of its slots could be given back).
    std::vector<std::pair<limit::Slots, limit::Slots>> to_release;
    void release_now() {
        for (const auto& [in_redis, in_memory] : to_release) {
            redis_limiter->release(in_redis);
            memory_limiter.release(in_memory);
        }
        to_release.clear();
    }
    limit::MemoryLimiter memory_limiter{"sluice", [this] { return memory_now; }};

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
    // Fixed windows (aligned to the epoch, and a calendar minute in a +05:30 zone) and costs
    // from a header, in every algorithm.
    const std::vector<config::LimitConfig> quota{
        costing(fixed_window("fixed", 5, 150ms), "x-cost", 2),
        costing(token_bucket("units", 10, 100ms, 6), "x-cost"),
        costing(sliding_window("window_units", 6, 130ms), "x-cost", 2),
    };
    const std::vector<config::LimitConfig> fixed_alone{fixed_window("fixed_alone", 1, 200ms, {client_ip(), method()})};
    const std::vector<config::LimitConfig> calendar{
        calendar_window("minute", 40, time::CalendarUnit::minute, "Asia/Kolkata"),
        costing(fixed_window("fixed_cost", 4, 90ms), "x-cost"),
    };
    // Concurrency slots, half of them given back at once (both sides alike), the others
    // reclaimed when their lease ends.
    const std::vector<config::LimitConfig> in_flight{slots_limit("slots", 3, 150ms), token_bucket("tb_slots", 20, 100ms, 8)};
    const std::vector<config::LimitConfig> slots_alone{slots_limit("slots_alone", 2, 90ms, {client_ip(), method()})};
    // Leaky buckets: with another limit (check, commit, report), alone with a cost header
    // and max_wait, shadow; clients sometimes asking with may_wait false (max_waiting reached).
    // One bucket for every client (or one per method) so that requests come faster than
    // they leave whatever the machine's speed: every outcome shows up many times.
    const std::vector<config::LimitConfig> shaped{leaky_bucket("shape", 30, 1s, 6, 1, std::nullopt, {}),  // 33.333 ms
                                                  token_bucket("shape_cap", 30, 100ms, 9)};
    const std::vector<config::LimitConfig> shaped_alone{
        costing(leaky_bucket("shaped_alone", 4, 100ms, 5, 0, 60ms, {method()}), "x-cost")};
    const std::vector<config::LimitConfig> shaped_watch{leaky_bucket("shaped_watch", 2, 100ms, 3, 0, std::nullopt,
                                                                     {}, true)};
    const std::vector<limit::RouteLimits> routes{{"in_flight", in_flight},
                                                 {"shaped", shaped},
                                                 {"shaped_alone", shaped_alone},
                                                 {"shaped_watch", shaped_watch},
                                                 {"slots_alone", slots_alone},
                                                 {"login", limits},
                                                 {"alone", alone},
                                                 {"watch", watch},
                                                 {"window_alone", window_alone},
                                                 {"window_watch", window_watch},
                                                 {"quota", quota},
                                                 {"fixed_alone", fixed_alone},
                                                 {"calendar", calendar}};

    const std::vector<std::string> ips{"203.0.113.7", "198.51.100.2", "2001:db8::1"};
    const std::vector<std::string> methods{"GET", "POST"};
    const std::vector<std::optional<std::string>> users{std::nullopt, "alice", "bob"};
    const std::vector<std::optional<std::string>> costs{std::nullopt, "0", "1", "2", "3", "junk"};
    std::mt19937 random{20240521};

    struct Client {
        const std::string* ip;
        const std::string* method;
        const std::optional<std::string>* user;
        const std::optional<std::string>* cost;
        bool may_wait = true;
        limit::RequestKeyValues values() const {
            return {*ip, *method, "/login",
                    [this](std::string_view name) -> std::optional<std::string_view> {
                        if (name == "x-user" && *user) return **user;
                        if (name == "x-cost" && *cost) return **cost;
                        return std::nullopt;
                    },
                    may_wait};
        }
    };

    Client any_client() {
        return {&ips[random() % ips.size()], &methods[random() % methods.size()], &users[random() % users.size()],
                &costs[random() % costs.size()], random() % 4 != 0};
    }

    // MemoryLimiter asked what Redis was asked, at the instant Redis decided it: the same answer.
    // Slots taken are given back on both sides when `give_back` says so.
    // Asks Redis, then the memory limiter at Redis's instant (compare): Redis's decision.
    Decision ask(const limit::RouteLimits& limits, const Client& client) {
        std::optional<Decision> from_redis;
        redis_limiter->decide(limits, client.values(), [&](Decision decision) { from_redis = std::move(decision); });
        REQUIRE(run_until(io, [&] { return from_redis.has_value(); }));
        compare(limits, client, *from_redis);
        return *from_redis;
    }

    void compare(const limit::RouteLimits& route, const Client& client, const Decision& from_redis) {
        REQUIRE(from_redis.outcome != Decision::Outcome::store_error);
        memory_now = from_redis.time_us;
        const Decision from_memory = memory_limiter.decide(route, client.values());
        REQUIRE(from_memory.slots.keys == from_redis.slots.keys);
        if (!from_redis.slots.empty()) {
            ++slots_taken;
            if (random() % 2 == 0) to_release.emplace_back(from_redis.slots, from_memory.slots);
        }
        INFO("route " << route.route << " at " << memory_now << " from " << *client.ip << " " << *client.method);
        REQUIRE(from_memory.outcome == from_redis.outcome);
        REQUIRE(from_memory.limited_by == from_redis.limited_by);
        REQUIRE(from_memory.limits.size() == from_redis.limits.size());
        for (std::size_t l = 0; l < route.limits.size(); ++l) {
            INFO("limit " << route.limits[l].name);
            const auto& m = from_memory.limits[l];
            const auto& r = from_redis.limits[l];
            CHECK(m.applies == r.applies);
            CHECK(m.shadow == r.shadow);
            CHECK(m.allowed == r.allowed);
            CHECK(m.remaining == r.remaining);
            CHECK(m.retry_after == r.retry_after);
            CHECK(m.reset == r.reset);
            CHECK(m.wait == r.wait);
            CHECK(m.banned == r.banned);
        }
        CHECK(from_memory.wait() == from_redis.wait());
    }
};

bool random_bool(std::mt19937& random) { return random() % 2 == 0; }

}  // namespace

TEST_CASE("differential: redis scripts and memory limiter agree decision by decision",
          "[differential][redis]") {
    const bool cluster = GENERATE(false, true);
    INFO((cluster ? "Redis Cluster of 3 masters" : "one Redis"));
    Differential d(cluster);
    int alone_limited = 0, watch_shadow_limited = 0, window_alone_limited = 0, window_watch_shadow_limited = 0;
    int quota_limited = 0, quota_allowed = 0, fixed_alone_limited = 0, calendar_limited = 0, in_flight_limited = 0;
    int allowed = 0, limited = 0, shadow_limited = 0;
    int shaped_delayed = 0, shaped_at_once = 0, shaped_limited = 0, shaped_watch_limited = 0;
    for (int i = 0; i < 400; ++i) {
        const auto client = d.any_client();
        for (const auto& route : d.routes) {
            std::optional<Decision> from_redis;
            d.redis_limiter->decide(route, client.values(), [&](Decision decision) { from_redis = std::move(decision); });
            REQUIRE(run_until(d.io, [&] { return from_redis.has_value(); }));
            INFO("request " << i);
            d.compare(route, client, *from_redis);
            d.release_now();
            if (route.route == "login") {
                allowed += from_redis->outcome == Decision::Outcome::allowed;
                limited += from_redis->outcome == Decision::Outcome::limited;
                shadow_limited += from_redis->shadow_limited();
            } else if (route.route == "alone") {
                alone_limited += from_redis->outcome == Decision::Outcome::limited;
            } else if (route.route == "window_alone") {
                window_alone_limited += from_redis->outcome == Decision::Outcome::limited;
            } else if (route.route == "quota") {
                quota_limited += from_redis->outcome == Decision::Outcome::limited;
                quota_allowed += from_redis->outcome == Decision::Outcome::allowed;
            } else if (route.route == "in_flight" || route.route == "slots_alone") {
                in_flight_limited += from_redis->outcome == Decision::Outcome::limited;
            } else if (route.route == "fixed_alone") {
                fixed_alone_limited += from_redis->outcome == Decision::Outcome::limited;
            } else if (route.route == "calendar") {
                calendar_limited += from_redis->outcome == Decision::Outcome::limited;
            } else if (route.route == "shaped" || route.route == "shaped_alone") {
                shaped_delayed += from_redis->wait().count() > 0;
                shaped_at_once += from_redis->outcome == Decision::Outcome::allowed && from_redis->wait().count() == 0;
                shaped_limited += from_redis->outcome == Decision::Outcome::limited;
                if (!client.may_wait) CHECK(from_redis->wait().count() == 0);
            } else if (route.route == "shaped_watch") {
                CHECK(from_redis->outcome == Decision::Outcome::allowed);
                CHECK(from_redis->wait().count() == 0);  // a shadow limit never holds a request back
                shaped_watch_limited += from_redis->shadow_limited();
            } else {
                CHECK(from_redis->outcome == Decision::Outcome::allowed);  // shadow only
                (route.route == "watch" ? watch_shadow_limited : window_watch_shadow_limited) +=
                    from_redis->shadow_limited();
            }
        }

        std::this_thread::sleep_for(std::chrono::microseconds(d.random() % 12'000));
    }
    // The sequence exercised both sides of every rule.
    CHECK(allowed > 50);
    CHECK(limited > 50);
    CHECK(shadow_limited > 10);
    CHECK(alone_limited > 20);
    CHECK(watch_shadow_limited > 20);
    CHECK(window_alone_limited > 20);
    CHECK(window_watch_shadow_limited > 20);
    CHECK(d.slots_taken > 100);
    CHECK(in_flight_limited > 20);
    CHECK(quota_limited > 20);
    CHECK(quota_allowed > 20);
    CHECK(fixed_alone_limited > 20);
    CHECK(calendar_limited > 20);
    CHECK(shaped_delayed > 20);
    CHECK(shaped_at_once > 20);
    CHECK(shaped_limited > 20);
    CHECK(shaped_watch_limited > 20);
    if (std::getenv("SLUICE_DIFFERENTIAL_COUNTS"))
        std::fprintf(stderr, "shaped: delayed %d, at once %d, limited %d; shaped_watch shadow-limited %d\n",
                     shaped_delayed, shaped_at_once, shaped_limited, shaped_watch_limited);
}

TEST_CASE("differential: batches agree with the memory limiter asked in order", "[differential][redis]") {
    // Decisions asked for in one turn of the loop go to Redis as one call (per master), where
    // a key is read once and written at the end however many of the batch's requests use it.
    // Asked the same questions in the same order at the batch's instant, MemoryLimiter must
    // agree.
    const bool cluster = GENERATE(false, true);
    INFO((cluster ? "Redis Cluster of 3 masters" : "one Redis"));
    Differential d(cluster);
    int batches = 0, limited = 0, allowed = 0, repeated_keys = 0;
    for (int i = 0; i < 360; ++i) {
        struct Asked {
            const limit::RouteLimits* route;
            Differential::Client client;
            std::optional<Decision> answer;
        };
        std::vector<Asked> asked(1 + d.random() % 12);
        for (auto& a : asked) {
            a.route = &d.routes[d.random() % d.routes.size()];
            a.client = d.any_client();
        }
        for (std::size_t k = 0; k < asked.size(); ++k)
            for (std::size_t j = 0; j < k; ++j)
                repeated_keys += asked[j].route == asked[k].route && asked[j].client.ip == asked[k].client.ip;
        for (auto& a : asked)
            d.redis_limiter->decide(*a.route, a.client.values(), [&a](Decision decision) { a.answer = std::move(decision); });
        REQUIRE(run_until(d.io, [&] {
            return std::all_of(asked.begin(), asked.end(), [](const Asked& a) { return a.answer.has_value(); });
        }));
        ++batches;
        // On a cluster the batch went to up to 3 masters, each its own call and TIME; the
        // masters hold different keys, so MemoryLimiter is asked in order of those times.
        std::vector<std::size_t> order(asked.size());
        for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
            return asked[a].answer->time_us < asked[b].answer->time_us;
        });
        for (std::size_t k : order) {
            INFO("batch " << i << ", request " << k << " of " << asked.size());
            if (!d.cluster_mode) CHECK(asked[k].answer->time_us == asked[0].answer->time_us);  // one call, one TIME
            d.compare(*asked[k].route, asked[k].client, *asked[k].answer);
            limited += asked[k].answer->outcome == Decision::Outcome::limited;
            allowed += asked[k].answer->outcome == Decision::Outcome::allowed;
        }
        d.release_now();
        std::this_thread::sleep_for(std::chrono::microseconds(d.random() % 20'000));
    }
    CHECK(batches == 360);
    CHECK(repeated_keys > 150);  // clients came back within their batch (13 routes: about 220)
    CHECK(limited > 100);
    CHECK(allowed > 100);
}

TEST_CASE("differential: limits counted after the response are checked and charged alike in both stores",
          "[differential][redis][count]") {
    // A login route: failures counted per client in a token bucket, a sliding window and a
    // fixed window (costs from a header), each checked before forwarding and charged after a
    // response that counts, with an ordinary bucket beside them. The charges are the
    // counted limits' copies that charge, keyed as the route's limits (the hash tag made of
    // what every limit of the route has). Both stores: the same answers to both calls.
    const bool cluster = GENERATE(false, true);
    INFO((cluster ? "Redis Cluster of 3 masters" : "one Redis"));
    Differential d(cluster);
    auto banning = [](config::LimitConfig limit, std::chrono::milliseconds ban) {
        limit.ban = ban;
        return limit;
    };
    const std::vector<config::LimitConfig> route{
        banning(counting(token_bucket("failures", 4, 100ms, 3)), 70ms),
        counting(sliding_window("failures_window", 4, 150ms, {client_ip(), method()})),
        counting(costing(fixed_window("failures_fixed", 5, 120ms, {client_ip(), method()}), "x-cost", 2)),
        token_bucket("everything", 20, 100ms, 10),
    };
    std::vector<config::LimitConfig> charges;
    for (const auto& limit : route)
        if (limit.counted()) charges.push_back(charging(limit));
    const limit::KeyPlan plan = limit::make_key_plan("counted", route);
    const limit::KeyPlan charge_plan = limit::make_key_plan("counted", charges, route);
    const limit::RouteLimits decide{"counted", route, &plan};
    const limit::RouteLimits charge{"counted", charges, &charge_plan};
    // Charged under the keys it was checked under: a charge of the window alone keyed with the
    // route's hash tag (made from that limit alone, the tag would name the method too).
    {
        const auto client = d.any_client();
        const auto checked = limit::build_limit_keys("sluice", decide, client.values());
        const auto charged = limit::build_limit_keys("sluice", charge, client.values());
        REQUIRE(charged.size() == 3);
        for (std::size_t i = 0; i < 3; ++i) CHECK(charged[i] == checked[i]);
        const std::vector<config::LimitConfig> window_only{charges[1]};
        const limit::KeyPlan tagged = limit::make_key_plan("counted", window_only, route);
        const limit::KeyPlan alone = limit::make_key_plan("counted", window_only);
        CHECK(limit::build_limit_keys("sluice", {"counted", window_only, &tagged}, client.values())[0] == checked[1]);
        CHECK(limit::build_limit_keys("sluice", {"counted", window_only, &alone}, client.values())[0] != checked[1]);
    }
    int allowed = 0, limited = 0, charged = 0, charged_past = 0, banned = 0;
    for (int i = 0; i < 300; ++i) {
        const auto client = d.any_client();
        auto ask = [&](const limit::RouteLimits& limits) { return d.ask(limits, client); };
        INFO("request " << i);
        const Decision decision = ask(decide);
        allowed += decision.outcome == Decision::Outcome::allowed;
        limited += decision.outcome == Decision::Outcome::limited;
        banned += decision.outcome == Decision::Outcome::limited && decision.limits[*decision.limited_by].banned;
        // A counted limit takes nothing when it admits: what it reports is what it had.
        if (decision.outcome == Decision::Outcome::allowed && random_bool(d.random)) {
            // Sometimes charged twice, as two requests checked together and both answered
            // with a counted status: a limit may then be past its capacity ("allowed" 0: it
            // had no room left), which the next check refuses until it is back within it.
            const int times = d.random() % 3 == 0 ? 2 : 1;
            for (int t = 0; t < times; ++t) {
                const Decision after = ask(charge);
                ++charged;
                for (const auto& result : after.limits) charged_past += !result.allowed;
            }
        }
        std::this_thread::sleep_for(std::chrono::microseconds(d.random() % 6'000));
    }
    CHECK(allowed > 50);
    CHECK(limited > 50);
    CHECK(charged > 30);
    CHECK(charged_past > 5);
    CHECK(banned > 20);
}

TEST_CASE("differential: reservations settled after the response, charged past them or given back, alike in both "
          "stores",
          "[differential][redis][settle]") {
    // An LLM-like route: tokens per client in a token bucket (a reservation of 3), a sliding
    // window and a fixed window (reservations of 2), each settled after the response at what
    // it reported (0 to 7: a give-back or a charge past the reservation, sometimes nothing to
    // settle), with an ordinary bucket beside them. The settle is one call of copies keyed as
    // the route's limits, as http::Exchange makes it. Both stores: the same answers.
    const bool cluster = GENERATE(false, true);
    INFO((cluster ? "Redis Cluster of 3 masters" : "one Redis"));
    Differential d(cluster);
    const std::vector<config::LimitConfig> route{
        reporting(token_bucket("tokens", 10, 100ms, 12), "x-tokens", 3),
        reporting(sliding_window("tokens_window", 9, 150ms, {client_ip(), method()}), "x-tokens", 2, true),
        reporting(fixed_window("tokens_fixed", 8, 120ms, {client_ip(), method()}), "x-tokens", 2),
        token_bucket("everything", 40, 100ms, 20),
    };
    std::vector<config::LimitConfig> settles(route.begin(), route.begin() + 3);
    for (auto& limit : settles) limit.charges = true;
    const limit::KeyPlan plan = limit::make_key_plan("llm", route);
    const limit::KeyPlan settle_plan = limit::make_key_plan("llm", settles, route);
    const limit::RouteLimits decide{"llm", route, &plan};
    int allowed = 0, limited = 0, charged = 0, given_back = 0, indebted = 0;
    for (int i = 0; i < 300; ++i) {
        const auto client = d.any_client();
        auto ask = [&](const limit::RouteLimits& limits) { return d.ask(limits, client); };
        INFO("request " << i);
        const Decision decision = ask(decide);
        allowed += decision.outcome == Decision::Outcome::allowed;
        limited += decision.outcome == Decision::Outcome::limited;
        if (decision.outcome == Decision::Outcome::allowed && d.random() % 4 != 0) {
            std::vector<config::LimitConfig> settle;
            for (const auto& limit : settles) {
                const std::uint64_t reported = d.random() % 8;
                settle.push_back(settling(limit, reported, decision.time_us));
                charged += reported > limit.cost;
                given_back += reported < limit.cost;
            }
            const Decision after = ask({"llm", settle, &settle_plan});
            for (const auto& result : after.limits) indebted += !result.allowed;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(d.random() % 6'000));
    }
    CHECK(allowed > 50);
    CHECK(limited > 30);
    CHECK(charged > 15);
    CHECK(given_back > 15);
    CHECK(indebted > 5);
}

TEST_CASE("differential: a bucket read under another plan's numbers decides alike in both stores",
          "[differential][redis][plans]") {
    // A route with plans: one client's key of a limit name is read under whichever plan the
    // client is on now, and a bucket keeps what was used (counted again in the new plan's
    // interval; never more than empty). Limits of a route without plans (not kept: a reload
    // changed the rate) keep the time until the bucket is full. Both stores, the same sums.
    Differential d;
    auto kept = [](config::LimitConfig limit) {
        limit.keeps_used = true;
        return limit;
    };
    // One route name (one key per client and limit name), several sets of numbers.
    const std::vector<std::vector<config::LimitConfig>> sets{
        {kept(token_bucket("quota", 4, 100ms, 3))},                   // a token every 25 ms
        {kept(token_bucket("quota", 20, 100ms, 10))},                 // every 5 ms
        {kept(token_bucket("quota", 3, 100ms, 2))},                   // every 33.333 ms
        {token_bucket("quota", 7, 100ms, 5)},                         // not kept
        {kept(token_bucket("quota", 10, 100ms, 4)), kept(leaky_bucket("shape", 30, 1s, 6, 1))},
        {kept(token_bucket("quota", 2, 100ms, 6)), kept(leaky_bucket("shape", 50, 1s, 3, 0, 40ms))},
        {token_bucket("quota", 5, 100ms, 2), leaky_bucket("shape", 40, 1s, 4)},
    };
    std::vector<limit::RouteLimits> routes;
    for (const auto& limits : sets) routes.push_back({"plans", limits});
    std::map<const std::string*, std::size_t> last_set;
    int moved = 0, allowed = 0, limited = 0;
    for (int i = 0; i < 1500; ++i) {
        const auto client = d.any_client();
        // Mostly the client's plan of before, sometimes another.
        std::size_t set = d.random() % routes.size();
        if (auto at = last_set.find(client.ip); at != last_set.end() && d.random() % 3 != 0) set = at->second;
        if (auto at = last_set.find(client.ip); at != last_set.end() && at->second != set) ++moved;
        last_set[client.ip] = set;
        std::optional<Decision> from_redis;
        d.redis_limiter->decide(routes[set], client.values(), [&](Decision decision) { from_redis = std::move(decision); });
        REQUIRE(run_until(d.io, [&] { return from_redis.has_value(); }));
        INFO("request " << i << ", set " << set);
        d.compare(routes[set], client, *from_redis);
        allowed += from_redis->outcome == Decision::Outcome::allowed;
        limited += from_redis->outcome == Decision::Outcome::limited;
        std::this_thread::sleep_for(std::chrono::microseconds(d.random() % 3'000));
    }
    CHECK(moved > 300);
    CHECK(allowed > 200);
    CHECK(limited > 200);
}
